//! Which dialect's statements a [`Dialect`] writes with: each dialect's
//! folder (`sqlite/`, `postgres/`) implements every [`Differences`], and
//! this is the one place a dialect is matched to its folder.

use sea_query::{Expr, ExprTrait};

use super::differences::Differences;
use super::postgres::Postgres;
use super::sqlite::Sqlite;
use crate::database::Dialect;

/// `dialect`'s part of every statement that differs.
pub(crate) fn of(dialect: Dialect) -> &'static dyn Differences {
    match dialect {
        Dialect::Sqlite => &Sqlite,
        Dialect::Postgres => &Postgres,
    }
}

/// Whether `payload` (JSON text) matches an endpoint's filter: its field
/// `field` read as text (see [`Differences::json_field`]) equals `value`;
/// true without a filter (`field` null).
pub(crate) fn filter_matches(dialect: Dialect, payload: Expr, field: Expr, value: Expr) -> Expr {
    field
        .clone()
        .is_null()
        .or(of(dialect).json_field(payload, field).eq(value))
}
