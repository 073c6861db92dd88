//! The receivers' remembered failure streaks (`<table>_topics`): one row per
//! receiver failing now, written by the drains, and the operational events
//! of a receiver failing too long and answering again.

use sea_query::{BinOper, Expr, ExprTrait, OnConflict, Query};

use super::endpoints::{event_col, events_table};
use super::events::{EventRow, endpoints_of, event_exprs, keep_selected};
use crate::database::{Dialect, Statement, query_error};
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

/// The streak table's column names.
pub(crate) mod streak_col {
    /// The receiver: the topic, or `topic @ destination`.
    pub(crate) const TOPIC: &str = "topic";
    /// The message that failed last.
    pub(crate) const FAILING_ID: &str = "failing_id";
    /// 1 once another message failed in the streak too.
    pub(crate) const SEVERAL: &str = "several";
    /// Its last failure, in Unix ms.
    pub(crate) const FAILED_AT: &str = "failed_at";
    /// Its first failure, in Unix ms (null in a row older than the column:
    /// read as `failed_at`).
    pub(crate) const SINCE: &str = "since";
    /// 1 once its operator was told it is failing.
    pub(crate) const TOLD: &str = "told";
}

pub(crate) fn streaks_table(table: &TableName) -> String {
    format!("{}_topics", table.as_str())
}

/// Reads every remembered streak.
pub(crate) fn read(table: &TableName, dialect: Dialect) -> Result<Statement> {
    let mut select = Query::select();
    select
        .columns([
            streak_col::TOPIC,
            streak_col::FAILING_ID,
            streak_col::SEVERAL,
            streak_col::FAILED_AT,
            streak_col::TOLD,
        ])
        .from(streaks_table(table));
    dialect.render(&select)
}

/// Ends `topic`'s streak: its receiver answered.
pub(crate) fn ended(table: &TableName, dialect: Dialect, topic: &str) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(streaks_table(table))
        .and_where(Expr::col(streak_col::TOPIC).eq(topic));
    dialect.render(&delete)
}

/// One failure of a streak, as a drain records it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Failure<'a> {
    pub(crate) topic: &'a str,
    pub(crate) failing_id: &'a str,
    pub(crate) several: bool,
    pub(crate) at: Timestamp,
    /// A streak whose last failure is older starts over.
    pub(crate) forget_before: Timestamp,
}

/// Records `failure`, merged with the stored streak: a different message
/// failing makes it several; one older than `forget_before` starts over
/// (its first failure now) unless its operator was told of it: an outage
/// told of lasts until the receiver answers. Safe to send again.
pub(crate) fn failed(
    table: &TableName,
    dialect: Dialect,
    failure: &Failure<'_>,
) -> Result<Statement> {
    let name = streaks_table(table);
    let stored = |column: &'static str| Expr::col((name.clone(), column));
    let now = failure.at.as_unix_millis();
    let forgotten = || stored(streak_col::FAILED_AT).lt(failure.forget_before.as_unix_millis());
    let several = i64::from(failure.several);
    let merged: Expr = Expr::case(forgotten(), several)
        .case(stored(streak_col::FAILING_ID).ne(failure.failing_id), 1)
        .case(Expr::val(several).eq(1), 1)
        .finally(stored(streak_col::SEVERAL))
        .into();
    let since: Expr = Expr::case(forgotten().and(stored(streak_col::TOLD).eq(0)), now)
        .finally(stored(streak_col::SINCE).if_null(stored(streak_col::FAILED_AT)))
        .into();
    let mut insert = Query::insert();
    insert
        .into_table(name.clone())
        .columns([
            streak_col::TOPIC,
            streak_col::FAILING_ID,
            streak_col::SEVERAL,
            streak_col::FAILED_AT,
            streak_col::SINCE,
            streak_col::TOLD,
        ])
        .values([
            failure.topic.into(),
            failure.failing_id.into(),
            several.into(),
            now.into(),
            now.into(),
            0.into(),
        ])
        .map_err(query_error)?;
    // Every SET expression reads the stored row as it was.
    insert.on_conflict(
        OnConflict::column(streak_col::TOPIC)
            .value(streak_col::SEVERAL, merged)
            .value(streak_col::SINCE, since)
            .value(streak_col::FAILING_ID, failure.failing_id)
            .value(streak_col::FAILED_AT, now)
            .to_owned(),
    );
    dialect.render(&insert)
}

/// The first failure of a row, `failed_at` where the row predates `since`.
fn first_failure() -> Expr {
    Expr::col(streak_col::SINCE).if_null(Expr::col(streak_col::FAILED_AT))
}

/// Keeps `event` (an [`RECEIVER_FAILING`](crate::outbox::operational::RECEIVER_FAILING))
/// if `receiver`'s streak blames the receiver (several messages failed in
/// turn), began at `began_by` or before, and was not told of yet; never
/// for a receiver that is an endpoint of `operator` (its own reports). The
/// payload is `payload_head` (a JSON object's text without its closing
/// brace) followed by `"failing_minutes"` and `"since_ms"`, read from the
/// streak.
pub(crate) fn keep_if_failing(
    table: &TableName,
    dialect: Dialect,
    (receiver, operator): (&str, &str),
    event: &EventRow<'_>,
    payload_head: &str,
    began_by: Timestamp,
) -> Result<Statement> {
    let text = |value: &str| Expr::val(value.to_owned()).cast_as("TEXT");
    let concat = |left: Expr, right: Expr| left.binary(BinOper::Custom("||"), right);
    let minutes = Expr::val(event.at.as_unix_millis())
        .cast_as("BIGINT")
        .sub(first_failure())
        // Cast: D1 binds every number as a double, and this is whole minutes.
        .div(Expr::val(60_000).cast_as("BIGINT"))
        .cast_as("TEXT");
    let payload = concat(
        concat(
            concat(
                concat(text(payload_head), text(",\"failing_minutes\":")),
                minutes,
            ),
            concat(text(",\"since_ms\":"), first_failure().cast_as("TEXT")),
        ),
        text("}"),
    );
    let [id, owner, event_type, _, subject, at] = event_exprs(event);
    let mut select = Query::select();
    select
        .exprs([id, owner, event_type, payload, subject, at])
        .from(streaks_table(table))
        .and_where(Expr::col(streak_col::TOPIC).eq(receiver))
        .and_where(Expr::col(streak_col::SEVERAL).eq(1))
        .and_where(Expr::col(streak_col::TOLD).eq(0))
        .and_where(first_failure().lte(began_by.as_unix_millis()))
        .and_where(Expr::col(streak_col::TOPIC).not_in_subquery(endpoints_of(table, operator)));
    keep_selected(table, dialect, select)
}

/// Marks `receiver`'s streak told, if the event `event_id` was kept (by
/// [`keep_if_failing`] earlier in the same batch).
pub(crate) fn mark_told(
    table: &TableName,
    dialect: Dialect,
    receiver: &str,
    event_id: &str,
) -> Result<Statement> {
    let mut kept = Query::select();
    kept.column(event_col::ID)
        .from(events_table(table))
        .and_where(Expr::col(event_col::ID).eq(event_id));
    let mut update = Query::update();
    update
        .table(streaks_table(table))
        .value(streak_col::TOLD, 1)
        .and_where(Expr::col(streak_col::TOPIC).eq(receiver))
        .and_where(Expr::exists(kept));
    dialect.render(&update)
}

/// Keeps `event` (a [`RECEIVER_RECOVERED`](crate::outbox::operational::RECEIVER_RECOVERED))
/// if `receiver`'s streak was told of: sent before [`ended`] deletes it.
pub(crate) fn keep_if_told(
    table: &TableName,
    dialect: Dialect,
    receiver: &str,
    event: &EventRow<'_>,
) -> Result<Statement> {
    let mut select = Query::select();
    select
        .exprs(event_exprs(event))
        .from(streaks_table(table))
        .and_where(Expr::col(streak_col::TOPIC).eq(receiver))
        .and_where(Expr::col(streak_col::TOLD).eq(1));
    keep_selected(table, dialect, select)
}
