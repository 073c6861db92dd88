//! Delivery over HTTP: a ready [`Deliver`](crate::drain::Deliver) that POSTs
//! each message's JSON payload to a URL.
//!
//! - `Idempotency-Key: <message id>` on every request, so the receiver can
//!   drop the duplicates at-least-once delivery may send; `traceparent` and
//!   `tracestate` when the message carries a [trace context](crate::trace).
//! - The answer becomes a [`Delivery`](crate::verdict::Delivery) through a
//!   configurable [`StatusMapping`]; `Retry-After` (seconds or an HTTP date)
//!   is honoured.
//! - Redirects are **never followed**: a 3xx is the receiver's answer, a
//!   failure that is retried (unless the mapping says otherwise), as
//!   Standard Webhooks senders treat it.
//! - Optionally **signed** the Standard Webhooks way
//!   (`HttpDeliverer::signed`, see [`webhook`](crate::webhook)).
//! - A request that runs past its timeout (15 s by default) is **aborted**,
//!   and so is one whose delivery the drainer drops: a hung receiver does not
//!   keep holding a connection.
//! - A `410 Gone` pauses the message's topic ([`Delivery::Gone`](crate::Delivery::Gone)).
//! - Nothing is logged; errors kept in `last_error` carry the status and at
//!   most 200 characters of the receiver's answer (of which at most 4 KiB
//!   is read), never the payload or the request headers (which may hold
//!   secrets); `Debug` shows neither header values nor the URL's query.
//!
//! One [`HttpDeliverer`], two transports: on Workers the runtime's `fetch`
//! (feature `workers`, `wasm32`, aborted through an `AbortController`),
//! natively reqwest on tokio with rustls (feature `native-http`; no
//! OpenSSL). The status mapping is plain Rust on every target.

mod addresses;
#[cfg(any(
    all(feature = "workers", target_arch = "wasm32"),
    all(feature = "native-http", not(target_arch = "wasm32"))
))]
mod deliverer;
#[cfg(all(feature = "native-http", not(target_arch = "wasm32")))]
mod native;
mod status;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod workers;

pub use addresses::is_private;
#[cfg(any(
    all(feature = "workers", target_arch = "wasm32"),
    all(feature = "native-http", not(target_arch = "wasm32"))
))]
pub use deliverer::HttpDeliverer;
#[cfg(any(
    all(feature = "workers", target_arch = "wasm32"),
    all(feature = "native-http", not(target_arch = "wasm32"))
))]
pub(crate) use deliverer::{Service, To};
pub use status::{StatusMapping, Treat, parse_retry_after};
