//! What the API writes into its answers: each view is built from the
//! library's types for what its caller may see (a message's payload and
//! keys, an endpoint's URL and metadata), so no answer is patched after it
//! was serialized; only plain enums (an endpoint's kind and body format)
//! are written as the library names them.

use serde::Serialize;
use serde_json::{Value as Json, json};

use super::Console;
use super::access::Grant;
use crate::endpoint::model::shown_url;
use crate::endpoint::{BodyFormat, Endpoint, EndpointKind, EndpointState};
use crate::fleet::FleetEntry;
use crate::inbox::InboxEntry;
use crate::outbox::{
    AuditEntry, BrowsedMessage, CappedCount, DeadCount, DeadLetterGroups, DueNow, Head, Histogram,
    LoggedAttempt, MessageState, Overview, PausedTopic, Rollup, StoredMessage,
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
    state: &'static str,
    topic: &'a str,
    payload: Option<&'a str>,
    payload_bytes: usize,
    /// Why a sealed payload was not opened (its text is never shown).
    unopened: Option<&'a str>,
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
    waits_on: Option<HeadView<'a>>,
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
            state: state_name(message.state),
            topic: &message.topic,
            payload: (seen != Seen::KeysHidden && message.unopened.is_none())
                .then_some(message.payload.as_str()),
            payload_bytes: message.payload.len(),
            unopened: message.unopened.as_deref(),
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
                waits_on: browsed.waits_on.as_ref().map(HeadView::from),
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

/// A count that stopped at a cap.
#[derive(Debug, Serialize)]
pub(super) struct CountView {
    count: u64,
    capped: bool,
}

impl From<CappedCount> for CountView {
    fn from(count: CappedCount) -> Self {
        CountView {
            count: count.count,
            capped: count.capped,
        }
    }
}

/// An outbox's counts per state, and how overdue its most overdue message is.
#[derive(Debug, Serialize)]
pub(super) struct OverviewView {
    due: CountView,
    scheduled: CountView,
    leased: CountView,
    waiting: CountView,
    dead: CountView,
    oldest_due_age_ms: Option<u64>,
}

impl From<&Overview> for OverviewView {
    fn from(overview: &Overview) -> Self {
        OverviewView {
            due: overview.due.into(),
            scheduled: overview.scheduled.into(),
            leased: overview.leased.into(),
            waiting: overview.waiting.into(),
            dead: overview.dead.into(),
            oldest_due_age_ms: overview.oldest_due_age.map(millis),
        }
    }
}

/// The messages due now and how overdue the oldest is, as an
/// auto-refresh reads them.
#[derive(Debug, Serialize)]
pub(super) struct LiveView {
    due: CountView,
    oldest_due_age_ms: Option<u64>,
}

impl From<&DueNow> for LiveView {
    fn from(live: &DueNow) -> Self {
        LiveView {
            due: live.due.into(),
            oldest_due_age_ms: live.oldest_due_age.map(millis),
        }
    }
}

/// A duration in whole milliseconds.
fn millis(duration: std::time::Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// A paused topic: why, and since when.
#[derive(Debug, Serialize)]
pub(super) struct PausedView<'a> {
    topic: &'a str,
    reason: &'a str,
    paused_at_ms: i64,
}

impl<'a> From<&'a PausedTopic> for PausedView<'a> {
    fn from(paused: &'a PausedTopic) -> Self {
        PausedView {
            topic: &paused.topic,
            reason: &paused.reason,
            paused_at_ms: paused.paused_at.as_unix_millis(),
        }
    }
}

/// Dead letters grouped by topic and error class, from the oldest read.
#[derive(Debug, Serialize)]
pub(super) struct GroupsView<'a> {
    groups: Vec<GroupView<'a>>,
    scanned: u64,
    complete: bool,
    read_at_ms: i64,
}

#[derive(Debug, Serialize)]
struct GroupView<'a> {
    topic: &'a str,
    error_class: &'a str,
    count: u64,
    first_died_at_ms: i64,
}

impl<'a> From<&'a DeadLetterGroups> for GroupsView<'a> {
    fn from(groups: &'a DeadLetterGroups) -> Self {
        GroupsView {
            groups: groups
                .groups
                .iter()
                .map(|group| GroupView {
                    topic: &group.topic,
                    error_class: &group.error_class,
                    count: group.count,
                    first_died_at_ms: group.first_died_at.as_unix_millis(),
                })
                .collect(),
            scanned: groups.scanned,
            complete: groups.complete,
            read_at_ms: groups.read_at.as_unix_millis(),
        }
    }
}

/// How many dead letters a filter matched among those read.
#[derive(Debug, Serialize)]
pub(super) struct DeadCountView {
    count: u64,
    scanned: u64,
    complete: bool,
    read_at_ms: i64,
}

impl From<&DeadCount> for DeadCountView {
    fn from(counted: &DeadCount) -> Self {
        DeadCountView {
            count: counted.count,
            scanned: counted.scanned,
            complete: counted.complete,
            read_at_ms: counted.read_at.as_unix_millis(),
        }
    }
}

/// An inbox key of a subject's export.
#[derive(Debug, Serialize)]
pub(super) struct InboxKeyView<'a> {
    key: &'a str,
    subject: Option<&'a str>,
    seen_at: i64,
}

impl<'a> From<&'a InboxEntry> for InboxKeyView<'a> {
    fn from(entry: &'a InboxEntry) -> Self {
        InboxKeyView {
            key: &entry.key,
            subject: entry.subject.as_deref(),
            seen_at: entry.seen_at.as_unix_millis(),
        }
    }
}

/// One logged attempt: what the receiver answered, as text.
#[derive(Debug, Serialize)]
pub(super) struct AttemptView<'a> {
    message_id: &'a str,
    topic: &'a str,
    event_id: Option<&'a str>,
    attempt: u32,
    at_ms: i64,
    status: Option<u16>,
    duration_ms: u64,
    outcome: &'a str,
    error: Option<&'a str>,
    headers: &'a [(String, String)],
    body: &'a str,
}

impl<'a> From<&'a LoggedAttempt> for AttemptView<'a> {
    fn from(attempt: &'a LoggedAttempt) -> Self {
        AttemptView {
            message_id: &attempt.message_id,
            topic: &attempt.topic,
            event_id: attempt.event_id.as_deref(),
            attempt: attempt.attempt,
            at_ms: attempt.at.as_unix_millis(),
            status: attempt.status,
            duration_ms: attempt.duration_ms,
            outcome: &attempt.outcome,
            error: attempt.error.as_deref(),
            headers: &attempt.headers,
            body: &attempt.body,
        }
    }
}

/// Attempts as views.
pub(super) fn attempt_views(attempts: &[LoggedAttempt]) -> Vec<AttemptView<'_>> {
    attempts.iter().map(AttemptView::from).collect()
}

/// One entry of the audit log.
#[derive(Debug, Serialize)]
pub(super) struct AuditView<'a> {
    at_ms: i64,
    id: &'a str,
    who: &'a str,
    role: &'a str,
    action: &'a str,
    selection: &'a Json,
    result: Option<&'a Json>,
}

impl<'a> From<&'a AuditEntry> for AuditView<'a> {
    fn from(entry: &'a AuditEntry) -> Self {
        AuditView {
            at_ms: entry.key.at.as_unix_millis(),
            id: &entry.key.id,
            who: &entry.who,
            role: &entry.role,
            action: &entry.action,
            selection: &entry.selection,
            result: entry.result.as_ref(),
        }
    }
}

/// The head of an ordering key a message waits on.
#[derive(Debug, Serialize)]
struct HeadView<'a> {
    id: &'a str,
    state: &'static str,
}

impl<'a> From<&'a Head> for HeadView<'a> {
    fn from(head: &'a Head) -> Self {
        HeadView {
            id: &head.id,
            state: state_name(head.state),
        }
    }
}

/// A message's state as the API names it.
fn state_name(state: MessageState) -> &'static str {
    match state {
        MessageState::Pending => "pending",
        MessageState::Leased => "leased",
        MessageState::Waiting => "waiting",
        MessageState::Dead => "dead",
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
    filter: Option<FilterView<'a>>,
    rate_limit_per_second: Option<u32>,
    body: &'a BodyFormat,
    state: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    since_ms: Option<i64>,
    metadata: Option<&'a Json>,
    previous_secret_expires_ms: Option<i64>,
    created_ms: i64,
    updated_ms: i64,
    details_hidden: bool,
}

/// An endpoint's filter: a payload field that must equal a text.
#[derive(Debug, Serialize)]
struct FilterView<'a> {
    field: &'a str,
    equals: &'a str,
}

impl<'a> EndpointView<'a> {
    pub(super) fn of(console: &Console, grant: &Grant, endpoint: &'a Endpoint) -> Self {
        let operator = grant.owner.is_none();
        let hidden = operator && !console.inner.show_payloads;
        let (state, reason, since_ms) = match &endpoint.state {
            EndpointState::Disabled { reason, since } => (
                "disabled",
                Some(reason.as_str()),
                Some(since.as_unix_millis()),
            ),
            EndpointState::Paused { reason, since } => (
                "paused",
                Some(reason.as_str()),
                Some(since.as_unix_millis()),
            ),
            EndpointState::Enabled => ("enabled", None, None),
        };
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
            filter: endpoint.filter.as_ref().map(|filter| FilterView {
                field: &filter.field,
                equals: &filter.equals,
            }),
            rate_limit_per_second: endpoint.rate_limit,
            body: &endpoint.body,
            state,
            reason,
            since_ms,
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

/// A member's outbox in the fleet view, `console` the link to its own
/// console (none for a name no link can hold). Counts are as read: above
/// the summary's cap means "more".
pub(super) fn fleet_entry(entry: &FleetEntry, console: Option<&str>) -> Json {
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
