//! The alerts (`<table>_alerts`): per rule, the window it was last told in
//! and the event that told it. A sweep checks each rule's condition in a
//! bounded read and, when it holds and the rule was not told in this window
//! yet, records the window and keeps the rule's event, in one call, so two
//! drains sweeping at once tell it once.

use sea_query::{Expr, ExprTrait, OnConflict, Order, Query};

use super::events::{EventRow, event_exprs, keep_selected};
use super::paused::paused_topics;
use super::{col, state};
use crate::database::{Dialect, Statement, query_error};
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

/// The alerts table's column names.
pub(crate) mod alert_col {
    pub(crate) const RULE: &str = "rule";
    pub(crate) const WINDOW_START: &str = "window_start";
    pub(crate) const TOLD_BY: &str = "told_by";
}

pub(crate) fn alerts_table(table: &TableName) -> String {
    format!("{}_alerts", table.as_str())
}

/// The most overdue rows [`overdue`] looks at.
pub(crate) const OVERDUE_LOOKED_AT: u64 = 10;

/// At least `at_least` messages died at or after `since`: a walk of at most
/// `at_least` entries of the dead range of the primary key.
pub(crate) fn dead_since(table: &TableName, since: Timestamp, at_least: u32) -> Expr {
    let mut dead = Query::select();
    dead.expr(Expr::cust("1"))
        .from(table.as_str().to_owned())
        .and_where(Expr::col(col::STATE).eq(state::DEAD))
        .and_where(Expr::col(col::DUE_AT).gte(since.as_unix_millis()))
        .limit(u64::from(at_least));
    let mut counted = Query::select();
    counted
        .expr(Expr::cust("COUNT(*)"))
        .from_subquery(dead, "recent");
    Expr::from(counted).gte(i64::from(at_least))
}

/// A message of a topic not paused was due before `before` and is still
/// unclaimed: among the [`OVERDUE_LOOKED_AT`] oldest overdue rows, one whose
/// topic is not paused.
pub(crate) fn overdue(table: &TableName, before: Timestamp) -> Expr {
    let mut oldest = Query::select();
    oldest
        .column(col::TOPIC)
        .from(table.as_str().to_owned())
        .and_where(Expr::col(col::STATE).eq(state::READY))
        .and_where(Expr::col(col::DUE_AT).lt(before.as_unix_millis()))
        .order_by(col::DUE_AT, Order::Asc)
        .limit(OVERDUE_LOOKED_AT);
    let mut unpaused = Query::select();
    unpaused
        .expr(Expr::cust("1"))
        .from_subquery(oldest, "oldest")
        .and_where(Expr::col(("oldest", col::TOPIC)).not_in_subquery(paused_topics(table)));
    Expr::exists(unpaused)
}

/// Records that `rule` is told in the window starting at `window_start`,
/// by the event `told_by`, if `holds` and it was not told in that window
/// (or a later one) yet.
pub(crate) fn tell(
    table: &TableName,
    dialect: Dialect,
    (rule, window_start, told_by): (&str, Timestamp, &str),
    holds: Expr,
) -> Result<Statement> {
    let alerts = alerts_table(table);
    // First whether it was told in this window: once it was, the
    // condition is not read again (SQLite stops at the first false term).
    let mut told = Query::select();
    told.expr(Expr::cust("1"))
        .from(alerts.clone())
        .and_where(Expr::col(alert_col::RULE).eq(rule))
        .and_where(Expr::col(alert_col::WINDOW_START).gte(window_start.as_unix_millis()));
    let mut when = Query::select();
    when.exprs([
        Expr::val(rule).cast_as("TEXT"),
        Expr::val(window_start.as_unix_millis()).cast_as("BIGINT"),
        Expr::val(told_by).cast_as("TEXT"),
    ])
    .and_where(Expr::exists(told).not())
    .and_where(holds);
    let mut insert = Query::insert();
    insert
        .into_table(alerts.clone())
        .columns([alert_col::RULE, alert_col::WINDOW_START, alert_col::TOLD_BY])
        .select_from(when)
        .map_err(query_error)?
        .on_conflict(
            OnConflict::column(alert_col::RULE)
                .update_columns([alert_col::WINDOW_START, alert_col::TOLD_BY])
                .action_and_where(
                    Expr::col((alerts, alert_col::WINDOW_START))
                        .lt(Expr::col(("excluded", alert_col::WINDOW_START))),
                )
                .to_owned(),
        );
    dialect.render(&insert)
}

/// Keeps `event` if the [`tell`] before it in the call recorded it (its id
/// is `told_by`).
pub(crate) fn keep_told(
    table: &TableName,
    dialect: Dialect,
    rule: &str,
    event: &EventRow<'_>,
) -> Result<Statement> {
    let mut told = Query::select();
    told.exprs(event_exprs(event))
        .from(alerts_table(table))
        .and_where(Expr::col(alert_col::RULE).eq(rule))
        .and_where(Expr::col(alert_col::TOLD_BY).eq(event.id));
    keep_selected(table, dialect, told)
}
