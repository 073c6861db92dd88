//! The console's routes: the page, its assets, and the JSON API.

use std::collections::BTreeMap;
use std::time::Duration;

use http::request::Parts;
use http::{Method, Response, StatusCode, header};
use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::access::{Grant, Role, cross_site};
use super::audit::{Change, what_it_did};
use super::wire::{hide_personal, no_nul, read_body};
use super::{Console, audit, endpoints, fleet, page, subjects};
use crate::error::{Error, Result};
use crate::inbox::Inbox;
use crate::outbox::{
    BrowseCursor, BrowseFilter, DeadFilter, Histogram, Listed, MAX_SELECTION, Outbox, PausedTopic,
    Resolution, Rollup,
};
use crate::time::Timestamp;

/// The largest request body the API reads.
pub(super) const MAX_BODY: usize = 64 * 1024;
/// The most minutes one rollups read covers: the 48 hours minutes are kept.
const MAX_MINUTES: u32 = 48 * 60;
/// A list's largest page.
const MAX_PAGE: u32 = 100;

/// What the console makes of a request before it reads a byte of its body.
pub(super) enum Admission {
    /// Answered without a body: a page, an asset, or a refusal.
    Answered(Response<String>),
    /// An API request its `grant` allows; when it `changes` something, its
    /// body (at most [`MAX_BODY`]) is read next, and only then.
    Api { grant: Grant, changes: bool },
}

/// Serves the page and its assets, and checks an API request's credentials,
/// cross-site rules and role: everything that needs no body, so an anonymous
/// or cross-site request is refused before its body is read.
pub(super) async fn admit(console: &Console, parts: &Parts) -> Admission {
    let reading = parts.method == Method::GET || parts.method == Method::HEAD;
    let answer = match console_path(console, parts) {
        None => failure(StatusCode::NOT_FOUND, "not a path of the console"),
        Some("") if reading => page::redirect(&format!("{}/", console.inner.prefix)),
        Some("/") if reading => page::html(),
        Some("/console.js") if reading => page::script(),
        Some("/console.css") if reading => page::style(),
        Some("/favicon.svg") if reading => page::icon(),
        // Who the request's credentials make it, without a 401: the page
        // asks on load (Cloudflare Access signs a request in without a
        // token the page could know of) and shows its sign-in form quietly.
        Some("/api/probe") if reading => {
            let grant = grant_of(console, parts).await;
            page::json(
                StatusCode::OK,
                &json!({
                    "role": grant.as_ref().map(|grant| grant.role),
                    "identity": grant.map(|grant| grant.identity),
                }),
            )
        }
        Some(rest) if rest.starts_with("/api/") => {
            let Some(grant) = grant_of(console, parts).await else {
                return Admission::Answered(unauthorized());
            };
            if reading {
                return Admission::Api {
                    grant,
                    changes: false,
                };
            }
            if let Some(why) = cross_site(parts) {
                return Admission::Answered(failure(StatusCode::FORBIDDEN, why));
            }
            if grant.role < Role::Operator {
                return Admission::Answered(failure(
                    StatusCode::FORBIDDEN,
                    "only an operator may change anything",
                ));
            }
            return Admission::Api {
                grant,
                changes: true,
            };
        }
        Some(_) => failure(StatusCode::NOT_FOUND, "no such page"),
    };
    Admission::Answered(answer)
}

/// The 413 of a body over [`MAX_BODY`], with the console's headers.
pub(super) fn too_large() -> Response<String> {
    failure(StatusCode::PAYLOAD_TOO_LARGE, "the body is over 64 KiB")
}

fn unauthorized() -> Response<String> {
    let mut response = failure(StatusCode::UNAUTHORIZED, "missing or wrong credentials");
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer realm=\"outbox console\""),
    );
    response
}

/// The path under the console's prefix (`""` for the prefix itself).
fn console_path<'p>(console: &Console, parts: &'p Parts) -> Option<&'p str> {
    parts
        .uri
        .path()
        .strip_prefix(console.inner.prefix.as_str())
        .filter(|rest| rest.is_empty() || rest.starts_with('/'))
}

/// Answers an API request [`admit`] let through with `grant`, with its
/// body.
pub(super) async fn answer(
    console: &Console,
    parts: &Parts,
    grant: &Grant,
    body: &[u8],
) -> Response<String> {
    let role = grant.role;
    let Some(route) = console_path(console, parts).and_then(|rest| rest.strip_prefix("/api/"))
    else {
        return failure(StatusCode::NOT_FOUND, "no such page");
    };
    let query: Vec<(String, String)> =
        form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes())
            .into_owned()
            .collect();
    let param = |name: &str| {
        query
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
            .filter(|value| !value.is_empty())
    };
    if let Some((name, _)) = query.iter().find(|(_, value)| value.contains('\0')) {
        return failure(
            StatusCode::BAD_REQUEST,
            &format!("{name} holds a NUL character"),
        );
    }
    let segments: Vec<&str> = route.split('/').collect();
    let inner = &console.inner;
    // A HEAD is answered as its GET (its body dropped by the server).
    let method = if parts.method == Method::HEAD {
        &Method::GET
    } else {
        &parts.method
    };
    if grant.owner.is_some() && !tenants_may(method, &segments) {
        return failure(
            StatusCode::FORBIDDEN,
            "a portal link reaches its own endpoints and their deliveries only",
        );
    }
    let mut change = Change::new(grant, route, body);
    let answer = match (method, segments.as_slice()) {
        (&Method::GET, ["session"]) if grant.owner.is_some() => Ok(json!({
            "role": role,
            "identity": grant.identity,
            "owner": grant.owner,
            "portal": true,
            "expires_ms": parts
                .headers
                .get(super::PORTAL_HEADER)
                .and_then(|token| token.to_str().ok())
                .and_then(super::portal::Portal::expiry_of)
                .map(Timestamp::as_unix_millis),
            "outboxes": [], "inboxes": [],
            "endpoints": inner.endpoints.iter().map(|(name, _)| name).collect::<Vec<_>>(),
            "show_payloads": true,
            "count_cap": inner.count_cap,
            "scan": inner.scan,
            "max_selection": MAX_SELECTION,
        })),
        (&Method::GET, ["session"]) => Ok(json!({
            "role": role,
            "identity": grant.identity,
            "outboxes": inner.outboxes.iter().map(|(name, _)| name).collect::<Vec<_>>(),
            "inboxes": inner.inboxes.iter().map(|(name, _)| name).collect::<Vec<_>>(),
            "endpoints": inner.endpoints.iter().map(|(name, _)| name).collect::<Vec<_>>(),
            "fleet": inner.fleet.is_some(),
            "show_payloads": inner.show_payloads,
            "count_cap": inner.count_cap,
            "scan": inner.scan,
            "max_selection": MAX_SELECTION,
        })),
        (&Method::GET, ["outboxes", name]) => overview(console, name).await,
        (&Method::GET, ["outboxes", name, "rollups"]) => {
            rollups(console, name, param("minutes")).await
        }
        (&Method::GET, ["outboxes", name, "messages"]) => messages(console, name, &param).await,
        (&Method::GET, ["outboxes", name, "message"]) => match param("key") {
            Some(key) => message(console, name, key).await,
            None => Err(Error::invalid(
                "key",
                "give ?key=<due_at>.<id>, as a list gave it",
            )),
        },
        (&Method::GET, ["outboxes", name, "dead", "groups"]) => groups(console, name).await,
        (&Method::GET, ["outboxes", name, "dead", "count"]) => {
            dead_count(console, name, &param).await
        }
        (&Method::POST, ["outboxes", name, "dead", action @ ("replay" | "purge")]) => {
            dead_letters(console, name, action, body, &mut change).await
        }
        (&Method::POST, ["outboxes", name, "topics", action @ ("pause" | "resume")]) => {
            topic_switch(console, name, action, body, &mut change).await
        }
        (&Method::POST, ["outboxes", name, "messages", "reschedule"]) => {
            reschedule(console, name, body, &mut change).await
        }
        (&Method::GET, ["outboxes", _, "audit"]) if role < Role::Operator => {
            return failure(
                StatusCode::FORBIDDEN,
                "only an operator may read the audit log",
            );
        }
        (&Method::GET, ["outboxes", name, "audit"]) => audit::page(console, name, &param).await,
        (&Method::GET, ["outboxes", name, "endpoints"]) => {
            endpoints::list(console, grant, name, &param).await
        }
        (&Method::GET, ["outboxes", name, "endpoint"]) => {
            endpoints::detail(console, grant, name, &param).await
        }
        (&Method::POST, ["outboxes", name, "endpoint", action]) => {
            endpoints::act(console, grant, (name, action), body, &mut change).await
        }
        (&Method::GET, ["outboxes", name, "deliveries"]) => {
            endpoints::deliveries(console, grant, name, &param).await
        }
        (&Method::GET, ["outboxes", name, "delivery"]) => {
            endpoints::delivery(console, grant, name, &param).await
        }
        (&Method::POST, ["outboxes", name, "deliveries", "replay"]) => {
            endpoints::replay(console, grant, name, body, &mut change).await
        }
        (&Method::GET, ["fleet"]) => match &inner.fleet {
            Some(view) => fleet::page(view, &param).await,
            None => return failure(StatusCode::NOT_FOUND, "this console shows no fleet"),
        },
        (&Method::GET, ["inboxes", name]) => inbox_count(console, name).await,
        (&Method::GET, ["subjects"]) if role < Role::Operator => {
            return failure(
                StatusCode::FORBIDDEN,
                "only an operator may export a subject's data",
            );
        }
        (&Method::GET, ["subjects"]) => match param("subject") {
            Some(subject) => subjects::export(console, subject).await,
            None => Err(Error::invalid("subject", "give ?subject=")),
        },
        (&Method::POST, ["subjects", "erase"]) => subjects::erase(console, body, &mut change).await,
        (&Method::GET, ["inboxes", name, "keys"]) => inbox_key(console, name, param("key")).await,
        _ => {
            return failure(
                StatusCode::NOT_FOUND,
                "no such API route (see docs/console.md)",
            );
        }
    };
    let (status, body) = match answer {
        Ok(body) => (StatusCode::OK, body),
        Err(error) => (
            StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            json!({ "error": error.to_string() }),
        ),
    };
    if *method != Method::GET {
        let did = what_it_did(&body);
        log_change(route, grant, status, &did);
        // A refusal after a write (a test event the endpoint took none of)
        // is recorded as it was answered.
        change.record(&did).await;
    }
    page::json(status, &body)
}

/// Logs a change: its route, who asked (as the authorizer named them) and
/// as what, and what it did (the answer's plain values and counts; never an
/// endpoint's URL or a payload).
fn log_change(route: &str, grant: &Grant, status: StatusCode, did: &Json) {
    log::info!(
        "{}",
        json!({
            "event": "outbox.console.change", "route": route,
            "who": grant.identity, "role": grant.role,
            "status": status.as_u16(), "answer": did,
        })
    );
}

/// Whether a tenant's grant (scoped to one endpoint owner) may use the
/// route: its session, and the endpoint and delivery routes, which act for
/// its owner only. Every other route reads or changes what is not its own.
fn tenants_may(method: &Method, segments: &[&str]) -> bool {
    matches!(
        (method, segments),
        (&Method::GET, ["session"])
            | (
                &Method::GET,
                [
                    "outboxes",
                    _,
                    "endpoints" | "endpoint" | "deliveries" | "delivery"
                ]
            )
            | (
                &Method::POST,
                [
                    "outboxes",
                    _,
                    "endpoint",
                    "enable" | "disable" | "pause" | "test" | "recover" | "rotate"
                ]
            )
            | (&Method::POST, ["outboxes", _, "deliveries", "replay"])
    )
}

/// The grant with the highest role any authorizer gives (the first of
/// equals).
async fn grant_of(console: &Console, parts: &Parts) -> Option<Grant> {
    let mut best: Option<Grant> = None;
    for authorizer in &console.inner.authorizers {
        let Some(grant) = authorizer.authorize(parts).await else {
            continue;
        };
        if best.as_ref().is_none_or(|best| grant.role > best.role) {
            best = Some(grant);
        }
        if best
            .as_ref()
            .is_some_and(|best| best.role == Role::Operator)
        {
            break;
        }
    }
    best
}

pub(super) fn failure(status: StatusCode, message: &str) -> Response<String> {
    page::json(status, &json!({ "error": message }))
}

fn outbox<'a>(console: &'a Console, name: &str) -> Result<&'a Outbox> {
    named(&console.inner.outboxes, name, "outbox")
}

fn inbox<'a>(console: &'a Console, name: &str) -> Result<&'a Inbox> {
    named(&console.inner.inboxes, name, "inbox")
}

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

async fn overview(console: &Console, name: &str) -> Result<Json> {
    let outbox = outbox(console, name)?;
    let overview = outbox.overview(console.inner.count_cap).await?;
    let paused = outbox.paused_topics().await?;
    Ok(json!({
        "counts": overview,
        "count_cap": console.inner.count_cap,
        "paused": paused,
    }))
}

/// The last `minutes` (default 60) per minute over every topic, and summed
/// per topic: counts, and the p50/p90/p99 of lateness, age and delivery
/// time (the upper bounds of their buckets, in ms).
async fn rollups(console: &Console, name: &str, minutes: Option<&str>) -> Result<Json> {
    let outbox = outbox(console, name)?;
    let minutes = whole("minutes", minutes, 60, MAX_MINUTES)?;
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
    let series: Vec<Json> = per_minute
        .iter()
        .map(|(at, sum)| {
            let mut body = summary(sum);
            body["at_ms"] = json!(at);
            body
        })
        .collect();
    let topics: serde_json::Map<String, Json> = per_topic
        .iter()
        .map(|(topic, sum)| (topic.clone(), summary(sum)))
        .collect();
    Ok(json!({ "minutes": minutes, "series": series, "topics": topics }))
}

fn summary(sum: &Rollup) -> Json {
    let c = &sum.counts;
    json!({
        "delivered": c.delivered, "retried": c.retried, "deferred": c.deferred,
        "dead": c.dead, "handed_back": c.handed_back, "lease_lost": c.lease_lost,
        "suspects_alone": c.suspects_alone, "breaker_trips": c.breaker_trips,
        "lateness": quantiles(&sum.lateness), "age": quantiles(&sum.age),
        "duration": quantiles(&sum.duration),
    })
}

fn quantiles(histogram: &Histogram) -> Json {
    let ms = |q| {
        histogram
            .quantile(q)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    };
    json!({ "count": histogram.count(), "p50_ms": ms(0.5), "p90_ms": ms(0.9), "p99_ms": ms(0.99) })
}

async fn messages<'q>(
    console: &Console,
    name: &str,
    param: &impl Fn(&str) -> Option<&'q str>,
) -> Result<Json> {
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
    let mut body = json!(page);
    if let Some(messages) = body["messages"].as_array_mut() {
        for message in messages {
            hide_personal(console, message);
            held_by_pause(message, &paused);
        }
    }
    body["scan"] = json!(console.inner.scan);
    Ok(body)
}

/// One message, found by its key (`<due_at>.<id>`, as a list gave it), with
/// its logged attempts, oldest first; 404 once it moved on.
async fn message(console: &Console, name: &str, key: &str) -> Result<Json> {
    let outbox = outbox(console, name)?;
    no_nul("message key", key)?;
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
    let mut message = json!(found);
    hide_personal(console, &mut message);
    held_by_pause(&mut message, &paused);
    Ok(json!({ "message": message, "attempts": attempts }))
}

/// Adds `paused: {reason, paused_at_ms}` to a message a pause of its topic
/// holds back (a pending or waiting one), and `null` to any other.
fn held_by_pause(message: &mut Json, paused: &[PausedTopic]) {
    let pending = matches!(message["state"].as_str(), Some("pending" | "waiting"));
    let pause = paused
        .iter()
        .find(|pause| pending && message["topic"].as_str() == Some(pause.topic.as_str()));
    message["paused"] = match pause {
        Some(pause) => {
            json!({ "reason": pause.reason, "paused_at_ms": pause.paused_at.as_unix_millis() })
        }
        None => Json::Null,
    };
}

async fn groups(console: &Console, name: &str) -> Result<Json> {
    let groups = outbox(console, name)?
        .dead_letter_groups(console.inner.scan)
        .await?;
    Ok(json!(groups))
}

async fn inbox_count(console: &Console, name: &str) -> Result<Json> {
    let cap = console.inner.count_cap;
    let keys = inbox(console, name)?.count_keys(cap).await?;
    Ok(json!({ "keys": keys, "count_cap": cap }))
}

async fn inbox_key(console: &Console, name: &str, key: Option<&str>) -> Result<Json> {
    let inbox = inbox(console, name)?;
    let key = key.ok_or_else(|| Error::invalid("key", "give ?key="))?;
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
async fn dead_count<'q>(
    console: &Console,
    name: &str,
    param: &impl Fn(&str) -> Option<&'q str>,
) -> Result<Json> {
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
    Ok(json!(counted))
}

async fn dead_letters(
    console: &Console,
    name: &str,
    action: &str,
    body: &[u8],
    change: &mut Change,
) -> Result<Json> {
    let outbox = &change.outbox(outbox(console, name)?)?;
    let selection: Selection = read_body(body)?;
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
    let done = if action == "replay" {
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

async fn reschedule(
    console: &Console,
    name: &str,
    body: &[u8],
    change: &mut Change,
) -> Result<Json> {
    let outbox = &change.outbox(outbox(console, name)?)?;
    let Keys { keys } = read_body(body)?;
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

async fn topic_switch(
    console: &Console,
    name: &str,
    action: &str,
    body: &[u8],
    change: &mut Change,
) -> Result<Json> {
    let outbox = &change.outbox(outbox(console, name)?)?;
    let switch: TopicSwitch = read_body(body)?;
    no_nul("topic", &switch.topic)?;
    if action == "pause" && !switch.unseen && !seen(outbox, &switch.topic).await? {
        return Err(Error::invalid(
            "topic",
            format!(
                "{:?} is not paused and had no message settled in the last {SEEN_MINUTES} \
                 minutes: send \"unseen\": true to pause it all the same",
                switch.topic
            ),
        ));
    }
    let changed = if action == "pause" {
        let reason = switch
            .reason
            .filter(|reason| !reason.trim().is_empty())
            .unwrap_or_else(|| "paused from the console".into());
        outbox.pause_topic(&switch.topic, &reason).await?
    } else {
        outbox.resume_topic(&switch.topic).await?
    };
    Ok(json!({ "topic": switch.topic, "paused": action == "pause", "changed": changed }))
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
