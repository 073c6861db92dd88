//! The stored pause switch of a topic: while `<table>_paused` has a row for
//! it, no claim leases the topic's rows and no attempt is made or spent;
//! the rows wait, due, until the topic is resumed.

use sea_query::{Expr, ExprTrait, InsertStatement, OnConflict, Order, Query, SelectStatement};

use super::claim_floor;
use super::{Fence, col};
use crate::database::{Dialect, Statement, query_error};
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

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
fn paused_topics(table: &TableName) -> SelectStatement {
    let mut paused = Query::select();
    paused.column(paused_col::TOPIC).from(paused_table(table));
    paused
}

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
    claim_floor::mark(dialect, table, &mut update, now.as_unix_millis().into());
    dialect.render(&update)
}
