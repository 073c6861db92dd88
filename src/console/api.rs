//! The handlers of the session and of an outbox's and an inbox's routes:
//! counts, rollups, messages, dead letters, pauses, the audit log.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::Console;
use super::call::{Call, DeadAction, TopicAction};
use super::views::{
    AuditView, CountView, DeadCountView, GroupsView, LiveView, MessagePage, MessageView,
    OverviewView, PausedView, RollupView, Seen, attempt_views,
};
use super::wire::{named, no_nul, read_body, whole};
use crate::error::{Error, Result};
use crate::inbox::Inbox;
use crate::outbox::{
    AuditKey, BrowseCursor, BrowseFilter, DeadFilter, Listed, MAX_SELECTION, Outbox, Resolution,
    Rollup,
};
use crate::time::Timestamp;

/// The most minutes one rollups read covers: the 48 hours minutes are kept.
const MAX_MINUTES: u32 = 48 * 60;
/// A list's largest page.
const MAX_PAGE: u32 = 100;
/// A page of the audit log unless the request asks for fewer.
const AUDIT_PAGE: u32 = 50;

/// `GET session`: who the caller is and what the console shows them; a
/// tenant's names its owner, its link's expiry and the endpoints only.
pub(super) async fn session(call: &mut Call<'_>) -> Result<Json> {
    let (inner, grant) = (&call.console.inner, call.grant);
    let endpoints: Vec<&String> = inner.endpoints.iter().map(|(name, _)| name).collect();
    if grant.owner.is_some() {
        return Ok(json!({
            "role": grant.role,
            "identity": grant.identity,
            "owner": grant.owner,
            "portal": true,
            "expires_ms": call
                .headers
                .get(super::PORTAL_HEADER)
                .and_then(|token| token.to_str().ok())
                .and_then(super::portal::Portal::expiry_of)
                .map(Timestamp::as_unix_millis),
            "outboxes": [], "inboxes": [],
            "endpoints": endpoints,
            "fleet": false,
            "show_payloads": true,
            "count_cap": inner.count_cap,
            "scan": inner.scan,
            "max_selection": MAX_SELECTION,
        }));
    }
    Ok(json!({
        "role": grant.role,
        "identity": grant.identity,
        "outboxes": inner.outboxes.iter().map(|(name, _)| name).collect::<Vec<_>>(),
        "inboxes": inner.inboxes.iter().map(|(name, _)| name).collect::<Vec<_>>(),
        "endpoints": endpoints,
        "fleet": inner.fleet.is_some(),
        "show_payloads": inner.show_payloads,
        "count_cap": inner.count_cap,
        "scan": inner.scan,
        "max_selection": MAX_SELECTION,
    }))
}

fn outbox<'a>(console: &'a Console, name: &str) -> Result<&'a Outbox> {
    named(&console.inner.outboxes, name, "outbox")
}

fn inbox<'a>(console: &'a Console, name: &str) -> Result<&'a Inbox> {
    named(&console.inner.inboxes, name, "inbox")
}

pub(super) async fn overview(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let console = call.console;
    let outbox = outbox(console, name)?;
    let overview = outbox.overview(console.inner.count_cap).await?;
    let paused = outbox.paused_topics().await?;
    Ok(json!({
        "counts": OverviewView::from(&overview),
        "count_cap": console.inner.count_cap,
        "paused": paused.iter().map(PausedView::from).collect::<Vec<_>>(),
    }))
}

/// What an auto-refresh reads: the messages due now, counted up to
/// [`LIVE_DUE_CAP`](super::LIVE_DUE_CAP), how overdue the oldest is, and
/// the paused topics; at most 51 rows and the paused ones.
pub(super) async fn live(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let outbox = outbox(call.console, name)?;
    let due = outbox.due_now(super::LIVE_DUE_CAP).await?;
    let paused = outbox.paused_topics().await?;
    Ok(json!({
        "live": LiveView::from(&due),
        "due_cap": super::LIVE_DUE_CAP,
        "paused": paused.iter().map(PausedView::from).collect::<Vec<_>>(),
    }))
}

/// The last `minutes` (default 60) per minute over every topic, and summed
/// per topic: counts, and the p50/p90/p99 of lateness, age and delivery
/// time (the upper bounds of their buckets, in ms).
pub(super) async fn rollups(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let outbox = outbox(call.console, name)?;
    let minutes = whole("minutes", call.query.get("minutes"), 60, MAX_MINUTES)?;
    let to = outbox.clock().now();
    let from = to.saturating_sub(Duration::from_secs(u64::from(minutes) * 60));
    let mut per_minute: BTreeMap<i64, Rollup> = BTreeMap::new();
    let mut per_topic: BTreeMap<String, Rollup> = BTreeMap::new();
    for rollup in outbox.rollups(from, to, Resolution::Minute).await? {
        let at = rollup.period_start.as_unix_millis();
        match per_minute.get_mut(&at) {
            Some(sum) => sum.merge(&rollup),
            None => drop(per_minute.insert(at, rollup.clone())),
        }
        match per_topic.get_mut(&rollup.topic) {
            Some(sum) => sum.merge(&rollup),
            None => drop(per_topic.insert(rollup.topic.clone(), rollup)),
        }
    }
    let series: Vec<RollupView> = per_minute
        .iter()
        .map(|(at, sum)| RollupView::of(sum, Some(*at)))
        .collect();
    let topics: BTreeMap<&str, RollupView> = per_topic
        .iter()
        .map(|(topic, sum)| (topic.as_str(), RollupView::of(sum, None)))
        .collect();
    Ok(json!({ "minutes": minutes, "series": series, "topics": topics }))
}

pub(super) async fn messages(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let (console, query) = (call.console, call.query);
    let param = |name: &str| query.get(name);
    let outbox = outbox(console, name)?;
    let mut filter = BrowseFilter::new(Listed::parse(param("state").unwrap_or("due"))?);
    filter.topic = param("topic").map(str::to_owned);
    filter.subject = param("subject").map(str::to_owned);
    filter.id_prefix = param("id").map(str::to_owned);
    let after = match (param("after"), param("from_ms")) {
        (Some(cursor), _) => Some(BrowseCursor::parse(cursor)?),
        (None, from) => time_param("from_ms", from)?.map(BrowseCursor::from),
    };
    let limit = whole("limit", param("limit"), 50, MAX_PAGE)?;
    let page = outbox
        .browse(&filter, after.as_ref(), limit, console.inner.scan)
        .await?;
    let paused = outbox.paused_topics().await?;
    let seen = Seen::by(console, call.grant);
    Ok(json!(MessagePage {
        messages: page
            .messages
            .iter()
            .map(|message| MessageView::listed(message, seen, &paused))
            .collect(),
        next: page.next.map(|next| next.to_string()),
        scan: Some(console.inner.scan),
        walk_cut: None,
    }))
}

/// One message, found by its key (`<due_at>.<id>`, as a list gave it), with
/// its logged attempts, oldest first; 404 once it moved on.
pub(super) async fn message(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let console = call.console;
    let key = call
        .query
        .get("key")
        .ok_or_else(|| Error::invalid("key", "give ?key=<due_at>.<id>, as a list gave it"))?;
    let outbox = outbox(console, name)?;
    let key = BrowseCursor::parse(key)?;
    let found = outbox
        .message_at(&key)
        .await?
        .ok_or_else(|| Error::NotFound {
            what: "message at that key (delivered, purged, or due at another time since)",
            id: key.to_string(),
        })?;
    let attempts = outbox.attempts_of(&found.message.id).await?;
    let paused = outbox.paused_topics().await?;
    let message = MessageView::listed(&found, Seen::by(console, call.grant), &paused);
    Ok(json!({ "message": message, "attempts": attempt_views(&attempts) }))
}

pub(super) async fn groups(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let console = call.console;
    let groups = outbox(console, name)?
        .dead_letter_groups(console.inner.scan)
        .await?;
    Ok(json!(GroupsView::from(&groups)))
}

pub(super) async fn inbox_count(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let cap = call.console.inner.count_cap;
    let keys = inbox(call.console, name)?.count_keys(cap).await?;
    Ok(json!({ "keys": CountView::from(keys), "count_cap": cap }))
}

pub(super) async fn inbox_key(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let inbox = inbox(call.console, name)?;
    let key = call
        .query
        .get("key")
        .ok_or_else(|| Error::invalid("key", "give ?key="))?;
    let seen = inbox.seen(key).await?;
    Ok(json!({ "key": key, "seen": seen }))
}

/// A selection of dead letters: their ids, or a filter of which the oldest
/// `limit` (at most [`MAX_SELECTION`]) are taken: any of topic, error class,
/// subject and a time range of their death (`from_ms`, `died_by_ms`). Give
/// `died_by_ms` the `read_at_ms` of the listing or count the operator acts
/// on: what died since is left alone.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Selection {
    ids: Option<Vec<String>>,
    topic: Option<String>,
    error_class: Option<String>,
    subject: Option<String>,
    from_ms: Option<i64>,
    died_by_ms: Option<i64>,
    limit: Option<usize>,
}

impl Selection {
    /// Its filter, if it is one (it names at least one criterion).
    fn filter(&self) -> Result<Option<DeadFilter>> {
        let texts = [
            ("topic", &self.topic),
            ("error_class", &self.error_class),
            ("subject", &self.subject),
        ];
        for (what, text) in texts {
            if let Some(text) = text {
                no_nul(what, text)?;
            }
        }
        let given = texts.iter().any(|(_, text)| text.is_some())
            || self.from_ms.is_some()
            || self.died_by_ms.is_some();
        if !given {
            return Ok(None);
        }
        Ok(Some(DeadFilter {
            topic: self.topic.clone(),
            error_class: self.error_class.clone(),
            subject: self.subject.clone(),
            died_from: self.from_ms.map(Timestamp::from_unix_millis).transpose()?,
            died_by: self
                .died_by_ms
                .map(Timestamp::from_unix_millis)
                .transpose()?,
        }))
    }
}

/// How many dead letters a filter (`topic`, `error_class`, `subject`,
/// `from_ms`, `to_ms`) matches, within the scan bound: what the page asks
/// the operator to confirm before a bulk action.
pub(super) async fn dead_count(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let (console, query) = (call.console, call.query);
    let param = |name: &str| query.get(name);
    let outbox = outbox(console, name)?;
    let filter = DeadFilter {
        topic: param("topic").map(str::to_owned),
        error_class: param("error_class").map(str::to_owned),
        subject: param("subject").map(str::to_owned),
        died_from: time_param("from_ms", param("from_ms"))?,
        died_by: time_param("to_ms", param("to_ms"))?,
    };
    let counted = outbox
        .count_dead_matching(&filter, console.inner.scan)
        .await?;
    Ok(json!(DeadCountView::from(&counted)))
}

pub(super) async fn dead_letters(
    call: &mut Call<'_>,
    name: &str,
    action: DeadAction,
) -> Result<Json> {
    let console = call.console;
    let outbox = &call.change.outbox(outbox(console, name)?)?;
    let selection: Selection = read_body(call.body)?;
    let limit = match selection.limit {
        None => MAX_SELECTION,
        Some(limit @ 1..=MAX_SELECTION) => limit,
        Some(limit) => {
            return Err(Error::invalid(
                "selection limit",
                format!("{limit} is outside 1 ..= {MAX_SELECTION}"),
            ));
        }
    };
    let (ids, filtered) = match (&selection.ids, selection.filter()?) {
        (Some(ids), None) if selection.limit.is_none() => {
            for id in ids {
                no_nul("id", id)?;
            }
            (ids.clone(), false)
        }
        (None, Some(filter)) => {
            let ids = outbox
                .dead_letters_matching(&filter, limit, console.inner.scan)
                .await?;
            if ids.is_empty() {
                return Ok(json!({ "selected": 0, "done": 0, "more": false }));
            }
            (ids, true)
        }
        _ => {
            return Err(Error::invalid(
                "selection",
                "give either {\"ids\": [...]} or a filter of any of \"topic\", \
                 \"error_class\", \"subject\", \"from_ms\", \"died_by_ms\" (and a \"limit\")",
            ));
        }
    };
    let done = if action == DeadAction::Replay {
        outbox.replay_selected(&ids).await?
    } else {
        outbox.purge_selected(&ids).await?
    };
    Ok(json!({
        "selected": ids.len(),
        "done": done,
        // A full batch of a filter: there may be more of it.
        "more": filtered && ids.len() == limit,
    }))
}

/// Messages as a list gave them: `"<due_at>.<id>"` each.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Keys {
    keys: Vec<String>,
}

pub(super) async fn reschedule(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let outbox = &call.change.outbox(outbox(call.console, name)?)?;
    let Keys { keys } = read_body(call.body)?;
    let keys = keys
        .iter()
        .map(|key| {
            no_nul("key", key)?;
            BrowseCursor::parse(key)
        })
        .collect::<Result<Vec<_>>>()?;
    let done = outbox.reschedule_now(&keys).await?;
    Ok(json!({ "selected": keys.len(), "done": done }))
}

/// A pause or a resume. A pause names a topic settled in the last
/// [`SEEN_MINUTES`] minutes (per the rollups) or paused already, unless
/// `unseen` says the operator means one with no such message: a typo
/// pauses nothing.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopicSwitch {
    topic: String,
    reason: Option<String>,
    #[serde(default)]
    unseen: bool,
}

/// How far back a pause looks for a topic's settled messages: the minute
/// rollups the page's topics table reads on each refresh, so a pause costs
/// no more than a refresh.
const SEEN_MINUTES: u64 = 60;

pub(super) async fn topic_switch(
    call: &mut Call<'_>,
    name: &str,
    action: TopicAction,
) -> Result<Json> {
    let outbox = &call.change.outbox(outbox(call.console, name)?)?;
    let switch: TopicSwitch = read_body(call.body)?;
    no_nul("topic", &switch.topic)?;
    let pause = action == TopicAction::Pause;
    if pause && !switch.unseen && !seen(outbox, &switch.topic).await? {
        return Err(Error::invalid(
            "topic",
            format!(
                "{:?} is not paused and had no message settled in the last {SEEN_MINUTES} \
                 minutes: send \"unseen\": true to pause it all the same",
                switch.topic
            ),
        ));
    }
    let changed = if pause {
        let reason = switch
            .reason
            .filter(|reason| !reason.trim().is_empty())
            .unwrap_or_else(|| "paused from the console".into());
        outbox.pause_topic(&switch.topic, &reason).await?
    } else {
        outbox.resume_topic(&switch.topic).await?
    };
    Ok(json!({ "topic": switch.topic, "paused": pause, "changed": changed }))
}

/// Whether `topic` is paused, or had a message settled in the last
/// [`SEEN_MINUTES`] minutes.
async fn seen(outbox: &Outbox, topic: &str) -> Result<bool> {
    if outbox
        .paused_topics()
        .await?
        .iter()
        .any(|p| p.topic == topic)
    {
        return Ok(true);
    }
    let to = outbox.clock().now();
    let from = to.saturating_sub(Duration::from_secs(SEEN_MINUTES * 60));
    Ok(outbox
        .rollups(from, to, Resolution::Minute)
        .await?
        .iter()
        .any(|rollup| rollup.topic == topic))
}

/// A query parameter that is a time in ms since 1970, if given.
fn time_param(name: &'static str, text: Option<&str>) -> Result<Option<Timestamp>> {
    text.map(|ms| {
        let ms = ms
            .parse::<i64>()
            .map_err(|_| Error::invalid(name, "a time in ms since 1970"))?;
        Timestamp::from_unix_millis(ms)
    })
    .transpose()
}

/// A page of `outbox`'s log, newest first, before the key `before`.
pub(super) async fn audit_page(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let query = call.query;
    let param = |name: &str| query.get(name);
    let outbox = named(&call.console.inner.outboxes, name, "outbox")?;
    let before = param("before").map(AuditKey::parse).transpose()?;
    let limit = whole("limit", param("limit"), AUDIT_PAGE, Outbox::MAX_AUDIT_PAGE)?;
    let entries = outbox.audit_log(before.as_ref(), limit).await?;
    let next = entries
        .last()
        .filter(|_| entries.len() == limit as usize)
        .map(|last| last.key.to_string());
    let entries: Vec<AuditView<'_>> = entries.iter().map(AuditView::from).collect();
    Ok(json!({ "entries": entries, "next_before": next }))
}
