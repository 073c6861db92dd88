//! The fleet's statements: an outbox's summary, read by its own drain in
//! bounded reads, and the registry (`<fleet table>`) it is reported into,
//! upserted one row per outbox and paged by name, by dead letters or by
//! the oldest due message.

use sea_query::{Expr, ExprTrait, OnConflict, Order, Query, SelectStatement};

use super::{col, state, state_is};
use crate::database::{Dialect, Statement, query_error};
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

/// The registry's column names.
pub(crate) mod fleet_col {
    pub(crate) const MEMBER: &str = "member";
    pub(crate) const OUTBOX: &str = "outbox";
    pub(crate) const BACKLOG: &str = "backlog";
    pub(crate) const DEAD: &str = "dead";
    pub(crate) const OLDEST_DUE_AT: &str = "oldest_due_at";
    pub(crate) const LAST_ERROR: &str = "last_error";
    pub(crate) const REPORTED_AT: &str = "reported_at";
}

/// Every column of a registry row, as written and as read.
pub(crate) const COLUMNS: [&str; 7] = [
    fleet_col::MEMBER,
    fleet_col::OUTBOX,
    fleet_col::BACKLOG,
    fleet_col::DEAD,
    fleet_col::OLDEST_DUE_AT,
    fleet_col::LAST_ERROR,
    fleet_col::REPORTED_AT,
];

/// The summary's column names.
pub(crate) mod summary_col {
    pub(crate) const BACKLOG: &str = "backlog";
    pub(crate) const DEAD: &str = "dead";
    pub(crate) const OLDEST_DUE_AT: &str = "oldest_due_at";
    pub(crate) const PENDING_ERROR: &str = "pending_error";
    pub(crate) const DEAD_ERROR: &str = "dead_error";
}

/// An outbox at a glance in one statement that reads at most about
/// `3 × cap + 2` rows of `table`, each by a range of its primary key:
/// - `backlog`: rows not dead, counted up to `cap + 1`;
/// - `dead`: dead rows, counted up to `cap + 1`;
/// - `oldest_due_at`: when the most overdue ready row fell due (null if
///   none is due at `now`);
/// - `pending_error`: the last error of the first row in line (of the
///   first `cap` ready rows) that failed before;
/// - `dead_error`: the latest dead letter's error.
pub(crate) fn summary(
    table: &TableName,
    dialect: Dialect,
    now: Timestamp,
    cap: u32,
) -> Result<Statement> {
    let table = table.as_str().to_owned();
    let over = u64::from(cap) + 1;
    let counted = |condition: Expr| {
        let mut rows = Query::select();
        rows.expr(Expr::cust("1"))
            .from(table.clone())
            .and_where(condition)
            .limit(over);
        let mut count = Query::select();
        count
            .expr(Expr::cust("COUNT(*)"))
            .from_subquery(rows, "counted");
        scalar(count)
    };
    let backlog = counted(Expr::col(col::STATE).is_in([state::READY, state::WAITING]));
    let dead = counted(state_is(state::DEAD));

    let mut oldest = Query::select();
    oldest
        .column(col::DUE_AT)
        .from(table.clone())
        .and_where(Expr::col(col::STATE).eq(state::READY))
        .and_where(Expr::col(col::DUE_AT).lte(now.as_unix_millis()))
        .order_by(col::DUE_AT, Order::Asc)
        .limit(1);

    let mut in_line = Query::select();
    in_line
        .columns([col::DUE_AT, col::LAST_ERROR])
        .from(table.clone())
        .and_where(Expr::col(col::STATE).eq(state::READY))
        .order_by(col::DUE_AT, Order::Asc)
        .limit(u64::from(cap));
    let mut pending_error = Query::select();
    pending_error
        .column(col::LAST_ERROR)
        .from_subquery(in_line, "in_line")
        .and_where(Expr::col(col::LAST_ERROR).is_not_null())
        .order_by(col::DUE_AT, Order::Asc)
        .limit(1);

    let mut dead_error = Query::select();
    dead_error
        .column(col::LAST_ERROR)
        .from(table.clone())
        .and_where(state_is(state::DEAD))
        .order_by(col::DUE_AT, Order::Desc)
        .limit(1);

    let mut select = Query::select();
    select
        .expr_as(backlog, summary_col::BACKLOG)
        .expr_as(dead, summary_col::DEAD)
        .expr_as(scalar(oldest), summary_col::OLDEST_DUE_AT)
        .expr_as(scalar(pending_error), summary_col::PENDING_ERROR)
        .expr_as(scalar(dead_error), summary_col::DEAD_ERROR);
    dialect.render(&select)
}

/// `select` as a scalar subquery.
fn scalar(select: SelectStatement) -> Expr {
    Expr::SubQuery(None, Box::new(select.into()))
}

/// One registry row as it is written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FleetRow<'a> {
    pub(crate) member: &'a str,
    pub(crate) outbox: &'a str,
    pub(crate) backlog: u32,
    pub(crate) dead: u32,
    pub(crate) oldest_due_at: Option<Timestamp>,
    pub(crate) last_error: Option<&'a str>,
    pub(crate) reported_at: Timestamp,
}

/// Writes `row` over the member's outbox's row, or inserts it.
pub(crate) fn upsert(table: &TableName, dialect: Dialect, row: &FleetRow<'_>) -> Result<Statement> {
    let mut insert = Query::insert();
    insert
        .into_table(table.as_str().to_owned())
        .columns(COLUMNS)
        .values([
            row.member.into(),
            row.outbox.into(),
            i64::from(row.backlog).into(),
            i64::from(row.dead).into(),
            row.oldest_due_at.map(Timestamp::as_unix_millis).into(),
            row.last_error.map(str::to_owned).into(),
            row.reported_at.as_unix_millis().into(),
        ])
        .map_err(query_error)?
        .on_conflict(
            OnConflict::columns([fleet_col::MEMBER, fleet_col::OUTBOX])
                .update_columns(COLUMNS.into_iter().skip(2))
                .to_owned(),
        );
    dialect.render(&insert)
}

/// How a page of the registry is ordered; each is served by an index, and
/// a page goes on from the last row's key by one range of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PageOrder {
    /// Every row by `(member, outbox)`.
    Name,
    /// Rows with dead letters, most first (ties by name, last first).
    Dead,
    /// Rows with a message due, most overdue first, then by name.
    OldestDue,
}

/// Where a page goes on from: the last row's ordering value (for `Dead` and
/// `OldestDue`) and name.
#[derive(Debug, Clone, Copy)]
pub(crate) struct After<'a> {
    pub(crate) value: i64,
    pub(crate) member: &'a str,
    pub(crate) outbox: &'a str,
}

/// At most `limit` rows in `order`, after `after` if given.
pub(crate) fn page(
    table: &TableName,
    dialect: Dialect,
    order: PageOrder,
    after: Option<After<'_>>,
    limit: u32,
) -> Result<Statement> {
    let key = |first: Option<&'static str>| {
        let mut columns: Vec<Expr> = first.map(Expr::col).into_iter().collect();
        columns.extend([Expr::col(fleet_col::MEMBER), Expr::col(fleet_col::OUTBOX)]);
        Expr::tuple(columns)
    };
    let cursor = |first: bool, after: &After<'_>| {
        let mut values: Vec<Expr> = first.then(|| Expr::val(after.value)).into_iter().collect();
        values.extend([Expr::val(after.member), Expr::val(after.outbox)]);
        Expr::tuple(values)
    };
    let mut select = Query::select();
    select
        .columns(COLUMNS)
        .from(table.as_str().to_owned())
        .limit(u64::from(limit));
    let (first, direction) = match order {
        PageOrder::Name => (None, Order::Asc),
        PageOrder::Dead => {
            // A literal: the partial index's condition must be seen to hold.
            select.and_where(Expr::col(fleet_col::DEAD).gt(Expr::cust("0")));
            (Some(fleet_col::DEAD), Order::Desc)
        }
        PageOrder::OldestDue => {
            select.and_where(Expr::col(fleet_col::OLDEST_DUE_AT).is_not_null());
            (Some(fleet_col::OLDEST_DUE_AT), Order::Asc)
        }
    };
    for column in first
        .into_iter()
        .chain([fleet_col::MEMBER, fleet_col::OUTBOX])
    {
        select.order_by(column, direction.clone());
    }
    if let Some(after) = after {
        let (key, cursor) = (key(first), cursor(first.is_some(), &after));
        select.and_where(if direction == Order::Desc {
            key.lt(cursor)
        } else {
            key.gt(cursor)
        });
    }
    dialect.render(&select)
}

/// Deletes every row of the member.
pub(crate) fn forget(table: &TableName, dialect: Dialect, member: &str) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(table.as_str().to_owned())
        .and_where(Expr::col(fleet_col::MEMBER).eq(member));
    dialect.render(&delete)
}
