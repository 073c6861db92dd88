//! A statement: SQL text with `?` placeholders, and the values bound to them.

use super::value::Value;
use crate::error::Error;

/// SQL text in its database's dialect (`?` placeholders for SQLite and
/// D1, `$1` for Postgres) and its bound values, in order.
///
/// Values are never formatted into the text.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    sql: String,
    values: Vec<Value>,
}

impl Statement {
    /// A statement from SQL text and its values.
    pub fn new(sql: impl Into<String>, values: Vec<Value>) -> Self {
        Statement {
            sql: sql.into(),
            values,
        }
    }

    /// The SQL text.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The bound values, in placeholder order.
    pub fn values(&self) -> &[Value] {
        &self.values
    }
}

/// A statement sea-query refused to build: a bug in the caller, reported.
pub(crate) fn query_error(error: sea_query::error::Error) -> Error {
    Error::internal(format!("could not build a statement: {error}"))
}
