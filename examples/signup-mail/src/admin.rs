//! `/admin/…`: outbox stats and rollups, dead letters, paused topics,
//! drains, and subject export and erasure. Every route needs `Authorization: Bearer <ADMIN_TOKEN>`.

use percent_encoding::percent_decode_str;
use serde_json::json;
use std::collections::BTreeMap;
use subtle::ConstantTimeEq;
use worker::{Method, Request, Response, Result};
use workers_outbox::outbox::{Histogram, Resolution, Rollup};
use workers_outbox::subject::export_subject;
use workers_outbox::{Batch, Clock, DrainLimits, Outbox, Statement, SystemClock, Value};

use crate::app::App;
use crate::{error_response, json, json_error};

pub(crate) async fn handle(request: Request, app: &App, path: &[&str]) -> Result<Response> {
    if !authorized(&request, app.admin_token.as_deref())? {
        let mut response = json_error(401, "missing or wrong bearer token")?;
        response
            .headers_mut()
            .set("www-authenticate", "Bearer realm=\"admin\"")?;
        return Ok(response);
    }
    let query: BTreeMap<String, String> = request.url()?.query_pairs().into_owned().collect();
    let param = |name: &str| query.get(name).cloned();
    let subject = |raw: &str| percent_decode_str(raw).decode_utf8_lossy().into_owned();
    let result = match (request.method(), path) {
        (Method::Get, ["outbox"]) => app.outbox.stats().await.map(|s| json!(s)),
        (Method::Get, ["outbox", "rollups"]) => {
            let minutes = param("minutes").map_or(Ok(60), |text| text.parse::<u32>());
            match minutes {
                Ok(minutes @ 1..=2880) => rollups(&app.outbox, minutes).await,
                _ => return json_error(400, "minutes must be a whole number in 1 ..= 2880"),
            }
        }
        (Method::Get, ["events"]) => events(app).await,
        (Method::Get, ["events", "dead"]) => {
            let dead = app.events.list_dead(Outbox::MAX_CLAIM, None);
            dead.await.map(|d| json!(d))
        }
        (Method::Post, ["events", "dead", id, "replay"]) => {
            let id = subject(id);
            let replayed = app.events.replay(&id).await;
            replayed.map(|()| json!({ "replayed": id }))
        }
        (Method::Get, ["outbox", "dead"]) => {
            let limit = param("limit").map_or(Ok(100), |text| text.parse::<u32>());
            let Ok(limit) = limit else {
                return json_error(400, "limit is not a whole number");
            };
            let dead = app.outbox.list_dead(limit.min(Outbox::MAX_CLAIM), None);
            dead.await.map(|d| json!(d))
        }
        (Method::Post, ["outbox", "dead", id, "replay"]) => {
            let id = subject(id);
            let replayed = app.outbox.replay(&id).await;
            replayed.map(|()| json!({ "replayed": id }))
        }
        (Method::Get, ["outbox", "paused"]) => app.outbox.paused_topics().await.map(|p| json!(p)),
        (Method::Post, ["outbox", "topics", topic, "pause"]) => {
            let (topic, reason) = (subject(topic), param("reason").unwrap_or_default());
            let reason = if reason.is_empty() {
                "paused by an operator".into()
            } else {
                reason
            };
            let paused = app.outbox.pause_topic(&topic, &reason).await;
            paused.map(|changed| json!({ "topic": topic, "paused": true, "changed": changed }))
        }
        (Method::Post, ["outbox", "topics", topic, "resume"]) => {
            let topic = subject(topic);
            let resumed = app.outbox.resume_topic(&topic).await;
            resumed.map(|changed| json!({ "topic": topic, "paused": false, "changed": changed }))
        }
        (Method::Post, ["outbox", "drain"]) => {
            const PARAMS: [(&str, &str); 3] = [
                ("batch_size", "DRAIN_BATCH_SIZE"),
                ("max_queries", "DRAIN_MAX_QUERIES"),
                ("max_messages", "DRAIN_MAX_MESSAGES"),
            ];
            // Named as the caller sent them, not as the variables they override.
            for (name, _) in PARAMS {
                if let Some(text) = param(name)
                    && text.parse::<u32>().is_err()
                {
                    return json_error(400, &format!("{name}={text:?} is not a whole number"));
                }
            }
            let overrides = |variable: &str| {
                PARAMS
                    .iter()
                    .find(|(_, overridden)| *overridden == variable)
                    .and_then(|(name, _)| param(name))
            };
            let drainer =
                DrainLimits::from_vars(app.scheduled, overrides).and_then(|l| app.drainer(l));
            match drainer {
                Ok(drainer) => Ok(json!(drainer.drain().await)),
                Err(error) => Err(error),
            }
        }
        (Method::Get, ["subjects", id]) => export(app, &subject(id)).await,
        (Method::Delete, ["subjects", id]) => erase(app, &subject(id)).await,
        _ => return json_error(404, "no such admin route"),
    };
    match result {
        Ok(body) => json(200, &body),
        Err(error) => error_response(&error),
    }
}

/// The last `minutes` of `outbox`'s rollups, per topic: counts, and the
/// p50/p90/p99 of lateness, age and delivery time (the upper bounds of
/// their histogram buckets, in ms).
async fn rollups(outbox: &Outbox, minutes: u32) -> workers_outbox::Result<serde_json::Value> {
    let to = SystemClock.now();
    let from = to.saturating_sub(std::time::Duration::from_secs(u64::from(minutes) * 60));
    let mut topics: BTreeMap<String, Rollup> = BTreeMap::new();
    for rollup in outbox.rollups(from, to, Resolution::Minute).await? {
        match topics.get_mut(&rollup.topic) {
            Some(sum) => sum.merge(&rollup),
            None => drop(topics.insert(rollup.topic.clone(), rollup)),
        }
    }
    let quantiles = |histogram: &Histogram| {
        let ms = |q| {
            histogram
                .quantile(q)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        };
        json!({ "count": histogram.count(), "p50_ms": ms(0.5), "p90_ms": ms(0.9), "p99_ms": ms(0.99) })
    };
    let topics: serde_json::Map<String, serde_json::Value> = topics
        .into_iter()
        .map(|(topic, sum)| {
            let c = sum.counts;
            let body = json!({
                "delivered": c.delivered, "retried": c.retried, "deferred": c.deferred,
                "dead": c.dead, "handed_back": c.handed_back, "lease_lost": c.lease_lost,
                "suspects_alone": c.suspects_alone, "breaker_trips": c.breaker_trips,
                "lateness": quantiles(&sum.lateness), "age": quantiles(&sum.age),
                "duration": quantiles(&sum.duration),
            });
            (topic, body)
        })
        .collect();
    Ok(json!({ "minutes": minutes, "topics": topics }))
}

/// The bearer token (the scheme in any case, RFC 9110), compared in
/// constant time. No token configured means no admin access at all.
fn authorized(request: &Request, token: Option<&str>) -> Result<bool> {
    let header = request.headers().get("authorization")?.unwrap_or_default();
    let given = header
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, credentials)| credentials.trim());
    let token = token.filter(|token| !token.is_empty());
    Ok(token
        .zip(given)
        .is_some_and(|(t, g)| bool::from(g.as_bytes().ct_eq(t.as_bytes()))))
}

/// The account-events outbox and how many welcome rows its consumer wrote.
async fn events(app: &App) -> workers_outbox::Result<serde_json::Value> {
    let outbox = app.events.stats().await?;
    let count = Statement::new("SELECT count(*) AS n FROM welcomes", Vec::new());
    let rows = app.db.query(&count).await?;
    let welcomes: i64 = rows
        .first()
        .map(|row| row.get("n"))
        .transpose()?
        .unwrap_or(0);
    Ok(json!({ "outbox": outbox, "welcomes": welcomes }))
}

/// Everything about one account: its row, its outbox messages, its inbox keys.
async fn export(app: &App, id: &str) -> workers_outbox::Result<serde_json::Value> {
    let select = Statement::new(
        "SELECT json_object('id', id, 'email', email, 'created_at', created_at) AS account \
         FROM accounts WHERE id = ?",
        vec![Value::from(id)],
    );
    let rows = app.db.query(&select).await?;
    let account: Option<String> = rows.first().map(|row| row.get("account")).transpose()?;
    let account = account.and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok());
    let export = export_subject(&app.outbox, &app.inbox, id).await?;
    let events = export_subject(&app.events, &app.inbox, id).await?;
    let welcome = Statement::new(
        "SELECT json_object('event_id', event_id, 'created_at', created_at, 'trace_id', trace_id) AS welcome \
         FROM welcomes WHERE account_id = ?",
        vec![Value::from(id)],
    );
    let welcome: Option<String> = app
        .db
        .query(&welcome)
        .await?
        .first()
        .map(|row| row.get("welcome"))
        .transpose()?;
    let welcome = welcome.and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok());
    Ok(json!({
        "subject": id, "account": account, "outbox": export.outbox, "inbox": export.inbox,
        "account_events": events.outbox, "welcome": welcome, "erased_at": export.erased_at,
    }))
}

/// Deletes the account, its outbox messages (mail and events), inbox keys and
/// welcome row in one batch.
async fn erase(app: &App, id: &str) -> workers_outbox::Result<serde_json::Value> {
    let mut batch = Batch::new(app.db.clone());
    let outbox = batch.erase_outbox_subject(&app.outbox, id)?;
    let events = batch.erase_outbox_subject(&app.events, id)?;
    let inbox = batch.erase_inbox_subject(&app.inbox, id)?;
    let welcome = batch.statement(Statement::new(
        "DELETE FROM welcomes WHERE account_id = ?",
        vec![Value::from(id)],
    ));
    let account = batch.statement(Statement::new(
        "DELETE FROM accounts WHERE id = ?",
        vec![Value::from(id)],
    ));
    let done = batch.commit().await?;
    Ok(json!({
        "outbox": done.erased(&outbox)? + done.erased(&events)?,
        "inbox": done.erased(&inbox)?,
        "welcomes": done.outcome(&welcome)?.rows_affected,
        "accounts": done.outcome(&account)?.rows_affected,
    }))
}
