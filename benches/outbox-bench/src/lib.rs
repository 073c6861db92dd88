//! Benchmarks of the outbox against the original algorithm. The scenarios
//! are shared; `src/main.rs` runs them on native SQLite, and on `wasm32`
//! this crate is a Worker that runs them on D1 (driven by
//! `benches/run.mjs` through Miniflare).

pub mod baseline;
pub mod batch_loop;
pub mod console_reads;
pub mod cost;
pub mod endpoint_costs;
pub mod latency;
pub mod scenarios;
pub mod sealing;
#[cfg(target_arch = "wasm32")]
#[allow(missing_docs)] // `#[durable_object]` generates undocumented methods.
mod wakeups;
#[cfg(target_arch = "wasm32")]
mod worker_entry;
#[cfg(target_arch = "wasm32")]
mod worker_glue;
#[cfg(target_arch = "wasm32")]
pub use wakeups::WakeObject;
