//! Rollups: counts per period and topic in `<table>_periods` (a column per
//! counter and per histogram bucket), written in the same atomic call as
//! the changes they count.
//!
//! A settle's counts are read from the rows its fenced statements are about
//! to change, in the same batch and before them: a row whose lease no
//! longer holds is not found, so a stale holder's settle counts nothing,
//! and a settle sent again after it committed finds none of its rows still
//! leased and counts nothing twice. On Postgres the counted rows are locked
//! (`FOR UPDATE`), so no other drainer can take them between the count and
//! the settle, and every count is added by one statement at the end of the
//! transaction ([`CountsLast`]).

use super::dialects;
use super::differences::MAX_COUNTED_UNSETTLED;
use serde::Serialize;

use super::{Fence, col, json_text, state};
use crate::database::value::Value;
use crate::database::{Dialect, Statement};
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

/// The rollups table's key columns.
pub(crate) mod rollup_col {
    pub(crate) const PERIOD_MS: &str = "period_ms";
    pub(crate) const PERIOD_START: &str = "period_start";
    pub(crate) const TOPIC: &str = "topic";
}

/// The stored names of the metrics.
pub(crate) mod metric {
    pub(crate) const DELIVERED: &str = "delivered";
    pub(crate) const RETRIED: &str = "retried";
    pub(crate) const DEFERRED: &str = "deferred";
    pub(crate) const DEAD: &str = "dead";
    /// Rows a claim parked as dead: read as `dead`, counted apart (a
    /// column of its own).
    pub(crate) const DEAD_AT_CLAIM: &str = "dead_at_claim";
    pub(crate) const HANDED_BACK: &str = "handed_back";
    pub(crate) const LEASE_LOST: &str = "lease_lost";
    pub(crate) const SUSPECTS_ALONE: &str = "suspects_alone";
    pub(crate) const BREAKER_TRIPS: &str = "breaker_trips";
    pub(crate) const LATENESS: &str = "lateness_ms";
    pub(crate) const AGE: &str = "age_ms";
    pub(crate) const DURATION: &str = "duration_ms";
}

/// The counters, each a column of its own.
const COUNTERS: [&str; 9] = [
    metric::DELIVERED,
    metric::RETRIED,
    metric::DEFERRED,
    metric::DEAD,
    metric::DEAD_AT_CLAIM,
    metric::HANDED_BACK,
    metric::LEASE_LOST,
    metric::SUSPECTS_ALONE,
    metric::BREAKER_TRIPS,
];

/// The histograms, each a column per bucket.
const HISTOGRAMS: [&str; 3] = [metric::LATENESS, metric::AGE, metric::DURATION];

/// One count column of a rollup row: a counter (`le` 0) or a histogram's
/// bucket (`le` its upper bound, or [`UNBOUNDED`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CountColumn {
    pub(crate) metric: &'static str,
    pub(crate) le: i64,
}

impl CountColumn {
    /// Its name: the counter's, or `<histogram>_le_<bound>` (`_le_inf`
    /// for the last bucket).
    pub(crate) fn name(&self) -> String {
        match (self.le, COUNTERS.contains(&self.metric)) {
            (_, true) => self.metric.to_owned(),
            (UNBOUNDED, false) => format!("{}_le_inf", self.metric),
            (le, false) => format!("{}_le_{le}", self.metric),
        }
    }
}

/// Every count column of a rollup row, in the table's order: the counters,
/// then each histogram's buckets in bound order.
pub(crate) fn count_columns() -> impl Iterator<Item = CountColumn> {
    let counters = COUNTERS
        .into_iter()
        .map(|metric| CountColumn { metric, le: 0 });
    let buckets = HISTOGRAMS.into_iter().flat_map(|metric| {
        BUCKETS_MS
            .into_iter()
            .chain(std::iter::once(UNBOUNDED))
            .map(move |le| CountColumn { metric, le })
    });
    counters.chain(buckets)
}

/// How many count columns a rollup row has.
pub(crate) const COUNT_COLUMNS: usize = COUNTERS.len() + HISTOGRAMS.len() * (BUCKETS_MS.len() + 1);

/// The position of `metric`'s column for `le` among [`count_columns`].
fn column_index(metric: &str, le: i64) -> Option<usize> {
    count_columns().position(|column| column.metric == metric && column.le == le)
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

/// What one settled lease counts, should its lease still hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counted<'a> {
    pub(crate) fence: Fence<'a>,
    /// The leased row's topic, as its claim read it.
    pub(crate) topic: &'a str,
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
    /// Delivered as a suspect, in a suspect group.
    pub(crate) alone: bool,
    /// Its failure tripped its topic's breaker.
    pub(crate) tripped: bool,
    /// The row's unsettled leases, when the lease knows them.
    pub(crate) unsettled: Option<u32>,
}

impl<'a> Counted<'a> {
    /// What the lease adds to per row its settle changes, when that is
    /// known without reading the row: leases of one key are counted by
    /// one [`count_changes`](RollupWrites::count_changes).
    pub(crate) fn changes_key(&self) -> Option<ChangesKey<'a>> {
        let lost = match (self.counts_lost_leases, self.unsettled) {
            (false, _) => 0,
            (true, Some(unsettled)) => i64::from(unsettled).min(MAX_COUNTED_UNSETTLED),
            (true, None) => return None,
        };
        Some(ChangesKey {
            topic: self.topic,
            signature: self.signature(),
            lost,
        })
    }

    /// The rollup rows this lease adds to.
    fn signature(&self) -> Signature {
        Signature {
            outcome: self.outcome,
            lateness: self.lateness_ms.map(bucket_of),
            age: self.age_ms.map(bucket_of),
            duration: self.duration_ms.map(bucket_of),
            counts_lost_leases: self.counts_lost_leases,
            alone: self.alone,
            tripped: self.tripped,
        }
    }
}

/// What one changed row of a settle statement adds to the rollups: its
/// topic, its rows and the unsettled leases it counts lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChangesKey<'a> {
    topic: &'a str,
    signature: Signature,
    lost: i64,
}

/// What leases known to be settled add to each topic's row, summed.
#[derive(Debug, Clone, Default)]
pub(crate) struct KnownCounts<'a> {
    per_topic: Vec<(&'a str, [i64; COUNT_COLUMNS])>,
}

impl<'a> KnownCounts<'a> {
    /// Adds what the lease of `key` adds: `false` (nothing added) where its
    /// lost leases are not known without reading its row.
    pub(crate) fn add(&mut self, key: Option<ChangesKey<'a>>) -> bool {
        let Some(key) = key else {
            return false;
        };
        let index = match self
            .per_topic
            .iter()
            .position(|(topic, _)| *topic == key.topic)
        {
            Some(index) => index,
            None => {
                self.per_topic.push((key.topic, [0; COUNT_COLUMNS]));
                self.per_topic.len() - 1
            }
        };
        if let Some((_, counts)) = self.per_topic.get_mut(index) {
            key.add_to(counts);
        }
        true
    }
}

impl ChangesKey<'_> {
    /// Adds what one row of this key adds to each count column.
    fn add_to(&self, counts: &mut [i64; COUNT_COLUMNS]) {
        for (column, from_row) in self.signature.columns() {
            if let Some(count) = counts.get_mut(column) {
                *count += if from_row { self.lost } else { 1 };
            }
        }
    }
}

/// What an upsert of `added` into `topic`'s row of the minute of `now`
/// binds: the minute, the topic, then each column's count.
fn upsert_values(now: Timestamp, topic: &str, added: &[(String, i64)]) -> Vec<Value> {
    let mut values = vec![
        Value::Integer(minute_of(now)),
        Value::Text(topic.to_owned()),
    ];
    values.extend(added.iter().map(|(_, count)| Value::Integer(*count)));
    values
}

/// The count columns `counts` adds to: each one's name and count.
fn added_columns(counts: &[i64; COUNT_COLUMNS]) -> Vec<(String, i64)> {
    count_columns()
        .zip(counts.iter().copied())
        .filter(|(_, count)| *count != 0)
        .map(|(column, count)| (column.name(), count))
        .collect()
}

/// The rollup rows a lease adds to, its buckets chosen: leases of one
/// signature add to the same rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Signature {
    outcome: &'static str,
    lateness: Option<i64>,
    age: Option<i64>,
    duration: Option<i64>,
    counts_lost_leases: bool,
    alone: bool,
    tripped: bool,
}

impl Signature {
    /// Its count columns: (index among [`count_columns`], counted from the
    /// row's unsettled leases rather than as 1).
    fn columns(&self) -> impl Iterator<Item = (usize, bool)> {
        let buckets = [
            (metric::LATENESS, self.lateness),
            (metric::AGE, self.age),
            (metric::DURATION, self.duration),
        ];
        std::iter::once((self.outcome, 0, false))
            .chain(
                buckets
                    .into_iter()
                    .filter_map(|(name, le)| le.map(|le| (name, le, false))),
            )
            .chain(
                self.counts_lost_leases
                    .then_some((metric::LEASE_LOST, 0, true)),
            )
            .chain(self.alone.then_some((metric::SUSPECTS_ALONE, 0, false)))
            .chain(self.tripped.then_some((metric::BREAKER_TRIPS, 0, false)))
            // Every outcome and bucket has its column (a test walks them).
            .filter_map(|(name, le, from_row)| Some((column_index(name, le)?, from_row)))
    }
}

/// The rollups table of `table`: a row per period and topic.
pub(crate) fn periods_table(table: &TableName) -> String {
    format!("{}_periods", table.as_str())
}

fn quoted_periods(table: &TableName) -> String {
    format!("\"{}\"", periods_table(table))
}

/// `INSERT INTO <periods> (period_ms, period_start, topic, <counts>)`, the
/// head of every write of all the count columns.
fn insert_head(table: &TableName) -> String {
    let counts: Vec<String> = count_columns().map(|column| column.name()).collect();
    insert_into(&quoted_periods(table), &counts)
}

/// `INSERT INTO <periods> (period_ms, period_start, topic, <columns>)`:
/// the columns left out are 0 in a new row, and unchanged in one there.
fn insert_into(periods: &str, columns: &[impl AsRef<str>]) -> String {
    use rollup_col::*;
    let columns: Vec<&str> = columns.iter().map(AsRef::as_ref).collect();
    format!(
        "INSERT INTO {periods} ({PERIOD_MS}, {PERIOD_START}, {TOPIC}, {})",
        columns.join(", ")
    )
}

/// The tail of a write of `columns`: a row already there grows by them.
fn grow_on_conflict(periods: &str, columns: &[impl AsRef<str>]) -> String {
    use rollup_col::*;
    let added: Vec<String> = columns
        .iter()
        .map(|name| {
            let name = name.as_ref();
            format!("{name} = {periods}.{name} + excluded.{name}")
        })
        .collect();
    format!(
        "ON CONFLICT ({PERIOD_MS}, {PERIOD_START}, {TOPIC}) DO UPDATE SET {}",
        added.join(", ")
    )
}

/// The count columns' values, `value` of each column's index, in order.
fn per_column(value: impl Fn(usize) -> String) -> String {
    (0..COUNT_COLUMNS).map(value).collect::<Vec<_>>().join(", ")
}

/// The count columns summed from a relation of `(col, n)` rows: each
/// column sums the `n` of the rows that name its index.
fn pivoted(col: &str, n: &str) -> String {
    per_column(|index| format!("SUM(CASE WHEN {col} = {index} THEN {n} ELSE 0 END)"))
}

/// The tail of every write of all the count columns.
fn add_on_conflict(table: &TableName) -> String {
    let counts: Vec<String> = count_columns().map(|column| column.name()).collect();
    grow_on_conflict(&quoted_periods(table), &counts)
}

/// The transaction-local setting in which a settle's count on Postgres
/// leaves what it counted for `table`, until the table's `_add_counts`
/// function adds it to the rollups (see [`CountsLast`]) and clears it:
/// named after the table's name in hex (a setting's name knows no case),
/// as that function names it too.
fn stash_setting(table: &TableName) -> String {
    let hex: String = table
        .as_str()
        .bytes()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("workers_outbox.rollups_{hex}")
}

/// A settle's count of its leases into the rollups.
#[derive(Debug, Clone)]
pub(crate) struct SettleCount {
    /// To send before the settle's statements: it reads (and on Postgres
    /// locks) the leased rows they are about to change.
    pub(crate) count: Statement,
    /// Postgres: `count` stashed what it counted, to add last in the same
    /// transaction (none for SQLite, whose `count` adds it).
    pub(crate) last: Option<CountsLast>,
}

/// Where a count's writes go in its transaction.
#[derive(Debug, Clone)]
pub(crate) enum Counts {
    /// Where they stand, in order (SQLite).
    Now(Vec<Statement>),
    /// Into the transaction's last statement (Postgres).
    Last(CountsLast),
}

/// Counts to add to the rollups in the last statement of their
/// transaction (Postgres), gathered from every part of it: the known counts
/// of its settles, what their counts stashed, and the rows its claim parked
/// as dead. Every drainer adds to the same few rollup rows, whose locks are
/// held until the commit: taken at the end, in one statement that takes
/// them in (minute, topic) order, they are held through the commit alone,
/// and two transactions never take them in opposite orders.
#[derive(Debug, Clone)]
pub(crate) struct CountsLast {
    /// The call of the table's `_add_counts` function (see its schema).
    call: String,
    /// `[minute, topic, column index, count]` each.
    counted: Vec<serde_json::Value>,
    /// Whether a statement before it stashed counts for it.
    stashed: bool,
    /// The claims whose dead rows it counts: (minute, at, token).
    claims: Vec<(i64, i64, String)>,
}

impl CountsLast {
    fn new(call: &str) -> Self {
        CountsLast {
            call: call.to_owned(),
            counted: Vec::new(),
            stashed: false,
            claims: Vec::new(),
        }
    }

    /// Adds `other`'s counts (of the same table) to these.
    pub(crate) fn add(&mut self, other: &CountsLast) {
        self.counted.extend(other.counted.iter().cloned());
        self.stashed |= other.stashed;
        self.claims.extend(other.claims.iter().cloned());
    }

    /// Gathers `counts` into `gathered`.
    pub(crate) fn gather(gathered: &mut Option<CountsLast>, counts: Option<&CountsLast>) {
        match (gathered.as_mut(), counts) {
            (Some(gathered), Some(counts)) => gathered.add(counts),
            (None, Some(counts)) => *gathered = Some(counts.clone()),
            (_, None) => {}
        }
    }

    /// The statements that add them: none when there is nothing to add,
    /// one otherwise (and one more per further claim, which a transaction
    /// of the library never holds).
    pub(crate) fn statements(&self) -> Vec<Statement> {
        let mut claims = self.claims.iter().map(Some);
        let first = claims.next();
        if first.is_none() && self.counted.is_empty() && !self.stashed {
            return Vec::new();
        }
        let counted = serde_json::Value::Array(self.counted.clone()).to_string();
        std::iter::once((counted, first.flatten()))
            .chain(claims.map(|claim| ("[]".to_owned(), claim)))
            .map(|(counted, claim)| {
                let (minute, at, token) = match claim {
                    Some((minute, at, token)) => (
                        Value::Integer(*minute),
                        Value::Integer(*at),
                        Value::Text(token.clone()),
                    ),
                    None => (Value::Null, Value::Null, Value::Null),
                };
                Statement::new(
                    self.call.clone(),
                    vec![Value::Text(counted), minute, at, token],
                )
            })
            .collect()
    }
}

/// The text of an outbox's rollup writes, rendered once per outbox (they
/// depend only on its table and dialect).
#[derive(Debug, Clone)]
pub(crate) struct RollupWrites {
    count_settles: String,
    last: Last,
    /// The rollups table, quoted: the known counts' statements name only
    /// the columns they add to.
    periods: String,
    dialect: Dialect,
}

/// Whether counts go last in their transaction.
#[derive(Debug, Clone)]
enum Last {
    /// SQLite: each count adds where it stands; a claim's deaths are
    /// counted by `count_claim_deaths`, one row each.
    No { count_claim_deaths: String },
    /// Postgres: counts are added by `add_counts`, the call of the table's
    /// function (see [`CountsLast`]).
    Yes { add_counts: String },
}

/// One group of a settle's leases, bound as `[topic, token, until,
/// signature, [ids]]`.
#[derive(Serialize)]
struct Group<'a>(&'a str, &'a str, i64, usize, Vec<&'a str>);

impl RollupWrites {
    /// `table`'s rollup writes in `dialect`.
    ///
    /// Leases that add to the same count columns share a signature. A
    /// settle's count binds them in groups of one topic, one claim's token
    /// and lease end and one signature (a group's fields are read once, its
    /// ids one by one): it finds the leases that still hold (one
    /// primary-key lookup each, see [`held_leases`](super::differences::Differences::held_leases)), and adds each group's
    /// count to its signature's columns of its topic's one row.
    pub(crate) fn new(table: &TableName, dialect: Dialect) -> Self {
        let differences = dialects::of(dialect);
        let field = |index: usize, integer: bool| differences.entry_field("g", index, integer);
        let row_field = |index: usize, integer: bool| differences.entry_field("m", index, integer);
        let outbox = format!("\"{}\"", table.as_str());
        let groups = format!(
            "WITH groups AS MATERIALIZED (SELECT {topic} AS topic, {token} AS token, \
             {until} AS until, {group_signature} AS signature, {ids} AS ids FROM {entries}), \
             {held}",
            topic = field(0, false),
            token = field(1, false),
            until = field(2, true),
            group_signature = field(3, true),
            ids = differences.entry_json("g", 4),
            entries = differences.entries_from(),
            held = differences.held_leases(&outbox),
        );
        // Per held group, per column of its signature: (topic, col, n).
        let counted = format!(
            "SELECT held.topic AS topic, {col} AS col, \
             CASE WHEN {from_row} = 1 THEN lost ELSE leases END AS n \
             FROM held CROSS JOIN {signature_rows}",
            col = row_field(0, true),
            from_row = row_field(1, true),
            signature_rows = differences.signature_rows_of("held.signature"),
        );
        let periods = quoted_periods(table);
        let (count_settles, last) = match dialect {
            Dialect::Sqlite => {
                // Each dead row adds 1 and the conflict clause sums them (a
                // claim's dead rows are few), with no sort: a statement whose
                // bound `WHERE` feeds a `GROUP BY` is planned again at every
                // run where the planner may weigh bound values.
                let dead_at_claim = [metric::DEAD_AT_CLAIM];
                let count_claim_deaths = format!(
                    "{insert} SELECT {MINUTE_MS}, ?, COALESCE(CAST({topic} AS TEXT), ''), 1 \
                     FROM {outbox} \
                     WHERE {state_col} = '{dead_state}' AND {due} = ? AND {token_col} = ? \
                     {conflict}",
                    insert = insert_into(&periods, &dead_at_claim),
                    topic = col::TOPIC,
                    state_col = col::STATE,
                    dead_state = state::DEAD,
                    due = col::DUE_AT,
                    token_col = col::LEASE_TOKEN,
                    conflict = grow_on_conflict(&periods, &dead_at_claim),
                );
                let count_settles = format!(
                    "{groups} {insert} SELECT {MINUTE_MS}, ?, c.topic, {pivot} FROM ({counted}) AS c \
                     WHERE c.n > 0 GROUP BY c.topic ORDER BY c.topic {conflict}",
                    insert = insert_head(table),
                    pivot = pivoted("c.col", "c.n"),
                    conflict = add_on_conflict(table),
                );
                (count_settles, Last::No { count_claim_deaths })
            }
            Dialect::Postgres => {
                let setting = stash_setting(table);
                let stashed = format!(
                    "COALESCE(NULLIF(current_setting('{setting}', true), ''), '[]')::jsonb"
                );
                let stash = format!(
                    "{groups} SELECT set_config('{setting}', ({stashed} || COALESCE((\
                     SELECT jsonb_agg(jsonb_build_array(CAST(? AS BIGINT), topic, col, n)) \
                     FROM (SELECT c.topic AS topic, c.col AS col, SUM(c.n) AS n FROM ({counted}) AS c \
                     GROUP BY 1, 2 HAVING SUM(c.n) > 0) AS s), '[]'::jsonb))::text, true) AS stashed",
                );
                let add_counts = format!(
                    "SELECT \"{table}_add_counts\"(CAST($1 AS JSONB), CAST($2 AS BIGINT), \
                     CAST($3 AS BIGINT), CAST($4 AS TEXT)) AS added",
                    table = table.as_str(),
                );
                (stash, Last::Yes { add_counts })
            }
        };
        RollupWrites {
            count_settles: dialect.number_placeholders(&count_settles),
            last,
            periods,
            dialect,
        }
    }

    /// Nothing yet to add last, where counts go last (Postgres).
    fn counts_last(&self) -> Option<CountsLast> {
        match &self.last {
            Last::No { .. } => None,
            Last::Yes { add_counts } => Some(CountsLast::new(add_counts)),
        }
    }

    /// Whether a settle statement's changes can be counted by the
    /// statement after it ([`count_changes`](RollupWrites::count_changes)).
    pub(crate) fn counts_changes(&self) -> bool {
        dialects::of(self.dialect).counts_by_changes()
    }

    /// Counts into the minute of `now`, once per row the statement just
    /// before it changed, what a lease of `key` adds: to send right after
    /// that statement, in the same atomic call. `None` where the dialect
    /// does not count this way (see [`counts_by_changes`](super::differences::Differences::counts_by_changes)).
    pub(crate) fn count_changes(&self, key: &ChangesKey<'_>, now: Timestamp) -> Option<Statement> {
        if !self.counts_changes() {
            return None;
        }
        let mut counts = [0_i64; COUNT_COLUMNS];
        key.add_to(&mut counts);
        let added = added_columns(&counts);
        let columns: Vec<&str> = added.iter().map(|(name, _)| name.as_str()).collect();
        let sql = format!(
            "{insert} SELECT {MINUTE_MS}, ?, ?, {per} WHERE changes() > 0 {conflict}",
            insert = insert_into(&self.periods, &columns),
            per = vec!["changes() * ?"; columns.len()].join(", "),
            conflict = grow_on_conflict(&self.periods, &columns),
        );
        Some(Statement::new(sql, upsert_values(now, key.topic, &added)))
    }

    /// Counts `known` into the minute of `now`: to send after statements
    /// that changed every counted row for sure (a delete checked by
    /// [`complete_listed`](super::differences::Differences::complete_listed)), in the same
    /// atomic call. SQLite: one upsert per topic, in topic order, naming
    /// only the columns it adds to (a few, of the row's 66); it reads only
    /// its own row. Postgres: added last (see [`CountsLast`]).
    pub(crate) fn count_known(&self, known: &KnownCounts<'_>, now: Timestamp) -> Counts {
        let mut per_topic: Vec<_> = known.per_topic.iter().collect();
        per_topic.sort_by(|a, b| a.0.cmp(b.0));
        if let Some(mut last) = self.counts_last() {
            let minute = minute_of(now);
            for (topic, counts) in per_topic {
                last.counted.extend(
                    counts
                        .iter()
                        .enumerate()
                        .filter(|(_, count)| **count != 0)
                        .map(|(column, count)| serde_json::json!([minute, topic, column, count])),
                );
            }
            return Counts::Last(last);
        }
        Counts::Now(
            per_topic
                .into_iter()
                .map(|(topic, counts)| {
                    let added = added_columns(counts);
                    let columns: Vec<&str> = added.iter().map(|(name, _)| name.as_str()).collect();
                    let sql = format!(
                        "{insert} VALUES ({MINUTE_MS}, ?, ?, {placeholders}) {conflict}",
                        insert = insert_into(&self.periods, &columns),
                        placeholders = vec!["?"; columns.len()].join(", "),
                        conflict = grow_on_conflict(&self.periods, &columns),
                    );
                    Statement::new(
                        self.dialect.number_placeholders(&sql),
                        upsert_values(now, topic, &added),
                    )
                })
                .collect(),
        )
    }

    /// Counts `counted` into the minute of `now`: to send before the settle
    /// statements of the same leases, in the same atomic call. `None` when
    /// there is nothing to count. A lease listed twice counts once.
    ///
    /// # Errors
    /// [`Error::Internal`](crate::error::Error::Internal) if the leases cannot be written as JSON.
    pub(crate) fn count_settles(
        &self,
        counted: &[Counted<'_>],
        now: Timestamp,
    ) -> Result<Option<SettleCount>> {
        let mut signatures: Vec<Signature> = Vec::new();
        let mut groups: Vec<Group<'_>> = Vec::new();
        let mut seen = std::collections::HashSet::with_capacity(counted.len());
        for lease in counted {
            let fence = &lease.fence;
            let until = fence.until.as_unix_millis();
            if !seen.insert((fence.id, fence.token, until)) {
                continue;
            }
            let signature = lease.signature();
            let index = match signatures.iter().position(|known| *known == signature) {
                Some(index) => index,
                None => {
                    signatures.push(signature);
                    signatures.len() - 1
                }
            };
            match groups.iter_mut().find(|group| {
                group.0 == lease.topic
                    && group.1 == fence.token
                    && group.2 == until
                    && group.3 == index
            }) {
                Some(group) => group.4.push(fence.id),
                None => groups.push(Group(
                    lease.topic,
                    fence.token,
                    until,
                    index,
                    vec![fence.id],
                )),
            }
        }
        if groups.is_empty() {
            return Ok(None);
        }
        let columns: Vec<Vec<(usize, i64)>> = signatures
            .iter()
            .map(|signature| {
                signature
                    .columns()
                    .map(|(index, from_row)| (index, i64::from(from_row)))
                    .collect()
            })
            .collect();
        let count = Statement::new(
            self.count_settles.clone(),
            vec![
                Value::Text(json_text(&groups, "a settle's count")?),
                Value::Integer(minute_of(now)),
                Value::Text(json_text(&columns, "a settle's count")?),
            ],
        );
        let last = self.counts_last().map(|mut last| {
            last.stashed = true;
            last
        });
        Ok(Some(SettleCount { count, last }))
    }

    /// Counts the rows a claim at `now` with `token` parked as dead: to
    /// send right after the claim, in the same atomic call (Postgres: added
    /// last, see [`CountsLast`]).
    pub(crate) fn count_claim_deaths(&self, now: Timestamp, token: &str) -> Counts {
        let count_claim_deaths = match &self.last {
            Last::No { count_claim_deaths } => count_claim_deaths,
            Last::Yes { add_counts } => {
                let mut last = CountsLast::new(add_counts);
                last.claims
                    .push((minute_of(now), now.as_unix_millis(), token.to_owned()));
                return Counts::Last(last);
            }
        };
        Counts::Now(vec![Statement::new(
            count_claim_deaths.clone(),
            vec![
                Value::Integer(minute_of(now)),
                Value::Integer(now.as_unix_millis()),
                Value::Text(token.to_owned()),
            ],
        )])
    }
}

/// Retention, for a drain's sweep at `now`: minutes older than 48 h are
/// folded into their hours (each minute counted once however many sweeps
/// run at once), hours older than 90 days are deleted.
pub(crate) fn retention(table: &TableName, dialect: Dialect, now: Timestamp) -> Vec<Statement> {
    use rollup_col::*;
    let now = now.as_unix_millis();
    let rollups = quoted_periods(table);
    let summed: Vec<String> = count_columns()
        .map(|column| format!("SUM({})", column.name()))
        .collect();
    let summed = summed.join(", ");
    let fold = dialects::of(dialect).period_fold(
        &rollups,
        &format!("{PERIOD_MS} = {MINUTE_MS} AND {PERIOD_START} < ?",),
        &format!(
            "{insert} SELECT {HOUR_MS}, {PERIOD_START} - {PERIOD_START} % {HOUR_MS}, {TOPIC}, \
             {summed}",
            insert = insert_head(table)
        ),
        &format!("GROUP BY 2, 3 ORDER BY 2, 3 {}", add_on_conflict(table)),
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

/// The stored rollups starting in `from .. to`, summed per period of
/// `period_ms` (hours sum their folded row and their minutes not folded
/// yet) and topic, in period then topic order: a row's count columns are
/// named as [`CountColumn::name`].
pub(crate) fn read(
    table: &TableName,
    dialect: Dialect,
    period_ms: i64,
    from: Timestamp,
    to: Timestamp,
) -> Statement {
    use rollup_col::*;
    let summed: Vec<String> = count_columns()
        .map(|column| {
            let name = column.name();
            format!("CAST(SUM({name}) AS BIGINT) AS {name}")
        })
        .collect();
    let sql = format!(
        "SELECT {PERIOD_START} - {PERIOD_START} % ? AS {PERIOD_START}, {TOPIC}, {} FROM {} \
         WHERE {PERIOD_MS} IN (?, ?) AND {PERIOD_START} >= ? AND {PERIOD_START} < ? \
         GROUP BY 1, 2 ORDER BY 1, 2",
        summed.join(", "),
        quoted_periods(table)
    );
    Statement::new(
        dialect.number_placeholders(&sql),
        vec![
            Value::Integer(period_ms),
            Value::Integer(period_ms),
            Value::Integer(MINUTE_MS),
            Value::Integer(from.as_unix_millis()),
            Value::Integer(to.as_unix_millis()),
        ],
    )
}
