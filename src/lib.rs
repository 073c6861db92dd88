//! Durable delivery for Cloudflare Workers: an **outbox** for outbound work
//! (at least once) and an **inbox** for inbound effects (exactly once), over
//! a small, dialect-aware [`Database`] port with adapters for D1 and a
//! Durable Object's SQLite storage (`workers` feature, `wasm32`; see
//! [`database`]), native SQLite (`sqlite` feature) and Postgres (`postgres`
//! natively, `hyperdrive` on Workers). Messages can be relayed into a
//! Cloudflare Queue and consumed exactly once (see [`queue`]).
//!
//! `ctx.wait_until` is an opportunity, not a promise: eviction, a deadline or
//! a failing downstream loses the work after the database write committed.
//! The outbox closes that gap:
//!
//! 1. The handler adds [`Outbox::enqueue`]'s statement to the **same**
//!    [`Database::batch_atomic`] as its state change, so the message exists
//!    exactly when the change does.
//! 2. A [`Defer`](defer::Defer) (Workers `wait_until`, or `tokio::spawn`)
//!    tries delivery at once.
//! 3. A scheduled [`Drainer`] delivers whatever was missed
//!    (in a Durable Object, the object's alarm runs it when the next message
//!    falls due): it leases due rows, delivers, and completes, retries with
//!    backoff or parks them as dead, within Workers' time and query limits.
//!
//! ```
//! # #[cfg(all(feature = "sqlite", not(target_arch = "wasm32")))]
//! # fn main() -> workers_outbox::Result<()> {
//! # futures_util::FutureExt::now_or_never(async {
//! use std::sync::Arc;
//! use std::time::Duration;
//! use workers_outbox::{Database, Message, Outbox, SqliteDatabase, Statement};
//!
//! let db: Arc<dyn Database> = Arc::new(SqliteDatabase::open_in_memory()?);
//! let outbox = Outbox::new(db.clone(), "outbox")?;
//! outbox.create_schema().await?;
//! db.execute(&Statement::new("CREATE TABLE accounts (email TEXT PRIMARY KEY)", vec![])).await?;
//!
//! // The state change and the message commit together, or neither does.
//! let signup = Statement::new("INSERT INTO accounts (email) VALUES (?)", vec!["ada@example.com".into()]);
//! let mail = outbox.enqueue(Message::json("welcome-mail", &serde_json::json!({"to": "ada@example.com"}))?)?;
//! db.batch_atomic(&[&[signup], mail.statements()].concat()).await?;
//!
//! // Later, a drain leases due messages, delivers them, and settles.
//! let claim = outbox.claim(10, Duration::from_secs(60)).await?;
//! assert_eq!(claim.messages[0].id, mail.id());
//! outbox.complete(claim.messages[0].lease()).await?;
//! assert_eq!(outbox.stats().await?.pending, 0);
//! # Ok(()) }).expect("SQLite futures complete at once")
//! # }
//! # #[cfg(not(all(feature = "sqlite", not(target_arch = "wasm32"))))]
//! # fn main() {}
//! ```

// One `Send` story for both targets (see `future`): on wasm32, `Arc`s hold
// JavaScript handles that are neither `Send` nor `Sync`, by design.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

mod batch;
#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "console")]
pub mod console;
pub mod database;
pub mod defer;
pub mod drain;
pub mod email;
pub mod endpoint;
mod erasure;
mod error;
pub mod fleet;
pub mod future;
pub mod http;
mod identifier;
pub mod inbox;
#[cfg(any(test, feature = "testing"))]
mod manual_clock;
pub mod outbox;
pub mod queue;
mod random;
mod retry;
pub mod seal;
mod sql;
pub mod subject;
pub mod telemetry;
#[cfg(feature = "testing")]
pub mod testing;
mod time;
pub mod topic;
pub mod trace;
mod vars;
mod verdict;
pub mod webhook;
pub mod workflow;

pub use batch::{
    Batch, Committed, InboxKey, OfErasure, OfEvent, OfLeasedMessage, OfMessage, OfStatement, Ticket,
};
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use database::d1::D1Database;
pub use database::dialect::Dialect;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use database::durable_object::DurableObjectDatabase;
pub use database::port::Database;
#[cfg(all(feature = "hyperdrive", target_arch = "wasm32"))]
pub use database::postgres::HyperdriveDatabase;
#[cfg(all(feature = "postgres", not(target_arch = "wasm32")))]
pub use database::postgres::PostgresDatabase;
#[cfg(all(feature = "sqlite", not(target_arch = "wasm32")))]
pub use database::sqlite::SqliteDatabase;
pub use database::statement::Statement;
pub use database::value::Value;
pub use drain::drainer::Drainer;
pub use drain::limits::DrainLimits;
pub use error::{Cause, Error, Result, RetryAdvice};
pub use identifier::TableName;
pub use inbox::handle::Inbox;
pub use outbox::claim::ClaimedMessage;
pub use outbox::handle::Outbox;
pub use outbox::message::Message;
pub use random::{FastRandom, RandomSource};
pub use retry::{Backoff, ExponentialBackoff, RetryPolicy, ScheduledBackoff};
#[cfg(all(feature = "tokio", not(target_arch = "wasm32")))]
pub use time::TokioTimer;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use time::WorkersTimer;
pub use time::{Clock, SystemClock, Timer, Timestamp};
pub use topic::typed::Topic;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use vars::worker_vars;
pub use verdict::Delivery;
