//! The native adapter: SQLite through rusqlite, with SQLite bundled.

use std::path::Path;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use rusqlite::types::{Value as SqliteValue, ValueRef};
use rusqlite::{Connection, ErrorCode};

use super::d1::classify_message;
use super::value::Value;
use super::{Database, Dialect, Outcome, Rows, Statement};
use crate::error::{Error, Result, RetryAdvice};
use crate::future::BoxFuture;

/// Prepared statements each connection keeps.
const PREPARED_STATEMENTS: usize = 64;

/// A SQLite database: the embedded default for native use and for tests.
///
/// One connection behind a mutex. Statements run on the calling task: SQLite
/// calls on a local file take microseconds, and running them inline keeps
/// tests deterministic. A [`batch_atomic`](Database::batch_atomic) is one
/// `BEGIN IMMEDIATE … COMMIT` transaction.
pub struct SqliteDatabase {
    connection: Mutex<Connection>,
}

impl SqliteDatabase {
    /// A private in-memory database, gone when this value is dropped.
    ///
    /// # Errors
    /// [`Error::Database`] if SQLite cannot open it.
    pub fn open_in_memory() -> Result<Self> {
        Self::from_connection(Connection::open_in_memory().map_err(map_error)?)
    }

    /// A database file, created if missing, in WAL mode with a 5 s busy
    /// timeout so several processes can share it.
    ///
    /// # Errors
    /// [`Error::Database`] if SQLite cannot open or configure the file.
    pub fn open(path: impl AsRef<Path>) -> Result<Self> {
        let connection = Connection::open(path).map_err(map_error)?;
        connection
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(map_error)?;
        connection
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(map_error)?;
        Self::from_connection(connection)
    }

    /// Wraps an open connection (its prepared-statement cache resized to
    /// 64 statements).
    ///
    /// # Errors
    /// [`Error::Database`] if the connection cannot be configured.
    pub fn from_connection(connection: Connection) -> Result<Self> {
        connection
            .busy_timeout(Duration::from_secs(5))
            .map_err(map_error)?;
        // A drain's call holds a dozen distinct statements (claim, settles,
        // counts, sweep): room for all of them and the caller's own.
        connection.set_prepared_statement_cache_capacity(PREPARED_STATEMENTS);
        // Plans that never depend on bound values: otherwise a statement
        // whose `state = ?` is weighed against a partial index's `WHERE
        // state = 'dead'` is compiled again at every run.
        connection
            .set_db_config(
                rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
                true,
            )
            .map_err(map_error)?;
        Ok(SqliteDatabase {
            connection: Mutex::new(connection),
        })
    }

    /// Runs `work` with the connection, holding the lock only for the call.
    fn with_connection<T>(&self, work: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        let mut connection = self
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        work(&mut connection)
    }
}

impl std::fmt::Debug for SqliteDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteDatabase").finish_non_exhaustive()
    }
}

impl Database for SqliteDatabase {
    fn dialect(&self) -> Dialect {
        Dialect::Sqlite
    }

    fn run<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Outcome>> {
        Box::pin(async move { self.with_connection(|connection| run(connection, statement)) })
    }

    fn run_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
        Box::pin(async move {
            self.with_connection(|connection| {
                let transaction = connection
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .map_err(map_error)?;
                let outcomes = statements
                    .iter()
                    .map(|statement| run(&transaction, statement))
                    .collect::<Result<Vec<_>>>()?;
                transaction.commit().map_err(map_error)?;
                Ok(outcomes)
            })
        })
    }
}

/// Runs one statement to completion, collecting its rows and its changes.
fn run(connection: &Connection, statement: &Statement) -> Result<Outcome> {
    let mut prepared = connection
        .prepare_cached(statement.sql())
        .map_err(map_error)?;
    for (index, value) in statement.values().iter().enumerate() {
        value.check_storable()?;
        prepared
            .raw_bind_parameter(index + 1, to_sqlite(value))
            .map_err(map_error)?;
    }
    let columns: Vec<String> = prepared.column_names().map(str::to_owned).collect();
    let writes = !prepared.readonly();
    let mut collected = Vec::new();
    {
        let mut rows = prepared.raw_query();
        while let Some(row) = rows.next().map_err(map_error)? {
            let values = (0..columns.len())
                .map(|index| row.get_ref(index).map_err(map_error).and_then(from_sqlite))
                .collect::<Result<Vec<_>>>()?;
            collected.push(values);
        }
    }
    Ok(Outcome {
        rows_affected: if writes { connection.changes() } else { 0 },
        rows: Rows::new(columns, collected)?,
    })
}

fn to_sqlite(value: &Value) -> SqliteValue {
    match value {
        Value::Null => SqliteValue::Null,
        Value::Integer(integer) => SqliteValue::Integer(*integer),
        Value::Real(real) => SqliteValue::Real(*real),
        Value::Text(text) => SqliteValue::Text(text.clone()),
        Value::Blob(bytes) => SqliteValue::Blob(bytes.clone()),
    }
}

fn from_sqlite(value: ValueRef<'_>) -> Result<Value> {
    Ok(match value {
        ValueRef::Null => Value::Null,
        ValueRef::Integer(integer) => Value::Integer(integer),
        ValueRef::Real(real) => Value::Real(real),
        ValueRef::Text(bytes) => {
            Value::Text(
                String::from_utf8(bytes.to_vec()).map_err(|_| Error::MalformedRow {
                    table: None,
                    row: None,
                    column: "?".into(),
                    reason: "text is not valid UTF-8".into(),
                })?,
            )
        }
        ValueRef::Blob(bytes) => Value::Blob(bytes.to_vec()),
    })
}

fn map_error(error: rusqlite::Error) -> Error {
    match &error {
        rusqlite::Error::SqliteFailure(failure, message) => match failure.code {
            ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked => {
                Error::unavailable(error.to_string(), RetryAdvice::AfterBackoff).caused_by(error)
            }
            ErrorCode::ConstraintViolation => {
                classify_message(message.as_deref().unwrap_or("constraint failed")).caused_by(error)
            }
            _ => Error::database(error.to_string()).caused_by(error),
        },
        _ => Error::database(error.to_string()).caused_by(error),
    }
}
