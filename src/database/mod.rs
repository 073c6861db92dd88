//! The `Database` port: the only way this crate touches storage. The port
//! ([`Database`], [`Statement`], [`Value`](crate::Value), [`Dialect`]) and the adapters
//! (`D1Database`, `DurableObjectDatabase`, `SqliteDatabase`,
//! `PostgresDatabase`, `HyperdriveDatabase`) are at the crate's root; this
//! module holds what a call returns.

#[cfg(feature = "testing")]
pub(crate) mod counting;
pub(crate) mod d1;
pub(crate) mod dialect;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub(crate) mod durable_object;
#[cfg(feature = "testing")]
pub(crate) mod faulty;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod js_values;
pub(crate) mod port;
#[cfg(any(
    all(feature = "postgres", not(target_arch = "wasm32")),
    all(feature = "hyperdrive", target_arch = "wasm32")
))]
pub(crate) mod postgres;
mod rows;
#[cfg(all(feature = "sqlite", not(target_arch = "wasm32")))]
pub(crate) mod sqlite;
pub(crate) mod statement;
pub(crate) mod value;

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use d1::D1Usage;
pub(crate) use dialect::Dialect;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use durable_object::NextDue;
pub(crate) use port::Database;
pub use port::Outcome;
pub use rows::{FromValue, Row, Rows};
pub(crate) use statement::Statement;
pub(crate) use statement::query_error;
