//! The drainer and its builder.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use futures_util::future::{Either, select};

use super::deliver::{BatchLimits, Deliver, DeliverBatch};
use super::destinations::DestinationLimits;
use super::limits::DrainLimits;
use crate::error::Result;
use crate::outbox::{ClaimedMessage, Outbox};
use crate::telemetry::{Sinks, Telemetry, spans};
use crate::time::{Timer, Timestamp};
use crate::verdict::Delivery;

/// Delivers an outbox's messages through a [`Deliver`] (one message a
/// call) or a [`DeliverBatch`] (many). Cheap to clone, so it can move into
/// a deferred task.
#[derive(Clone)]
pub struct Drainer {
    pub(super) outbox: Outbox,
    pub(super) deliver: Deliverer,
    pub(super) timer: Arc<dyn Timer>,
    pub(super) limits: DrainLimits,
    pub(super) destinations: Option<DestinationLimits>,
    /// Where what the drain does is told as it happens.
    pub(super) telemetry: Sinks,
    /// When this drainer (and its clones) last swept (stranded ordering
    /// keys, expired tombstones), in Unix ms (see `run::Run::sweep`).
    pub(super) last_sweep: Arc<AtomicI64>,
}

/// How often a drainer sweeps (stranded ordering keys, expired tombstones).
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

impl std::fmt::Debug for Drainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drainer")
            .field("outbox", &self.outbox)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// What a drainer delivers through.
#[derive(Clone)]
pub(super) enum Deliverer {
    One(Arc<dyn Deliver>),
    Batch(Arc<dyn DeliverBatch>),
}

impl Deliverer {
    /// What one call may carry.
    pub(super) fn limits(&self) -> BatchLimits {
        match self {
            Deliverer::One(_) => BatchLimits {
                max_messages: 1,
                max_bytes: usize::MAX,
            },
            Deliverer::Batch(batch) => batch.limits(),
        }
    }

    pub(super) fn size_of(&self, message: &ClaimedMessage) -> usize {
        match self {
            Deliverer::One(_) => 0,
            Deliverer::Batch(batch) => batch.size_of(message),
        }
    }

    pub(super) fn isolates_suspects(&self) -> bool {
        match self {
            Deliverer::One(_) => true,
            Deliverer::Batch(batch) => batch.isolates_suspects(),
        }
    }

    /// Where `message` goes, as the deliverer names it (a batch call has
    /// no one destination per message).
    pub(super) fn destination(&self, message: &ClaimedMessage) -> Option<String> {
        match self {
            Deliverer::One(deliver) => deliver.destination(message),
            Deliverer::Batch(_) => None,
        }
    }

    pub(super) fn is_batch(&self) -> bool {
        matches!(self, Deliverer::Batch(_))
    }
}

/// How one delivery attempt ended.
pub(super) enum Attempt {
    Answered(Delivery),
    TimedOut,
    /// Never started: when its turn came, the lease (or the deadline) no
    /// longer left room for a timeout and a settle.
    TooLate,
}

/// A message queued for delivery, and the latest its delivery may end (its
/// settle margin included).
pub(super) struct Queued {
    pub(super) message: ClaimedMessage,
    pub(super) finish_by: Timestamp,
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
            outbox: self.outbox,
            deliver: self.deliver,
            timer,
            limits: self.limits,
            destinations: self.destinations,
            telemetry: self.telemetry,
            last_sweep: Arc::new(AtomicI64::new(i64::MIN)),
        })
    }
}

/// What a delivery's span names of `message`.
fn processed(message: &ClaimedMessage) -> spans::Processed<'_> {
    spans::Processed {
        topic: &message.topic,
        id: &message.id,
        attempt: message.attempt(),
        creation_context: message.trace.as_ref().map(|trace| trace.traceparent()),
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
        }
    }

    /// The limits in force.
    pub fn limits(&self) -> &DrainLimits {
        &self.limits
    }

    /// Whether a run starting at `now` should sweep (at most once per
    /// [`SWEEP_EVERY`] for a drainer and its clones);
    /// if so, the sweep is counted as done.
    pub(super) fn sweep_due(&self, now: crate::time::Timestamp) -> bool {
        let now = now.as_unix_millis();
        let every = i64::try_from(SWEEP_EVERY.as_millis()).unwrap_or(i64::MAX);
        let last = self.last_sweep.load(Ordering::Relaxed);
        now.saturating_sub(last) >= every
            && self
                .last_sweep
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }

    /// Whether a delivery starting `now` can time out and be settled by
    /// `finish_by`.
    pub(super) fn room_before(&self, finish_by: Timestamp, now: Timestamp) -> bool {
        now.checked_add(self.limits.delivery_timeout + self.limits.settle_margin)
            .is_ok_and(|finish| finish <= finish_by)
    }

    /// One delivery call (one message, unless the deliverer takes batches),
    /// timed out (and dropped) after the delivery timeout; one attempt per
    /// message. Every delivery passes here: the lease is checked at the
    /// instant the call starts, so the deliverer is never called with less
    /// than the timeout and the settle margin left; a message without that
    /// room is not delivered ([`Attempt::TooLate`]).
    pub(super) async fn attempt(&self, call: Vec<Queued>) -> Vec<(ClaimedMessage, Attempt)> {
        let now = self.outbox.now();
        let (starting, late): (Vec<Queued>, Vec<Queued>) = call
            .into_iter()
            .partition(|queued| self.room_before(queued.finish_by, now));
        let messages: Vec<ClaimedMessage> = starting.into_iter().map(|s| s.message).collect();
        let late = late.into_iter().map(|s| (s.message, Attempt::TooLate));
        if messages.is_empty() {
            return late.collect();
        }
        let delivery: crate::future::BoxFuture<'_, Vec<Delivery>> = match &self.deliver {
            Deliverer::One(deliver) => {
                Box::pin(futures_util::future::join_all(messages.iter().map(
                    |message| spans::in_process_span(processed(message), deliver.deliver(message)),
                )))
            }
            Deliverer::Batch(deliver) => {
                let topics = messages.iter().map(|message| message.topic.as_str());
                spans::in_batch_span(topics, deliver.deliver_batch(&messages))
            }
        };
        let timeout = self.timer.sleep(self.limits.delivery_timeout);
        let attempts: Vec<Attempt> = match select(delivery, timeout).await {
            Either::Left((verdicts, _)) => {
                let mut verdicts = verdicts.into_iter();
                messages
                    .iter()
                    .map(|_| {
                        Attempt::Answered(verdicts.next().unwrap_or_else(|| {
                            Delivery::retry("the batch deliverer gave no verdict for this message")
                        }))
                    })
                    .collect()
            }
            Either::Right(((), _)) => messages.iter().map(|_| Attempt::TimedOut).collect(),
        };
        messages.into_iter().zip(attempts).chain(late).collect()
    }
}
