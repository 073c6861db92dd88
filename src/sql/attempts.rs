//! The attempt log (`<table>_attempts`): what receivers answered, written
//! in the drain's settle calls, fenced by the lease, a bounded number of
//! slots per message.

use sea_query::{Expr, ExprTrait, OnConflict, Order, Query};

use super::{Fence, col};
use crate::database::{Dialect, Statement, query_error};
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

/// The attempt log's column names.
pub(crate) mod attempt_col {
    pub(crate) const MESSAGE_ID: &str = "message_id";
    pub(crate) const SLOT: &str = "slot";
    pub(crate) const TOPIC: &str = "topic";
    pub(crate) const EVENT_ID: &str = "event_id";
    pub(crate) const SUBJECT: &str = "subject";
    pub(crate) const ATTEMPT: &str = "attempt";
    pub(crate) const AT: &str = "at";
    pub(crate) const STATUS: &str = "status";
    pub(crate) const DURATION_MS: &str = "duration_ms";
    pub(crate) const OUTCOME: &str = "outcome";
    pub(crate) const ERROR: &str = "error";
    pub(crate) const HEADERS: &str = "headers";
    pub(crate) const BODY: &str = "body";
}

pub(crate) fn attempts_table(table: &TableName) -> String {
    format!("{}_attempts", table.as_str())
}

/// One attempt as it is logged.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LoggedRow<'a> {
    /// Which of the message's slots it takes (its attempt count, deferrals
    /// included, modulo the slots a message keeps).
    pub(crate) slot: u32,
    pub(crate) attempt: u32,
    pub(crate) at: Timestamp,
    pub(crate) status: Option<u16>,
    pub(crate) duration_ms: i64,
    pub(crate) outcome: &'a str,
    pub(crate) error: Option<&'a str>,
    pub(crate) headers: &'a str,
    pub(crate) body: &'a str,
}

/// Logs an attempt of the row `lease` holds, while it holds (a stale
/// holder logs nothing), in the message's slot `row.slot` (replacing what
/// an older attempt left there). Safe to send again.
pub(crate) fn log(
    table: &TableName,
    dialect: Dialect,
    lease: &Fence<'_>,
    row: &LoggedRow<'_>,
) -> Result<Statement> {
    let text = |value: Option<&str>| Expr::val(value.map(str::to_owned)).cast_as("TEXT");
    let number = |value: Option<i64>| Expr::val(value).cast_as("BIGINT");
    let mut select = Query::select();
    select
        .column(col::ID)
        .expr(number(Some(i64::from(row.slot))))
        .column(col::TOPIC)
        .column(col::EVENT_ID)
        .column(col::SUBJECT)
        .expr(number(Some(i64::from(row.attempt))))
        .expr(number(Some(row.at.as_unix_millis())))
        .expr(number(row.status.map(i64::from)))
        .expr(number(Some(row.duration_ms)))
        .expr(text(Some(row.outcome)))
        .expr(text(row.error))
        .expr(text(Some(row.headers)))
        .expr(text(Some(row.body)))
        .from(table.as_str().to_owned())
        .and_where(lease.holds());
    let columns = [
        attempt_col::MESSAGE_ID,
        attempt_col::SLOT,
        attempt_col::TOPIC,
        attempt_col::EVENT_ID,
        attempt_col::SUBJECT,
        attempt_col::ATTEMPT,
        attempt_col::AT,
        attempt_col::STATUS,
        attempt_col::DURATION_MS,
        attempt_col::OUTCOME,
        attempt_col::ERROR,
        attempt_col::HEADERS,
        attempt_col::BODY,
    ];
    let mut insert = Query::insert();
    insert
        .into_table(attempts_table(table))
        .columns(columns)
        .select_from(select)
        .map_err(query_error)?
        .on_conflict(
            OnConflict::columns([attempt_col::MESSAGE_ID, attempt_col::SLOT])
                .update_columns(columns.into_iter().skip(2))
                .to_owned(),
        );
    dialect.render(&insert)
}

/// The logged attempts of message `id`, oldest first.
pub(crate) fn of_message(table: &TableName, dialect: Dialect, id: &str) -> Result<Statement> {
    let mut select = Query::select();
    select
        .column(sea_query::Asterisk)
        .from(attempts_table(table))
        .and_where(Expr::col(attempt_col::MESSAGE_ID).eq(id))
        .order_by(attempt_col::AT, Order::Asc)
        .order_by(attempt_col::SLOT, Order::Asc);
    dialect.render(&select)
}

/// The `limit` latest logged attempts of topic `topic` (an endpoint's id,
/// for its deliveries), newest first.
pub(crate) fn of_topic(
    table: &TableName,
    dialect: Dialect,
    topic: &str,
    limit: u32,
) -> Result<Statement> {
    let mut select = Query::select();
    select
        .column(sea_query::Asterisk)
        .from(attempts_table(table))
        .and_where(Expr::col(attempt_col::TOPIC).eq(topic))
        .order_by(attempt_col::AT, Order::Desc)
        .order_by(attempt_col::MESSAGE_ID, Order::Desc)
        .limit(u64::from(limit));
    dialect.render(&select)
}

/// Deletes up to `limit` of the oldest attempts logged before `before`.
pub(crate) fn prune(
    table: &TableName,
    dialect: Dialect,
    before: Timestamp,
    limit: u32,
) -> Result<Statement> {
    let mut oldest = Query::select();
    oldest
        .columns([attempt_col::MESSAGE_ID, attempt_col::SLOT])
        .from(attempts_table(table))
        .and_where(Expr::col(attempt_col::AT).lt(before.as_unix_millis()))
        .order_by(attempt_col::AT, Order::Asc)
        .limit(u64::from(limit));
    let mut delete = Query::delete();
    delete.from_table(attempts_table(table)).and_where(
        Expr::tuple([
            Expr::col(attempt_col::MESSAGE_ID),
            Expr::col(attempt_col::SLOT),
        ])
        .in_subquery(oldest),
    );
    dialect.render(&delete)
}

/// Deletes every attempt logged for `subject`'s messages.
pub(crate) fn erase(table: &TableName, dialect: Dialect, subject: &str) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(attempts_table(table))
        .and_where(Expr::col(attempt_col::SUBJECT).eq(subject));
    dialect.render(&delete)
}

/// The logged attempts of `subject`'s messages, oldest first.
pub(crate) fn of_subject(table: &TableName, dialect: Dialect, subject: &str) -> Result<Statement> {
    let mut select = Query::select();
    select
        .column(sea_query::Asterisk)
        .from(attempts_table(table))
        .and_where(Expr::col(attempt_col::SUBJECT).eq(subject))
        .order_by(attempt_col::AT, Order::Asc)
        .order_by(attempt_col::MESSAGE_ID, Order::Asc);
    dialect.render(&select)
}
