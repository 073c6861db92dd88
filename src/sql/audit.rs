//! The audit log (`<table>_audit`): each change an operator made, written in
//! the change's own atomic call, its result filled in once it committed,
//! read newest first, pruned oldest first.

use sea_query::{Expr, ExprTrait, Order, Query};

use crate::database::{Dialect, Statement, query_error};
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

/// The audit log's column names.
pub(crate) mod audit_col {
    pub(crate) const AT: &str = "at";
    pub(crate) const ID: &str = "id";
    pub(crate) const WHO: &str = "who";
    pub(crate) const ROLE: &str = "role";
    pub(crate) const ACTION: &str = "action";
    pub(crate) const SELECTION: &str = "selection";
    pub(crate) const RESULT: &str = "result";
}

/// An entry's columns as it is written; its result comes after.
const WRITTEN: [&str; 6] = [
    audit_col::AT,
    audit_col::ID,
    audit_col::WHO,
    audit_col::ROLE,
    audit_col::ACTION,
    audit_col::SELECTION,
];

pub(crate) fn audit_table(table: &TableName) -> String {
    format!("{}_audit", table.as_str())
}

/// One entry as it is written, before its result is known.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AuditRow<'a> {
    pub(crate) at: Timestamp,
    pub(crate) id: &'a str,
    pub(crate) who: &'a str,
    pub(crate) role: &'a str,
    pub(crate) action: &'a str,
    /// JSON.
    pub(crate) selection: &'a str,
}

/// Writes `row`, its result null.
pub(crate) fn record(table: &TableName, dialect: Dialect, row: &AuditRow<'_>) -> Result<Statement> {
    let mut insert = Query::insert();
    insert
        .into_table(audit_table(table))
        .columns(WRITTEN)
        .values([
            row.at.as_unix_millis().into(),
            row.id.into(),
            row.who.into(),
            row.role.into(),
            row.action.into(),
            row.selection.into(),
        ])
        .map_err(query_error)?;
    dialect.render(&insert)
}

/// Fills in the result (JSON) of the entry at `(at, id)`.
pub(crate) fn set_result(
    table: &TableName,
    dialect: Dialect,
    (at, id): (Timestamp, &str),
    result: &str,
) -> Result<Statement> {
    let mut update = Query::update();
    update
        .table(audit_table(table))
        .value(audit_col::RESULT, result)
        .and_where(Expr::col(audit_col::AT).eq(at.as_unix_millis()))
        .and_where(Expr::col(audit_col::ID).eq(id));
    dialect.render(&update)
}

/// The `limit` newest entries before `(at, id)` (from the newest if none),
/// newest first, by primary key.
pub(crate) fn page(
    table: &TableName,
    dialect: Dialect,
    before: Option<(Timestamp, &str)>,
    limit: u32,
) -> Result<Statement> {
    let mut select = Query::select();
    select
        .columns(WRITTEN)
        .column(audit_col::RESULT)
        .from(audit_table(table))
        .order_by(audit_col::AT, Order::Desc)
        .order_by(audit_col::ID, Order::Desc)
        .limit(u64::from(limit));
    if let Some((at, id)) = before {
        select.and_where(
            Expr::tuple([Expr::col(audit_col::AT), Expr::col(audit_col::ID)])
                .lt(Expr::tuple([Expr::val(at.as_unix_millis()), Expr::val(id)])),
        );
    }
    dialect.render(&select)
}

/// Deletes at most `limit` entries written before `before`, oldest first.
pub(crate) fn prune(
    table: &TableName,
    dialect: Dialect,
    before: Timestamp,
    limit: u32,
) -> Result<Statement> {
    super::delete_oldest(
        dialect,
        audit_table(table),
        &[audit_col::AT, audit_col::ID],
        audit_col::AT,
        before,
        limit,
    )
}
