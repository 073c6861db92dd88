//! The console's endpoint routes: every owner's endpoints, one endpoint with
//! its recent attempts, and what an operator does to one (enable, disable,
//! pause, rotate its secret, recover its events since a time, send it a
//! test event). Secrets are never shown; while payloads are hidden, a URL
//! shows its origin only and metadata not at all.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::Console;
use super::audit::Change;
use super::wire::{no_nul, read_body};
use crate::endpoint::model::shown_url;
use crate::endpoint::{Endpoint, Endpoints};
use crate::error::{Error, Result};
use crate::time::Timestamp;

/// A list's page of endpoints unless the request asks for fewer.
const PAGE: u32 = 50;
/// How many of an endpoint's latest attempts its detail shows.
const ATTEMPTS_SHOWN: u32 = 20;
/// How long a rotated-out secret still signs unless the operator says.
const DEFAULT_OVERLAP: Duration = Duration::from_secs(24 * 3600);
/// The longest overlap the console sets.
const MOST_OVERLAP: Duration = Duration::from_secs(7 * 24 * 3600);

fn endpoints<'a>(console: &'a Console, name: &str) -> Result<&'a Endpoints> {
    super::api::named(&console.inner.endpoints, name, "outbox with endpoints")
}

/// An endpoint as the console shows it: whole when payloads are shown;
/// otherwise its URL's origin (a path or query often holds a token, a
/// chat's webhook URL is one) and no metadata, with `details_hidden`.
fn shown(console: &Console, endpoint: &Endpoint) -> Json {
    let mut body = json!(endpoint);
    let hidden = !console.inner.show_payloads;
    body["details_hidden"] = json!(hidden);
    if hidden {
        body["url"] = json!(shown_url(&endpoint.url));
        body["metadata"] = Json::Null;
    }
    body
}

/// `owner`'s endpoints (given `owner`), or a page of every owner's after
/// the id `after`, at most `limit`.
pub(super) async fn list<'q>(
    console: &Console,
    name: &str,
    param: &impl Fn(&str) -> Option<&'q str>,
) -> Result<Json> {
    let endpoints = endpoints(console, name)?;
    let (listed, next_after) = match param("owner") {
        Some(owner) => {
            no_nul("owner", owner)?;
            (endpoints.list(owner).await?, None)
        }
        None => {
            let after = param("after");
            if let Some(after) = after {
                no_nul("after", after)?;
            }
            let limit = super::api::whole("limit", param("limit"), PAGE, Endpoints::MAX_PAGE)?;
            let page = endpoints.list_all(after, limit).await?;
            (page.endpoints, page.next_after)
        }
    };
    let shown: Vec<Json> = listed
        .iter()
        .map(|endpoint| shown(console, endpoint))
        .collect();
    Ok(json!({ "endpoints": shown, "next_after": next_after }))
}

/// One endpoint and its latest attempts, newest first.
pub(super) async fn detail<'q>(
    console: &Console,
    name: &str,
    param: &impl Fn(&str) -> Option<&'q str>,
) -> Result<Json> {
    let endpoints = endpoints(console, name)?;
    let (owner, id) = match (param("owner"), param("id")) {
        (Some(owner), Some(id)) => (owner, id),
        _ => return Err(Error::invalid("endpoint", "give ?owner=&id=")),
    };
    no_nul("owner", owner)?;
    no_nul("id", id)?;
    let endpoint = endpoints.get(owner, id).await?;
    let attempts = endpoints.attempts(owner, id, ATTEMPTS_SHOWN).await?;
    Ok(json!({ "endpoint": shown(console, &endpoint), "attempts": attempts }))
}

/// Which endpoint an action is on.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Named {
    owner: String,
    id: String,
}

/// A disable or a pause, and the operator's words.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Hold {
    owner: String,
    id: String,
    reason: Option<String>,
}

/// A rotation: the new secret (the page makes one in the browser and shows
/// it once), and how long the old one still signs (default a day).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rotate {
    owner: String,
    id: String,
    secret: String,
    overlap_s: Option<u64>,
}

/// A recovery of the endpoint's events since `since_ms`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Recover {
    owner: String,
    id: String,
    since_ms: i64,
}

/// Does `action` to the endpoint the body names, and says what it did.
pub(super) async fn act(
    console: &Console,
    name: &str,
    action: &str,
    body: &[u8],
    change: &mut Change,
) -> Result<Json> {
    let endpoints = &change.endpoints(endpoints(console, name)?)?;
    let done = match action {
        "enable" | "test" => {
            let Named { owner, id } = read_body(body)?;
            checked(&[&owner, &id])?;
            if action == "enable" {
                endpoints.enable(&owner, &id).await?;
                json!({ "owner": owner, "id": id, "enabled": true })
            } else {
                let event_id = endpoints.send_test(&owner, &id).await?;
                json!({ "owner": owner, "id": id, "event_id": event_id })
            }
        }
        "disable" | "pause" => {
            let Hold { owner, id, reason } = read_body(body)?;
            let reason = reason
                .filter(|reason| !reason.trim().is_empty())
                .unwrap_or_else(|| format!("{action}d from the console"));
            checked(&[&owner, &id, &reason])?;
            if action == "disable" {
                endpoints.disable(&owner, &id, &reason).await?;
            } else {
                endpoints.pause(&owner, &id, &reason).await?;
            }
            json!({ "owner": owner, "id": id, "held": action, "reason": reason })
        }
        "rotate" => {
            let Rotate {
                owner,
                id,
                secret,
                overlap_s,
            } = read_body(body)?;
            checked(&[&owner, &id])?;
            let overlap = overlap_s.map_or(DEFAULT_OVERLAP, Duration::from_secs);
            if overlap > MOST_OVERLAP {
                return Err(Error::invalid(
                    "overlap_s",
                    format!("at most {} s (7 days)", MOST_OVERLAP.as_secs()),
                ));
            }
            let endpoint = endpoints
                .rotate_secret(&owner, &id, &secret, overlap)
                .await?;
            json!({ "owner": owner, "id": id, "endpoint": shown(console, &endpoint) })
        }
        "recover" => {
            let Recover {
                owner,
                id,
                since_ms,
            } = read_body(body)?;
            checked(&[&owner, &id])?;
            let recovered = endpoints
                .recover(&owner, &id, Timestamp::from_unix_millis(since_ms)?)
                .await?;
            json!({
                "owner": owner, "id": id,
                "deliveries": recovered.deliveries,
                "next_since_ms": recovered.next_since.map(Timestamp::as_unix_millis),
            })
        }
        _ => {
            return Err(Error::NotFound {
                what: "endpoint action",
                id: action.to_owned(),
            });
        }
    };
    Ok(done)
}

fn checked(texts: &[&str]) -> Result<()> {
    texts.iter().try_for_each(|text| no_nul("endpoint", text))
}
