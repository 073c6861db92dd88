//! The enqueue: one `INSERT` of a new row, which waits behind an earlier
//! row of its ordering key and does nothing while its dedup key is taken.

use sea_query::{Expr, ExprTrait, OnConflict, Query};

use super::{col, state};
use crate::database::{Dialect, Statement, query_error};
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

/// The row an enqueue writes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewRow<'a> {
    pub(crate) id: &'a str,
    /// Whether the caller chose the id (else it is a generated ULID).
    pub(crate) id_given: bool,
    pub(crate) topic: &'a str,
    pub(crate) payload: &'a str,
    pub(crate) subject: Option<&'a str>,
    pub(crate) dedup_key: Option<&'a str>,
    pub(crate) ordering_key: Option<&'a str>,
    pub(crate) due_at: Timestamp,
    pub(crate) attempts: u32,
    /// Written leased to the caller (its first attempt), or not leased.
    pub(crate) lease_token: Option<&'a str>,
    pub(crate) created_at: Timestamp,
    /// W3C `traceparent` and `tracestate`, validated.
    pub(crate) traceparent: Option<&'a str>,
    pub(crate) tracestate: Option<&'a str>,
}

/// Inserts `row`. With an ordering key it takes the key's next sequence
/// number, and waits if an earlier row of the key is still present. While
/// a row with its dedup key is in the table, it inserts nothing (0 rows).
pub(crate) fn insert(table: &TableName, dialect: Dialect, row: &NewRow<'_>) -> Result<Statement> {
    let mut columns = vec![
        col::STATE,
        col::DUE_AT,
        col::ID,
        col::TOPIC,
        col::PAYLOAD,
        col::SUBJECT,
        col::DEDUP_KEY,
        col::ORDERING_KEY,
        col::SEQ,
        col::ID_GIVEN,
        col::ATTEMPTS,
        col::LEASE_TOKEN,
        col::CREATED_AT,
        col::TRACEPARENT,
        col::TRACESTATE,
    ];
    let late = super::dialects::of(dialect).late_due(table, Expr::val(row.due_at.as_unix_millis()));
    if late.is_some() {
        columns.push(col::LATE_DUE);
    }
    let text = |value: Option<&str>| Expr::val(value.map(str::to_owned));
    let fixed = |seq: Expr, state: Expr, late: Option<Expr>| -> Vec<Expr> {
        let mut values = vec![
            state,
            Expr::val(row.due_at.as_unix_millis()),
            Expr::val(row.id),
            Expr::val(row.topic),
            Expr::val(row.payload),
            text(row.subject),
            text(row.dedup_key),
            text(row.ordering_key),
            seq,
            Expr::val(row.id_given),
            Expr::val(i64::from(row.attempts)),
            text(row.lease_token),
            Expr::val(row.created_at.as_unix_millis()),
            text(row.traceparent),
            text(row.tracestate),
        ];
        values.extend(late);
        values
    };
    let mut insert = Query::insert();
    insert
        .into_table(table.as_str().to_owned())
        .columns(columns);
    match row.ordering_key {
        None => {
            insert
                .values(fixed(
                    Expr::val(Option::<i64>::None),
                    Expr::val(state::READY),
                    late,
                ))
                .map_err(query_error)?;
        }
        Some(key) => {
            let latest_seq = || Expr::col(("key_state", "latest"));
            let state = Expr::case(latest_seq().is_null(), state::READY).finally(state::WAITING);
            // Only a row written ready can be late (its promotion marks a
            // waiting one).
            let late = late.map(|late| Expr::case(latest_seq().is_null(), late).into());
            let mut select = Query::select();
            select
                .exprs(fixed(latest_seq().if_null(0).add(1), state.into(), late))
                .from_subquery(
                    super::dialects::of(dialect).latest_of_key(table, key),
                    "key_state",
                )
                // `WHERE` keeps SQLite from reading `ON CONFLICT` as a join.
                .and_where(Expr::cust("TRUE"));
            insert.select_from(select).map_err(query_error)?;
        }
    }
    insert.on_conflict(
        OnConflict::column(col::DEDUP_KEY)
            .target_and_where(Expr::col(col::DEDUP_KEY).is_not_null())
            .do_nothing()
            .to_owned(),
    );
    dialect.render(&insert)
}
