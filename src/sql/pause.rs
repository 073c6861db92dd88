//! The stored pause switch of a topic: while `<table>_paused` has a row for
//! it, no claim leases the topic's rows and no attempt is made or spent;
//! the rows wait, due, until the topic is resumed.

use sea_query::{Expr, ExprTrait, InsertStatement, OnConflict, Order, Query};

use super::paused::{paused_col, paused_table, paused_topics};
use super::{Fence, col};
use crate::database::{Dialect, Statement, query_error};
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

/// An insert of a pause that keeps a topic's first one.
fn insert_pause(table: &TableName) -> InsertStatement {
    let mut insert = Query::insert();
    insert
        .into_table(paused_table(table))
        .columns([paused_col::TOPIC, paused_col::REASON, paused_col::PAUSED_AT])
        .on_conflict(
            OnConflict::column(paused_col::TOPIC)
                .do_nothing()
                .to_owned(),
        );
    insert
}

/// Pauses `topic` with `reason`, unless it is paused already (the first
/// reason stays).
pub(crate) fn pause(
    table: &TableName,
    dialect: Dialect,
    topic: &str,
    reason: &str,
    now: Timestamp,
) -> Result<Statement> {
    let mut insert = insert_pause(table);
    insert
        .values([topic.into(), reason.into(), now.as_unix_millis().into()])
        .map_err(query_error)?;
    dialect.render(&insert)
}

/// Pauses the topic of the row `lease` holds, with `reason`, while the
/// lease holds (a stale holder pauses nothing). Sent before the settle
/// that ends the lease, in the same atomic call.
pub(crate) fn pause_leased(
    table: &TableName,
    dialect: Dialect,
    lease: &Fence<'_>,
    reason: &str,
    now: Timestamp,
) -> Result<Statement> {
    let mut held = Query::select();
    held.column(col::TOPIC)
        .expr(Expr::val(reason))
        .expr(Expr::val(now.as_unix_millis()))
        .from(table.as_str().to_owned())
        .and_where(lease.holds());
    let mut insert = insert_pause(table);
    insert.select_from(held).map_err(query_error)?;
    dialect.render(&insert)
}

/// Resumes `topic`: its rows are claimed again.
pub(crate) fn resume(table: &TableName, dialect: Dialect, topic: &str) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(paused_table(table))
        .and_where(Expr::col(paused_col::TOPIC).eq(topic));
    dialect.render(&delete)
}

/// Every paused topic, in name order.
pub(crate) fn paused(table: &TableName, dialect: Dialect) -> Result<Statement> {
    let mut select = Query::select();
    select
        .columns([paused_col::TOPIC, paused_col::REASON, paused_col::PAUSED_AT])
        .from(paused_table(table))
        .order_by(paused_col::TOPIC, Order::Asc);
    dialect.render(&select)
}

/// Gives back, due at `now` and with no attempt spent, the row just written
/// leased to `lease` if its topic is paused: the caller must not deliver it
/// (1 row), and a drain does once the topic is resumed.
pub(crate) fn unlease_if_paused(
    table: &TableName,
    dialect: Dialect,
    lease: &Fence<'_>,
    now: Timestamp,
) -> Result<Statement> {
    let mut update = Query::update();
    update
        .table(table.as_str().to_owned())
        .value(col::DUE_AT, now.as_unix_millis())
        .value(col::LEASE_TOKEN, Option::<String>::None)
        .and_where(lease.holds())
        .and_where(Expr::col(col::TOPIC).in_subquery(paused_topics(table)));
    super::dialects::of(dialect).mark_late(table, &mut update, now.as_unix_millis().into());
    dialect.render(&update)
}
