//! Every place where the library's statements differ between SQLite (D1, a
//! Durable Object's storage) and Postgres, as one trait: each dialect's
//! folder (`sqlite/`, `postgres/`) implements all of it, so a dialect added
//! fails to compile until it has every statement's part. SQLite serializes
//! writers, so a statement there can read and write without locks;
//! Postgres runs them concurrently under read committed, so the same
//! promise needs a lock or a conflict on a key.

use sea_query::{Expr, SelectStatement, UpdateStatement};

use crate::database::Statement;
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

/// The due time a Postgres claim returns beside each row, to sort by.
pub(crate) const CLAIMED_DUE: &str = "claimed_due";

/// The most unsettled leases a settle's count reads from one row.
pub(crate) const MAX_COUNTED_UNSETTLED: i64 = 65_535;

/// What a dialect writes differently. Each method's doc states what both
/// dialects promise; each implementation's, how it keeps the promise.
pub(crate) trait Differences: Sync {
    /// Bounds a claim's `update` of due rows to the first `limit` of `due`
    /// (the due rows in claim order) at `now`, returning `returned` of
    /// each; two drainers never lease the same row.
    fn bound_claim(
        &self,
        update: &mut UpdateStatement,
        due: SelectStatement,
        table: &TableName,
        limit: u32,
        now: Timestamp,
        returned: Vec<Expr>,
    );

    /// Whether a claim's rows come back in no order, each carrying its
    /// [`CLAIMED_DUE`] to be sorted by.
    fn claim_returns_unordered(&self) -> bool;

    /// The newest sequence number of ordering key `key`, as a one-row
    /// select of `latest` (null when the key has no row), such that two
    /// enqueues never take the same place and a completion racing the
    /// insert never strands it.
    fn latest_of_key(&self, table: &TableName, key: &str) -> SelectStatement;

    /// `text` as a JSON string's text (quoted and escaped), for a payload
    /// built in SQL from a row's columns.
    fn json_string(&self, text: Expr) -> Expr;

    /// `payload`'s (JSON text) field `field` (a dot-separated path), read
    /// as text: strings as they are, numbers as they are written.
    fn json_field(&self, payload: Expr, field: Expr) -> Expr;

    /// Whether a drain's sweep must make ready the head of every ordering
    /// key left waiting (a completion and an erasure of one key's rows
    /// committing at once may each miss the other's delete).
    fn sweep_promotes_heads(&self) -> bool;

    /// Statements that fail their batch on the primary key of the
    /// tombstone of `subject` in `table` if one exists from
    /// `remembered_from` on, and change nothing else; an erasure committing
    /// meanwhile is seen. `before` is how the subject was written before a
    /// key ring was given (its tombstones refuse too).
    fn erasure_guard(
        &self,
        table: &TableName,
        subject: &str,
        before: Option<&str>,
        remembered_from: Timestamp,
    ) -> Result<Vec<Statement>>;

    /// The lease groups of a settle, bound as one JSON text: a table of
    /// one row per group, `g`.
    fn entries_from(&self) -> &'static str;

    /// Membership in the texts of a JSON array bound as one parameter: a
    /// column followed by this is true when it equals one of them.
    fn in_texts_listed(&self) -> &'static str;

    /// `column` (SQL text: a validated, quoted name) is one of the texts of
    /// the JSON array `listed`, bound as one value (as
    /// [`in_texts_listed`](Differences::in_texts_listed)), for a statement
    /// built with sea-query.
    fn listed_in(&self, column: &str, listed: String) -> Expr;

    /// Whether a settle statement's changes are counted by the statement
    /// right after it, with `changes()`; otherwise a settle's count reads
    /// its rows first ([`held_leases`](Differences::held_leases)).
    fn counts_by_changes(&self) -> bool;

    /// The common table expressions that end in `held`: per group of
    /// `groups` (topic, token, until, signature and ids), the leases that
    /// still hold in `outbox`, counted: rows of `topic`, `signature`,
    /// `leases` (how many hold) and `lost` (their unsettled leases, each
    /// row's counted as at most [`MAX_COUNTED_UNSETTLED`]). No other
    /// drainer's claim takes a counted row before the settle after it.
    fn held_leases(&self, outbox: &str) -> String;

    /// Field `index` of a group's JSON array `alias`, as JSON (for its ids).
    fn entry_json(&self, alias: &str, index: usize) -> String;

    /// Field `index` of the JSON array `alias` (a lease group `g`, or a
    /// signature's row `m`), as an integer or text.
    fn entry_field(&self, alias: &str, index: usize, integer: bool) -> String;

    /// The rollup rows of signature `signature` (a column), bound as one
    /// JSON text (an array of arrays of rows): a table `m` of only that
    /// signature's rows, read by position.
    fn signature_rows_of(&self, signature: &str) -> String;

    /// Moves the rollups of `rollups` matching `matching` into coarser
    /// periods: `insert` (an `INSERT … SELECT` of the moved rows'
    /// aggregates) followed by `grouped` (its `GROUP BY` and conflict
    /// clause); every statement binds `matching`'s one parameter, and two
    /// sweeps at once never fold the same rows twice.
    fn period_fold(
        &self,
        rollups: &str,
        matching: &str,
        insert: &str,
        grouped: &str,
    ) -> Vec<String>;

    /// Deletes the delivered rows `ids` of one claim (its `token` and lease
    /// end `until`) and checks that it deleted exactly those: the batch
    /// commits only if each id was deleted, and otherwise fails with an
    /// error whose text holds
    /// [`SETTLE_NOT_EXACT`](crate::error::SETTLE_NOT_EXACT) (it then changed
    /// nothing, and is sent again with
    /// [`complete_all`](super::settle::complete_all), which tells each row
    /// apart). Nothing is returned, so nothing is read twice. The check's
    /// error is built from the count, so no planner raises it before the
    /// count is known.
    fn complete_listed(
        &self,
        table: &TableName,
        token: &str,
        until: Timestamp,
        ids: &[&str],
    ) -> Result<Vec<Statement>>;

    /// The `late_due` of a row written due at `due`, where the dialect
    /// keeps a claim floor (see [`claim_floor`](super::postgres::claim_floor)).
    fn late_due(&self, table: &TableName, due: Expr) -> Option<Expr>;

    /// Marks the rows `update` writes late or not for their new due time
    /// `due`, where the dialect keeps a claim floor.
    fn mark_late(&self, table: &TableName, update: &mut UpdateStatement, due: Expr) {
        if let Some(late_due) = self.late_due(table, due) {
            update.value(super::col::LATE_DUE, late_due);
        }
    }

    /// Clears the late mark of the rows `update` parks as dead, where the
    /// dialect keeps one.
    fn clear_late(&self, update: &mut UpdateStatement);

    /// The statements to send first in a claim's transaction, in order,
    /// before any write of it: they must see committed rows only (the claim
    /// floor's moves stay if the transaction rolls back).
    fn before_claim(&self, table: &TableName, now: Timestamp) -> Result<Vec<Statement>>;

    /// How many statements [`before_claim`](Differences::before_claim)
    /// sends.
    #[cfg(any(test, feature = "conformance"))]
    fn statements_before_claim(&self) -> u64;

    /// The statements that make claimable again, where the dialect keeps a
    /// claim floor, the rows of `topic` that it passed while the topic was
    /// paused.
    fn resume_topic(&self, table: &TableName, topic: &str) -> Vec<Statement>;

    /// The statement to send first in a busy transaction (a claim's or a
    /// settle's), where the dialect's planner needs settings for it.
    fn planner_settings(&self) -> Option<Statement>;

    /// Whether a claim's update checks again that each row it leases is
    /// ready (where its rows do not come locked, and ready, from its own
    /// pick).
    fn claim_checks_ready(&self) -> bool;

    /// Whether a topic's held rows are found by a range of the held
    /// index's key.
    fn held_by_range(&self) -> bool;
}
