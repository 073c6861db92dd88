//! The table of an outbox's paused topics, and the filter every claim (and
//! the claim floor's walk) applies over it. The writes that pause and resume
//! a topic are in [`pause`](super::pause).

use sea_query::{Expr, ExprTrait, Query, SelectStatement};

use super::col;
use crate::identifier::TableName;

/// The paused table's column names.
pub(crate) mod paused_col {
    pub(crate) const TOPIC: &str = "topic";
    pub(crate) const REASON: &str = "reason";
    pub(crate) const PAUSED_AT: &str = "paused_at";
}

/// The table of `table`'s paused topics.
pub(crate) fn paused_table(table: &TableName) -> String {
    format!("{}_paused", table.as_str())
}

/// `SELECT topic FROM <table>_paused`.
pub(crate) fn paused_topics(table: &TableName) -> SelectStatement {
    let mut paused = Query::select();
    paused.column(paused_col::TOPIC).from(paused_table(table));
    paused
}

/// Rows whose topic is not paused (for a claim's and an alarm's `WHERE`).
/// While no topic is paused, an uncorrelated `NOT EXISTS` answers for every
/// row at once: SQLite evaluates it once per statement and never probes the
/// paused topics per row (on D1 each probe is a row read).
pub(crate) fn topic_not_paused(table: &TableName) -> Expr {
    let mut any_paused = Query::select();
    any_paused.expr(Expr::cust("1")).from(paused_table(table));
    Expr::exists(any_paused)
        .not()
        .or(Expr::col((table.as_str().to_owned(), col::TOPIC))
            .not_in_subquery(paused_topics(table)))
}
