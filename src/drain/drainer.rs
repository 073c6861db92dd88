//! The drainer and its builder.

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use super::deliver::{Deliver, DeliverBatch};
use super::destinations::DestinationLimits;
use super::limits::DrainLimits;
use super::parts::{Deliverer, Parts};
use super::report::DrainReport;
use super::run::Run;
use crate::error::Result;
use crate::fleet::FleetMember;
use crate::outbox::{ClaimedMessage, Outbox};
use crate::telemetry::{Sinks, Telemetry};
use crate::time::Timer;

/// Delivers an outbox's messages through a [`Deliver`] (one message a
/// call) or a [`DeliverBatch`] (many). Cheap to clone, so it can move into
/// a deferred task.
#[derive(Clone)]
pub struct Drainer {
    pub(super) parts: Parts,
    /// Told the outbox's summary after each drain.
    pub(super) fleet: Option<FleetMember>,
}

impl std::fmt::Debug for Drainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drainer")
            .field("outbox", &self.parts.outbox)
            .field("limits", &self.parts.limits)
            .finish_non_exhaustive()
    }
}

/// Configures a [`Drainer`]; made by [`Drainer::builder`].
#[must_use = "a builder does nothing until it is built"]
pub struct DrainerBuilder {
    outbox: Outbox,
    deliver: Deliverer,
    timer: Option<Arc<dyn Timer>>,
    limits: DrainLimits,
    destinations: Option<DestinationLimits>,
    telemetry: Sinks,
    fleet: Option<FleetMember>,
}

impl std::fmt::Debug for DrainerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DrainerBuilder")
            .field("limits", &self.limits)
            .field("destinations", &self.destinations)
            .finish_non_exhaustive()
    }
}

impl DrainerBuilder {
    /// Limits per destination, across topics (default: none beyond
    /// [`DrainLimits::concurrency`]); see [`DestinationLimits`].
    pub fn destination_limits(mut self, limits: DestinationLimits) -> Self {
        self.destinations = Some(limits);
        self
    }

    /// Tells `sink` what each drain does, as it happens (default: no
    /// sink); call again to add another. See [`telemetry`](crate::telemetry).
    pub fn telemetry(mut self, sink: Arc<dyn Telemetry>) -> Self {
        self.telemetry.add(sink);
        self
    }

    /// Reports the outbox's [`summary`](Outbox::summary) to `member`'s fleet
    /// after each [`drain`](Drainer::drain) (default: none), when it is
    /// worth writing (see [`FleetMember`]). A report that fails is logged
    /// (level warn) and fails nothing.
    pub fn fleet(mut self, member: FleetMember) -> Self {
        self.fleet = Some(member);
        self
    }

    /// The limits (default: [`DrainLimits::scheduled`]).
    pub fn limits(mut self, limits: DrainLimits) -> Self {
        self.limits = limits;
        self
    }

    /// What times deliveries out (default: the runtime's, `WorkersTimer` on
    /// Workers and `TokioTimer` natively with the `tokio` feature).
    pub fn timer(mut self, timer: Arc<dyn Timer>) -> Self {
        self.timer = Some(timer);
        self
    }

    /// The drainer.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::error::Error::InvalidInput) if the limits do
    /// not [validate](DrainLimits::validate), or no timer was set where the
    /// target has no default.
    pub fn build(self) -> Result<Drainer> {
        let timer = match self.timer.or_else(default_timer) {
            Some(timer) => timer,
            None => {
                return Err(crate::error::Error::invalid(
                    "timer",
                    "this target has no default timer: set one with `.timer(…)`",
                ));
            }
        };
        self.limits.validate()?;
        if let Some(destinations) = &self.destinations {
            destinations.validate()?;
        }
        let limits = self.deliver.limits();
        if limits.max_messages == 0 || limits.max_bytes == 0 {
            return Err(crate::error::Error::invalid(
                "batch limits",
                "a batch deliverer must allow at least one message and one byte per call",
            ));
        }
        Ok(Drainer {
            parts: Parts {
                outbox: self.outbox,
                deliver: self.deliver,
                timer,
                limits: self.limits,
                destinations: self.destinations,
                telemetry: self.telemetry,
                last_sweep: Arc::new(AtomicI64::new(i64::MIN)),
            },
            fleet: self.fleet,
        })
    }
}

/// The runtime's timer, where the enabled features provide one.
fn default_timer() -> Option<Arc<dyn Timer>> {
    #[cfg(all(feature = "workers", target_arch = "wasm32"))]
    return Some(Arc::new(crate::time::WorkersTimer));
    #[cfg(all(feature = "tokio", not(target_arch = "wasm32")))]
    return Some(Arc::new(crate::time::TokioTimer));
    #[allow(unreachable_code)]
    None
}

impl Drainer {
    /// Starts configuring a drainer of `outbox` delivering through `deliver`.
    pub fn builder(outbox: Outbox, deliver: impl Deliver + 'static) -> DrainerBuilder {
        DrainerBuilder {
            outbox,
            deliver: Deliverer::One(Arc::new(deliver)),
            timer: None,
            limits: DrainLimits::scheduled(),
            destinations: None,
            telemetry: Sinks::default(),
            fleet: None,
        }
    }

    /// Starts configuring a drainer of `outbox` delivering many messages a
    /// call through `deliver` (a Queue, a bulk API). `concurrency` then
    /// counts calls in flight.
    pub fn batch_builder(outbox: Outbox, deliver: impl DeliverBatch + 'static) -> DrainerBuilder {
        DrainerBuilder {
            outbox,
            deliver: Deliverer::Batch(Arc::new(deliver)),
            timer: None,
            limits: DrainLimits::scheduled(),
            destinations: None,
            telemetry: Sinks::default(),
            fleet: None,
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &DrainLimits {
        &self.parts.limits
    }

    /// Drains due messages until none is left or a limit is reached, and
    /// logs the report as one JSON line ([`DrainReport::log_line`], level
    /// info) and each message it parked as dead as one more (`event`
    /// `"outbox.dead"`, its id, topic and reason class; level warn). The
    /// dead letter lines are best effort: a death whose settle reply was
    /// lost (its retry reads as lease lost) has none. Then reports to the
    /// [fleet](DrainerBuilder::fleet), if any.
    pub async fn drain(&self) -> DrainReport {
        let report = Run::new(&self.parts, Vec::new(), true).run_to_end().await;
        log::info!("{}", report.log_line());
        if let Some(member) = &self.fleet
            && let Err(error) = member.report(&self.parts.outbox).await
        {
            log::warn!(
                "outbox drain of {}: not reported to the fleet as {}: {error}",
                self.parts.outbox.table(),
                member.member()
            );
        }
        report
    }

    /// Hands the immediate delivery of `message` (leased to this request by
    /// [`Batch::enqueue_leased`](crate::batch::Batch::enqueue_leased)) to `defer`:
    /// Workers' `wait_until`, or `tokio::spawn`. If the runtime drops it,
    /// the message is delivered by a drain once its lease ends.
    pub fn deliver_now(&self, defer: &dyn crate::defer::Defer, message: ClaimedMessage) {
        let drainer = self.clone();
        defer.defer(Box::pin(async move {
            drainer.deliver_claimed(vec![message]).await;
        }));
    }

    /// Delivers messages the caller already leases (from
    /// [`Batch::enqueue_leased`](crate::batch::Batch::enqueue_leased)) and settles them: the immediate attempt
    /// after a response, one database call for its settle.
    pub(crate) async fn deliver_claimed(&self, messages: Vec<ClaimedMessage>) -> DrainReport {
        let report = Run::new(&self.parts, messages, false).run_to_end().await;
        log::info!("{}", report.log_line());
        report
    }
}
