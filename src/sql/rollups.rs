//! Rollups: counts per period, topic and metric in `<table>_rollups`,
//! written in the same atomic call as the changes they count.
//!
//! A settle's counts are read from the rows its fenced statements are about
//! to change, in the same batch and before them: a row whose lease no
//! longer holds is not found, so a stale holder's settle counts nothing,
//! and a settle sent again after it committed finds none of its rows still
//! leased and counts nothing twice. On Postgres the counted rows are locked
//! (`FOR UPDATE`), so no other drainer can take them between the count and
//! the settle.

use super::dialects::{counted_kinds, entries_from, entry_field, lock_counted_rows, period_fold};
use super::{Fence, col, state};
use crate::database::value::Value;
use crate::database::{Dialect, Statement};
use crate::identifier::TableName;
use crate::time::Timestamp;

/// The rollups table's column names.
pub(crate) mod rollup_col {
    pub(crate) const PERIOD_MS: &str = "period_ms";
    pub(crate) const PERIOD_START: &str = "period_start";
    pub(crate) const TOPIC: &str = "topic";
    pub(crate) const METRIC: &str = "metric";
    pub(crate) const LE: &str = "le";
    pub(crate) const COUNT: &str = "count";
}

/// The stored names of the metrics.
pub(crate) mod metric {
    pub(crate) const DELIVERED: &str = "delivered";
    pub(crate) const RETRIED: &str = "retried";
    pub(crate) const DEFERRED: &str = "deferred";
    pub(crate) const DEAD: &str = "dead";
    pub(crate) const HANDED_BACK: &str = "handed_back";
    pub(crate) const LEASE_LOST: &str = "lease_lost";
    pub(crate) const SUSPECTS_ALONE: &str = "suspects_alone";
    pub(crate) const BREAKER_TRIPS: &str = "breaker_trips";
    pub(crate) const LATENESS: &str = "lateness_ms";
    pub(crate) const AGE: &str = "age_ms";
    pub(crate) const DURATION: &str = "duration_ms";
}

/// A minute, in ms: the period rollups are written in.
pub(crate) const MINUTE_MS: i64 = 60_000;
/// An hour, in ms: the period minutes are folded into.
pub(crate) const HOUR_MS: i64 = 3_600_000;
/// Minutes are kept this long, then folded into hours.
pub(crate) const MINUTES_KEPT_MS: i64 = 48 * HOUR_MS;
/// Hours are kept this long.
pub(crate) const HOURS_KEPT_MS: i64 = 90 * 24 * HOUR_MS;

/// The upper bounds, in ms, of the histograms' buckets; a last bucket has
/// none (stored as `le = -1`).
pub(crate) const BUCKETS_MS: [i64; 18] = [
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 900_000,
    3_600_000, 21_600_000, 86_400_000,
];
/// `le` of the bucket with no upper bound.
pub(crate) const UNBOUNDED: i64 = -1;

/// The bucket (its `le`) that holds `ms`.
pub(crate) fn bucket_of(ms: i64) -> i64 {
    BUCKETS_MS
        .iter()
        .copied()
        .find(|bound| ms <= *bound)
        .unwrap_or(UNBOUNDED)
}

/// The start of the minute `at` falls in.
pub(crate) fn minute_of(at: Timestamp) -> i64 {
    let ms = at.as_unix_millis();
    ms - ms.rem_euclid(MINUTE_MS)
}

/// What each counted lease may count, one row of rollups each: its
/// outcome's counter, then the others (zeros are left out). A constant
/// table, not a `UNION ALL`: D1 allows few terms in a compound `SELECT`.
const KINDS: [&str; 7] = [
    "outcome",
    metric::LATENESS,
    metric::AGE,
    metric::DURATION,
    metric::LEASE_LOST,
    metric::SUSPECTS_ALONE,
    metric::BREAKER_TRIPS,
];

/// What one settled lease counts, should its lease still hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counted<'a> {
    pub(crate) fence: Fence<'a>,
    /// The counter the settle moves: delivered, retried, deferred, dead or
    /// handed back.
    pub(crate) outcome: &'static str,
    /// Delivered − due, delivered − created and the delivery's duration, in
    /// ms (for a delivered message; the duration when it was measured).
    pub(crate) lateness_ms: Option<i64>,
    pub(crate) age_ms: Option<i64>,
    pub(crate) duration_ms: Option<i64>,
    /// The settle resets the row's unsettled leases: they are counted lost.
    pub(crate) counts_lost_leases: bool,
    /// Delivered alone, as a suspect.
    pub(crate) alone: bool,
    /// Its failure tripped its topic's breaker.
    pub(crate) tripped: bool,
}

impl Counted<'_> {
    fn entry(&self) -> serde_json::Value {
        let flag = |on: bool| i64::from(on);
        serde_json::json!([
            self.fence.id,
            self.fence.token,
            self.fence.until.as_unix_millis(),
            self.outcome,
            self.lateness_ms.map(bucket_of),
            self.age_ms.map(bucket_of),
            self.duration_ms.map(bucket_of),
            flag(self.counts_lost_leases),
            flag(self.alone),
            flag(self.tripped),
        ])
    }
}

fn rollups_table(table: &TableName) -> String {
    format!("\"{}_rollups\"", table.as_str())
}

/// `INSERT INTO <rollups> (…)`, the head of every write.
fn insert_head(table: &TableName) -> String {
    use rollup_col::*;
    format!(
        "INSERT INTO {} ({PERIOD_MS}, {PERIOD_START}, {TOPIC}, {METRIC}, {LE}, \"{COUNT}\")",
        rollups_table(table)
    )
}

/// The tail of every write: a count already there grows.
fn add_on_conflict(table: &TableName) -> String {
    use rollup_col::*;
    format!(
        "ON CONFLICT ({PERIOD_MS}, {PERIOD_START}, {TOPIC}, {METRIC}, {LE}) DO UPDATE SET \
         \"{COUNT}\" = {}.\"{COUNT}\" + excluded.\"{COUNT}\"",
        rollups_table(table)
    )
}

/// Counts `counted` into the minute of `now`: to send before the settle
/// statements of the same leases, in the same atomic call. `None` when
/// there is nothing to count. A row whose topic does not decode counts
/// under the topic `""`.
pub(crate) fn count_settles(
    table: &TableName,
    dialect: Dialect,
    counted: &[Counted<'_>],
    now: Timestamp,
) -> Option<Statement> {
    if counted.is_empty() {
        return None;
    }
    let entries =
        serde_json::Value::Array(counted.iter().map(Counted::entry).collect()).to_string();
    let field = |index: usize, integer: bool| entry_field(dialect, index, integer);
    let outbox = format!("\"{}\"", table.as_str());
    let sql = format!(
        "WITH held AS MATERIALIZED (SELECT COALESCE(CAST({outbox}.{topic} AS TEXT), '') AS topic, {outcome} AS outcome, \
         {late} AS late, {age} AS age, {duration} AS duration, \
         CASE WHEN {lost} = 1 THEN {outbox}.{unsettled} ELSE 0 END AS lost, {alone} AS alone, \
         {tripped} AS tripped \
         FROM {entries} CROSS JOIN {outbox} \
         WHERE {outbox}.{state_col} = '{ready}' AND {outbox}.{due} = {until} \
         AND {outbox}.{id} = {entry_id} AND {outbox}.{token_col} = {token}{lock}) \
         {insert} SELECT {MINUTE_MS}, ?, topic, metric, le, SUM(n) FROM (SELECT topic, \
         CASE k.value WHEN 'outcome' THEN outcome ELSE k.value END AS metric, \
         CASE k.value WHEN '{lateness}' THEN COALESCE(late, 0) \
         WHEN '{age_metric}' THEN COALESCE(age, 0) \
         WHEN '{duration_metric}' THEN COALESCE(duration, 0) ELSE 0 END AS le, \
         CASE k.value WHEN 'outcome' THEN 1 \
         WHEN '{lateness}' THEN CASE WHEN late IS NULL THEN 0 ELSE 1 END \
         WHEN '{age_metric}' THEN CASE WHEN age IS NULL THEN 0 ELSE 1 END \
         WHEN '{duration_metric}' THEN CASE WHEN duration IS NULL THEN 0 ELSE 1 END \
         WHEN '{lease_lost}' THEN lost WHEN '{suspects}' THEN alone \
         WHEN '{trips}' THEN tripped END AS n \
         FROM held CROSS JOIN {kinds}\
         ) AS counted WHERE n > 0 GROUP BY topic, metric, le ORDER BY topic, metric, le {conflict}",
        topic = col::TOPIC,
        outcome = field(3, false),
        late = field(4, true),
        age = field(5, true),
        duration = field(6, true),
        lost = field(7, true),
        unsettled = col::UNSETTLED_LEASES,
        alone = field(8, true),
        tripped = field(9, true),
        entries = entries_from(dialect),
        state_col = col::STATE,
        ready = state::READY,
        due = col::DUE_AT,
        until = field(2, true),
        id = col::ID,
        entry_id = field(0, false),
        token_col = col::LEASE_TOKEN,
        token = field(1, false),
        lock = lock_counted_rows(dialect, &outbox),
        insert = insert_head(table),
        lateness = metric::LATENESS,
        age_metric = metric::AGE,
        duration_metric = metric::DURATION,
        lease_lost = metric::LEASE_LOST,
        suspects = metric::SUSPECTS_ALONE,
        trips = metric::BREAKER_TRIPS,
        kinds = counted_kinds(dialect, &KINDS),
        conflict = add_on_conflict(table),
    );
    Some(Statement::new(
        dialect.number_placeholders(&sql),
        vec![Value::Text(entries), Value::Integer(minute_of(now))],
    ))
}

/// Counts the rows a claim at `now` with `token` parked as dead: to send
/// right after the claim, in the same atomic call.
pub(crate) fn count_claim_deaths(
    table: &TableName,
    dialect: Dialect,
    now: Timestamp,
    token: &str,
) -> Statement {
    let sql = format!(
        "{insert} SELECT {MINUTE_MS}, ?, COALESCE(CAST({topic} AS TEXT), ''), '{dead}', 0, COUNT(*) \
         FROM \"{outbox}\" WHERE {state_col} = '{dead_state}' AND {due} = ? AND {token_col} = ? \
         GROUP BY 3 ORDER BY 3 {conflict}",
        insert = insert_head(table),
        topic = col::TOPIC,
        dead = metric::DEAD,
        outbox = table.as_str(),
        state_col = col::STATE,
        dead_state = state::DEAD,
        due = col::DUE_AT,
        token_col = col::LEASE_TOKEN,
        conflict = add_on_conflict(table),
    );
    Statement::new(
        dialect.number_placeholders(&sql),
        vec![
            Value::Integer(minute_of(now)),
            Value::Integer(now.as_unix_millis()),
            Value::Text(token.to_owned()),
        ],
    )
}

/// Retention, for a drain's sweep at `now`: minutes older than 48 h are
/// folded into their hours (each minute counted once however many sweeps
/// run at once), hours older than 90 days are deleted.
pub(crate) fn retention(table: &TableName, dialect: Dialect, now: Timestamp) -> Vec<Statement> {
    use rollup_col::*;
    let now = now.as_unix_millis();
    let rollups = rollups_table(table);
    let fold = period_fold(
        dialect,
        &rollups,
        &format!("{PERIOD_MS} = {MINUTE_MS} AND {PERIOD_START} < ?",),
        &format!(
            "{insert} SELECT {HOUR_MS}, {PERIOD_START} - {PERIOD_START} % {HOUR_MS}, {TOPIC}, \
             {METRIC}, {LE}, SUM(\"{COUNT}\")",
            insert = insert_head(table)
        ),
        &format!(
            "GROUP BY 2, 3, 4, 5 ORDER BY 2, 3, 4, 5 {}",
            add_on_conflict(table)
        ),
    );
    let minutes_from = Value::Integer(now.saturating_sub(MINUTES_KEPT_MS));
    let mut statements: Vec<Statement> = fold
        .into_iter()
        .map(|sql| {
            Statement::new(
                dialect.number_placeholders(&sql),
                vec![minutes_from.clone()],
            )
        })
        .collect();
    statements.push(Statement::new(
        dialect.number_placeholders(&format!(
            "DELETE FROM {rollups} WHERE {PERIOD_MS} = {HOUR_MS} AND {PERIOD_START} < ?"
        )),
        vec![Value::Integer(now.saturating_sub(HOURS_KEPT_MS))],
    ));
    statements
}

/// The stored rollups of periods of `period_ms` (and, for hours, of the
/// minutes not folded yet) starting in `from .. to`, in period order.
pub(crate) fn read(
    table: &TableName,
    dialect: Dialect,
    period_ms: i64,
    from: Timestamp,
    to: Timestamp,
) -> Statement {
    use rollup_col::*;
    let sql = format!(
        "SELECT {PERIOD_MS}, {PERIOD_START}, {TOPIC}, {METRIC}, {LE}, \"{COUNT}\" FROM {} \
         WHERE {PERIOD_MS} IN (?, ?) AND {PERIOD_START} >= ? AND {PERIOD_START} < ? \
         ORDER BY {PERIOD_START}, {TOPIC}, {METRIC}, {LE}",
        rollups_table(table)
    );
    Statement::new(
        dialect.number_placeholders(&sql),
        vec![
            Value::Integer(period_ms),
            Value::Integer(MINUTE_MS),
            Value::Integer(from.as_unix_millis()),
            Value::Integer(to.as_unix_millis()),
        ],
    )
}
