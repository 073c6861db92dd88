//! Counts for dashboards, alerts and a Durable Object's alarm.

use sea_query::{Asterisk, Expr, ExprTrait, Order, Query};

use super::{col, state};
use crate::database::{Dialect, Statement};
use crate::error::Result;
use crate::identifier::TableName;

/// The names of [`stats`]'s and [`backlog`]'s columns.
pub(crate) mod stats_col {
    pub(crate) const PENDING: &str = "pending";
    pub(crate) const DUE: &str = "due";
    pub(crate) const LEASED: &str = "leased";
    pub(crate) const DEAD: &str = "dead";
    pub(crate) const OLDEST_DUE_AT: &str = "oldest_due_at";
}

/// Counts by state at `now` in one row (`pending`, `due`, `leased`,
/// `dead`, `oldest_due_at`): it reads the whole table.
pub(crate) fn stats(table: &TableName, dialect: Dialect, now: i64) -> Result<Statement> {
    let ready = || Expr::col(col::STATE).eq(state::READY);
    let due = || ready().and(Expr::col(col::DUE_AT).lte(now));
    let leased = || {
        ready()
            .and(Expr::col(col::LEASE_TOKEN).is_not_null())
            .and(Expr::col(col::DUE_AT).gt(now))
    };
    // COUNT of a CASE without ELSE: an integer in every dialect (a SUM is
    // NUMERIC in Postgres).
    let count = |condition: Expr| {
        let case: Expr = Expr::case(condition, 1).into();
        case.count()
    };
    let mut select = Query::select();
    select
        .expr_as(
            count(leased().not().and(Expr::col(col::STATE).ne(state::DEAD))),
            stats_col::PENDING,
        )
        .expr_as(count(due()), stats_col::DUE)
        .expr_as(count(leased()), stats_col::LEASED)
        .expr_as(
            count(Expr::col(col::STATE).eq(state::DEAD)),
            stats_col::DEAD,
        )
        .expr_as(
            Expr::case(due(), Expr::col(col::DUE_AT)).min(),
            stats_col::OLDEST_DUE_AT,
        )
        .from(table.as_str().to_owned());
    dialect.render(&select)
}

/// Messages due at `now` (at most `at_most`) and when the most overdue of
/// them fell due, in one row (`due`, `oldest_due_at`), reading at most
/// `at_most` rows of the primary key.
pub(crate) fn backlog(
    table: &TableName,
    dialect: Dialect,
    now: i64,
    at_most: u64,
) -> Result<Statement> {
    let mut due = Query::select();
    due.column(col::DUE_AT)
        .from(table.as_str().to_owned())
        .and_where(Expr::col(col::STATE).eq(state::READY))
        .and_where(Expr::col(col::DUE_AT).lte(now))
        .order_by(col::DUE_AT, Order::Asc)
        .limit(at_most);
    let mut backlog = Query::select();
    backlog
        .expr_as(Expr::col(Asterisk).count(), stats_col::DUE)
        .expr_as(Expr::col(col::DUE_AT).min(), stats_col::OLDEST_DUE_AT)
        .from_subquery(due, "due_rows");
    dialect.render(&backlog)
}

/// The next due time of `table`'s messages whose topic is not paused
/// (`due_at`), as a Durable Object's SQLite reads it for its alarm.
#[cfg(any(test, all(feature = "workers", target_arch = "wasm32")))]
pub(crate) fn next_due(table: &TableName) -> Result<Statement> {
    let mut select = Query::select();
    select
        .expr_as(sea_query::Func::min(Expr::col(col::DUE_AT)), col::DUE_AT)
        .from(table.as_str().to_owned())
        .and_where(Expr::col(col::STATE).eq(state::READY))
        .and_where(super::paused::topic_not_paused(table));
    Dialect::Sqlite.render(&select)
}
