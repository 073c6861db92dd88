//! Which SQL a database speaks, and rendering sea-query statements for it.

#[cfg(any(feature = "postgres", feature = "hyperdrive"))]
use sea_query::PostgresQueryBuilder;
use sea_query::{QueryStatementBuilder, SqliteQueryBuilder};

use super::statement::Statement;
use super::value::from_sea_query;
use crate::error::Result;

/// The SQL dialect of a [`Database`](super::Database).
///
/// The outbox and inbox keep one definition of each operation and render it
/// for the dialect of the database they are given: placeholders, types and
/// the few statements whose semantics differ (a Postgres claim locks with
/// `FOR UPDATE SKIP LOCKED`; SQLite serializes writers instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Dialect {
    /// SQLite, D1 and a Durable Object's storage: `?` placeholders.
    #[default]
    Sqlite,
    /// PostgreSQL (natively, or through Hyperdrive): `$1` placeholders.
    Postgres,
}

impl Dialect {
    /// Renders a sea-query statement in this dialect, its values bound.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::error::Error::InvalidInput) if a value cannot be stored exactly (see
    /// [`Value`](crate::Value)), or for Postgres in a build without the
    /// `postgres` or `hyperdrive` feature (which brings its renderer).
    pub fn render(self, query: &impl QueryStatementBuilder) -> Result<Statement> {
        let (sql, values) = match self {
            Dialect::Sqlite => query.build_any(&SqliteQueryBuilder),
            #[cfg(any(feature = "postgres", feature = "hyperdrive"))]
            Dialect::Postgres => query.build_any(&PostgresQueryBuilder),
            #[cfg(not(any(feature = "postgres", feature = "hyperdrive")))]
            Dialect::Postgres => {
                return Err(crate::error::Error::invalid(
                    "dialect",
                    "Postgres statements need the `postgres` or `hyperdrive` feature",
                ));
            }
        };
        let values = values
            .into_iter()
            .map(from_sea_query)
            .collect::<Result<Vec<_>>>()?;
        Ok(Statement::new(sql, values))
    }

    /// `sql` written with `?` placeholders, in this dialect's: unchanged for
    /// SQLite, `$1`, `$2`, … for Postgres. A `?` inside a quoted string or
    /// identifier is left alone; comments, dollar quoting and Postgres's
    /// `?` operators (jsonb) are not understood: write such SQL with `$n`.
    pub fn number_placeholders(self, sql: &str) -> String {
        if self == Dialect::Sqlite {
            return sql.to_owned();
        }
        let mut numbered = String::with_capacity(sql.len() + 8);
        let mut quote: Option<char> = None;
        let mut next = 0;
        for c in sql.chars() {
            match (quote, c) {
                (None, '\'' | '"') => quote = Some(c),
                (Some(open), _) if c == open => quote = None,
                (None, '?') => {
                    next += 1;
                    numbered.push('$');
                    numbered.push_str(&next.to_string());
                    continue;
                }
                _ => {}
            }
            numbered.push(c);
        }
        numbered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::database::value::Value;
    use sea_query::{Expr, ExprTrait, Query};

    #[test]
    fn values_are_bound_not_formatted() {
        let mut select = Query::select();
        select
            .column("id")
            .from("outbox")
            .and_where(Expr::col("topic").eq("x'); DROP TABLE outbox; --"));
        let statement = Dialect::Sqlite.render(&select).unwrap();
        assert_eq!(
            statement.sql(),
            r#"SELECT "id" FROM "outbox" WHERE "topic" = ?"#
        );
        assert_eq!(
            statement.values(),
            [Value::Text("x'); DROP TABLE outbox; --".into())]
        );
    }

    #[test]
    #[cfg(any(feature = "postgres", feature = "hyperdrive"))]
    fn renders_each_dialect_with_values_bound() {
        let mut select = Query::select();
        select
            .column("id")
            .from("outbox")
            .and_where(Expr::col("topic").eq("x'); DROP TABLE outbox; --"))
            .and_where(Expr::col("due_at").lte(5));
        let sqlite = Dialect::Sqlite.render(&select).unwrap();
        let postgres = Dialect::Postgres.render(&select).unwrap();
        assert_eq!(
            sqlite.sql(),
            r#"SELECT "id" FROM "outbox" WHERE "topic" = ? AND "due_at" <= ?"#
        );
        assert_eq!(
            postgres.sql(),
            r#"SELECT "id" FROM "outbox" WHERE "topic" = $1 AND "due_at" <= $2"#
        );
        assert_eq!(sqlite.values(), postgres.values());
        assert_eq!(
            postgres.values()[0],
            Value::Text("x'); DROP TABLE outbox; --".into())
        );
    }

    #[test]
    fn numbers_placeholders_outside_quotes() {
        let sql = r#"SELECT '?', "a?" FROM t WHERE a = ? AND b IN (?, ?)"#;
        assert_eq!(Dialect::Sqlite.number_placeholders(sql), sql);
        assert_eq!(
            Dialect::Postgres.number_placeholders(sql),
            r#"SELECT '?', "a?" FROM t WHERE a = $1 AND b IN ($2, $3)"#
        );
    }
}
