//! The statements of an outbox's endpoints (`<table>_endpoints`) and their
//! subscriptions (`<table>_subscriptions`), and the names of the tables of
//! their events (whose statements, the fan-out among them, are in
//! [`events`](super::events)).
//!
//! Every write that names an endpoint also names its owner, so a caller who
//! knows another owner's endpoint id changes nothing of it.

use sea_query::{Expr, ExprTrait, OnConflict, Order, Query, SelectStatement};

use super::col;
use super::paused::{paused_col, paused_table};
use crate::database::{Dialect, Statement, query_error};
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

/// The endpoints table's column names.
pub(crate) mod endpoint_col {
    pub(crate) const ID: &str = "id";
    pub(crate) const OWNER: &str = "owner";
    pub(crate) const TARGET: &str = "target";
    pub(crate) const METADATA: &str = "metadata";
    pub(crate) const STATE: &str = "state";
    /// The payload field (a dot-separated path) a filter reads, if any.
    pub(crate) const FILTER_FIELD: &str = "filter_field";
    /// The text that field must hold.
    pub(crate) const FILTER_VALUE: &str = "filter_value";
    pub(crate) const CREATED_AT: &str = "created_at";
    pub(crate) const UPDATED_AT: &str = "updated_at";
    /// Of a read: why the endpoint is held (its pause's reason), if it is.
    pub(crate) const HELD_REASON: &str = "held_reason";
    /// Of a read: since when it is held.
    pub(crate) const HELD_AT: &str = "held_at";
}

/// The subscriptions table's column names.
pub(crate) mod subscription_col {
    pub(crate) const EVENT_TYPE: &str = "event_type";
    pub(crate) const ENDPOINT: &str = "endpoint";
}

/// The events table's column names.
pub(crate) mod event_col {
    pub(crate) const ID: &str = "id";
    pub(crate) const OWNER: &str = "owner";
    pub(crate) const EVENT_TYPE: &str = "event_type";
    pub(crate) const PAYLOAD: &str = "payload";
    pub(crate) const SUBJECT: &str = "subject";
    pub(crate) const CREATED_AT: &str = "created_at";
}

/// The values of an endpoint's `state`.
pub(crate) mod endpoint_state {
    pub(crate) const ENABLED: &str = "enabled";
    pub(crate) const DISABLED: &str = "disabled";
    pub(crate) const PAUSED: &str = "paused";
}

/// The subscription that matches every event type.
pub(crate) const EVERY_TYPE: &str = "*";

/// The column a claim returns each row's endpoint target in (null for a
/// row whose topic is no endpoint).
pub(crate) const RETURNED_TARGET: &str = "endpoint_target";

pub(crate) fn endpoints_table(table: &TableName) -> String {
    format!("{}_endpoints", table.as_str())
}

pub(crate) fn subscriptions_table(table: &TableName) -> String {
    format!("{}_subscriptions", table.as_str())
}

pub(crate) fn events_table(table: &TableName) -> String {
    format!("{}_events", table.as_str())
}

/// `(SELECT target FROM <table>_endpoints WHERE id = <table>.topic) AS
/// endpoint_target`: what a claim returns beside each row, so a delivery
/// reads its endpoint as it is at the attempt with no call of its own.
pub(crate) fn returned_target(table: &TableName) -> Expr {
    Expr::cust(format!(
        "(SELECT \"{target}\" FROM \"{endpoints}\" WHERE \"{id}\" = \"{table}\".\"{topic}\") AS \"{RETURNED_TARGET}\"",
        target = endpoint_col::TARGET,
        endpoints = endpoints_table(table),
        id = endpoint_col::ID,
        table = table.as_str(),
        topic = col::TOPIC,
    ))
}

/// An endpoint's row as written.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EndpointRow<'a> {
    pub(crate) id: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) target: &'a str,
    pub(crate) metadata: &'a str,
    pub(crate) state: &'static str,
    /// Its filter: a payload field and the text it must hold.
    pub(crate) filter: Option<(&'a str, &'a str)>,
    pub(crate) at: Timestamp,
    /// Written only while its owner has fewer endpoints than this.
    pub(crate) most: u32,
}

/// Inserts a new endpoint while its owner has fewer than `row.most` (a
/// taken id fails on the primary key).
pub(crate) fn insert(
    table: &TableName,
    dialect: Dialect,
    row: &EndpointRow<'_>,
) -> Result<Statement> {
    let mut insert = Query::insert();
    insert
        .into_table(endpoints_table(table))
        .columns([
            endpoint_col::ID,
            endpoint_col::OWNER,
            endpoint_col::TARGET,
            endpoint_col::METADATA,
            endpoint_col::STATE,
            endpoint_col::FILTER_FIELD,
            endpoint_col::FILTER_VALUE,
            endpoint_col::CREATED_AT,
            endpoint_col::UPDATED_AT,
        ])
        .select_from(
            Query::select()
                .exprs([
                    Expr::val(row.id).cast_as("TEXT"),
                    Expr::val(row.owner).cast_as("TEXT"),
                    Expr::val(row.target).cast_as("TEXT"),
                    Expr::val(row.metadata).cast_as("TEXT"),
                    Expr::val(row.state).cast_as("TEXT"),
                    Expr::val(row.filter.map(|(field, _)| field.to_owned())).cast_as("TEXT"),
                    Expr::val(row.filter.map(|(_, value)| value.to_owned())).cast_as("TEXT"),
                    Expr::val(row.at.as_unix_millis()).cast_as("BIGINT"),
                    Expr::val(row.at.as_unix_millis()).cast_as("BIGINT"),
                ])
                .and_where(
                    Expr::expr(
                        Query::select()
                            .expr(Expr::col(endpoint_col::ID).count())
                            .from(endpoints_table(table))
                            .and_where(Expr::col(endpoint_col::OWNER).eq(row.owner))
                            .to_owned(),
                    )
                    .lt(i64::from(row.most)),
                )
                .to_owned(),
        )
        .map_err(query_error)?;
    dialect.render(&insert)
}

/// The endpoint `id` of `owner` (a select of its id, for `IN`).
pub(super) fn owned(table: &TableName, owner: &str, id: &str) -> SelectStatement {
    let mut select = Query::select();
    select
        .column(endpoint_col::ID)
        .from(endpoints_table(table))
        .and_where(Expr::col(endpoint_col::ID).eq(id))
        .and_where(Expr::col(endpoint_col::OWNER).eq(owner));
    select
}

/// What an update writes of an endpoint.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rewrite<'a> {
    pub(crate) target: &'a str,
    pub(crate) metadata: &'a str,
    pub(crate) filter: Option<(&'a str, &'a str)>,
}

/// Rewrites the target, metadata and filter of `owner`'s endpoint `id`.
pub(crate) fn update(
    table: &TableName,
    dialect: Dialect,
    (owner, id): (&str, &str),
    rewrite: &Rewrite<'_>,
    at: Timestamp,
) -> Result<Statement> {
    let mut update = Query::update();
    update
        .table(endpoints_table(table))
        .value(endpoint_col::TARGET, rewrite.target)
        .value(endpoint_col::METADATA, rewrite.metadata)
        .value(
            endpoint_col::FILTER_FIELD,
            rewrite.filter.map(|(field, _)| field.to_owned()),
        )
        .value(
            endpoint_col::FILTER_VALUE,
            rewrite.filter.map(|(_, value)| value.to_owned()),
        )
        .value(endpoint_col::UPDATED_AT, at.as_unix_millis())
        .and_where(Expr::col(endpoint_col::ID).eq(id))
        .and_where(Expr::col(endpoint_col::OWNER).eq(owner));
    dialect.render(&update)
}

/// Sets the state of `owner`'s endpoint `id`.
pub(crate) fn set_state(
    table: &TableName,
    dialect: Dialect,
    owner: &str,
    id: &str,
    state: &'static str,
    at: Timestamp,
) -> Result<Statement> {
    let mut update = Query::update();
    update
        .table(endpoints_table(table))
        .value(endpoint_col::STATE, state)
        .value(endpoint_col::UPDATED_AT, at.as_unix_millis())
        .and_where(Expr::col(endpoint_col::ID).eq(id))
        .and_where(Expr::col(endpoint_col::OWNER).eq(owner));
    dialect.render(&update)
}

/// Holds the deliveries of `owner`'s endpoint `id` (its pause row, with
/// `reason`; an earlier reason is replaced).
pub(crate) fn hold(
    table: &TableName,
    dialect: Dialect,
    owner: &str,
    id: &str,
    reason: &str,
    at: Timestamp,
) -> Result<Statement> {
    let mut select = owned(table, owner, id);
    select
        .expr(Expr::val(reason))
        .expr(Expr::val(at.as_unix_millis()));
    let mut insert = Query::insert();
    insert
        .into_table(paused_table(table))
        .columns([paused_col::TOPIC, paused_col::REASON, paused_col::PAUSED_AT])
        .select_from(select)
        .map_err(query_error)?
        .on_conflict(
            OnConflict::column(paused_col::TOPIC)
                .update_columns([paused_col::REASON, paused_col::PAUSED_AT])
                .to_owned(),
        );
    dialect.render(&insert)
}

/// Ends the hold on `owner`'s endpoint `id` (its pause row).
pub(crate) fn unhold(
    table: &TableName,
    dialect: Dialect,
    owner: &str,
    id: &str,
) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(paused_table(table))
        .and_where(Expr::col(paused_col::TOPIC).in_subquery(owned(table, owner, id)));
    dialect.render(&delete)
}

/// Deletes the subscriptions of `owner`'s endpoint `id`.
pub(crate) fn unsubscribe(
    table: &TableName,
    dialect: Dialect,
    owner: &str,
    id: &str,
) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(subscriptions_table(table))
        .and_where(Expr::col(subscription_col::ENDPOINT).in_subquery(owned(table, owner, id)));
    dialect.render(&delete)
}

/// Subscribes `owner`'s endpoint `id` to `event_type`.
pub(crate) fn subscribe(
    table: &TableName,
    dialect: Dialect,
    owner: &str,
    id: &str,
    event_type: &str,
) -> Result<Statement> {
    let mut select = Query::select();
    select
        .expr(Expr::val(event_type))
        .column(endpoint_col::ID)
        .from(endpoints_table(table))
        .and_where(Expr::col(endpoint_col::ID).eq(id))
        .and_where(Expr::col(endpoint_col::OWNER).eq(owner));
    let mut insert = Query::insert();
    insert
        .into_table(subscriptions_table(table))
        .columns([subscription_col::EVENT_TYPE, subscription_col::ENDPOINT])
        .select_from(select)
        .map_err(query_error)?
        .on_conflict(
            OnConflict::columns([subscription_col::EVENT_TYPE, subscription_col::ENDPOINT])
                .do_nothing()
                .to_owned(),
        );
    dialect.render(&insert)
}

/// Deletes the delivery rows of `owner`'s endpoint `id` (pending, leased or
/// dead): a leased one's settle then finds its lease lost.
pub(crate) fn delete_deliveries(
    table: &TableName,
    dialect: Dialect,
    owner: &str,
    id: &str,
) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(table.as_str().to_owned())
        .and_where(Expr::col(col::TOPIC).in_subquery(owned(table, owner, id)))
        .and_where(Expr::col(col::EVENT_ID).is_not_null());
    dialect.render(&delete)
}

/// Deletes `owner`'s endpoint `id` itself (sent last: the statements
/// before it find it by its owner).
pub(crate) fn delete(
    table: &TableName,
    dialect: Dialect,
    owner: &str,
    id: &str,
) -> Result<Statement> {
    let mut delete = Query::delete();
    delete
        .from_table(endpoints_table(table))
        .and_where(Expr::col(endpoint_col::ID).eq(id))
        .and_where(Expr::col(endpoint_col::OWNER).eq(owner));
    dialect.render(&delete)
}

/// Which endpoints a read takes: one owner's (or one of them), or a page of
/// every owner's in id order.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scope<'a> {
    /// `owner`'s endpoints, `id` alone if given.
    Owner { owner: &'a str, id: Option<&'a str> },
    /// The first `limit` endpoints of any owner whose id is after `after`.
    Page { after: Option<&'a str>, limit: u32 },
}

impl Scope<'_> {
    /// Narrows `select` (over the endpoints table, qualified by `endpoints`)
    /// to the scope's endpoints.
    fn narrow(&self, select: &mut SelectStatement, endpoints: &str) {
        let column = |name: &'static str| Expr::col((endpoints.to_owned(), name));
        match *self {
            Scope::Owner { owner, id } => {
                select.and_where(column(endpoint_col::OWNER).eq(owner));
                if let Some(id) = id {
                    select.and_where(column(endpoint_col::ID).eq(id));
                }
            }
            Scope::Page { after, limit } => {
                if let Some(after) = after {
                    select.and_where(column(endpoint_col::ID).gt(after));
                }
                select.limit(u64::from(limit));
            }
        }
        select.order_by((endpoints.to_owned(), endpoint_col::ID), Order::Asc);
    }
}

/// The endpoints of `scope`, in id order, each with its hold's reason and
/// time (null when it has none).
pub(crate) fn select(table: &TableName, dialect: Dialect, scope: Scope<'_>) -> Result<Statement> {
    let endpoints = endpoints_table(table);
    let paused = paused_table(table);
    let mut select = Query::select();
    select
        .columns(
            [
                endpoint_col::ID,
                endpoint_col::OWNER,
                endpoint_col::TARGET,
                endpoint_col::METADATA,
                endpoint_col::STATE,
                endpoint_col::FILTER_FIELD,
                endpoint_col::FILTER_VALUE,
                endpoint_col::CREATED_AT,
                endpoint_col::UPDATED_AT,
            ]
            .map(|column| (endpoints.clone(), column)),
        )
        .expr_as(
            Expr::col((paused.clone(), paused_col::REASON)),
            endpoint_col::HELD_REASON,
        )
        .expr_as(
            Expr::col((paused.clone(), paused_col::PAUSED_AT)),
            endpoint_col::HELD_AT,
        )
        .from(endpoints.clone())
        .left_join(
            paused.clone(),
            Expr::col((paused, paused_col::TOPIC)).equals((endpoints.clone(), endpoint_col::ID)),
        );
    scope.narrow(&mut select, &endpoints);
    dialect.render(&select)
}

/// The subscriptions of the endpoints of `scope`.
pub(crate) fn select_subscriptions(
    table: &TableName,
    dialect: Dialect,
    scope: Scope<'_>,
) -> Result<Statement> {
    let name = endpoints_table(table);
    let mut endpoints = Query::select();
    endpoints.column(endpoint_col::ID).from(name.clone());
    scope.narrow(&mut endpoints, &name);
    let mut select = Query::select();
    select
        .columns([subscription_col::ENDPOINT, subscription_col::EVENT_TYPE])
        .from(subscriptions_table(table))
        .and_where(Expr::col(subscription_col::ENDPOINT).in_subquery(endpoints))
        .order_by(subscription_col::ENDPOINT, Order::Asc)
        .order_by(subscription_col::EVENT_TYPE, Order::Asc);
    dialect.render(&select)
}

/// Deletes the events published for a subject stored as one of `forms`
/// (kept for their recovery).
pub(crate) fn erase_events(
    table: &TableName,
    dialect: Dialect,
    forms: &[&str],
) -> Result<Statement> {
    let mut events = Query::delete();
    events
        .from_table(events_table(table))
        .and_where(super::one_of(event_col::SUBJECT, forms));
    dialect.render(&events)
}
