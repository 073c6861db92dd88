//! The caller's side of delivery: send one message, say how it went.

use std::future::Future;

use crate::outbox::{ClaimedMessage, Delivery};
use crate::send::{BoxFuture, MaybeSend, MaybeSync};

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

impl<F, Fut> Deliver for DeliverFn<F>
where
    F: Fn(ClaimedMessage) -> Fut + MaybeSend + MaybeSync,
    Fut: Future<Output = Delivery> + MaybeSend + 'static,
{
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin((self.0)(message.clone()))
    }
}
