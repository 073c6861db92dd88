//! Delivery over HTTP: a ready [`Deliver`](crate::drain::Deliver) that POSTs
//! each message's JSON payload to a URL.
//!
//! - `Idempotency-Key: <message id>` on every request, so the receiver can
//!   drop the duplicates at-least-once delivery may send.
//! - The answer becomes a [`Delivery`](crate::verdict::Delivery) through a
//!   configurable [`StatusMapping`]; `Retry-After` (seconds or an HTTP date)
//!   is honoured.
//! - Redirects are **never followed**: a 3xx is the receiver's answer, a
//!   failure that is retried (unless the mapping says otherwise), as
//!   Standard Webhooks senders treat it.
//! - Optionally **signed** the Standard Webhooks way
//!   (`HttpDeliverer::signed`, see [`webhook`](crate::webhook)).
//! - A request that runs past its timeout is **aborted** (`AbortController`),
//!   and so is one whose delivery the drainer drops: a hung receiver does not
//!   keep holding one of the invocation's connections.
//! - Nothing is logged; errors kept in `last_error` carry the status and at
//!   most 200 characters of the receiver's answer (of which at most 4 KiB
//!   is read), never the payload or the request headers (which may hold
//!   secrets); `Debug` shows neither header values nor the URL's query.
//!
//! The HTTP client is the Workers runtime's `fetch` (feature `workers`,
//! `wasm32`); the status mapping is plain Rust on every target.

mod status;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod workers;

pub use status::{StatusMapping, Treat, parse_retry_after};
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use workers::HttpDeliverer;
