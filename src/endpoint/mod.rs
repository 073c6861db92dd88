//! Receivers as data: endpoints with subscriptions, secrets and their own
//! state, stored beside an outbox, and events fanned out to them **inside
//! the application's own atomic batch**.
//!
//! An [`Endpoints`] handle manages an outbox's endpoints (create, list,
//! update, rotate a secret with overlap, disable, pause, enable, delete),
//! every call scoped by owner, the tenant the application names.
//! [`Batch::publish`](crate::Batch::publish) adds an [`Event`] to a batch:
//! the event is kept, and one delivery row per endpoint of its owner
//! subscribed to its type is written by an `INSERT … SELECT` of the same
//! batch, so the deliveries exist exactly when the business change does.
//!
//! Each delivery is an outbox message whose topic is its endpoint's id:
//! retries, the breaker, held backlogs and pauses are per endpoint, and a
//! `410 Gone` from one receiver disables that endpoint alone. The
//! [`EndpointDeliverer`] sends each with its endpoint's URL and secrets as
//! they are at the attempt (the claim reads them with the row), signed the
//! Standard Webhooks way with `webhook-id` = the event's id, the same on
//! every endpoint and every retry.
//!
//! ```
//! # #[cfg(all(feature = "sqlite", not(target_arch = "wasm32")))]
//! # fn main() -> workers_outbox::Result<()> {
//! # futures_util::FutureExt::now_or_never(async {
//! use std::sync::Arc;
//! use workers_outbox::endpoint::{Endpoints, Event, NewEndpoint};
//! use workers_outbox::{Batch, Database, Outbox, SqliteDatabase, Statement};
//!
//! let db: Arc<dyn Database> = Arc::new(SqliteDatabase::open_in_memory()?);
//! let outbox = Outbox::new(db.clone(), "outbox")?;
//! outbox.create_schema().await?;
//! let endpoints = Endpoints::new(&outbox);
//!
//! // A customer registers where its events go.
//! let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
//! let endpoint = endpoints
//!     .create(NewEndpoint::new("acme", "https://hooks.acme.example/in", secret).event_types(["order.paid"]))
//!     .await?;
//!
//! // The application's write and the event, in one atomic batch.
//! db.execute(&Statement::new("CREATE TABLE orders (id TEXT PRIMARY KEY)", vec![])).await?;
//! let mut batch = Batch::new(db.clone());
//! batch.push(Statement::new("INSERT INTO orders (id) VALUES ('o-1')", vec![]));
//! let event = batch.publish(&endpoints, Event::raw_json("acme", "order.paid", r#"{"order":"o-1"}"#))?;
//! let committed = batch.commit().await?;
//! assert_eq!(committed.published(&event)?, 1); // one delivery: acme's one endpoint
//! assert_eq!(outbox.stats().await?.pending, 1);
//! # let _ = endpoint;
//! # Ok(()) }).expect("SQLite futures complete at once")
//! # }
//! # #[cfg(not(all(feature = "sqlite", not(target_arch = "wasm32"))))]
//! # fn main() {}
//! ```

#[cfg(any(
    all(feature = "workers", target_arch = "wasm32"),
    all(feature = "native-http", not(target_arch = "wasm32"))
))]
mod deliver;
mod destination;
mod event;
#[cfg(any(test, all(feature = "workers", target_arch = "wasm32")))]
mod mail;
pub(crate) mod model;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod platform;
#[cfg(any(
    test,
    all(feature = "workers", target_arch = "wasm32"),
    all(feature = "native-http", not(target_arch = "wasm32"))
))]
mod slack;
mod store;

#[cfg(any(
    all(feature = "workers", target_arch = "wasm32"),
    all(feature = "native-http", not(target_arch = "wasm32"))
))]
pub use deliver::EndpointDeliverer;
pub use destination::EndpointKind;
pub(crate) use event::events_of_subject;
pub use event::{Event, MAX_EVENT_ID_BYTES, PublishedEvent};
pub use model::{
    BodyFormat, Endpoint, EndpointFilter, EndpointState, EndpointUpdate, MAX_EVENT_TYPE_BYTES,
    MAX_EVENT_TYPES, MAX_FILTER_BYTES, MAX_METADATA_BYTES, MAX_RATE_LIMIT, NewEndpoint,
};
pub use store::{EndpointPage, Endpoints, Recovered};
