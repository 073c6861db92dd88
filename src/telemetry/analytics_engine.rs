//! Drains written to a Workers Analytics Engine dataset.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use worker::{AnalyticsEngineDataPointBuilder, AnalyticsEngineDataset};

use super::{Backlog, DataPoints, Settled, Telemetry};

/// Points an invocation writes by default: Workers allow 250 per
/// invocation, and the rest is left to the Worker's own.
const DEFAULT_MAX_POINTS: usize = 50;

/// Writes what drains did to an Analytics Engine dataset, as summed points
/// (see [`DataPoints`] for the layout): one per outbox, topic, outcome and
/// error type at the end of each drain, plus a backlog point when one was
/// sampled. Make one per invocation (from `env.analytics_engine(..)`): it
/// writes at most [`max_points`](Self::max_points) in its life, and logs
/// what it leaves out.
///
/// ```ignore
/// let telemetry = AnalyticsEngineTelemetry::new(env.analytics_engine("OUTBOX_ANALYTICS")?);
/// let drainer = Drainer::builder(outbox, deliverer).telemetry(Arc::new(telemetry)).build()?;
/// ```
pub struct AnalyticsEngineTelemetry {
    dataset: AnalyticsEngineDataset,
    points: Mutex<DataPoints>,
    max_points: usize,
    written: AtomicUsize,
}

impl AnalyticsEngineTelemetry {
    /// Writes to `dataset`, at most 50 points.
    pub fn new(dataset: AnalyticsEngineDataset) -> Self {
        AnalyticsEngineTelemetry {
            dataset,
            points: Mutex::new(DataPoints::new()),
            max_points: DEFAULT_MAX_POINTS,
            written: AtomicUsize::new(0),
        }
    }

    /// At most `max` points in all (Workers allow 250 per invocation,
    /// shared with the Worker's own writes).
    #[must_use]
    pub fn max_points(mut self, max: usize) -> Self {
        self.max_points = max.min(250);
        self
    }

    fn points(&self) -> std::sync::MutexGuard<'_, DataPoints> {
        self.points
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl std::fmt::Debug for AnalyticsEngineTelemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnalyticsEngineTelemetry")
            .field("max_points", &self.max_points)
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

impl Telemetry for AnalyticsEngineTelemetry {
    fn settled(&self, settled: &Settled<'_>) {
        self.points().record(settled);
    }

    fn backlog(&self, backlog: &Backlog<'_>) {
        self.points().record_backlog(backlog);
    }

    fn run_ended(&self, outbox: &str) {
        let room = self
            .max_points
            .saturating_sub(self.written.load(Ordering::Relaxed));
        if room == 0 {
            let left_out = self.points().take(outbox, usize::MAX).len();
            if left_out > 0 {
                log::warn!(
                    "outbox telemetry of {outbox}: {left_out} data points left out: {} written, the most allowed",
                    self.max_points
                );
            }
            return;
        }
        let points = self.points().take(outbox, room);
        for point in points {
            let mut builder =
                AnalyticsEngineDataPointBuilder::new().indexes([point.index.as_str()]);
            for blob in point.blobs {
                builder = builder.add_blob(blob.as_str());
            }
            for double in point.doubles {
                builder = builder.add_double(double);
            }
            match self.dataset.write_data_point(&builder.build()) {
                Ok(()) => {
                    self.written.fetch_add(1, Ordering::Relaxed);
                }
                Err(error) => {
                    log::warn!("outbox telemetry of {outbox}: a data point was refused: {error}");
                }
            }
        }
    }
}
