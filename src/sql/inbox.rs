//! The inbox's statements: a first-writer-wins key per processed message.

use sea_query::{Expr, ExprTrait, Order, Query};

use crate::database::{Dialect, Statement, query_error};
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

/// The inbox's column names.
pub(crate) const KEY: &str = "key";
pub(crate) const SUBJECT: &str = "subject";
pub(crate) const SEEN_AT: &str = "seen_at";

/// Records `key`, first seen at `now`; fails on the key's primary key if
/// it was recorded before.
pub(crate) fn record(
    table: &TableName,
    dialect: Dialect,
    key: &str,
    subject: Option<&str>,
    now: Timestamp,
) -> Result<Statement> {
    let mut insert = Query::insert();
    insert
        .into_table(table.as_str().to_owned())
        .columns([KEY, SUBJECT, SEEN_AT])
        .values([
            key.into(),
            subject.map(str::to_owned).into(),
            now.as_unix_millis().into(),
        ])
        .map_err(query_error)?;
    dialect.render(&insert)
}

/// One row if `key` was recorded, else none.
pub(crate) fn seen(table: &TableName, dialect: Dialect, key: &str) -> Result<Statement> {
    let mut select = Query::select();
    select
        .expr(Expr::val(1))
        .from(table.as_str().to_owned())
        .and_where(Expr::col(KEY).eq(key));
    dialect.render(&select)
}

/// How many keys there are, counting at most `cap` (a walk of the primary
/// key that stops there).
pub(crate) fn count(table: &TableName, dialect: Dialect, cap: u32) -> Result<Statement> {
    let mut walk = Query::select();
    walk.column(KEY)
        .from(table.as_str().to_owned())
        .limit(u64::from(cap));
    let mut count = Query::select();
    count
        .expr_as(Expr::cust("count(*)"), sea_query::Alias::new("keys"))
        .from_subquery(walk, sea_query::Alias::new("walked"));
    dialect.render(&count)
}

/// Deletes the keys first seen before `older_than`.
pub(crate) fn purge(
    table: &TableName,
    dialect: Dialect,
    older_than: Timestamp,
) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(table.as_str().to_owned())
        .and_where(Expr::col(SEEN_AT).lt(older_than.as_unix_millis()));
    dialect.render(&delete)
}

/// Every key of `subject`, oldest first.
pub(crate) fn of_subject(
    table: &TableName,
    dialect: Dialect,
    subject: &[&str],
) -> Result<Statement> {
    let mut select = Query::select();
    select
        .columns([KEY, SUBJECT, SEEN_AT])
        .from(table.as_str().to_owned())
        .and_where(super::one_of(SUBJECT, subject))
        .order_by(SEEN_AT, Order::Asc);
    dialect.render(&select)
}

/// Deletes every key of `subject`.
pub(crate) fn erase_subject(
    table: &TableName,
    dialect: Dialect,
    subject: &[&str],
) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(table.as_str().to_owned())
        .and_where(super::one_of(SUBJECT, subject))
        .returning_col(KEY);
    dialect.render(&delete)
}
