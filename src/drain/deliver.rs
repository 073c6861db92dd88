//! The caller's side of delivery: send one message, say how it went.

use std::future::Future;

use crate::future::{BoxFuture, MaybeSend, MaybeSync};
use crate::outbox::ClaimedMessage;
use crate::verdict::Delivery;

/// Sends one message somewhere (a mail API, a webhook, another module).
///
/// Report [`Delivery::Delivered`] only once the receiver has the message;
/// [`Delivery::Retry`] (or [`Delivery::RetryAfter`]) when this message
/// failed in a way that may pass (a 500); [`Delivery::Unavailable`] when the
/// receiver as a whole is down or throttling (429, 503: no attempt spent);
/// [`Delivery::Permanent`] for failures that never will (a 400). The
/// drainer times out slow deliveries itself, and a dropped delivery future
/// should cancel its request (the library's
/// [`HttpDeliverer`](crate::http) aborts its `fetch`).
///
/// Delivery is at least once: the same message can arrive twice (after a
/// crash between delivery and settle). Pass [`ClaimedMessage::id`] along as
/// an idempotency key so the receiver can drop duplicates.
pub trait Deliver: MaybeSend + MaybeSync {
    /// Delivers `message`.
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery>;

    /// The receiver `message` goes to (for HTTP, the URL's host and port),
    /// if the deliverer knows it; `None` (the default) when a topic has one
    /// receiver. A drain keeps its circuit breaker per topic *and*
    /// destination, so one failing receiver of a topic that fans out does
    /// not stop the healthy ones, and applies
    /// [`DestinationLimits`](super::DestinationLimits) per destination
    /// across topics.
    fn destination(&self, message: &ClaimedMessage) -> Option<String> {
        let _ = message;
        None
    }
}

/// Sends many messages in one call: a Cloudflare Queue's `send_batch`, a
/// bulk API. The drainer groups claimed messages into calls within
/// [`limits`](DeliverBatch::limits), and keeps up to
/// [`DrainLimits::concurrency`](super::DrainLimits::concurrency) calls in
/// flight; a call that outlives the delivery timeout is dropped and all its
/// messages count as timed out. A [`DrainLimits::batch_size`](super::DrainLimits::batch_size)
/// below the deliverer's `max_messages` also bounds a call.
///
/// The same verdicts and the same at-least-once rule as [`Deliver`] apply,
/// per message. A call that outlives the delivery timeout makes its
/// messages [`Delivery::Unavailable`] (no attempt spent): a slow batch
/// endpoint is not any one message's fault.
pub trait DeliverBatch: MaybeSend + MaybeSync {
    /// How much one call may carry.
    fn limits(&self) -> BatchLimits;

    /// The size of `message` as it counts against
    /// [`BatchLimits::max_bytes`]. By default its payload, id, topic and
    /// subject, plus 64 bytes.
    fn size_of(&self, message: &ClaimedMessage) -> usize {
        message.payload.len()
            + message.id.len()
            + message.topic.len()
            + message.subject.as_ref().map_or(0, String::len)
            + 64
    }

    /// Whether suspects — messages whose lease ended unsettled, which may
    /// have crashed their drainer — must be delivered in suspect groups with
    /// nothing else in flight (the default; a group is re-leased in a
    /// database call of its own). A relay that only forwards bytes cannot be
    /// crashed by one message: return `false` and suspects travel in calls
    /// like the rest.
    fn isolates_suspects(&self) -> bool {
        true
    }

    /// Delivers `messages` and returns one verdict per message, in order. A
    /// missing verdict counts as a retryable failure (and one too many is
    /// ignored), so a faulty deliverer cannot lose a message.
    fn deliver_batch<'a>(&'a self, messages: &'a [ClaimedMessage]) -> BoxFuture<'a, Vec<Delivery>>;
}

/// What one [`DeliverBatch`] call may carry. A message larger than
/// `max_bytes` on its own still goes, alone: the deliverer decides its fate
/// (a Queue refuses it as a permanent failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    /// Messages per call (at least 1).
    pub max_messages: usize,
    /// Bytes per call, as [`DeliverBatch::size_of`] counts them.
    pub max_bytes: usize,
}

/// A [`Deliver`] made from an async closure taking the message by value.
pub fn deliver_fn<F, Fut>(deliver: F) -> DeliverFn<F>
where
    F: Fn(ClaimedMessage) -> Fut + MaybeSend + MaybeSync,
    Fut: Future<Output = Delivery> + MaybeSend + 'static,
{
    DeliverFn(deliver)
}

/// See [`deliver_fn`].
#[derive(Debug, Clone, Copy)]
pub struct DeliverFn<F>(F);

/// A shared deliverer delivers as the one it shares.
impl<T: Deliver + ?Sized> Deliver for std::sync::Arc<T> {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        (**self).deliver(message)
    }

    fn destination(&self, message: &ClaimedMessage) -> Option<String> {
        (**self).destination(message)
    }
}

impl<F, Fut> Deliver for DeliverFn<F>
where
    F: Fn(ClaimedMessage) -> Fut + MaybeSend + MaybeSync,
    Fut: Future<Output = Delivery> + MaybeSend + 'static,
{
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin((self.0)(message.clone()))
    }
}
