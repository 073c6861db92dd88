//! The attempt log (`<table>_attempts`): what receivers answered, written
//! in the drain's settle calls, fenced by the lease, a bounded number of
//! slots per message.

use sea_query::{Expr, ExprTrait, Order, Query};

use super::{Fence, col, dialects};
use crate::database::{Dialect, Statement};
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

/// The columns [`log`] writes: the message's own from its row, the
/// others from its entry.
const LOGGED: [&str; 13] = [
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

/// One attempt of the row `lease` holds, as [`log`] takes it: the lease's
/// fence (id, lease end, token), then the row's fields.
pub(crate) fn entry(lease: &Fence<'_>, row: &LoggedRow<'_>) -> serde_json::Value {
    serde_json::json!([
        lease.id,
        lease.until.as_unix_millis(),
        lease.token,
        row.slot,
        row.attempt,
        row.at.as_unix_millis(),
        row.status,
        row.duration_ms,
        row.outcome,
        row.error,
        row.headers,
        row.body,
    ])
}

/// Logs the attempts `entries` (a JSON array of [`entry`]s, bound as one
/// text) of the rows their leases still hold (a stale holder logs
/// nothing), each in its message's slot (replacing what an older attempt
/// left there): one statement, however many attempts a settle call
/// carries (the entries drive the join: each finds its row by the primary
/// key). Safe to send again.
pub(crate) fn log(table: &TableName, dialect: Dialect, entries: &str) -> Result<Statement> {
    let field =
        |index: usize, integer: bool| dialects::of(dialect).entry_field("g", index, integer);
    let from_entry = [
        "o.id".to_owned(),
        field(3, true),
        "o.topic".to_owned(),
        "o.event_id".to_owned(),
        "o.subject".to_owned(),
        field(4, true),
        field(5, true),
        field(6, true),
        field(7, true),
        field(8, false),
        field(9, false),
        field(10, false),
        field(11, false),
    ];
    let updated: Vec<String> = LOGGED[2..]
        .iter()
        .map(|column| format!("{column} = excluded.{column}"))
        .collect();
    let sql = format!(
        "INSERT INTO \"{attempts}\" ({columns}) SELECT {values} FROM {entries} CROSS JOIN \"{outbox}\" AS o \
         WHERE o.{state} = '{ready}' AND o.{due} = {until} AND o.{id} = {message} AND o.{token} = {lease} \
         ON CONFLICT ({message_id}, {slot}) DO UPDATE SET {updated}",
        attempts = attempts_table(table),
        columns = LOGGED.join(", "),
        values = from_entry.join(", "),
        entries = dialects::of(dialect).entries_from(),
        outbox = table.as_str(),
        state = col::STATE,
        ready = super::state::READY,
        due = col::DUE_AT,
        until = field(1, true),
        id = col::ID,
        message = field(0, false),
        token = col::LEASE_TOKEN,
        lease = field(2, false),
        message_id = attempt_col::MESSAGE_ID,
        slot = attempt_col::SLOT,
        updated = updated.join(", "),
    );
    Ok(Statement::new(
        dialect.number_placeholders(&sql),
        vec![entries.into()],
    ))
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
    super::delete_oldest(
        dialect,
        attempts_table(table),
        &[attempt_col::MESSAGE_ID, attempt_col::SLOT],
        attempt_col::AT,
        before,
        limit,
    )
}

/// Deletes every attempt logged for `subject`'s messages.
pub(crate) fn erase(table: &TableName, dialect: Dialect, subject: &[&str]) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(attempts_table(table))
        .and_where(super::one_of(attempt_col::SUBJECT, subject));
    dialect.render(&delete)
}

/// The logged attempts of `subject`'s messages, oldest first.
pub(crate) fn of_subject(
    table: &TableName,
    dialect: Dialect,
    subject: &[&str],
) -> Result<Statement> {
    let mut select = Query::select();
    select
        .column(sea_query::Asterisk)
        .from(attempts_table(table))
        .and_where(super::one_of(attempt_col::SUBJECT, subject))
        .order_by(attempt_col::AT, Order::Asc)
        .order_by(attempt_col::MESSAGE_ID, Order::Asc);
    dialect.render(&select)
}
