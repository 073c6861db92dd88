//! Cloudflare D1: the adapter (on `wasm32` with the `workers` feature) and
//! the classification of D1's error messages (everywhere, so it is testable
//! on any host).

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod adapter;
mod classify;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod values;

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use adapter::{D1Database, D1Usage};
pub use classify::classify_message;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use values::{MAX_SAFE_INTEGER, from_js, to_js};
