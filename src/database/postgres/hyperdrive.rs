//! Postgres on Workers: tokio-postgres over a Hyperdrive binding's socket.

use futures_util::lock::Mutex;
use tokio_postgres::NoTls;
use worker::Hyperdrive;

use super::{map_error, run_alone, run_transaction};
use crate::database::{Database, Dialect, Outcome, Statement};
use crate::error::{Error, Result};
use crate::future::BoxFuture;

/// A Postgres database reached through a Hyperdrive binding (feature
/// `hyperdrive`, wasm32).
///
/// One connection, opened by [`connect`](HyperdriveDatabase::connect) for the
/// invocation that uses it (Hyperdrive pools the connections to the origin,
/// so opening one per request is cheap). Calls take turns on it: a
/// [`batch_atomic`](Database::batch_atomic) is one transaction no other call
/// interleaves with. Statements, values and rows are as for
/// [`PostgresDatabase`](https://docs.rs/workers-outbox/latest/workers_outbox/struct.PostgresDatabase.html),
/// the native adapter.
///
/// Hyperdrive caches read queries (60 s by default); writes and claims are
/// never cached, but plain reads (`stats`, `count_due`, `list_dead`,
/// `export_subject`, `Inbox::seen`) can be stale. Create the configuration with
/// `--caching-disabled` where they must be current.
///
/// Locally, `wrangler dev` and Miniflare connect the binding to the database
/// named by its `localConnectionString` (or the
/// `CLOUDFLARE_HYPERDRIVE_LOCAL_CONNECTION_STRING_<BINDING>` variable).
pub struct HyperdriveDatabase {
    client: Mutex<tokio_postgres::Client>,
}

impl HyperdriveDatabase {
    /// Opens a connection through `hyperdrive` (e.g. `env.hyperdrive("DB")?`).
    /// The connection's driver runs on the invocation's event loop until
    /// this value is dropped.
    ///
    /// # Errors
    /// [`Error::Unavailable`] if the database cannot be reached;
    /// [`Error::InvalidInput`] if the binding's connection string is
    /// malformed.
    pub async fn connect(hyperdrive: &Hyperdrive) -> Result<Self> {
        let config: tokio_postgres::Config =
            hyperdrive
                .connection_string()
                .parse()
                .map_err(|error: tokio_postgres::Error| {
                    Error::invalid("Hyperdrive connection string", error.to_string())
                })?;
        let socket = hyperdrive.connect().map_err(|error| {
            Error::unavailable(
                format!("Hyperdrive socket: {error}"),
                crate::error::RetryAdvice::AfterBackoff,
            )
        })?;
        let (client, connection) = config.connect_raw(socket, NoTls).await.map_err(map_error)?;
        wasm_bindgen_futures::spawn_local(async move {
            if let Err(error) = connection.await {
                log::warn!("Hyperdrive connection ended: {error}");
            }
        });
        Ok(HyperdriveDatabase {
            client: Mutex::new(client),
        })
    }
}

impl std::fmt::Debug for HyperdriveDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HyperdriveDatabase").finish_non_exhaustive()
    }
}

impl Database for HyperdriveDatabase {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn run<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Outcome>> {
        Box::pin(async move {
            let client = self.client.lock().await;
            run_alone(&client, statement).await
        })
    }

    fn run_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
        Box::pin(async move {
            let mut client = self.client.lock().await;
            run_transaction(&mut client, statements).await
        })
    }
}
