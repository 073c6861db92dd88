//! Postgres adapters: natively through a `deadpool-postgres` pool, and on
//! Workers through a Hyperdrive binding. Both speak tokio-postgres; this
//! module holds what they share: binding values, reading rows, running a
//! statement or a transaction, and classifying errors.

#[cfg(all(feature = "hyperdrive", target_arch = "wasm32"))]
mod hyperdrive;
#[cfg(all(feature = "postgres", not(target_arch = "wasm32")))]
mod native;

#[cfg(all(feature = "hyperdrive", target_arch = "wasm32"))]
pub use hyperdrive::HyperdriveDatabase;
#[cfg(all(feature = "postgres", not(target_arch = "wasm32")))]
pub use native::PostgresDatabase;

use std::future::Future;

use bytes::BytesMut;
use futures_util::future::join_all;
use futures_util::{StreamExt, pin_mut};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};
use tokio_postgres::{Client, IsolationLevel, RowStream};

use super::value::Value;
use super::{Outcome, Rows, Statement};
use crate::error::{Error, Result, RetryAdvice};

/// A value bound to a placeholder. Its Postgres type is declared with the
/// statement (see [`declared_type`]), except `NULL`, whose type Postgres
/// infers from where it is used.
#[derive(Debug)]
struct Param<'a>(&'a Value);

impl ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self.0 {
            Value::Null => Ok(IsNull::Yes),
            Value::Integer(integer) => integer.to_sql(ty, out),
            Value::Real(real) => real.to_sql(ty, out),
            Value::Text(text) => text.to_sql(ty, out),
            Value::Blob(bytes) => bytes.to_sql(ty, out),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// The type a value is declared with: `BIGINT`, `DOUBLE PRECISION`, `TEXT`
/// or `BYTEA`, as SQLite's storage classes are; a `NULL`'s type is inferred
/// from where it is used (a bare `SELECT $1` of a NULL cannot be typed:
/// cast it). Declaring types makes a statement mean the same as on SQLite
/// (`CASE … THEN $1 ELSE $2 END` is a `BIGINT` when both are integers),
/// and a value of the wrong type for its column fails loudly instead of
/// being converted. Cast in SQL for other column types (`$1::jsonb`).
fn declared_type(value: &Value) -> Type {
    match value {
        Value::Null => Type::UNKNOWN,
        Value::Integer(_) => Type::INT8,
        Value::Real(_) => Type::FLOAT8,
        Value::Text(_) => Type::TEXT,
        Value::Blob(_) => Type::BYTEA,
    }
}

fn params(statement: &Statement) -> Result<Vec<(Param<'_>, Type)>> {
    statement
        .values()
        .iter()
        .map(|value| {
            value.check_storable()?;
            if matches!(value, Value::Text(text) if text.contains('\0')) {
                return Err(Error::invalid(
                    "value",
                    "Postgres text cannot hold a NUL character",
                ));
            }
            Ok((Param(value), declared_type(value)))
        })
        .collect()
}

/// A column read back as one of the five storage classes.
struct Cell(Value);

impl<'a> FromSql<'a> for Cell {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        let value = match *ty {
            Type::INT8 => Value::Integer(i64::from_sql(ty, raw)?),
            Type::INT4 => Value::Integer(i32::from_sql(ty, raw)?.into()),
            Type::INT2 => Value::Integer(i16::from_sql(ty, raw)?.into()),
            Type::OID => Value::Integer(u32::from_sql(ty, raw)?.into()),
            Type::BOOL => Value::from(bool::from_sql(ty, raw)?),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
            Type::BYTEA => Value::Blob(raw.to_vec()),
            Type::JSON => Value::Text(std::str::from_utf8(raw)?.to_owned()),
            // Binary JSONB is a version byte (1), then the JSON text.
            Type::JSONB => match raw.split_first() {
                Some((1, json)) => Value::Text(std::str::from_utf8(json)?.to_owned()),
                _ => return Err("unknown jsonb format version".into()),
            },
            _ if <String as FromSql>::accepts(ty) => Value::Text(String::from_sql(ty, raw)?),
            _ => {
                return Err(format!(
                    "Postgres type {ty} has no SQLite storage class; cast it in SQL \
                     (::bigint, ::double precision, ::text or ::bytea)"
                )
                .into());
            }
        };
        Ok(Cell(value))
    }

    fn from_sql_null(
        _: &Type,
    ) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Cell(Value::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// Why a call failed, before a uniqueness conflict is named: naming one
/// may need the catalog.
enum Failure {
    Classified(Error),
    /// A unique violation whose detail did not name its columns (the
    /// server's messages are translated, or the role may not read them).
    UnnamedConflict {
        schema: String,
        table: String,
        index: String,
    },
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        Failure::Classified(error)
    }
}

/// Runs one statement: `send` starts it on a client or transaction with
/// the statement's SQL and parameters (one round trip: the unnamed
/// statement is parsed, bound and run together).
async fn run<'a, F, Fut>(statement: &'a Statement, send: F) -> std::result::Result<Outcome, Failure>
where
    F: FnOnce(&'a str, Vec<(Param<'a>, Type)>) -> Fut,
    Fut: Future<Output = std::result::Result<RowStream, tokio_postgres::Error>>,
{
    let params = params(statement)?;
    let stream = send(statement.sql(), params).await.map_err(classify)?;
    pin_mut!(stream);
    let mut columns: Option<Vec<String>> = None;
    let mut rows = Vec::new();
    while let Some(row) = stream.next().await {
        let row = row.map_err(classify)?;
        let names = columns.get_or_insert_with(|| {
            row.columns()
                .iter()
                .map(|column| column.name().to_owned())
                .collect()
        });
        let values = (0..names.len())
            .map(|index| {
                row.try_get::<_, Cell>(index)
                    .map(|cell| cell.0)
                    .map_err(|error| Error::MalformedRow {
                        table: None,
                        row: None,
                        column: names[index].clone(),
                        reason: std::error::Error::source(&error)
                            .map_or_else(|| error.to_string(), ToString::to_string),
                    })
            })
            .collect::<Result<Vec<_>>>()?;
        rows.push(values);
    }
    let rows_affected = if changes_rows(statement.sql()) {
        stream.rows_affected().unwrap_or(0)
    } else {
        0
    };
    Ok(Outcome {
        rows_affected,
        rows: Rows::new(columns.unwrap_or_default(), rows)?,
    })
}

/// Runs one statement on its own (Postgres commits it alone).
async fn run_alone(client: &Client, statement: &Statement) -> Result<Outcome> {
    match run(statement, |sql, params| client.query_typed_raw(sql, params)).await {
        Ok(outcome) => Ok(outcome),
        Err(failure) => Err(name(client, failure).await),
    }
}

/// Runs `statements` in one read-committed transaction: `BEGIN`, the
/// statements pipelined (sent at once, run in order on the server, so their
/// number costs no extra round trips; a settle of a hundred messages is a
/// hundred statements), `COMMIT`. After a failure Postgres refuses the rest
/// and the first error is returned. If this future is dropped half-way the
/// transaction is rolled back (tokio-postgres queues the `ROLLBACK`).
async fn run_transaction(client: &mut Client, statements: &[Statement]) -> Result<Vec<Outcome>> {
    if statements.is_empty() {
        return Ok(Vec::new());
    }
    let result = async {
        let transaction = client
            .build_transaction()
            .isolation_level(IsolationLevel::ReadCommitted)
            .start()
            .await
            .map_err(classify)?;
        let sent = &transaction;
        let outcomes = join_all(statements.iter().map(|statement| {
            run(statement, move |sql, params| {
                sent.query_typed_raw(sql, params)
            })
        }))
        .await
        .into_iter()
        .collect::<std::result::Result<Vec<_>, Failure>>()?;
        transaction.commit().await.map_err(classify)?;
        Ok(outcomes)
    }
    .await;
    match result {
        Ok(outcomes) => Ok(outcomes),
        Err(failure) => Err(name(client, failure).await),
    }
}

/// Whether a statement's command tag counts changed rows: a read's counts
/// the rows it returned, which the contract reports as 0 changed. The main
/// verb is the first keyword outside parentheses, quotes and comments,
/// after any `WITH` clause.
fn changes_rows(sql: &str) -> bool {
    let mut depth = 0usize;
    let mut quote: Option<char> = None;
    let mut word = String::new();
    let mut chars = sql.chars().chain([' ']).peekable();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(open), _) if c == open => quote = None,
            (Some(_), _) => continue,
            (None, '\'' | '"') => quote = Some(c),
            (None, '-') if chars.peek() == Some(&'-') => {
                chars.by_ref().take_while(|c| *c != '\n').for_each(drop);
            }
            (None, '/') if chars.peek() == Some(&'*') => {
                chars.next();
                let mut previous = ' ';
                for c in chars.by_ref() {
                    if previous == '*' && c == '/' {
                        break;
                    }
                    previous = c;
                }
            }
            (None, '(') => depth += 1,
            (None, ')') => depth = depth.saturating_sub(1),
            (None, c) if depth == 0 && (c.is_ascii_alphanumeric() || c == '_' || c == '$') => {
                word.push(c.to_ascii_uppercase());
                continue;
            }
            _ => {}
        }
        match word.as_str() {
            "INSERT" | "UPDATE" | "DELETE" | "MERGE" => return true,
            "SELECT" | "VALUES" | "TABLE" | "SHOW" | "EXPLAIN" => return false,
            _ => word.clear(),
        }
    }
    false
}

/// Classifies a tokio-postgres error by its SQLSTATE; the error itself is
/// kept as the `source()`.
fn classify(error: tokio_postgres::Error) -> Failure {
    match classify_by_code(&error) {
        Failure::Classified(classified) => Failure::Classified(classified.caused_by(error)),
        unnamed => unnamed,
    }
}

fn classify_by_code(error: &tokio_postgres::Error) -> Failure {
    let Some(db) = error.as_db_error() else {
        // No answer from the server: the connection broke, or closed.
        return Failure::Classified(Error::unavailable(
            format!("Postgres: {error}"),
            RetryAdvice::AfterBackoff,
        ));
    };
    let code = db.code();
    let message = match db.detail() {
        Some(detail) => format!("{} ({detail}; SQLSTATE {})", db.message(), code.code()),
        None => format!("{} (SQLSTATE {})", db.message(), code.code()),
    };
    if *code == SqlState::UNIQUE_VIOLATION {
        let table = db.table().unwrap_or_default();
        let index = db.constraint().unwrap_or_default();
        // The outbox's ordering index (see its schema): two enqueues raced
        // for one place in a key's order.
        if !table.is_empty() && index == format!("{table}_ordering") {
            return Failure::Classified(Error::unavailable(
                format!(
                    "another transaction took this ordering key's next place at the same moment; \
                     the batch changed nothing and can be sent again: {message}"
                ),
                RetryAdvice::Now,
            ));
        }
        return match key_columns(db.detail().unwrap_or_default()).first() {
            Some(column) => Failure::Classified(Error::Conflict {
                constraint: format!("{table}.{column}"),
            }),
            None => Failure::UnnamedConflict {
                schema: db.schema().unwrap_or("public").to_owned(),
                table: table.to_owned(),
                index: index.to_owned(),
            },
        };
    }
    let now = [
        SqlState::T_R_SERIALIZATION_FAILURE,
        SqlState::T_R_DEADLOCK_DETECTED,
        SqlState::LOCK_NOT_AVAILABLE,
    ];
    let after_backoff = [
        SqlState::QUERY_CANCELED,
        SqlState::ADMIN_SHUTDOWN,
        SqlState::CRASH_SHUTDOWN,
        SqlState::CANNOT_CONNECT_NOW,
        SqlState::IDLE_SESSION_TIMEOUT,
        SqlState::TOO_MANY_CONNECTIONS,
        SqlState::T_R_STATEMENT_COMPLETION_UNKNOWN,
        SqlState::SYSTEM_ERROR,
        SqlState::IO_ERROR,
    ];
    let class = &code.code()[..2];
    Failure::Classified(if now.contains(code) {
        Error::unavailable(message, RetryAdvice::Now)
    } else if after_backoff.contains(code)
        || (class == "08" && *code != SqlState::PROTOCOL_VIOLATION)
        || (class == "53" && *code != SqlState::CONFIGURATION_LIMIT_EXCEEDED)
    {
        Error::unavailable(message, RetryAdvice::AfterBackoff)
    } else if *code == SqlState::CHARACTER_NOT_IN_REPERTOIRE
        || *code == SqlState::UNTRANSLATABLE_CHARACTER
    {
        Error::InvalidInput {
            what: "value",
            reason: message,
        }
    } else {
        Error::database(message)
    })
}

/// Classifies an error where the catalog cannot be read (connecting).
fn map_error(error: tokio_postgres::Error) -> Error {
    match classify(error) {
        Failure::Classified(error) => error,
        Failure::UnnamedConflict { table, index, .. } => Error::Conflict {
            constraint: format!("{table}.{index}"),
        },
    }
}

/// The error of a failure, reading the catalog to name the first column of
/// a unique index when the server's message did not (as `table.column`,
/// or `table.index` if even the catalog cannot say).
async fn name(client: &Client, failure: Failure) -> Error {
    let (schema, table, index) = match failure {
        Failure::Classified(error) => return error,
        Failure::UnnamedConflict {
            schema,
            table,
            index,
        } => (schema, table, index),
    };
    let lookup = Statement::new(
        "SELECT a.attname::text AS name FROM pg_catalog.pg_class i \
         JOIN pg_catalog.pg_namespace n ON n.oid = i.relnamespace \
         JOIN pg_catalog.pg_index x ON x.indexrelid = i.oid \
         JOIN pg_catalog.pg_attribute a ON a.attrelid = x.indrelid AND a.attnum = x.indkey[0] \
         WHERE i.relname = $1 AND n.nspname = $2",
        vec![index.clone().into(), schema.into()],
    );
    let column = match run(&lookup, |sql, params| client.query_typed_raw(sql, params)).await {
        Ok(outcome) => outcome
            .rows
            .first()
            .and_then(|row| row.get::<String>("name").ok()),
        Err(_) => None,
    };
    Error::Conflict {
        constraint: format!("{table}.{}", column.unwrap_or(index)),
    }
}

/// The columns of a unique violation's detail: `Key (a, b)=(…) already exists.`
fn key_columns(detail: &str) -> Vec<&str> {
    detail
        .strip_prefix("Key (")
        .and_then(|rest| rest.split_once(")="))
        .map(|(columns, _)| columns.split(", ").map(|c| c.trim_matches('"')).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_count_no_changes() {
        assert!(!changes_rows("SELECT * FROM t"));
        assert!(changes_rows(
            r#"WITH "picked" AS MATERIALIZED (SELECT "due_at" FROM "t" FOR UPDATE SKIP LOCKED) UPDATE "t" SET "a" = $1"#
        ));
        assert!(changes_rows("insert into t values ('SELECT')"));
        assert!(!changes_rows("CREATE TABLE t (a BIGINT)"));
        assert!(changes_rows(
            "WITH select_ids AS (SELECT id FROM t) DELETE FROM t USING select_ids"
        ));
        assert!(!changes_rows(
            "-- update the view\nWITH delete_x AS (SELECT 1) SELECT * FROM delete_x"
        ));
        assert!(!changes_rows("/* insert */ SELECT 1"));
    }

    #[test]
    fn unique_violations_name_their_columns() {
        assert_eq!(
            key_columns("Key (ordering_key, seq)=(k, 2) already exists."),
            ["ordering_key", "seq"]
        );
        assert_eq!(key_columns("Key (key)=(a) already exists."), ["key"]);
        assert!(key_columns("something else").is_empty());
    }
}
