//! Events published to endpoints (`<table>_events`) and the delivery rows
//! they make: the fan-out inside the publishing batch, a recovery since a
//! time, the retention, and operational events written with the change
//! they report. The endpoints themselves are in [`endpoints`](super::endpoints).

use sea_query::{BinOper, Expr, ExprTrait, OnConflict, Order, Query, SelectStatement};

use super::endpoints::{
    EVERY_TYPE, endpoint_col, endpoint_state, endpoints_table, event_col, events_table, owned,
    subscription_col, subscriptions_table,
};
use super::paused::paused_topics;
use super::{col, state};
use crate::database::{Dialect, Statement, query_error};
use crate::error::Result;
use crate::identifier::TableName;
use crate::time::Timestamp;

/// The type of the operational event of a message that died (written in
/// SQL by a claim that parks rows as dead): see
/// [`operational::MESSAGE_DEAD`](crate::outbox::operational::MESSAGE_DEAD).
pub(crate) const MESSAGE_DEAD: &str = "outbox.message.dead";

/// How an operational event's id starts: see
/// [`operational::EVENT_ID_PREFIX`](crate::outbox::operational::EVENT_ID_PREFIX).
pub(crate) const EVENT_ID_PREFIX: &str = "evt_outbox_";

/// An event as published.
#[derive(Debug, Clone, Copy)]
pub(crate) struct EventRow<'a> {
    pub(crate) id: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) event_type: &'a str,
    /// As stored: sealed, with a key ring.
    pub(crate) payload: &'a str,
    /// The clear payload endpoints' filters read (a bound value, never
    /// stored): `payload` unless sealed.
    pub(crate) filtered: &'a str,
    pub(crate) subject: Option<&'a str>,
    /// Its deliveries to one endpoint are delivered one at a time, in
    /// publish order, with those of the same key.
    pub(crate) ordering_key: Option<&'a str>,
    pub(crate) at: Timestamp,
}

/// The separator of a delivery's ordering key: `<endpoint id>/<key>`.
pub(crate) const ORDERING_KEY_SEPARATOR: &str = "/";

/// Keeps the event (a taken id fails on the primary key).
pub(crate) fn insert_event(
    table: &TableName,
    dialect: Dialect,
    event: &EventRow<'_>,
) -> Result<Statement> {
    let mut insert = Query::insert();
    insert
        .into_table(events_table(table))
        .columns(EVENT_COLUMNS)
        .values([
            event.id.into(),
            event.owner.into(),
            event.event_type.into(),
            event.payload.into(),
            event.subject.map(str::to_owned).into(),
            event.at.as_unix_millis().into(),
        ])
        .map_err(query_error)?;
    dialect.render(&insert)
}

/// The events table's columns, in the order an insert writes them.
const EVENT_COLUMNS: [&str; 6] = [
    event_col::ID,
    event_col::OWNER,
    event_col::EVENT_TYPE,
    event_col::PAYLOAD,
    event_col::SUBJECT,
    event_col::CREATED_AT,
];

/// `event`'s values for [`EVENT_COLUMNS`], typed for a select list.
pub(crate) fn event_exprs(event: &EventRow<'_>) -> [Expr; 6] {
    let text = |value: Option<&str>| Expr::val(value.map(str::to_owned)).cast_as("TEXT");
    [
        text(Some(event.id)),
        text(Some(event.owner)),
        text(Some(event.event_type)),
        text(Some(event.payload)),
        text(event.subject),
        Expr::val(event.at.as_unix_millis()).cast_as("BIGINT"),
    ]
}

/// Keeps the event `select` yields (the events it selects, one or none).
pub(crate) fn keep_selected(
    table: &TableName,
    dialect: Dialect,
    select: SelectStatement,
) -> Result<Statement> {
    let mut insert = Query::insert();
    insert
        .into_table(events_table(table))
        .columns(EVENT_COLUMNS)
        .select_from(select)
        .map_err(query_error)?;
    dialect.render(&insert)
}

/// The separator of a delivery's id: `<event id>:<endpoint id>`.
pub(crate) const DELIVERY_ID_SEPARATOR: &str = ":";

/// One delivery row of `event` per endpoint of its owner that takes new
/// events (enabled and not held, or paused by an operator: its deliveries
/// wait) and subscribes to its type (or to every type), due at once. A
/// delivery's id and dedup key are `<event id>:<endpoint id>`, so the same
/// event is never pending twice for one endpoint; its topic is the
/// endpoint's id. Reads the owner's endpoints through their index.
pub(crate) fn fan_out(
    table: &TableName,
    dialect: Dialect,
    event: &EventRow<'_>,
) -> Result<Statement> {
    fan_out_where(table, dialect, event, false)
}

/// [`fan_out`], if the event was kept (by [`keep_if_held`] earlier in the
/// same batch).
pub(crate) fn fan_out_if_kept(
    table: &TableName,
    dialect: Dialect,
    event: &EventRow<'_>,
) -> Result<Statement> {
    fan_out_where(table, dialect, event, true)
}

fn fan_out_where(
    table: &TableName,
    dialect: Dialect,
    event: &EventRow<'_>,
    if_kept: bool,
) -> Result<Statement> {
    // A kept event is read back (an operational event's payload may be
    // completed by the statement that kept it), and drives the fan-out:
    // none kept, no endpoint is read.
    let kept = if_kept.then(|| {
        Query::select()
            .columns([event_col::ID, event_col::PAYLOAD])
            .from(events_table(table))
            .and_where(Expr::col(event_col::ID).eq(event.id))
            .to_owned()
    });
    let (id, payload, filtered) = match &kept {
        Some(_) => (
            Expr::col((KEPT, event_col::ID)),
            Expr::col((KEPT, event_col::PAYLOAD)),
            Expr::col((KEPT, event_col::PAYLOAD)),
        ),
        None => (
            Expr::val(event.id).cast_as("TEXT"),
            Expr::val(event.payload).cast_as("TEXT"),
            Expr::val(event.filtered).cast_as("TEXT"),
        ),
    };
    let fanned = Fanned {
        id,
        payload,
        filtered,
        owner: event.owner,
        event_type: event.event_type,
        subject: event.subject,
        ordering_key: event.ordering_key,
        at: event.at,
        only: None,
        kept,
    };
    fan_out_of(table, dialect, fanned)
}

/// The alias of the kept events a fan-out is driven by.
const KEPT: &str = "kept";

/// What a fan-out writes deliveries of: the event's id and payload (bound
/// values, or the columns of the event rows the select reads), and what
/// decides who receives it.
struct Fanned<'a> {
    id: Expr,
    payload: Expr,
    /// What endpoints' filters read: the clear payload.
    filtered: Expr,
    owner: &'a str,
    event_type: &'a str,
    subject: Option<&'a str>,
    ordering_key: Option<&'a str>,
    at: Timestamp,
    /// The one endpoint it goes to whatever its subscriptions and filter
    /// (a test event); `None`: every endpoint of the owner it matches.
    only: Option<&'a str>,
    /// The kept events (`id`, `payload`, as [`KEPT`]) that drive it, read
    /// before any endpoint (a `CROSS JOIN`, which SQLite does not reorder):
    /// none kept, nothing else is read. `None`: the one event of `id`.
    kept: Option<SelectStatement>,
}

/// One delivery of `event` (not kept: no recovery sends it again) to
/// `event.owner`'s endpoint `endpoint`, whatever it subscribes to, if it
/// takes new events: the test event an operator or a tenant sends to see
/// an endpoint answer.
pub(crate) fn deliver_test(
    table: &TableName,
    dialect: Dialect,
    event: &EventRow<'_>,
    endpoint: &str,
) -> Result<Statement> {
    let fanned = Fanned {
        id: Expr::val(event.id).cast_as("TEXT"),
        payload: Expr::val(event.payload).cast_as("TEXT"),
        filtered: Expr::val(event.filtered).cast_as("TEXT"),
        owner: event.owner,
        event_type: event.event_type,
        subject: None,
        ordering_key: None,
        at: event.at,
        only: Some(endpoint),
        kept: None,
    };
    fan_out_of(table, dialect, fanned)
}

/// One delivery row per endpoint of `fanned`'s owner that takes new events
/// and subscribes to its type, and lets its payload through its filter (per
/// kept event, when the events kept drive it).
fn fan_out_of(table: &TableName, dialect: Dialect, fanned: Fanned<'_>) -> Result<Statement> {
    let endpoints = endpoints_table(table);
    let at = fanned.at.as_unix_millis();
    let text = |value: Option<&str>| Expr::val(value.map(str::to_owned)).cast_as("TEXT");
    let per_endpoint = || -> Expr {
        fanned
            .id
            .clone()
            .binary(
                BinOper::Custom("||"),
                Expr::val(DELIVERY_ID_SEPARATOR).cast_as("TEXT"),
            )
            .binary(
                BinOper::Custom("||"),
                Expr::col((endpoints.clone(), endpoint_col::ID)),
            )
    };
    let mut columns = vec![
        col::STATE,
        col::DUE_AT,
        col::ID,
        col::TOPIC,
        col::PAYLOAD,
        col::SUBJECT,
        col::DEDUP_KEY,
        col::ID_GIVEN,
        col::ATTEMPTS,
        col::CREATED_AT,
        col::EVENT_ID,
        col::ORDERING_KEY,
        col::SEQ,
    ];
    // With an ordering key: each endpoint's own key, `<endpoint id>/<key>`,
    // its next place, and waiting if an earlier row of it is present.
    let ordered = fanned.ordering_key.map(|key| {
        let per_key = Expr::col((endpoints.clone(), endpoint_col::ID))
            .binary(
                BinOper::Custom("||"),
                Expr::val(ORDERING_KEY_SEPARATOR).cast_as("TEXT"),
            )
            .binary(BinOper::Custom("||"), Expr::val(key).cast_as("TEXT"));
        let latest: Expr = Query::select()
            .expr(Expr::col(("ordered", col::SEQ)).max())
            .from_as(table.as_str().to_owned(), "ordered")
            .and_where(Expr::col(("ordered", col::ORDERING_KEY)).eq(per_key.clone()))
            .to_owned()
            .into();
        (per_key, latest)
    });
    let (state, ordering_key, seq) = match &ordered {
        None => (
            Expr::val(state::READY).cast_as("TEXT"),
            text(None),
            Expr::val(Option::<i64>::None).cast_as("BIGINT"),
        ),
        Some((per_key, latest)) => (
            Expr::case(
                latest.clone().is_null(),
                Expr::val(state::READY).cast_as("TEXT"),
            )
            .finally(Expr::val(state::WAITING).cast_as("TEXT"))
            .into(),
            per_key.clone(),
            latest.clone().if_null(0).add(1),
        ),
    };
    let mut values = vec![
        state,
        Expr::val(at).cast_as("BIGINT"),
        per_endpoint(),
        Expr::col((endpoints.clone(), endpoint_col::ID)),
        fanned.payload.clone(),
        text(fanned.subject),
        per_endpoint(),
        Expr::val(0).cast_as("BIGINT"),
        Expr::val(0).cast_as("BIGINT"),
        Expr::val(at).cast_as("BIGINT"),
        fanned.id.clone(),
        ordering_key,
        seq,
    ];
    if let Some(late) =
        super::dialects::of(dialect).late_due(table, Expr::val(at).cast_as("BIGINT"))
    {
        // Only a row written ready can be late (its promotion marks a
        // waiting one).
        let late = match &ordered {
            None => late,
            Some((_, latest)) => Expr::case(latest.clone().is_null(), late).into(),
        };
        columns.push(col::LATE_DUE);
        values.push(late);
    }
    let mut subscribed = Query::select();
    subscribed
        .column(subscription_col::ENDPOINT)
        .from(subscriptions_table(table))
        .and_where(Expr::col(subscription_col::EVENT_TYPE).is_in([fanned.event_type, EVERY_TYPE]));
    let state_is =
        |value: &'static str| Expr::col((endpoints.clone(), endpoint_col::STATE)).eq(value);
    let takes_events = state_is(endpoint_state::PAUSED).or(state_is(endpoint_state::ENABLED).and(
        Expr::col((endpoints.clone(), endpoint_col::ID)).not_in_subquery(paused_topics(table)),
    ));
    let filtered = super::dialects::filter_matches(
        dialect,
        fanned.filtered,
        Expr::col((endpoints.clone(), endpoint_col::FILTER_FIELD)),
        Expr::col((endpoints.clone(), endpoint_col::FILTER_VALUE)),
    );
    let mut select = Query::select();
    select.exprs(values);
    match fanned.kept {
        Some(kept) => select
            .from_subquery(kept, KEPT)
            .cross_join(endpoints.clone()),
        None => select.from(endpoints.clone()),
    };
    select
        .and_where(Expr::col((endpoints.clone(), endpoint_col::OWNER)).eq(fanned.owner))
        .and_where(takes_events);
    match fanned.only {
        Some(endpoint) => select.and_where(Expr::col((endpoints, endpoint_col::ID)).eq(endpoint)),
        None => select
            .and_where(filtered)
            .and_where(Expr::col((endpoints, endpoint_col::ID)).in_subquery(subscribed)),
    };
    insert_deliveries(table, dialect, columns, select)
}

/// Inserts the delivery rows `select` yields into `columns`, but none
/// whose dedup key (`<event id>:<endpoint id>`) is pending already.
fn insert_deliveries(
    table: &TableName,
    dialect: Dialect,
    columns: Vec<&'static str>,
    select: SelectStatement,
) -> Result<Statement> {
    let mut insert = Query::insert();
    insert
        .into_table(table.as_str().to_owned())
        .columns(columns)
        .select_from(select)
        .map_err(query_error)?
        .on_conflict(
            OnConflict::column(col::DEDUP_KEY)
                .target_and_where(Expr::col(col::DEDUP_KEY).is_not_null())
                .do_nothing()
                .to_owned(),
        );
    dialect.render(&insert)
}

/// The rows a claim parked as dead (its attempts used up by leases that
/// ended unsettled), told to the operator as `outbox.message.dead`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimDeaths<'a> {
    /// The claim's lease token, which the rows it parks keep.
    pub(crate) token: &'a str,
    /// When the claim ran: the rows it parks are due then.
    pub(crate) at: Timestamp,
    /// The operator: the events' owner, whose own endpoints' deaths are
    /// not told.
    pub(crate) operator: &'a str,
}

impl ClaimDeaths<'_> {
    /// The ids of its events: `evt_outbox_<token>_<n>`.
    fn id_prefix(&self) -> String {
        format!("{}{}_", EVENT_ID_PREFIX, self.token)
    }
}

/// Keeps an `outbox.message.dead` event of each row `deaths` names (but a
/// delivery to one of the operator's endpoints), with the message's id,
/// topic and error in its payload: sent after the claim, in its batch.
pub(crate) fn keep_claim_deaths(
    table: &TableName,
    dialect: Dialect,
    deaths: &ClaimDeaths<'_>,
) -> Result<Statement> {
    let text = |value: String| Expr::val(value).cast_as("TEXT");
    let concat = |left: Expr, right: Expr| left.binary(BinOper::Custom("||"), right);
    let head = serde_json::json!({
        "type": MESSAGE_DEAD,
        "at_ms": deaths.at.as_unix_millis(),
    })
    .to_string();
    let json = |column: &'static str| super::dialects::of(dialect).json_string(Expr::col(column));
    let payload = [
        text(format!("{},\"message_id\":", head.trim_end_matches('}'))),
        json(col::ID),
        text(",\"topic\":".to_owned()),
        json(col::TOPIC),
        text(",\"error\":".to_owned()),
        json(col::LAST_ERROR),
        text("}".to_owned()),
    ]
    .into_iter()
    .reduce(concat)
    .unwrap_or_else(|| text(head));
    let id = concat(
        text(deaths.id_prefix()),
        Expr::cust(format!(
            "CAST(ROW_NUMBER() OVER (ORDER BY {}) AS TEXT)",
            col::ID
        )),
    );
    let mut select = Query::select();
    select
        .exprs([
            id,
            text(deaths.operator.to_owned()),
            text(MESSAGE_DEAD.to_owned()),
            payload,
            Expr::val(Option::<String>::None).cast_as("TEXT"),
            Expr::val(deaths.at.as_unix_millis()).cast_as("BIGINT"),
        ])
        .from(table.as_str().to_owned())
        .and_where(super::state_is(state::DEAD))
        .and_where(Expr::col(col::DUE_AT).eq(deaths.at.as_unix_millis()))
        .and_where(Expr::col(col::LEASE_TOKEN).eq(deaths.token))
        .and_where(Expr::col(col::TOPIC).not_in_subquery(endpoints_of(table, deaths.operator)));
    keep_selected(table, dialect, select)
}

/// The deliveries of the events [`keep_claim_deaths`] kept, to the
/// operator's endpoints subscribed to them.
pub(crate) fn fan_out_claim_deaths(
    table: &TableName,
    dialect: Dialect,
    deaths: &ClaimDeaths<'_>,
) -> Result<Statement> {
    let mut kept = Query::select();
    kept.columns([event_col::ID, event_col::PAYLOAD])
        .from(events_table(table))
        .and_where(Expr::col(event_col::OWNER).eq(deaths.operator))
        .and_where(Expr::col(event_col::CREATED_AT).eq(deaths.at.as_unix_millis()))
        .and_where(Expr::col(event_col::ID).like(format!("{}%", deaths.id_prefix())));
    let fanned = Fanned {
        id: Expr::col((KEPT, event_col::ID)),
        payload: Expr::col((KEPT, event_col::PAYLOAD)),
        filtered: Expr::col((KEPT, event_col::PAYLOAD)),
        owner: deaths.operator,
        event_type: MESSAGE_DEAD,
        subject: None,
        ordering_key: None,
        at: deaths.at,
        only: None,
        kept: Some(kept),
    };
    fan_out_of(table, dialect, fanned)
}

/// The events of `owner` since `since` that its endpoint `id` subscribes to,
/// oldest first: what [`recover`] writes deliveries of.
/// Which kept events an endpoint's filter lets through, in a recovery.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Filtered<'a> {
    /// The endpoint's filter, read by the statement from each event's
    /// payload (clear payloads).
    InSql,
    /// These events only: the filter was read by the caller from payloads
    /// it opened (sealed payloads, which SQL cannot read).
    Only(&'a [&'a str]),
    /// Every event (the caller filters what it reads).
    Unfiltered,
}

fn recoverable(
    table: &TableName,
    dialect: Dialect,
    (owner, id): (&str, &str),
    since: Timestamp,
    through: Filtered<'_>,
) -> Result<SelectStatement> {
    let events = events_table(table);
    // The endpoint's filter lets the event through.
    let mut filtered = Query::select();
    filtered
        .expr(Expr::cust("1"))
        .from(endpoints_table(table))
        .and_where(Expr::col((endpoints_table(table), endpoint_col::ID)).eq(id))
        .and_where(super::dialects::filter_matches(
            dialect,
            Expr::col((events.clone(), event_col::PAYLOAD)),
            Expr::col((endpoints_table(table), endpoint_col::FILTER_FIELD)),
            Expr::col((endpoints_table(table), endpoint_col::FILTER_VALUE)),
        ));
    let mut subscribed = Query::select();
    subscribed
        .expr(Expr::cust("1"))
        .from(subscriptions_table(table))
        .and_where(Expr::col((subscriptions_table(table), subscription_col::ENDPOINT)).eq(id))
        .and_where(
            Expr::col((subscriptions_table(table), subscription_col::EVENT_TYPE))
                .equals((events.clone(), event_col::EVENT_TYPE))
                .or(
                    Expr::col((subscriptions_table(table), subscription_col::EVENT_TYPE))
                        .eq(EVERY_TYPE),
                ),
        );
    let mut select = Query::select();
    select
        .from(events.clone())
        .and_where(Expr::col((events.clone(), event_col::OWNER)).eq(owner))
        .and_where(Expr::col((events.clone(), event_col::CREATED_AT)).gte(since.as_unix_millis()))
        .and_where(Expr::exists(subscribed));
    match through {
        Filtered::InSql => {
            select.and_where(Expr::exists(filtered));
        }
        Filtered::Only(ids) => {
            select.and_where(super::dialects::of(dialect).listed_in(
                &format!("\"{events}\".\"{}\"", event_col::ID),
                super::json_text(&ids, "the events a recovery sends")?,
            ));
        }
        Filtered::Unfiltered => {}
    }
    select
        .order_by((events.clone(), event_col::CREATED_AT), Order::Asc)
        .order_by((events, event_col::ID), Order::Asc);
    Ok(select)
}

/// The first `limit` events since `since` that `owner`'s endpoint `id`
/// subscribes to, whatever its filter: their id, payload, subject and time,
/// for a caller that reads the filter from payloads it opens.
pub(crate) fn recoverable_events(
    table: &TableName,
    dialect: Dialect,
    (owner, id): (&str, &str),
    since: Timestamp,
    limit: u32,
) -> Result<Statement> {
    let events = events_table(table);
    let mut select = recoverable(table, dialect, (owner, id), since, Filtered::Unfiltered)?;
    select
        .columns([
            (events.clone(), event_col::ID),
            (events.clone(), event_col::PAYLOAD),
            (events.clone(), event_col::SUBJECT),
            (events, event_col::CREATED_AT),
        ])
        .limit(u64::from(limit));
    dialect.render(&select)
}

/// Writes, due at once, a delivery to `owner`'s endpoint `id` of each of
/// the first `limit` events since `since` it subscribes to (an event still
/// pending for it is not written twice). Nothing for an endpoint of
/// another owner.
pub(crate) fn recover(
    table: &TableName,
    dialect: Dialect,
    (owner, id): (&str, &str),
    since: Timestamp,
    (now, limit): (Timestamp, u32),
    through: Filtered<'_>,
) -> Result<Statement> {
    let events = events_table(table);
    let delivery_id = || -> Expr {
        Expr::col((events.clone(), event_col::ID))
            .binary(
                BinOper::Custom("||"),
                Expr::val(DELIVERY_ID_SEPARATOR).cast_as("TEXT"),
            )
            .binary(BinOper::Custom("||"), Expr::val(id).cast_as("TEXT"))
    };
    let at = now.as_unix_millis();
    let mut columns = vec![
        col::STATE,
        col::DUE_AT,
        col::ID,
        col::TOPIC,
        col::PAYLOAD,
        col::SUBJECT,
        col::DEDUP_KEY,
        col::ID_GIVEN,
        col::ATTEMPTS,
        col::CREATED_AT,
        col::EVENT_ID,
    ];
    let mut values = vec![
        Expr::val(state::READY).cast_as("TEXT"),
        Expr::val(at).cast_as("BIGINT"),
        delivery_id(),
        Expr::val(id).cast_as("TEXT"),
        Expr::col((events.clone(), event_col::PAYLOAD)),
        Expr::col((events.clone(), event_col::SUBJECT)),
        delivery_id(),
        Expr::val(0).cast_as("BIGINT"),
        Expr::val(0).cast_as("BIGINT"),
        Expr::val(at).cast_as("BIGINT"),
        Expr::col((events.clone(), event_col::ID)),
    ];
    if let Some(late) =
        super::dialects::of(dialect).late_due(table, Expr::val(at).cast_as("BIGINT"))
    {
        columns.push(col::LATE_DUE);
        values.push(late);
    }
    let mut select = recoverable(table, dialect, (owner, id), since, through)?;
    select
        .exprs(values)
        .and_where(Expr::exists(owned(table, owner, id)))
        .limit(u64::from(limit));
    insert_deliveries(table, dialect, columns, select)
}

/// The time of the event [`recover`] with the same arguments would reach
/// next (the `limit + 1`-th), if there is one.
pub(crate) fn recover_next(
    table: &TableName,
    dialect: Dialect,
    (owner, id): (&str, &str),
    since: Timestamp,
    limit: u32,
    through: Filtered<'_>,
) -> Result<Statement> {
    let mut select = recoverable(table, dialect, (owner, id), since, through)?;
    select
        .expr_as(
            Expr::col((events_table(table), event_col::CREATED_AT)),
            event_col::CREATED_AT,
        )
        .limit(1)
        .offset(u64::from(limit));
    dialect.render(&select)
}

/// Deletes up to `limit` of the oldest events published before `before`.
pub(crate) fn prune_events(
    table: &TableName,
    dialect: Dialect,
    before: Timestamp,
    limit: u32,
) -> Result<Statement> {
    super::delete_oldest(
        dialect,
        events_table(table),
        &[event_col::ID],
        event_col::CREATED_AT,
        before,
        limit,
    )
}

/// The events of `subject`, oldest first.
pub(crate) fn events_of_subject(
    table: &TableName,
    dialect: Dialect,
    subject: &[&str],
) -> Result<Statement> {
    let mut select = Query::select();
    select
        .columns(EVENT_COLUMNS)
        .from(events_table(table))
        .and_where(super::one_of(event_col::SUBJECT, subject))
        .order_by(event_col::CREATED_AT, Order::Asc)
        .order_by(event_col::ID, Order::Asc);
    dialect.render(&select)
}

/// The ids of `owner`'s endpoints: the topics of their deliveries.
pub(crate) fn endpoints_of(table: &TableName, owner: &str) -> SelectStatement {
    let mut ids = Query::select();
    ids.column(endpoint_col::ID)
        .from(endpoints_table(table))
        .and_where(Expr::col(endpoint_col::OWNER).eq(owner));
    ids
}

/// Which rows an operational event is about.
#[derive(Debug, Clone, Copy)]
pub(crate) enum About<'a> {
    /// A delivery to an endpoint (its topic is an endpoint's id).
    AnEndpointsDelivery,
    /// Any row but a delivery to an endpoint of `owner` (the operator's
    /// own: a failing operator endpoint must not report its own reports).
    NotADeliveryOf(&'a str),
}

/// Keeps `event` if the row `lease` holds is still held and is what
/// `about` says: an operational event about a settle, written by it.
pub(crate) fn keep_if_held(
    table: &TableName,
    dialect: Dialect,
    lease: &super::Fence<'_>,
    event: &EventRow<'_>,
    about: About<'_>,
) -> Result<Statement> {
    let mut select = Query::select();
    select
        .exprs(event_exprs(event))
        .from(table.as_str().to_owned())
        .and_where(lease.holds());
    match about {
        About::AnEndpointsDelivery => {
            let mut endpoint_ids = Query::select();
            endpoint_ids
                .column(endpoint_col::ID)
                .from(endpoints_table(table));
            select.and_where(Expr::col(col::TOPIC).in_subquery(endpoint_ids));
        }
        About::NotADeliveryOf(owner) => {
            select.and_where(Expr::col(col::TOPIC).not_in_subquery(endpoints_of(table, owner)));
        }
    }
    keep_selected(table, dialect, select)
}

/// Deletes the dead deliveries to `owner`'s endpoint `id` of its events
/// since `since`: a recovery writes them anew (their dedup keys would
/// otherwise keep it from doing so).
pub(crate) fn forget_dead_deliveries(
    table: &TableName,
    dialect: Dialect,
    owner: &str,
    id: &str,
    since: Timestamp,
) -> Result<Statement> {
    let mut events = Query::select();
    events
        .column(event_col::ID)
        .from(events_table(table))
        .and_where(Expr::col(event_col::OWNER).eq(owner))
        .and_where(Expr::col(event_col::CREATED_AT).gte(since.as_unix_millis()));
    let mut delete = Query::delete();
    delete
        .from_table(table.as_str().to_owned())
        .and_where(super::state_is(state::DEAD))
        .and_where(Expr::col(col::TOPIC).in_subquery(owned(table, owner, id)))
        .and_where(Expr::col(col::EVENT_ID).in_subquery(events));
    dialect.render(&delete)
}

/// Keeps `event` if `owner`'s endpoint `id` exists: an operational event
/// about a change of it through the API, written with the change.
pub(crate) fn keep_if_endpoint(
    table: &TableName,
    dialect: Dialect,
    owner: &str,
    id: &str,
    event: &EventRow<'_>,
) -> Result<Statement> {
    let mut select = owned(table, owner, id);
    select.clear_selects();
    select.exprs(event_exprs(event));
    keep_selected(table, dialect, select)
}
