//! Cloudflare D1: the adapter (on `wasm32` with the `workers` feature) and
//! the classification of D1's error messages (everywhere, so it is testable
//! on any host).

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod adapter;
#[cfg(any(
    test,
    all(feature = "workers", target_arch = "wasm32"),
    all(feature = "sqlite", not(target_arch = "wasm32"))
))]
pub(crate) mod classify;

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use adapter::{D1Database, D1Usage};
#[cfg(all(feature = "sqlite", not(target_arch = "wasm32")))]
pub(crate) use classify::classify_message;
