//! Every statement of the library: the outbox's write path (claim, settle,
//! enqueue, the erasure guard), its operators' reads and writes, the
//! inbox's statements: pure functions of a table, a dialect, their inputs,
//! "now" and the tokens to write.
//!
//! Nothing here reads a clock, draws randomness or touches a database; the
//! façades ([`Outbox`](crate::Outbox), [`Inbox`](crate::Inbox)) take the
//! time and tokens, call these, and send what they return through the
//! [`Database`](crate::Database) port: no other module writes SQL. Every
//! place where a statement's text differs between SQLite and Postgres is a
//! method of [`differences::Differences`], which [`sqlite`] and
//! [`postgres`] each implement whole (Postgres's claim floor, which SQLite
//! has no need of, is in [`postgres::claim_floor`]), reached through
//! [`dialects::of`]; the tests pin the exact SQL of each statement here in
//! both (the write path's in `tests.rs`, the operators' reads and writes in
//! `pinned/<dialect>.sql`).

pub(crate) mod alerts;
pub(crate) mod attempts;
pub(crate) mod audit;
pub(crate) mod browse;
pub(crate) mod claim;
pub(crate) mod dead_letters;
pub(crate) mod dialects;
pub(crate) mod differences;
pub(crate) mod endpoints;
pub(crate) mod enqueue;
pub(crate) mod events;
pub(crate) mod fleet;
pub(crate) mod inbox;
pub(crate) mod keys;
pub(crate) mod pause;
pub(crate) mod paused;
#[cfg(test)]
mod pinned;
pub(crate) mod postgres;
pub(crate) mod rollups;
pub(crate) mod schema;
pub(crate) mod settle;
pub(crate) mod sqlite;
pub(crate) mod stats;
pub(crate) mod streaks;
#[cfg(test)]
mod tests;
pub(crate) mod tombstones;

use sea_query::{Expr, ExprTrait};

use crate::time::Timestamp;

/// The outbox's column names.
pub(crate) mod col {
    pub(crate) const STATE: &str = "state";
    pub(crate) const DUE_AT: &str = "due_at";
    pub(crate) const ID: &str = "id";
    pub(crate) const TOPIC: &str = "topic";
    pub(crate) const PAYLOAD: &str = "payload";
    pub(crate) const SUBJECT: &str = "subject";
    pub(crate) const DEDUP_KEY: &str = "dedup_key";
    pub(crate) const ORDERING_KEY: &str = "ordering_key";
    pub(crate) const SEQ: &str = "seq";
    pub(crate) const ID_GIVEN: &str = "id_given";
    pub(crate) const ATTEMPTS: &str = "attempts";
    pub(crate) const LEASE_TOKEN: &str = "lease_token";
    pub(crate) const LAST_ERROR: &str = "last_error";
    pub(crate) const CREATED_AT: &str = "created_at";
    pub(crate) const UNSETTLED_LEASES: &str = "unsettled_leases";
    pub(crate) const DEFERRALS: &str = "deferrals";
    pub(crate) const TRACEPARENT: &str = "traceparent";
    pub(crate) const TRACESTATE: &str = "tracestate";
    pub(crate) const BECAME_DUE: &str = "became_due";
    /// The receiver (`topic`, or `topic @ destination`) whose failures hold
    /// the row back, while it waits unleased for a retry that spent no
    /// attempt; null otherwise. Released early when that receiver answers.
    pub(crate) const HELD_FOR: &str = "held_for";
    /// The event a fan-out delivery carries (its `webhook-id`); null for a
    /// plain message. Such a row's topic is its endpoint's id.
    pub(crate) const EVENT_ID: &str = "event_id";
    /// Postgres only: the row's due time when it is behind the claim floor
    /// (`claim_floor`), else null.
    pub(crate) const LATE_DUE: &str = "late_due";
}

/// The values of the outbox's `state` column.
pub(crate) mod state {
    pub(crate) const READY: &str = "ready";
    pub(crate) const WAITING: &str = "waiting";
    pub(crate) const DEAD: &str = "dead";
}

/// `value` as JSON text, to bind as one parameter (`what` names it in the
/// error).
///
/// # Errors
/// [`Error::Internal`](crate::error::Error::Internal) if it cannot be
/// written as JSON.
pub(crate) fn json_text(value: &impl serde::Serialize, what: &str) -> crate::error::Result<String> {
    serde_json::to_string(value)
        .map_err(|error| crate::error::Error::internal(format!("{what} as JSON: {error}")))
}

/// `column` holds one of `forms` (a subject as stored now, and as it was
/// stored before a key ring was given: see [`Outbox::subject_forms`](crate::Outbox)):
/// `= ?` for one form, `IN (?, ?)` for more.
pub(crate) fn one_of(column: impl sea_query::IntoColumnRef, forms: &[&str]) -> Expr {
    match forms {
        [one] => Expr::col(column).eq(*one),
        _ => Expr::col(column).is_in(forms.iter().copied()),
    }
}

/// `"state" = '<value>'`, the value written into the SQL: an index on rows
/// of one state (`… WHERE state = 'dead'`) serves it whatever the planner
/// may weigh. (SQLite matches a bound value against an index's condition
/// only where it re-plans by bound values, which `SqliteDatabase` turns off.)
pub(crate) fn state_is(value: &'static str) -> Expr {
    Expr::col(col::STATE).eq(Expr::cust(format!("'{value}'")))
}

/// What fences a statement to one lease: the row's id, the primary key it
/// was leased under (`due_at` = the lease's end) and the lease's token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fence<'a> {
    pub(crate) id: &'a str,
    pub(crate) token: &'a str,
    pub(crate) until: Timestamp,
}

impl Fence<'_> {
    /// Rows this lease still holds.
    pub(crate) fn holds(&self) -> Expr {
        Expr::col(col::STATE)
            .eq(state::READY)
            .and(Expr::col(col::DUE_AT).eq(self.until.as_unix_millis()))
            .and(Expr::col(col::ID).eq(self.id))
            .and(Expr::col(col::LEASE_TOKEN).eq(self.token))
    }
}

/// The tombstone table's column names, and the mark of a guard's own row.
pub(crate) mod tombstone_col {
    pub(crate) const SUBJECT: &str = "subject";
    pub(crate) const ERASED_AT: &str = "erased_at";
    /// `erased_at` of a Postgres guard's own row, never a real tombstone's.
    pub(crate) const GUARD_MARK: i64 = -1;
}

/// Deletes at most `limit` rows of `table` whose `at` column is before
/// `before`, oldest first, each found by its primary key `key`: a
/// retention's bounded share of a sweep.
pub(crate) fn delete_oldest(
    dialect: crate::database::Dialect,
    table: String,
    key: &[&'static str],
    at: &'static str,
    before: crate::time::Timestamp,
    limit: u32,
) -> crate::error::Result<crate::database::Statement> {
    use sea_query::{Expr, ExprTrait, Order, Query};
    let mut oldest = Query::select();
    oldest
        .columns(key.iter().copied())
        .from(table.clone())
        .and_where(Expr::col(at).lt(before.as_unix_millis()))
        .order_by(at, Order::Asc)
        .limit(u64::from(limit));
    let key = Expr::tuple(key.iter().map(|column| Expr::col(*column)));
    let mut delete = Query::delete();
    delete.from_table(table).and_where(key.in_subquery(oldest));
    dialect.render(&delete)
}
