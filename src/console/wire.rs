//! What the API reads from requests and writes into answers, shared by its
//! routes.

use serde_json::{Value as Json, json};

use serde::Serialize;

use super::Console;
use super::access::Grant;
use crate::endpoint::model::shown_url;
use crate::endpoint::{BodyFormat, Endpoint, EndpointFilter, EndpointKind, EndpointState};
use crate::error::{Error, Result};
use crate::fleet::FleetEntry;
use crate::outbox::{
    BrowsedMessage, Head, Histogram, MessageState, PausedTopic, Rollup, StoredMessage,
};
use crate::time::Timestamp;

/// What a caller may see of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Seen {
    /// Every field (payloads shown).
    Whole,
    /// No payload, dedup key or ordering key: the application chose them,
    /// and they may carry personal data (payloads hidden).
    KeysHidden,
    /// A tenant's own delivery: its payload (what it receives anyway), but
    /// none of the application's subject, trace, dedup and ordering keys.
    Tenant,
}

impl Seen {
    /// What `grant` sees on `console`.
    pub(super) fn by(console: &Console, grant: &Grant) -> Self {
        match (&grant.owner, console.inner.show_payloads) {
            (Some(_), _) => Seen::Tenant,
            (None, true) => Seen::Whole,
            (None, false) => Seen::KeysHidden,
        }
    }
}

/// A message as the API shows it to a caller who sees `seen` of it.
#[derive(Debug, Serialize)]
pub(super) struct MessageView<'a> {
    id: &'a str,
    state: MessageState,
    topic: &'a str,
    payload: Option<&'a str>,
    payload_bytes: usize,
    keys_hidden: bool,
    subject: Option<&'a str>,
    dedup_key: Option<&'a str>,
    ordering_key: Option<&'a str>,
    attempts: u32,
    unsettled_leases: u32,
    deferrals: u32,
    last_error: Option<&'a str>,
    due_at: i64,
    created_at: i64,
    /// Where a list or a detail found it (none in an export).
    #[serde(flatten)]
    listing: Option<Listing<'a>>,
}

/// What a list or a detail adds to a message.
#[derive(Debug, Serialize)]
struct Listing<'a> {
    trace_id: Option<&'a str>,
    /// The head of its ordering key, if it waits behind one.
    waits_on: Option<&'a Head>,
    /// The pause of its topic holding it back (pending or waiting only).
    paused: Option<PauseView<'a>>,
}

#[derive(Debug, Serialize)]
struct PauseView<'a> {
    reason: &'a str,
    paused_at_ms: i64,
}

impl<'a> MessageView<'a> {
    /// A stored message (as a subject's export gives it).
    pub(super) fn stored(message: &'a StoredMessage, seen: Seen) -> Self {
        let whole = seen == Seen::Whole;
        let application = seen != Seen::Tenant;
        MessageView {
            id: &message.id,
            state: message.state,
            topic: &message.topic,
            payload: (seen != Seen::KeysHidden).then_some(message.payload.as_str()),
            payload_bytes: message.payload.len(),
            keys_hidden: !whole,
            subject: message.subject.as_deref().filter(|_| application),
            dedup_key: message.dedup_key.as_deref().filter(|_| whole),
            ordering_key: message.ordering_key.as_deref().filter(|_| whole),
            attempts: message.attempts,
            unsettled_leases: message.unsettled_leases,
            deferrals: message.deferrals,
            last_error: message.last_error.as_deref(),
            due_at: message.due_at.as_unix_millis(),
            created_at: message.created_at.as_unix_millis(),
            listing: None,
        }
    }

    /// A message a list or a detail found; `paused`: the topics paused now.
    pub(super) fn listed(
        browsed: &'a BrowsedMessage,
        seen: Seen,
        paused: &'a [PausedTopic],
    ) -> Self {
        let message = &browsed.message;
        let held = matches!(message.state, MessageState::Pending | MessageState::Waiting);
        let pause = paused
            .iter()
            .find(|pause| held && pause.topic == message.topic)
            .map(|pause| PauseView {
                reason: &pause.reason,
                paused_at_ms: pause.paused_at.as_unix_millis(),
            });
        MessageView {
            listing: Some(Listing {
                trace_id: browsed.trace_id.as_deref().filter(|_| seen != Seen::Tenant),
                waits_on: browsed.waits_on.as_ref(),
                paused: pause,
            }),
            ..MessageView::stored(message, seen)
        }
    }
}

/// A page of messages as the API shows it: `next` where the next page
/// starts, `scan` the walk's bound, and for a tenant whether the walk was
/// cut before its page filled.
#[derive(Debug, Serialize)]
pub(super) struct MessagePage<'a> {
    pub(super) messages: Vec<MessageView<'a>>,
    pub(super) next: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) scan: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) walk_cut: Option<bool>,
}

/// A minute's (or a topic's) rollup as the API shows it: counts, and the
/// p50/p90/p99 of lateness, age and delivery time (the upper bounds of
/// their buckets, in ms).
#[derive(Debug, Serialize)]
pub(super) struct RollupView {
    #[serde(skip_serializing_if = "Option::is_none")]
    at_ms: Option<i64>,
    delivered: u64,
    retried: u64,
    deferred: u64,
    dead: u64,
    handed_back: u64,
    lease_lost: u64,
    suspects_alone: u64,
    breaker_trips: u64,
    lateness: Quantiles,
    age: Quantiles,
    duration: Quantiles,
}

#[derive(Debug, Serialize)]
struct Quantiles {
    count: u64,
    p50_ms: Option<u64>,
    p90_ms: Option<u64>,
    p99_ms: Option<u64>,
}

impl Quantiles {
    fn of(histogram: &Histogram) -> Self {
        let ms = |q| {
            histogram
                .quantile(q)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        };
        Quantiles {
            count: histogram.count(),
            p50_ms: ms(0.5),
            p90_ms: ms(0.9),
            p99_ms: ms(0.99),
        }
    }
}

impl RollupView {
    /// `sum`, of the minute starting at `at_ms` if it is one.
    pub(super) fn of(sum: &Rollup, at_ms: Option<i64>) -> Self {
        let c = &sum.counts;
        RollupView {
            at_ms,
            delivered: c.delivered,
            retried: c.retried,
            deferred: c.deferred,
            dead: c.dead,
            handed_back: c.handed_back,
            lease_lost: c.lease_lost,
            suspects_alone: c.suspects_alone,
            breaker_trips: c.breaker_trips,
            lateness: Quantiles::of(&sum.lateness),
            age: Quantiles::of(&sum.age),
            duration: Quantiles::of(&sum.duration),
        }
    }
}

/// An endpoint as the API shows it: never a secret; while payloads are
/// hidden, an operator sees a URL's origin only and no metadata; a tenant
/// its own URL whole and no metadata (the application's).
#[derive(Debug, Serialize)]
pub(super) struct EndpointView<'a> {
    id: &'a str,
    owner: &'a str,
    url: std::borrow::Cow<'a, str>,
    kind: &'a EndpointKind,
    event_types: &'a [String],
    filter: &'a Option<EndpointFilter>,
    rate_limit_per_second: Option<u32>,
    body: &'a BodyFormat,
    #[serde(flatten)]
    state: &'a EndpointState,
    metadata: Option<&'a Json>,
    previous_secret_expires_ms: Option<i64>,
    created_ms: i64,
    updated_ms: i64,
    details_hidden: bool,
}

impl<'a> EndpointView<'a> {
    pub(super) fn of(console: &Console, grant: &Grant, endpoint: &'a Endpoint) -> Self {
        let operator = grant.owner.is_none();
        let hidden = operator && !console.inner.show_payloads;
        EndpointView {
            id: &endpoint.id,
            owner: &endpoint.owner,
            url: if hidden {
                shown_url(&endpoint.url).into()
            } else {
                endpoint.url.as_str().into()
            },
            kind: &endpoint.kind,
            event_types: &endpoint.event_types,
            filter: &endpoint.filter,
            rate_limit_per_second: endpoint.rate_limit,
            body: &endpoint.body,
            state: &endpoint.state,
            metadata: (operator && !hidden).then_some(&endpoint.metadata),
            previous_secret_expires_ms: endpoint
                .previous_secret_expires
                .map(Timestamp::as_unix_millis),
            created_ms: endpoint.created_at.as_unix_millis(),
            updated_ms: endpoint.updated_at.as_unix_millis(),
            details_hidden: hidden,
        }
    }
}

/// Refuses text with a NUL (Postgres cannot store one: it would be a 500).
pub(super) fn no_nul(what: &'static str, text: &str) -> Result<()> {
    if text.contains('\0') {
        return Err(Error::invalid(what, "holds a NUL character"));
    }
    Ok(())
}

/// A request's query: its parameters, decoded, as given.
#[derive(Debug, Default)]
pub(super) struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Reads `query` (`a=1&b=x`).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a value that holds a NUL.
    pub(super) fn parse(query: &str) -> Result<Self> {
        let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        if let Some((name, _)) = pairs.iter().find(|(_, value)| value.contains('\0')) {
            return Err(Error::invalid(
                "query",
                format!("{name} holds a NUL character"),
            ));
        }
        Ok(Query { pairs })
    }

    /// The first value of `name`, unless it is missing or empty.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
            .filter(|value| !value.is_empty())
    }
}

pub(super) fn read_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|error| Error::invalid("request body", error.to_string()))
}

/// A member's outbox in the fleet view, `console` the link to its own
/// console. Counts are as read: above the summary's cap means "more".
pub(super) fn fleet_entry(entry: &FleetEntry, console: &str) -> Json {
    let summary = &entry.summary;
    json!({
        "member": entry.member,
        "outbox": entry.outbox,
        "backlog": summary.backlog,
        "dead": summary.dead,
        "oldest_due_at_ms": summary.oldest_due_at.map(Timestamp::as_unix_millis),
        "last_error": summary.last_error,
        "reported_at_ms": entry.reported_at.as_unix_millis(),
        "console": console,
    })
}

/// The item of `list` called `name` (`what` names it when it is not found).
pub(super) fn named<'a, T>(
    list: &'a [(String, T)],
    name: &str,
    what: &'static str,
) -> Result<&'a T> {
    list.iter()
        .find(|(known, _)| known == name)
        .map(|(_, item)| item)
        .ok_or_else(|| Error::NotFound {
            what,
            id: name.to_owned(),
        })
}

/// A query parameter that is a whole number in `1 ..= most`; `default`
/// when it is not given.
pub(super) fn whole(
    name: &'static str,
    text: Option<&str>,
    default: u32,
    most: u32,
) -> Result<u32> {
    match text.map(str::parse::<u32>) {
        None => Ok(default),
        Some(Ok(number)) if (1..=most).contains(&number) => Ok(number),
        Some(_) => Err(Error::invalid(
            name,
            format!("a whole number in 1 ..= {most}"),
        )),
    }
}
