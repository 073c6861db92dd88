//! Postgres's claim floor: where a claim's walk of the due index starts, so
//! that its cost does not depend on when vacuum last ran.
//!
//! A claim moves each row it leases to its lease's end in the due index
//! (`state, due_at, id`), and a delivered row is deleted: every claim leaves
//! dead index entries where the next one starts. Vacuum removes them in
//! time, and a plain index scan marks them dead as it passes (kill bits),
//! but neither can while any snapshot that might still see the rows is
//! open: a report, a backup, a replica's feedback. Then each claim walks
//! every entry leased or deleted since that snapshot began.
//!
//! The floor is a `due_at` below which every claimable row (ready, of a
//! topic not paused) is marked late: its `late_due` holds its due time (it
//! is null on every other row). A claim walks the due index from the
//! floor, and the few late rows through their own partial index on
//! `late_due`, and takes the first of both in due order: the same rows, in
//! the same order, as a walk from the start, while the dead entries behind
//! the floor cost nothing however many there are. Due times are never
//! changed. (The late rows' index orders by a column of their own, so the
//! planner cannot walk the due index for them instead, even before the
//! table has statistics.) The floor
//! rides in sequences, not a table: `setval` is seen at once by every
//! session and leaves no row version behind, so reading it costs the same
//! under a held snapshot as without.
//!
//! **Keeping it true.** Every write of a claimable row's `due_at` (an
//! enqueue, a claim, a retry, a release, a promotion, a replay, a resume, a
//! reschedule) marks the row late if its new due time is below the
//! *pending* floor, read after the transaction has its id ([`late_due`]).
//!
//! The floor moves in two steps, each taken by one drainer at a time (a
//! transaction-scoped advisory lock, tried, never waited on):
//!
//! 1. [`advance`]'s first statement, once every transaction up to the
//!    fence has ended (`pg_snapshot_xmin` past it): the floor becomes the
//!    lesser of the pending floor and the first claimable row not late at
//!    or above the floor, as this statement's snapshot sees it; the next
//!    pending floor becomes the lesser of that row and now less
//!    [`PENDING_LAG`] (never below the new floor).
//! 2. Its second statement, after that: the fence becomes the id of its
//!    own transaction, assigned there, so greater than every id assigned
//!    before. (A snapshot's `xmax` would not do: it is one past the newest
//!    *finished* transaction, and a writer still running may be newer.)
//!
//! A writer that read the old pending floor had its transaction id before
//! the new one was set, so before the fence: step 1 runs only once it has
//! ended, and then sees its row. A writer that read the new pending floor
//! marks its row late if it is below it. Either way no claimable row is
//! below the floor unmarked. (A transaction that writes and stays open
//! holds the floor where it is, as it holds vacuum: the claims are then no
//! faster than before.)
//!
//! A paused topic's rows do not hold the floor; its resume marks those that
//! fell behind it late.

use std::time::Duration;

use sea_query::{Expr, ExprTrait, Query, SelectStatement};

use crate::database::value::Value;
use crate::database::{Dialect, Statement};
use crate::error::{Error, Result};
use crate::identifier::TableName;
use crate::sql::paused::topic_not_paused;
use crate::sql::{col, state, state_is};
use crate::time::Timestamp;

/// How far the pending floor stays behind the advancing drainer's now, so
/// that a write whose due time was taken a moment before is not late (a
/// late row costs a write to the partial index). Behind the floor, the
/// claims walk the entries of about this long.
pub(crate) const PENDING_LAG: Duration = Duration::from_millis(250);

/// The sequences of `table`'s floor: the floor a claim starts at, the
/// pending floor writers compare with, and the fence (a transaction id;
/// `-1` while it is to be set).
fn sequence(table: &TableName, which: &str) -> String {
    format!("{}_claim_{which}", table.as_str())
}

/// The current value of one of `table`'s floor sequences, as a subquery.
fn current(table: &TableName, which: &str) -> String {
    format!("(SELECT last_value FROM \"{}\")", sequence(table, which))
}

/// Bounds a Postgres claim's walk of the due rows (`due`) to those at or
/// above the floor and not late.
pub(crate) fn bound_due(table: &TableName, due: &mut SelectStatement) {
    due.and_where(Expr::col(col::DUE_AT).gte(Expr::cust(current(table, "floor"))))
        .and_where(Expr::col(col::LATE_DUE).is_null());
}

/// The late rows due at `now` of topics not paused, in due order, through
/// their partial index: a Postgres claim takes them beside those of
/// [`bound_due`]. Only a ready row is ever late (a write that leaves a row
/// waiting or dead clears its mark), so no condition on the state is
/// needed, and none is given: the planner would walk the due index for it.
pub(crate) fn behind_floor(table: &TableName, now: Timestamp) -> SelectStatement {
    let mut late = Query::select();
    late.columns([col::DUE_AT, col::ID])
        .from(table.as_str().to_owned())
        .and_where(Expr::col(col::LATE_DUE).is_not_null())
        .and_where(Expr::col(col::LATE_DUE).lte(now.as_unix_millis()))
        .and_where(topic_not_paused(table))
        .order_by(col::LATE_DUE, sea_query::Order::Asc)
        .order_by(col::ID, sea_query::Order::Asc);
    late
}

/// The `late_due` of a row written due at `due`: `due` if it is below the
/// pending floor, else null, the floor read only after the transaction has
/// its id. The outer `CASE` takes the id first, and the sequence is read
/// when its branch is (an uncorrelated subquery runs when its value is
/// first needed).
pub(crate) fn late_due(table: &TableName, due: Expr) -> Expr {
    Expr::cust_with_exprs(
        format!(
            "CASE WHEN pg_current_xact_id() IS NOT NULL THEN CASE WHEN $1 < {} THEN $2 END END",
            current(table, "pending")
        ),
        [due.clone(), due],
    )
}

/// The advisory lock the floor's steps take, one per table name.
fn try_lock(table: &TableName) -> String {
    format!(
        "pg_try_advisory_xact_lock(hashtext('workers-outbox claim floor'), hashtext('{}'))",
        table.as_str()
    )
}

/// The statements that move `table`'s floor, to send in order before a
/// claim, in its transaction: the planner's
/// settings for it ([`planner`](super::planner)), then the floor's two
/// steps. The first step sets the floor and the next pending floor if the
/// fence has passed, the second sets the fence after it. They must come
/// first in their
/// transaction: the first must see committed rows only (its moves stay
/// if the transaction rolls back), and the second assigns the transaction
/// its id. Each does nothing while another transaction takes a step, or
/// while its step is not yet due.
///
/// # Errors
/// If a statement cannot be rendered.
pub(crate) fn advance(table: &TableName, now: Timestamp) -> Result<Vec<Statement>> {
    let dialect = Dialect::Postgres;
    let name = table.as_str();
    let mut first = Query::select();
    first
        .column(col::DUE_AT)
        .from(name.to_owned())
        .and_where(state_is(state::READY))
        .and_where(Expr::col(col::DUE_AT).gte(Expr::cust(current(table, "floor"))))
        .and_where(Expr::col(col::LATE_DUE).is_null())
        .and_where(topic_not_paused(table))
        .order_by(col::DUE_AT, sea_query::Order::Asc);
    // Rendered with no value bound, so it nests in a statement of its own.
    let first = dialect.render(&first)?;
    if !first.values().is_empty() {
        return Err(Error::internal("the claim floor's scan binds values"));
    }
    let (floor, pending, fence) = (
        sequence(table, "floor"),
        sequence(table, "pending"),
        sequence(table, "fence"),
    );
    let lagging = now
        .as_unix_millis()
        .saturating_sub(i64::try_from(PENDING_LAG.as_millis()).unwrap_or(i64::MAX));
    let step = format!(
        "SELECT setval('\"{floor}\"', LEAST(v.pending, v.first_due)), \
         setval('\"{pending}\"', GREATEST(LEAST(v.pending, v.first_due), LEAST(?, v.first_due))), \
         setval('\"{fence}\"', -1) \
         FROM (SELECT {pending_now} AS pending, ({first} LIMIT 1) AS first_due \
         WHERE CASE WHEN {lock} THEN {fence_now} >= 0 \
         AND pg_snapshot_xmin(pg_current_snapshot())::text::bigint > {fence_now} ELSE FALSE END \
         OFFSET 0) AS v",
        first = first.sql(),
        pending_now = current(table, "pending"),
        fence_now = current(table, "fence"),
        lock = try_lock(table),
    );
    let fence_step = format!(
        "SELECT CASE WHEN {lock} THEN CASE WHEN {fence_now} = -1 \
         THEN setval('\"{fence}\"', pg_current_xact_id()::text::bigint) END END",
        lock = try_lock(table),
        fence_now = current(table, "fence"),
    );
    Ok(std::iter::once(super::planner::settings())
        .chain([
            Statement::new(
                dialect.number_placeholders(&step),
                vec![Value::Integer(lagging)],
            ),
            Statement::new(fence_step, Vec::new()),
        ])
        .collect())
}

/// Marks late the claimable rows of `topic` that fell behind the pending
/// floor while it was paused: the transaction takes its id first, then the
/// rows are compared with the pending floor.
pub(crate) fn resume(table: &TableName, topic: &str) -> Vec<Statement> {
    let sql = format!(
        "UPDATE \"{name}\" SET {late} = {due} WHERE {state_col} = '{ready}' AND {topic_col} = ? \
         AND {late} IS NULL AND {due} < {pending}",
        name = table.as_str(),
        late = col::LATE_DUE,
        due = col::DUE_AT,
        state_col = col::STATE,
        ready = state::READY,
        topic_col = col::TOPIC,
        pending = current(table, "pending"),
    );
    vec![
        Statement::new("SELECT pg_current_xact_id()::text AS xid", Vec::new()),
        Statement::new(
            Dialect::Postgres.number_placeholders(&sql),
            vec![Value::Text(topic.to_owned())],
        ),
    ]
}
