//! The caller's side of delivery: send one message, say how it went.

use std::future::Future;
use std::time::Duration;

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

    /// The most requests a second `message`'s
    /// [`destination`](Deliver::destination) takes, when the destination
    /// sets its own rate (an [endpoint's rate limit](crate::endpoint::NewEndpoint::rate_limit));
    /// `None` (the default) keeps the drainer's
    /// [`DestinationLimits`](super::DestinationLimits). A drain starts that
    /// destination's requests at most this many a second, evenly spaced,
    /// whether or not the drainer sets destination limits (its in-flight
    /// limit still applies); at most
    /// [`DestinationLimits::MOST_PER_SECOND`](super::DestinationLimits::MOST_PER_SECOND).
    /// The rate holds within one drain: drains running side by side each
    /// keep it.
    fn destination_rate(&self, message: &ClaimedMessage) -> Option<u32> {
        let _ = message;
        None
    }

    /// Delivers `message` and says what the receiver answered, for the
    /// outbox's attempt log (`None`: nothing to log). The drain calls this;
    /// by default it is [`deliver`](Deliver::deliver), logging nothing. The
    /// record is written in the drain's next settle call, while the lease
    /// holds: a stale holder's attempt is not logged.
    fn deliver_logged<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> BoxFuture<'a, (Delivery, Option<AttemptRecord>)> {
        Box::pin(async move { (self.deliver(message).await, None) })
    }
}

/// What a receiver answered to one attempt, for the attempt log: written
/// beside the verdict (its class and error) by the drain.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AttemptRecord {
    /// The status, if an answer came.
    pub status: Option<u16>,
    /// How long the attempt took.
    pub duration: Duration,
    /// The response headers kept (content type, `Retry-After`).
    pub headers: Vec<(String, String)>,
    /// The start of the response body, as text (at most
    /// [`AttemptRecord::BODY_BYTES`]).
    pub body: String,
}

impl AttemptRecord {
    /// The most bytes of a response body an attempt keeps.
    pub const BODY_BYTES: usize = 4096;

    /// A record of an answer with `status` (or none), after `duration`.
    pub fn new(status: Option<u16>, duration: Duration) -> Self {
        AttemptRecord {
            status,
            duration,
            headers: Vec::new(),
            body: String::new(),
        }
    }

    /// With the response header `name`'s `value` kept.
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_ascii_lowercase(), value.to_owned()));
        self
    }

    /// With the start of the response body kept (cut to
    /// [`BODY_BYTES`](Self::BODY_BYTES) at a character boundary; a NUL,
    /// which Postgres text cannot hold, kept as U+FFFD).
    #[must_use]
    pub fn body(mut self, body: &str) -> Self {
        let mut end = body.len().min(Self::BODY_BYTES);
        while !body.is_char_boundary(end) {
            end -= 1;
        }
        self.body = body[..end].replace('\0', "\u{FFFD}");
        self
    }
}

/// Which attempts a deliverer logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AttemptLog {
    /// None.
    Off,
    /// Failures only (the default): what went wrong, without a row per
    /// delivered message.
    #[default]
    Failures,
    /// Every attempt.
    All,
}

impl AttemptLog {
    /// Whether an attempt ending in `verdict` is logged.
    pub fn keeps(self, verdict: &Delivery) -> bool {
        match self {
            AttemptLog::Off => false,
            AttemptLog::Failures => *verdict != Delivery::Delivered,
            AttemptLog::All => true,
        }
    }

    /// The record of an attempt that ended in `verdict` after `took` with
    /// no status to tell (a binding call, not an HTTP answer): its error as
    /// the body, if this log keeps it.
    #[cfg(all(feature = "workers", target_arch = "wasm32"))]
    pub(crate) fn without_status(
        self,
        verdict: &Delivery,
        took: Duration,
    ) -> Option<AttemptRecord> {
        self.keeps(verdict)
            .then(|| AttemptRecord::new(None, took).body(verdict.error().unwrap_or_default()))
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

    fn destination_rate(&self, message: &ClaimedMessage) -> Option<u32> {
        (**self).destination_rate(message)
    }

    fn deliver_logged<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> BoxFuture<'a, (Delivery, Option<AttemptRecord>)> {
        (**self).deliver_logged(message)
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
