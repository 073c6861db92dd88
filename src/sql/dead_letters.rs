//! Dead letters: a page of them, their replay and their purge; and a
//! subject's messages, read and erased.

use sea_query::{Expr, ExprTrait, Func, Order, Query};

use super::{col, one_of, state, state_is};
use crate::database::{Dialect, Statement};
use crate::error::Result;
use crate::identifier::TableName;

/// The columns of a stored message, as every read of whole messages
/// selects them.
pub(crate) const STORED_COLUMNS: [&str; 14] = [
    col::STATE,
    col::DUE_AT,
    col::ID,
    col::TOPIC,
    col::PAYLOAD,
    col::SUBJECT,
    col::DEDUP_KEY,
    col::ORDERING_KEY,
    col::ATTEMPTS,
    col::LEASE_TOKEN,
    col::LAST_ERROR,
    col::CREATED_AT,
    col::UNSETTLED_LEASES,
    col::DEFERRALS,
];

/// Up to `limit` dead messages in the order they died, after the one that
/// died at `after`'s time with `after`'s id.
pub(crate) fn list_dead(
    table: &TableName,
    dialect: Dialect,
    limit: u32,
    after: Option<(i64, &str)>,
) -> Result<Statement> {
    let mut select = Query::select();
    select
        .columns(STORED_COLUMNS)
        .from(table.as_str().to_owned())
        .and_where(state_is(state::DEAD))
        .order_by(col::DUE_AT, Order::Asc)
        .order_by(col::ID, Order::Asc)
        .limit(u64::from(limit));
    if let Some((died, id)) = after {
        select.and_where(
            Expr::col(col::DUE_AT).gt(died).or(Expr::col(col::DUE_AT)
                .eq(died)
                .and(Expr::col(col::ID).gt(id))),
        );
    }
    dialect.render(&select)
}

/// Every stored message, oldest first (reads the whole table).
#[cfg(any(
    test,
    all(feature = "testing", feature = "sqlite", not(target_arch = "wasm32"))
))]
pub(crate) fn every_message(table: &TableName, dialect: Dialect) -> Result<Statement> {
    let mut select = Query::select();
    select
        .columns(STORED_COLUMNS)
        .from(table.as_str().to_owned())
        .order_by(col::CREATED_AT, Order::Asc)
        .order_by(col::ID, Order::Asc);
    dialect.render(&select)
}

/// Deletes the dead messages that died before `older_than`, returning
/// each one's id (count those: D1 counts a trigger's deletes among a
/// statement's changes).
pub(crate) fn purge_dead(
    table: &TableName,
    dialect: Dialect,
    older_than: i64,
) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(table.as_str().to_owned())
        .and_where(state_is(state::DEAD))
        .and_where(Expr::col(col::DUE_AT).lt(older_than))
        .returning_col(col::ID);
    dialect.render(&delete)
}

/// Makes the dead message `id` (every dead message, without one)
/// deliverable at `now`, with a fresh count of attempts.
pub(crate) fn replay(
    table: &TableName,
    dialect: Dialect,
    now: i64,
    id: Option<&str>,
) -> Result<Statement> {
    let mut update = Query::update();
    update
        .table(table.as_str().to_owned())
        .value(col::STATE, state::READY)
        .value(col::DUE_AT, now)
        .value(col::ATTEMPTS, 0)
        .value(col::DEFERRALS, 0)
        .value(col::LEASE_TOKEN, Option::<String>::None)
        .and_where(state_is(state::DEAD));
    if let Some(id) = id {
        update.and_where(Expr::col(col::ID).eq(id));
    }
    super::dialects::of(dialect).mark_late(table, &mut update, now.into());
    dialect.render(&update)
}

/// Every message whose subject is stored as one of `forms`, in any state,
/// oldest first (`subject` has no index: this reads the table once).
pub(crate) fn export_subject(
    table: &TableName,
    dialect: Dialect,
    forms: &[&str],
) -> Result<Statement> {
    let mut select = Query::select();
    select
        .columns(STORED_COLUMNS)
        .from(table.as_str().to_owned())
        .and_where(one_of(col::SUBJECT, forms))
        .order_by(col::CREATED_AT, Order::Asc)
        .order_by(col::ID, Order::Asc);
    dialect.render(&select)
}

/// Holds back, until the lease ends, the rows waiting behind the messages
/// of a subject stored as one of `forms` that are leased at `now` with an
/// ordering key: erased, they cannot be recalled, and two messages of one
/// key are never in flight together.
pub(crate) fn hold_erased_successors(
    table: &TableName,
    dialect: Dialect,
    forms: &[&str],
    now: i64,
) -> Result<Statement> {
    let outbox = table.as_str().to_owned();
    // The subject's rows leased right now, with an ordering key.
    let in_flight = |query: &mut sea_query::SelectStatement| {
        query
            .and_where(one_of(("erased", col::SUBJECT), forms))
            .and_where(Expr::col(("erased", col::STATE)).eq(state::READY))
            .and_where(Expr::col(("erased", col::LEASE_TOKEN)).is_not_null())
            .and_where(Expr::col(("erased", col::DUE_AT)).gt(now))
            .and_where(Expr::col(("erased", col::ORDERING_KEY)).is_not_null());
    };
    let mut lease_end = Query::select();
    lease_end
        .expr(Expr::col(("erased", col::DUE_AT)).max())
        .from_as(outbox.clone(), "erased")
        .and_where(
            Expr::col(("erased", col::ORDERING_KEY)).equals((outbox.clone(), col::ORDERING_KEY)),
        );
    in_flight(&mut lease_end);
    let mut keys = Query::select();
    keys.column(("erased", col::ORDERING_KEY))
        .from_as(outbox.clone(), "erased");
    in_flight(&mut keys);
    let mut hold = Query::update();
    hold.table(outbox.clone())
        .value(
            col::DUE_AT,
            Func::greatest([Expr::col((outbox, col::DUE_AT)), lease_end.into()]),
        )
        .and_where(Expr::col(col::STATE).eq(state::WAITING))
        .and_where(Expr::col(col::ORDERING_KEY).in_subquery(keys));
    dialect.render(&hold)
}

/// Deletes every message of a subject stored as one of `forms`, returning
/// each one's id (count those: D1 counts a trigger's deletes, a sealed
/// message's data key, among a statement's changes).
pub(crate) fn erase_subject(
    table: &TableName,
    dialect: Dialect,
    forms: &[&str],
) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(table.as_str().to_owned())
        .and_where(one_of(col::SUBJECT, forms))
        .returning_col(col::ID);
    dialect.render(&delete)
}
