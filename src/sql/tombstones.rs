//! Tombstones of erased subjects (see [`erasure`](crate::erasure)): one row
//! per subject key in a table shared by the database's outboxes and
//! inboxes. The guards that refuse writes carrying a subject are in
//! [`Differences::erasure_guard`](super::differences::Differences::erasure_guard).

use sea_query::{Expr, ExprTrait, OnConflict, Order, Query};

use super::one_of;
use super::tombstone_col::{ERASED_AT, GUARD_MARK, SUBJECT};
use crate::database::{Dialect, Statement, query_error};
use crate::error::Result;
use crate::identifier::TableName;

/// Records (or renews) the tombstone of the subject stored as `stored`,
/// erased at `now`.
pub(crate) fn tombstone(
    table: &TableName,
    dialect: Dialect,
    stored: &str,
    now: i64,
) -> Result<Statement> {
    let mut insert = Query::insert();
    insert
        .into_table(table.as_str().to_owned())
        .columns([SUBJECT, ERASED_AT])
        .values([stored.into(), now.into()])
        .map_err(query_error)?
        .on_conflict(
            OnConflict::column(SUBJECT)
                .update_column(ERASED_AT)
                .to_owned(),
        );
    dialect.render(&insert)
}

/// Deletes the tombstones of erasures before `before` (and a guard's own
/// row, should one ever have been committed).
pub(crate) fn forget(table: &TableName, dialect: Dialect, before: i64) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(table.as_str().to_owned())
        .and_where(Expr::col(ERASED_AT).lt(before));
    dialect.render(&delete)
}

/// When the subject stored as one of `forms` was last erased: one row
/// with `erased_at`, or none.
pub(crate) fn read(table: &TableName, dialect: Dialect, forms: &[&str]) -> Result<Statement> {
    let mut select = Query::select();
    select
        .column(ERASED_AT)
        .from(table.as_str().to_owned())
        .and_where(one_of(SUBJECT, forms))
        .and_where(Expr::col(ERASED_AT).ne(GUARD_MARK))
        .order_by(ERASED_AT, Order::Desc)
        .limit(1);
    dialect.render(&select)
}

/// The subjects, of those stored as `forms`, erased at `from` or later: a
/// row each with `subject`.
pub(crate) fn erased_since(
    table: &TableName,
    dialect: Dialect,
    forms: Vec<String>,
    from: i64,
) -> Result<Statement> {
    let mut select = Query::select();
    select
        .column(SUBJECT)
        .from(table.as_str().to_owned())
        .and_where(Expr::col(SUBJECT).is_in(forms))
        .and_where(Expr::col(ERASED_AT).gte(from));
    dialect.render(&select)
}

/// Inserts a copy of each tombstone of a subject stored as one of `forms`
/// from `remembered_from` on onto itself: a conflict exactly when one
/// exists, and no change otherwise.
pub(crate) fn copy_onto_themselves(
    dialect: Dialect,
    table: &TableName,
    forms: &[&str],
    remembered_from: i64,
) -> Result<Statement> {
    let table = table.as_str().to_owned();
    let mut tombstone = Query::select();
    tombstone
        .columns([SUBJECT, ERASED_AT])
        .from(table.clone())
        .and_where(one_of(SUBJECT, forms))
        .and_where(Expr::col(ERASED_AT).gte(remembered_from));
    let mut copy = Query::insert();
    copy.into_table(table)
        .columns([SUBJECT, ERASED_AT])
        .select_from(tombstone)
        .map_err(query_error)?;
    dialect.render(&copy)
}
