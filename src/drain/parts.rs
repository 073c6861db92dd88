//! What a drainer is made of (the outbox, the deliverer, the timer, the
//! limits, the telemetry), and the one delivery attempt every delivery
//! passes. Below the run, which borrows it, and the public `Drainer`,
//! which wraps it.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use futures_util::future::{Either, select};

use super::deliver::{AttemptRecord, BatchLimits, Deliver, DeliverBatch};
use super::destinations::DestinationLimits;
use super::limits::DrainLimits;
use crate::outbox::{ClaimedMessage, Outbox};
use crate::telemetry::{Sinks, spans};
use crate::time::{Timer, Timestamp};
use crate::verdict::Delivery;

/// A drainer's parts, shared by its clones.
#[derive(Clone)]
pub(super) struct Parts {
    pub(super) outbox: Outbox,
    pub(super) deliver: Deliverer,
    pub(super) timer: Arc<dyn Timer>,
    pub(super) limits: DrainLimits,
    pub(super) destinations: Option<DestinationLimits>,
    /// Where what the drain does is told as it happens.
    pub(super) telemetry: Sinks,
    /// When this drainer (and its clones) last swept (stranded ordering
    /// keys, expired tombstones), in Unix ms.
    pub(super) last_sweep: Arc<AtomicI64>,
}

/// How often a drainer sweeps (stranded ordering keys, expired tombstones).
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(60);

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

    /// The rate `message`'s destination sets itself, if any.
    pub(super) fn destination_rate(&self, message: &ClaimedMessage) -> Option<u32> {
        match self {
            Deliverer::One(deliver) => deliver.destination_rate(message),
            Deliverer::Batch(_) => None,
        }
    }

    pub(super) fn is_batch(&self) -> bool {
        matches!(self, Deliverer::Batch(_))
    }
}

/// How one delivery attempt ended.
pub(super) enum Attempt {
    /// The verdict, and what the deliverer logs of the receiver's answer.
    Answered(Delivery, Option<Box<AttemptRecord>>),
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

/// What a delivery's span names of `message`.
fn processed(message: &ClaimedMessage) -> spans::Processed<'_> {
    spans::Processed {
        topic: &message.topic,
        id: &message.id,
        attempt: message.attempt(),
        creation_context: message.trace.as_ref().map(|trace| trace.traceparent()),
    }
}

impl Parts {
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
        type Verdicts = Vec<(Delivery, Option<AttemptRecord>)>;
        let delivery: crate::future::BoxFuture<'_, Verdicts> = match &self.deliver {
            Deliverer::One(deliver) => Box::pin(futures_util::future::join_all(
                messages.iter().map(|message| {
                    spans::in_process_span(
                        processed(message),
                        deliver.deliver_logged(message),
                        |(verdict, _)| verdict,
                    )
                }),
            )),
            Deliverer::Batch(deliver) => {
                let topics = messages.iter().map(|message| message.topic.as_str());
                let verdicts = spans::in_batch_span(topics, deliver.deliver_batch(&messages));
                Box::pin(async move {
                    verdicts
                        .await
                        .into_iter()
                        .map(|verdict| (verdict, None))
                        .collect()
                })
            }
        };
        let timeout = self.timer.sleep(self.limits.delivery_timeout);
        let attempts: Vec<Attempt> = match select(delivery, timeout).await {
            Either::Left((verdicts, _)) => {
                let mut verdicts = verdicts.into_iter();
                messages
                    .iter()
                    .map(|_| match verdicts.next() {
                        Some((verdict, record)) => Attempt::Answered(verdict, record.map(Box::new)),
                        None => Attempt::Answered(
                            Delivery::retry("the batch deliverer gave no verdict for this message"),
                            None,
                        ),
                    })
                    .collect()
            }
            Either::Right(((), _)) => messages.iter().map(|_| Attempt::TimedOut).collect(),
        };
        messages.into_iter().zip(attempts).chain(late).collect()
    }
}
