//! Native Postgres: tokio-postgres connections from a `deadpool-postgres` pool.

use std::str::FromStr;

use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, PoolError, RecyclingMethod, Runtime};
use tokio_postgres::NoTls;

use super::{map_error, run_alone, run_transaction};
use crate::database::{Database, Dialect, Outcome, Statement};
use crate::error::{Error, Result, RetryAdvice};
use crate::future::BoxFuture;

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const POOL_WAIT: Duration = Duration::from_secs(30);

/// A Postgres database reached through a pool of connections.
///
/// Each call takes a connection from the pool for its duration: a single
/// statement commits on its own, a [`batch_atomic`](Database::batch_atomic)
/// is one read-committed transaction (`BEGIN`, its statements pipelined,
/// `COMMIT`: three round trips whatever its length). Claims lock the rows
/// they lease with `FOR UPDATE SKIP LOCKED`, so any number of drainers,
/// in any number of processes, can share one outbox.
///
/// Statements are in the [`Dialect::Postgres`] dialect (`$1` placeholders).
/// Values are declared as `BIGINT`, `DOUBLE PRECISION`, `TEXT` or `BYTEA`
/// (a NULL's type is inferred from where it is used): cast in SQL for other
/// column types (`$1::jsonb`).
/// Rows read back integer, float, text, `bytea`, `bool` and JSON columns;
/// other types are refused with [`Error::MalformedRow`]: cast them in SQL.
#[derive(Clone)]
pub struct PostgresDatabase {
    pool: Pool,
}

impl PostgresDatabase {
    /// Connects to `url` (`postgres://user:password@host:port/database`,
    /// or `key=value` pairs) without TLS, with a pool of up to
    /// `max_connections`, and checks that one connection opens. Opening a
    /// connection gives up after 10 s (unless the URL sets
    /// `connect_timeout`), waiting for a free one after 30 s: both are
    /// [`Error::Unavailable`].
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a malformed URL or a pool size of 0;
    /// [`Error::Unavailable`] if the server cannot be reached.
    pub async fn connect(url: &str, max_connections: usize) -> Result<Self> {
        if max_connections == 0 {
            return Err(Error::invalid("pool size", "0: at least one connection"));
        }
        let mut config = tokio_postgres::Config::from_str(url)
            .map_err(|error| Error::invalid("Postgres URL", error.to_string()))?;
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(CONNECT_TIMEOUT);
        }
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(max_connections)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(CONNECT_TIMEOUT))
            .wait_timeout(Some(POOL_WAIT))
            .build()
            .map_err(|error| Error::invalid("Postgres pool", error.to_string()))?;
        let database = PostgresDatabase { pool };
        drop(database.connection().await?);
        Ok(database)
    }

    /// Uses a pool built by the caller (TLS, timeouts, hooks).
    pub fn from_pool(pool: Pool) -> Self {
        PostgresDatabase { pool }
    }

    /// The pool, for the caller's own queries.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    async fn connection(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(|error| match error {
            PoolError::Backend(error) => map_error(error),
            other => {
                Error::unavailable(format!("Postgres pool: {other}"), RetryAdvice::AfterBackoff)
                    .caused_by(other)
            }
        })
    }
}

impl std::fmt::Debug for PostgresDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresDatabase")
            .field("pool", &self.pool.status())
            .finish()
    }
}

impl Database for PostgresDatabase {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn run<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Outcome>> {
        Box::pin(async move {
            let client = self.connection().await?;
            run_alone(&client, statement).await
        })
    }

    fn run_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
        Box::pin(async move {
            let mut client = self.connection().await?;
            run_transaction(&mut client, statements).await
        })
    }
}
