//! The claim: one statement that leases up to `limit` due rows and returns
//! them, parking as dead those that have used all their attempts.

use sea_query::{BinOper, Expr, ExprTrait, Order, Query};

use super::endpoints;
use super::keys;
use super::paused::topic_not_paused;
use super::{Fence, col, state};
use crate::database::{Dialect, Statement};
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

/// The columns a claim returns.
pub(crate) const RETURNED: [&str; 14] = [
    col::STATE,
    col::ID,
    col::TOPIC,
    col::PAYLOAD,
    col::SUBJECT,
    col::ORDERING_KEY,
    col::ATTEMPTS,
    col::CREATED_AT,
    col::UNSETTLED_LEASES,
    col::DEFERRALS,
    col::TRACEPARENT,
    col::TRACESTATE,
    col::BECAME_DUE,
    col::EVENT_ID,
];

/// What a claim returns: [`RETURNED`], each row's endpoint target, and
/// (for an outbox that seals) each row's data key.
pub(crate) fn returned(table: &TableName, sealed: bool) -> Vec<Expr> {
    RETURNED
        .iter()
        .map(|column| Expr::col(*column))
        .chain([endpoints::returned_target(table)])
        .chain(sealed.then(|| keys::returned_key(table)))
        .collect()
}

/// What one claim is asked to do.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimSpec<'a> {
    /// At most this many rows (at least 1).
    pub(crate) limit: u32,
    /// A row with this many attempts spent is parked as dead, not leased.
    pub(crate) max_attempts: u32,
    pub(crate) now: Timestamp,
    /// The new lease: its token, and its end (the rows' new `due_at`).
    pub(crate) until: Timestamp,
    pub(crate) token: &'a str,
    /// Return each row's data key too (see [`keys::returned_key`]).
    pub(crate) sealed: bool,
}

/// Leases the first `limit` rows due at `now`, in (`due_at`, `id`) order,
/// of topics not paused.
/// A row still carrying a token had its last lease expire unsettled: it
/// counts one more unsettled lease. A row with every attempt spent is
/// parked as dead instead, with why in `last_error`. `became_due` keeps
/// the due time each row was leased at.
pub(crate) fn claim(
    table: &TableName,
    dialect: Dialect,
    spec: &ClaimSpec<'_>,
) -> Result<Statement> {
    let name = table.as_str().to_owned();
    let max_attempts = i64::from(spec.max_attempts);
    let exhausted = || Expr::col(col::ATTEMPTS).gte(max_attempts);
    let when_exhausted =
        |dead: Expr, leased: Expr| -> Expr { Expr::case(exhausted(), dead).finally(leased).into() };
    let lease_expired = || Expr::col(col::LEASE_TOKEN).is_not_null();
    let last_error = || Expr::col(col::LAST_ERROR).if_null("none");
    let exhausted_error = Expr::case(
        lease_expired(),
        Expr::val(format!(
            "attempts exhausted ({max_attempts} of {max_attempts}): the lease of the last attempt, \
             delivered alone, expired without a settle, so its outcome is unknown (the delivery \
             may have crashed its drainer, or succeeded and its settle was lost); last receiver error: "
        ))
        .binary(BinOper::Custom("||"), last_error()),
    )
    .finally(
        Expr::val(format!(
            "attempts exhausted: the retry policy allows {max_attempts}; last error: "
        ))
        .binary(BinOper::Custom("||"), last_error()),
    );

    let mut update = Query::update();
    update
        .table(name.clone())
        .value(
            col::STATE,
            when_exhausted(state::DEAD.into(), state::READY.into()),
        )
        .value(
            col::DUE_AT,
            when_exhausted(
                spec.now.as_unix_millis().into(),
                spec.until.as_unix_millis().into(),
            ),
        )
        // A row parked as dead keeps the claim's token too: the rollup sent
        // after the claim counts the deaths by it (see
        // `rollups::count_claim_deaths`).
        .value(col::LEASE_TOKEN, spec.token)
        .value(col::BECAME_DUE, Expr::col(col::DUE_AT))
        .value(
            col::UNSETTLED_LEASES,
            Expr::case(lease_expired(), Expr::col(col::UNSETTLED_LEASES).add(1))
                .finally(Expr::col(col::UNSETTLED_LEASES)),
        )
        .value(
            col::LAST_ERROR,
            when_exhausted(exhausted_error.into(), Expr::col(col::LAST_ERROR)),
        );
    if super::dialects::of(dialect).claim_checks_ready() {
        update.and_where(Expr::col((name.clone(), col::STATE)).eq(state::READY));
    }
    update.and_where(topic_not_paused(table));
    // A row parked as dead is not late; a leased one is if its lease ends
    // behind the pending floor.
    if let Some(late) =
        super::dialects::of(dialect).late_due(table, spec.until.as_unix_millis().into())
    {
        update.value(
            col::LATE_DUE,
            when_exhausted(Expr::val(Option::<i64>::None), late),
        );
    }
    let mut due = Query::select();
    due.columns([col::DUE_AT, col::ID])
        .from(name)
        .and_where(Expr::col(col::STATE).eq(state::READY))
        .and_where(Expr::col(col::DUE_AT).lte(spec.now.as_unix_millis()))
        .and_where(topic_not_paused(table))
        .order_by(col::DUE_AT, Order::Asc)
        .order_by(col::ID, Order::Asc);
    super::dialects::of(dialect).bound_claim(
        &mut update,
        due,
        table,
        spec.limit,
        spec.now,
        returned(table, spec.sealed),
    );
    dialect.render(&update)
}

/// Reads back the rows a claim leased until `until` with `token` (for when
/// its reply was lost): safe to send any number of times. Rows it parked as
/// dead are not among them.
pub(crate) fn recovery(
    table: &TableName,
    dialect: Dialect,
    until: Timestamp,
    token: &str,
    sealed: bool,
) -> Result<Statement> {
    let mut select = Query::select();
    select
        .exprs(returned(table, sealed))
        .from(table.as_str().to_owned())
        .and_where(Expr::col(col::STATE).eq(state::READY))
        .and_where(Expr::col(col::DUE_AT).eq(until.as_unix_millis()))
        .and_where(Expr::col(col::LEASE_TOKEN).eq(token))
        .order_by(col::ID, Order::Asc);
    dialect.render(&select)
}

/// Moves a row from lease `current` to lease `alone` (its suspect group's),
/// writing `attempts` (one spent up front when the group is down to one).
/// Matching `alone` too makes the statement safe to send again: a repeat
/// after it committed confirms it, spending nothing.
pub(crate) fn isolate(
    table: &TableName,
    dialect: Dialect,
    current: &Fence<'_>,
    alone: &Fence<'_>,
    attempts: u32,
) -> Result<Statement> {
    let mut update = Query::update();
    update
        .table(table.as_str().to_owned())
        .value(col::DUE_AT, alone.until.as_unix_millis())
        .value(col::LEASE_TOKEN, alone.token)
        .value(col::ATTEMPTS, i64::from(attempts))
        .and_where(current.holds().or(alone.holds()));
    super::dialects::of(dialect).mark_late(table, &mut update, alone.until.as_unix_millis().into());
    dialect.render(&update)
}
