//! A statement: SQL text with `?` placeholders, and the values bound to them.

use sea_query::QueryStatementBuilder;

use super::dialect::Dialect;
use super::value::Value;
use crate::error::{Error, Result};

/// SQL text in its database's [`Dialect`] (`?` placeholders for SQLite and
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

    /// Renders a sea-query statement with the SQLite query builder (see
    /// [`Dialect::render`] for the others).
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) if a value cannot
    /// be stored exactly (see [`Value`]).
    pub fn from_query(query: &impl QueryStatementBuilder) -> Result<Self> {
        Dialect::Sqlite.render(query)
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
    Error::Database {
        message: format!("could not build a statement: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sea_query::{Expr, ExprTrait, Query};

    #[test]
    fn values_are_bound_not_formatted() {
        let mut select = Query::select();
        select
            .column("id")
            .from("outbox")
            .and_where(Expr::col("topic").eq("x'); DROP TABLE outbox; --"));
        let statement = Statement::from_query(&select).unwrap();
        assert_eq!(
            statement.sql(),
            r#"SELECT "id" FROM "outbox" WHERE "topic" = ?"#
        );
        assert_eq!(
            statement.values(),
            [Value::Text("x'); DROP TABLE outbox; --".into())]
        );
    }
}
