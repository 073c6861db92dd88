//! The data keys of sealed payloads (`<table>_keys`, see
//! [`seal`](crate::seal)): written beside the row they seal, returned with
//! each claimed row, deleted by an erasure, re-wrapped by a reseal pass.

use sea_query::{Expr, ExprTrait, OnConflict, Order, Query};

use super::dialects;
use super::{col, json_text};
use crate::database::value::Value;
use crate::database::{Dialect, Statement, query_error};
use crate::error::Result;
use crate::identifier::TableName;
use crate::seal::WrappedKey;
use crate::time::Timestamp;

/// The key table's column names.
pub(crate) mod key_col {
    pub(crate) const ID: &str = "id";
    pub(crate) const SUBJECT: &str = "subject";
    pub(crate) const RING_KEY: &str = "ring_key";
    pub(crate) const WRAPPED: &str = "wrapped";
    pub(crate) const CREATED_AT: &str = "created_at";
}

/// The column a claim returns each row's data key in: `ring_key:wrapped`,
/// null for a row sealed under no data key of its own.
pub(crate) const RETURNED_KEY: &str = "sealed_key";

pub(crate) fn keys_table(table: &TableName) -> String {
    format!("{}_keys", table.as_str())
}

/// `(SELECT ring_key || ':' || wrapped FROM <table>_keys WHERE subject =
/// <table>.subject AND id = substr(<table>.payload, 12, 26)) AS
/// sealed_key`: the data key a row's payload names (`sealed:1:d:<id>:…`;
/// an endpoint's delivery names its event's), read by its primary key in
/// the claim's own statement, so opening costs no call.
pub(crate) fn returned_key(table: &TableName) -> Expr {
    Expr::cust(format!(
        "(SELECT \"{ring}\" || ':' || \"{wrapped}\" FROM \"{keys}\" WHERE \"{keys}\".\"{subject}\" = \
         \"{table}\".\"{row_subject}\" AND \"{keys}\".\"{id}\" = \
         substr(\"{table}\".\"{payload}\", {start}, {length})) AS \"{RETURNED_KEY}\"",
        ring = key_col::RING_KEY,
        wrapped = key_col::WRAPPED,
        keys = keys_table(table),
        subject = key_col::SUBJECT,
        row_subject = col::SUBJECT,
        id = key_col::ID,
        table = table.as_str(),
        payload = col::PAYLOAD,
        start = crate::seal::DATA_KEY_ID_AT,
        length = crate::seal::DATA_KEY_ID_LEN,
    ))
}

/// A data key as [`returned_key`] returns it: key `id` of a row of
/// `subject` (its keyed hash).
pub(crate) fn read_returned(id: &str, subject: &str, text: &str) -> Option<WrappedKey> {
    let (ring_key, wrapped) = text.split_once(':')?;
    Some(WrappedKey {
        id: id.to_owned(),
        subject: subject.to_owned(),
        ring_key: ring_key.to_owned(),
        wrapped: wrapped.to_owned(),
    })
}

/// Writes `key` (its id is new: a ULID of its own), at `at`.
pub(crate) fn insert(
    table: &TableName,
    dialect: Dialect,
    key: &WrappedKey,
    at: Timestamp,
) -> Result<Statement> {
    let mut insert = Query::insert();
    insert
        .into_table(keys_table(table))
        .columns([
            key_col::ID,
            key_col::SUBJECT,
            key_col::RING_KEY,
            key_col::WRAPPED,
            key_col::CREATED_AT,
        ])
        .values([
            key.id.clone().into(),
            key.subject.clone().into(),
            key.ring_key.clone().into(),
            key.wrapped.clone().into(),
            at.as_unix_millis().into(),
        ])
        .map_err(query_error)?
        // Its id is new: a conflict is this very statement sent again
        // after it committed (a retried batch), which changes nothing.
        .on_conflict(
            OnConflict::columns([key_col::SUBJECT, key_col::ID])
                .do_nothing()
                .to_owned(),
        );
    dialect.render(&insert)
}

/// Reads the keys of `ids` among those of `subjects` (their keyed hashes):
/// primary-key lookups.
pub(crate) fn of_ids(
    table: &TableName,
    dialect: Dialect,
    subjects: &[&str],
    ids: &[&str],
) -> Result<Statement> {
    let sql = format!(
        "SELECT \"{subject}\", \"{id}\", \"{ring}\", \"{wrapped}\" FROM \"{keys}\" \
         WHERE \"{subject}\" {listed} AND \"{id}\" {listed}",
        id = key_col::ID,
        subject = key_col::SUBJECT,
        ring = key_col::RING_KEY,
        wrapped = key_col::WRAPPED,
        keys = keys_table(table),
        listed = dialects::of(dialect).in_texts_listed(),
    );
    Ok(Statement::new(
        dialect.number_placeholders(&sql),
        vec![
            Value::Text(json_text(&subjects, "the subjects of data keys")?),
            Value::Text(json_text(&ids, "the ids of data keys")?),
        ],
    ))
}

/// Deletes every key of `subject` (its keyed hash): what makes its sealed
/// payloads unreadable wherever copies of them are.
pub(crate) fn forget_subject(
    table: &TableName,
    dialect: Dialect,
    subject: &str,
) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(keys_table(table))
        .and_where(Expr::col(key_col::SUBJECT).eq(subject));
    dialect.render(&delete)
}

/// Up to `limit` keys after `(subject, id)`, in the primary key's order.
pub(crate) fn page(
    table: &TableName,
    dialect: Dialect,
    after: (&str, &str),
    limit: u32,
) -> Result<Statement> {
    let sql = format!(
        "SELECT \"{subject}\", \"{id}\", \"{ring}\", \"{wrapped}\" FROM \"{keys}\" \
         WHERE (\"{subject}\", \"{id}\") > (?, ?) ORDER BY \"{subject}\", \"{id}\" LIMIT ?",
        subject = key_col::SUBJECT,
        id = key_col::ID,
        ring = key_col::RING_KEY,
        wrapped = key_col::WRAPPED,
        keys = keys_table(table),
    );
    Ok(Statement::new(
        dialect.number_placeholders(&sql),
        vec![
            Value::Text(after.0.to_owned()),
            Value::Text(after.1.to_owned()),
            Value::Integer(i64::from(limit)),
        ],
    ))
}

/// Replaces key `old` of `subject` by `new` (the same key wrapped under
/// another ring key), if it is still `old`.
pub(crate) fn rewrap(
    table: &TableName,
    dialect: Dialect,
    subject: &str,
    old: &WrappedKey,
    new: &WrappedKey,
) -> Result<Statement> {
    let mut update = Query::update();
    update
        .table(keys_table(table))
        .values([
            (key_col::RING_KEY, new.ring_key.clone().into()),
            (key_col::WRAPPED, new.wrapped.clone().into()),
        ])
        .and_where(Expr::col(key_col::SUBJECT).eq(subject))
        .and_where(Expr::col(key_col::ID).eq(old.id.clone()))
        .and_where(Expr::col(key_col::WRAPPED).eq(old.wrapped.clone()));
    dialect.render(&update)
}

/// Up to `limit` rows of the outbox after `(state, due_at, id)` in its
/// primary key's order: their key and stored payload.
pub(crate) fn messages_page(
    table: &TableName,
    dialect: Dialect,
    after: (&str, i64, &str),
    limit: u32,
) -> Result<Statement> {
    let sql = format!(
        "SELECT \"{state}\", \"{due}\", \"{id}\", \"{payload}\" FROM \"{table}\" \
         WHERE (\"{state}\", \"{due}\", \"{id}\") > (?, ?, ?) \
         ORDER BY \"{state}\", \"{due}\", \"{id}\" LIMIT ?",
        state = col::STATE,
        due = col::DUE_AT,
        id = col::ID,
        payload = col::PAYLOAD,
        table = table.as_str(),
    );
    Ok(Statement::new(
        dialect.number_placeholders(&sql),
        vec![
            Value::Text(after.0.to_owned()),
            Value::Integer(after.1),
            Value::Text(after.2.to_owned()),
            Value::Integer(i64::from(limit)),
        ],
    ))
}

/// Replaces the payload of the row at `(state, due_at, id)` by `new`, if
/// it is still `old`.
pub(crate) fn reseal_message(
    table: &TableName,
    dialect: Dialect,
    at: (&str, i64, &str),
    old: &str,
    new: &str,
) -> Result<Statement> {
    let mut update = Query::update();
    update
        .table(table.as_str().to_owned())
        .value(col::PAYLOAD, new)
        .and_where(Expr::col(col::STATE).eq(at.0))
        .and_where(Expr::col(col::DUE_AT).eq(at.1))
        .and_where(Expr::col(col::ID).eq(at.2))
        .and_where(Expr::col(col::PAYLOAD).eq(old));
    dialect.render(&update)
}

/// Up to `limit` kept events after id `after`: their id and payload.
pub(crate) fn events_page(
    table: &TableName,
    dialect: Dialect,
    after: &str,
    limit: u32,
) -> Result<Statement> {
    use super::endpoints::{event_col, events_table};
    let mut select = Query::select();
    select
        .columns([event_col::ID, event_col::PAYLOAD])
        .from(events_table(table))
        .and_where(Expr::col(event_col::ID).gt(after))
        .order_by(event_col::ID, Order::Asc)
        .limit(u64::from(limit));
    dialect.render(&select)
}

/// Replaces kept event `id`'s payload by `new`, if it is still `old`.
pub(crate) fn reseal_event(
    table: &TableName,
    dialect: Dialect,
    id: &str,
    old: &str,
    new: &str,
) -> Result<Statement> {
    use super::endpoints::{event_col, events_table};
    let mut update = Query::update();
    update
        .table(events_table(table))
        .value(event_col::PAYLOAD, new)
        .and_where(Expr::col(event_col::ID).eq(id))
        .and_where(Expr::col(event_col::PAYLOAD).eq(old));
    dialect.render(&update)
}
