//! Cloudflare Queues: relay outbox messages into a Queue in batches, and
//! consume them with exactly-once effects.
//!
//! The outbox captures a message atomically with the state change; a
//! `QueueDeliverer` relays it into a Queue (one subrequest per up to 100
//! messages), and the Queue fans the work out to up to 250 concurrent
//! consumer invocations. A `QueueConsumer` applies each message's effect in
//! one atomic batch with an inbox key (the outbox id), so a message the
//! Queue delivers twice — or the outbox relays twice — changes nothing
//! twice. Together: state change → outbox → Queue → effect, exactly once.
//!
//! [`Envelope`] and its limits are plain data, usable anywhere; the relay
//! and the consumer need the `workers` feature on `wasm32`.

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod consumer;
mod envelope;
mod fan_out;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod relay;

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use consumer::{ConsumeReport, Consumed, QueueConsumer};
pub use envelope::{
    Envelope, MAX_BATCH_BYTES, MAX_BATCH_MESSAGES, MAX_MESSAGE_BYTES, METADATA_BYTES,
};
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use fan_out::request_drains;
pub use fan_out::{DrainRequest, FanOut};
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use relay::QueueDeliverer;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub(crate) use relay::send_one;
