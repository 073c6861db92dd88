//! Live telemetry: what a drain did, told as it happens to sinks of the
//! caller's choosing — an Analytics Engine dataset on Workers
//! (`AnalyticsEngineTelemetry`, feature `workers`), the `metrics` crate's facade natively
//! (`MetricsTelemetry`, feature `metrics`), or a [`Telemetry`] of one's own.
//! With the `tracing` feature, enqueues and deliveries also open spans
//! (`send {topic}`, `process {topic}`) after the OpenTelemetry messaging
//! conventions.
//!
//! # Live numbers and exact numbers
//! A sink hears of a settle once its database call has returned. A call that
//! failed and was sent again reports what the first try applied as lease
//! lost, and a drainer that dies takes its unreported events with it: live
//! numbers are for dashboards and alerts. The exact numbers are the
//! [rollups](crate::Outbox::rollups), counted by the settle itself in the
//! same atomic call.

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod analytics_engine;
mod data_points;
#[cfg(all(feature = "metrics", not(target_arch = "wasm32")))]
mod metrics;
pub(crate) mod spans;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::future::{MaybeSend, MaybeSync};

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use analytics_engine::AnalyticsEngineTelemetry;
pub use data_points::{DataPoint, DataPoints};
#[cfg(all(feature = "metrics", not(target_arch = "wasm32")))]
pub use metrics::MetricsTelemetry;

/// The `messaging.system` this crate reports as.
pub const MESSAGING_SYSTEM: &str = "workers_outbox";

/// Receives what drains do, as they do it.
///
/// Calls are made on the drain's own task, between its database calls: an
/// implementation returns at once (it records, buffers or hands off), never
/// blocks, and never fails the drain.
pub trait Telemetry: MaybeSend + MaybeSync {
    /// A message's settle (or a claim's parking of it as dead) came back
    /// from the database.
    fn settled(&self, settled: &Settled<'_>);

    /// How far behind an outbox is, sampled once by a drain that also does
    /// its housekeeping (at most once a minute per `Drainer` and its clones;
    /// a Worker that builds a drainer per invocation samples in each), in
    /// the same database call, reading at most [`BACKLOG_CAP`] rows.
    fn backlog(&self, backlog: &Backlog<'_>) {
        let _ = backlog;
    }

    /// A drain (or an immediate delivery) of `outbox` ended: a sink that
    /// buffers writes its buffer now.
    fn run_ended(&self, outbox: &str) {
        let _ = outbox;
    }
}

/// How a message's settle ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Outcome {
    /// Delivered and deleted.
    Delivered,
    /// Rescheduled, an attempt spent.
    Retried,
    /// Rescheduled without spending an attempt (receiver unavailable or
    /// throttling, several of a topic's messages failing in turn).
    Deferred,
    /// Parked as dead.
    Dead,
    /// Given back unattempted (circuit open, no time left, paused topic).
    HandedBack,
    /// The lease had passed to someone else: nothing was changed.
    LeaseLost,
}

impl Outcome {
    /// Its name, as sinks label it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Delivered => "delivered",
            Outcome::Retried => "retried",
            Outcome::Deferred => "deferred",
            Outcome::Dead => "dead",
            Outcome::HandedBack => "handed_back",
            Outcome::LeaseLost => "lease_lost",
        }
    }
}

/// One message's settle, as the database applied it. Never carries a
/// payload, a subject or an error text: only classes fit for labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settled<'a> {
    /// The outbox (its table).
    pub outbox: &'a str,
    /// The message's topic (`messaging.destination.name`).
    pub topic: &'a str,
    /// The message's id.
    pub id: &'a str,
    /// How its settle ended.
    pub outcome: Outcome,
    /// The class of what went wrong with the message in this run
    /// (`error.type`), `None` for `Delivered`: `timeout`, `failed`,
    /// `throttled`, `unavailable`, `permanent`, `gone` (its attempt's
    /// verdict), `circuit_open`, `paused`, `no_time`, `run_ended` (never
    /// started before the run stopped), `malformed` or `attempts_exhausted`.
    /// A `LeaseLost` settle keeps its attempt's class (`None` if the
    /// delivery went through).
    pub error_type: Option<&'static str>,
    /// How long its delivery took, if one was made in this run.
    pub duration: Option<Duration>,
    /// How late it was delivered: from when it was due (delivered only).
    pub lateness: Option<Duration>,
    /// How old it was when delivered: from its enqueue (delivered only).
    pub age: Option<Duration>,
    /// It was delivered as a suspect (its lease had expired unsettled), in
    /// a suspect group with nothing else in flight.
    pub alone: bool,
    /// Its failure tripped its receiver's circuit breaker.
    pub tripped: bool,
}

/// An outbox's backlog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Backlog<'a> {
    /// The outbox (its table).
    pub outbox: &'a str,
    /// Messages due now (paused topics included), counted no further than
    /// [`BACKLOG_CAP`].
    pub due: u64,
    /// How far behind schedule the most overdue message is; `None` when
    /// nothing is due.
    pub oldest_due_age: Option<Duration>,
}

impl Backlog<'_> {
    /// Whether the count stopped at [`BACKLOG_CAP`]: at least that many
    /// are due.
    pub fn is_capped(&self) -> bool {
        self.due >= BACKLOG_CAP
    }
}

/// A backlog sample reads at most this many rows.
pub const BACKLOG_CAP: u64 = 1_000;

/// The sinks of one drainer (none by default).
#[derive(Clone, Default)]
pub(crate) struct Sinks(Vec<Arc<dyn Telemetry>>);

impl Sinks {
    pub(crate) fn add(&mut self, sink: Arc<dyn Telemetry>) {
        self.0.push(sink);
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn settled(&self, settled: &Settled<'_>) {
        for sink in &self.0 {
            sink.settled(settled);
        }
    }

    pub(crate) fn backlog(&self, backlog: &Backlog<'_>) {
        for sink in &self.0 {
            sink.backlog(backlog);
        }
    }

    pub(crate) fn run_ended(&self, outbox: &str) {
        for sink in &self.0 {
            sink.run_ended(outbox);
        }
    }
}

impl std::fmt::Debug for Sinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sinks")
            .field("count", &self.0.len())
            .finish()
    }
}
