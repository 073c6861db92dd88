//! Settling a leased row: each statement is fenced by the lease, so a
//! holder whose lease ended changes nothing (0 rows). Attempts are written
//! as absolute values, never incremented, so a statement sent again cannot
//! spend one twice.

use sea_query::{Expr, ExprTrait, Query};

use super::{Fence, col, dialects, json_text, state};
use crate::database::value::Value;
use crate::database::{Dialect, Statement};
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

/// Deletes the delivered rows `ids` of one claim (its `token` and lease end
/// `until`), in one statement returning the id of each row it deleted: a
/// row whose lease no longer holds is neither deleted nor returned. Binds
/// the ids as one JSON text, so a claim of any size is one statement.
///
/// # Errors
/// [`Error::Internal`](crate::error::Error::Internal) if the ids cannot be
/// written as JSON.
pub(crate) fn complete_all(
    table: &TableName,
    dialect: Dialect,
    token: &str,
    until: Timestamp,
    ids: &[&str],
) -> Result<Statement> {
    let ids = json_text(&ids, "a settle's ids")?;
    let (state_col, due, id, token_col) = (col::STATE, col::DUE_AT, col::ID, col::LEASE_TOKEN);
    let sql = format!(
        "DELETE FROM \"{table}\" WHERE {state_col} = '{ready}' AND {due} = ? AND {token_col} = ? \
         AND {id} {listed} RETURNING {id}",
        table = table.as_str(),
        ready = state::READY,
        listed = dialects::of(dialect).in_texts_listed(),
    );
    Ok(Statement::new(
        dialect.number_placeholders(&sql),
        vec![
            Value::Integer(until.as_unix_millis()),
            Value::Text(token.to_owned()),
            Value::Text(ids),
        ],
    ))
}

/// Deletes the delivered row `lease` holds: one primary-key lookup, and
/// its changes tell whether the lease held (no `RETURNING`, which D1 bills
/// as a second read of the row).
pub(crate) fn complete_one(
    table: &TableName,
    dialect: Dialect,
    lease: &Fence<'_>,
) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(table.as_str().to_owned())
        .and_where(lease.holds());
    dialect.render(&delete)
}

/// A failed delivery of lease `attempt`, due again at `due`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Retry<'a> {
    pub(crate) due: Timestamp,
    pub(crate) error: &'a str,
    /// The row's own failure: the attempt is spent and the row is no
    /// suspect now. Otherwise it counts one more deferral, and a suspect
    /// stays one (and so is still delivered in a suspect group).
    pub(crate) charged: bool,
    pub(crate) attempt: u32,
    pub(crate) deferrals: u32,
    /// The receiver whose failure this is, if it spent no attempt: the row
    /// is held for it (see [`release_held`]).
    pub(crate) held_for: Option<&'a str>,
}

/// Makes the row due again after a failure.
pub(crate) fn retry(
    table: &TableName,
    dialect: Dialect,
    lease: &Fence<'_>,
    retry: &Retry<'_>,
) -> Result<Statement> {
    let mut update = Query::update();
    update
        .table(table.as_str().to_owned())
        .value(col::DUE_AT, retry.due.as_unix_millis())
        .value(col::LEASE_TOKEN, Option::<String>::None)
        .value(col::LAST_ERROR, retry.error)
        .value(col::HELD_FOR, retry.held_for.filter(|_| !retry.charged))
        .and_where(lease.holds());
    if retry.charged {
        update
            .value(col::ATTEMPTS, i64::from(retry.attempt))
            .value(col::UNSETTLED_LEASES, 0);
    } else {
        update
            .value(col::ATTEMPTS, i64::from(retry.attempt.saturating_sub(1)))
            .value(col::DEFERRALS, i64::from(retry.deferrals.saturating_add(1)));
    }
    super::dialects::of(dialect).mark_late(table, &mut update, retry.due.as_unix_millis().into());
    dialect.render(&update)
}

/// Parks the row as dead at `now` after lease `attempt`, with `error`.
pub(crate) fn bury(
    table: &TableName,
    dialect: Dialect,
    lease: &Fence<'_>,
    attempt: u32,
    error: &str,
    now: Timestamp,
) -> Result<Statement> {
    let mut update = Query::update();
    update
        .table(table.as_str().to_owned())
        .value(col::STATE, state::DEAD)
        .value(col::DUE_AT, now.as_unix_millis())
        .value(col::LEASE_TOKEN, Option::<String>::None)
        .value(col::ATTEMPTS, i64::from(attempt))
        .value(col::UNSETTLED_LEASES, 0)
        .value(col::LAST_ERROR, error)
        .value(col::HELD_FOR, Option::<String>::None)
        .and_where(lease.holds());
    super::dialects::of(dialect).clear_late(&mut update);
    dialect.render(&update)
}

/// Gives lease `attempt` back unattempted, due at `due`: no attempt spent,
/// and `unsettled_leases` kept (a suspect not attempted is still one). Held
/// for the receiver `held_for` when its breaker handed the row back.
pub(crate) fn release(
    table: &TableName,
    dialect: Dialect,
    lease: &Fence<'_>,
    attempt: u32,
    due: Timestamp,
    held_for: Option<&str>,
) -> Result<Statement> {
    given_back(
        table,
        dialect,
        (lease, attempt, due),
        (col::HELD_FOR, held_for),
    )
}

/// Gives lease `attempt` back due at `due`, writing `also` beside: what
/// [`release`] and [`hold`] share.
fn given_back(
    table: &TableName,
    dialect: Dialect,
    (lease, attempt, due): (&Fence<'_>, u32, Timestamp),
    also: (&'static str, Option<&str>),
) -> Result<Statement> {
    let mut update = Query::update();
    update
        .table(table.as_str().to_owned())
        .value(col::DUE_AT, due.as_unix_millis())
        .value(col::LEASE_TOKEN, Option::<String>::None)
        .value(col::ATTEMPTS, i64::from(attempt.saturating_sub(1)))
        .value(also.0, also.1)
        .and_where(lease.holds());
    super::dialects::of(dialect).mark_late(table, &mut update, due.as_unix_millis().into());
    dialect.render(&update)
}

/// Gives lease `attempt` back unattempted, due at `due`, with `error` as
/// the row's last: a row that cannot be delivered as it is (its sealed
/// payload does not open). No attempt or deferral is counted.
pub(crate) fn hold(
    table: &TableName,
    dialect: Dialect,
    lease: &Fence<'_>,
    attempt: u32,
    due: Timestamp,
    error: &str,
) -> Result<Statement> {
    given_back(
        table,
        dialect,
        (lease, attempt, due),
        (col::LAST_ERROR, Some(error)),
    )
}

/// Makes due at `now` every row of `topic` held for one of its receivers
/// (the topic, or `topic @ destination`): the topic is resumed, and its
/// messages are due at once. Unleased rows only; no attempt spent or
/// refunded. Reads the held rows (the `held` index), not the whole table.
pub(crate) fn release_held_topic(
    table: &TableName,
    dialect: Dialect,
    topic: &str,
    now: Timestamp,
) -> Result<Statement> {
    let name = table.as_str().to_owned();
    let mut update = Query::update();
    update
        .table(name.clone())
        .value(col::DUE_AT, now.as_unix_millis())
        .value(col::HELD_FOR, Option::<String>::None);
    if dialects::of(dialect).held_by_range() {
        // Every receiver of the topic sorts from `topic` to `topic @!`
        // (`!` follows the space): a range of the held index's key.
        let mut held = Query::select();
        held.columns([col::STATE, col::DUE_AT, col::ID])
            .from(name)
            .and_where(Expr::col(col::HELD_FOR).gte(topic))
            .and_where(Expr::col(col::HELD_FOR).lt(format!("{topic} @!")))
            .and_where(Expr::col(col::TOPIC).eq(topic))
            .and_where(Expr::col(col::LEASE_TOKEN).is_null())
            .and_where(Expr::col(col::DUE_AT).gt(now.as_unix_millis()));
        update
            .and_where(Expr::col(col::STATE).eq(state::READY))
            .and_where(
                Expr::tuple([
                    Expr::col(col::STATE),
                    Expr::col(col::DUE_AT),
                    Expr::col(col::ID),
                ])
                .in_subquery(held),
            );
    } else {
        update
            .and_where(Expr::col(col::HELD_FOR).is_not_null())
            .and_where(Expr::col(col::TOPIC).eq(topic))
            .and_where(Expr::col(col::STATE).eq(state::READY))
            .and_where(Expr::col(col::LEASE_TOKEN).is_null())
            .and_where(Expr::col(col::DUE_AT).gt(now.as_unix_millis()));
    }
    super::dialects::of(dialect).mark_late(table, &mut update, now.as_unix_millis().into());
    dialect.render(&update)
}

/// Makes due at `now` the `limit` rows held longest for `receiver` (see
/// `col::HELD_FOR`), oldest due first: its failures held them back, and it
/// answers again. Unleased rows only, so no lease's fence moves; no attempt
/// is spent or refunded. Reads at most `limit` rows of the held index.
pub(crate) fn release_held(
    table: &TableName,
    dialect: Dialect,
    receiver: &str,
    now: Timestamp,
    limit: u32,
) -> Result<Statement> {
    let name = table.as_str().to_owned();
    let held = || {
        Expr::col(col::HELD_FOR)
            .eq(receiver)
            .and(Expr::col(col::STATE).eq(state::READY))
            .and(Expr::col(col::LEASE_TOKEN).is_null())
            .and(Expr::col(col::DUE_AT).gt(now.as_unix_millis()))
    };
    let mut oldest = Query::select();
    oldest
        .columns([col::DUE_AT, col::ID])
        .from(name.clone())
        .and_where(held())
        // The id breaks ties, as the claim's order does: every engine
        // releases the same rows.
        .order_by(col::DUE_AT, sea_query::Order::Asc)
        .order_by(col::ID, sea_query::Order::Asc)
        .limit(u64::from(limit));
    let mut update = Query::update();
    update
        .table(name)
        .value(col::DUE_AT, now.as_unix_millis())
        .value(col::HELD_FOR, Option::<String>::None)
        .and_where(held())
        .and_where(Expr::tuple([Expr::col(col::DUE_AT), Expr::col(col::ID)]).in_subquery(oldest));
    super::dialects::of(dialect).mark_late(table, &mut update, now.as_unix_millis().into());
    dialect.render(&update)
}

/// Makes the oldest remaining row of ordering key `key` ready, if it is
/// waiting.
pub(crate) fn promote_next(table: &TableName, dialect: Dialect, key: &str) -> Result<Statement> {
    let name = table.as_str().to_owned();
    let mut oldest = Query::select();
    oldest
        .expr(Expr::col(col::SEQ).min())
        .from(name.clone())
        .and_where(Expr::col(col::ORDERING_KEY).eq(key));
    let mut update = Query::update();
    update
        .table(name)
        .value(col::STATE, state::READY)
        .and_where(Expr::col(col::STATE).eq(state::WAITING))
        .and_where(Expr::col(col::ORDERING_KEY).eq(key))
        .and_where(Expr::col(col::SEQ).eq(Expr::from(oldest)));
    super::dialects::of(dialect).mark_late(table, &mut update, Expr::col(col::DUE_AT));
    dialect.render(&update)
}

/// Makes the oldest row of every key ready where it is waiting: after rows
/// were removed other than by completion (purge, erasure).
pub(crate) fn promote_all_heads(table: &TableName, dialect: Dialect) -> Result<Statement> {
    let name = table.as_str().to_owned();
    let mut oldest = Query::select();
    oldest
        .expr(Expr::col(("earlier", col::SEQ)).min())
        .from_as(name.clone(), "earlier")
        .and_where(
            Expr::col(("earlier", col::ORDERING_KEY)).equals((name.clone(), col::ORDERING_KEY)),
        );
    let mut update = Query::update();
    update
        .table(name.clone())
        .value(col::STATE, state::READY)
        .and_where(Expr::col(col::STATE).eq(state::WAITING))
        .and_where(Expr::col((name, col::SEQ)).eq(Expr::from(oldest)));
    super::dialects::of(dialect).mark_late(table, &mut update, Expr::col(col::DUE_AT));
    dialect.render(&update)
}
