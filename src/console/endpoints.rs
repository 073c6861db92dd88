//! The console's endpoint routes: endpoints, one endpoint with its recent
//! attempts, what may be done to one (enable, disable, pause, rotate its
//! secret, recover its events since a time, send it a test event), and its
//! deliveries (listed, one with its attempts, the dead ones replayed).
//!
//! Every route takes the owner from the [`Grant`]: a tenant's (a portal
//! link's) is its own, whatever the request names; an operator names one.
//! An id of another owner's is not found. Secrets are never shown; an
//! operator sees a URL's origin only and no metadata while payloads are
//! hidden, a tenant its own URLs whole and no metadata (the application's).

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Value as Json, json};

use super::Console;
use super::access::Grant;
use super::call::{Call, EndpointAction};
use super::views::{EndpointView, MessagePage, MessageView, Seen, attempt_views};
use super::wire::{no_nul, read_body};
use crate::endpoint::{Endpoint, Endpoints};
use crate::error::{Error, Result};
use crate::outbox::{BrowseCursor, BrowseFilter, DeadFilter, Listed, MAX_SELECTION};
use crate::time::Timestamp;

/// A list's page of endpoints or deliveries unless the request asks for
/// fewer.
const PAGE: u32 = 50;
/// How many of an endpoint's latest attempts its detail shows.
const ATTEMPTS_SHOWN: u32 = 20;
/// How long a rotated-out secret still signs unless the request says.
const DEFAULT_OVERLAP: Duration = Duration::from_secs(24 * 3600);
/// The longest overlap the console sets.
const MOST_OVERLAP: Duration = Duration::from_secs(7 * 24 * 3600);

fn endpoints<'a>(console: &'a Console, name: &str) -> Result<&'a Endpoints> {
    super::wire::named(&console.inner.endpoints, name, "outbox with endpoints")
}

/// The owner a request acts for: a scoped grant's own (a different one
/// named is not found; the operator's, whose operational events tell of
/// every owner, is refused), else the one it names.
fn owner_for<'a>(
    endpoints: &Endpoints,
    grant: &'a Grant,
    asked: Option<&'a str>,
) -> Result<&'a str> {
    match (&grant.owner, asked) {
        (Some(own), Some(asked)) if own != asked => Err(Error::NotFound {
            what: "endpoint owner",
            id: asked.to_owned(),
        }),
        (Some(own), _) if endpoints.outbox().operational_owner() == Some(own.as_str()) => {
            Err(Error::invalid(
                "portal",
                "the operator's own endpoints are not shown through a portal link",
            ))
        }
        (Some(own), _) => Ok(own),
        (None, Some(asked)) => {
            no_nul("owner", asked)?;
            Ok(asked)
        }
        (None, None) => Err(Error::invalid("owner", "give the endpoint's owner")),
    }
}

/// An operator's page of every owner's endpoints (or one owner's, given
/// `owner`); a tenant's own endpoints.
pub(super) async fn list(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let (console, grant, query) = (call.console, call.grant, call.query);
    let param = |name: &str| query.get(name);
    let endpoints = endpoints(console, name)?;
    let (listed, next_after) = match (&grant.owner, param("owner")) {
        (None, None) => {
            let after = param("after");
            if let Some(after) = after {
                no_nul("after", after)?;
            }
            let limit = super::wire::whole("limit", param("limit"), PAGE, Endpoints::MAX_PAGE)?;
            let page = endpoints.list_all(after, limit).await?;
            (page.endpoints, page.next_after)
        }
        (_, asked) => (
            endpoints.list(owner_for(endpoints, grant, asked)?).await?,
            None,
        ),
    };
    let shown: Vec<EndpointView<'_>> = listed
        .iter()
        .map(|endpoint| EndpointView::of(console, grant, endpoint))
        .collect();
    Ok(json!({ "endpoints": shown, "next_after": next_after }))
}

/// One endpoint and its latest attempts, newest first.
pub(super) async fn detail(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let (console, grant, query) = (call.console, call.grant, call.query);
    let param = |name: &str| query.get(name);
    let endpoints = endpoints(console, name)?;
    let owner = owner_for(endpoints, grant, param("owner"))?;
    let id = param("id").ok_or_else(|| Error::invalid("endpoint", "give ?id="))?;
    no_nul("id", id)?;
    let endpoint = endpoints.get(owner, id).await?;
    let attempts = endpoints.attempts(owner, id, ATTEMPTS_SHOWN).await?;
    Ok(json!({
        "endpoint": EndpointView::of(console, grant, &endpoint),
        "attempts": attempt_views(&attempts),
    }))
}

/// Which endpoint an action is on (its owner implied for a tenant).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Named {
    owner: Option<String>,
    id: String,
}

/// A disable or a pause, and the words its owner will read.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Hold {
    owner: Option<String>,
    id: String,
    reason: Option<String>,
}

/// A rotation: the new secret (the page makes one in the browser and shows
/// it once), and how long the old one still signs (default a day).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Rotate {
    owner: Option<String>,
    id: String,
    secret: String,
    overlap_s: Option<u64>,
}

/// A recovery of the endpoint's events since `since_ms`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Recover {
    owner: Option<String>,
    id: String,
    since_ms: i64,
}

/// Does `action` to the endpoint the body names, and says what it did.
pub(super) async fn act(call: &mut Call<'_>, name: &str, action: EndpointAction) -> Result<Json> {
    let (console, grant, body) = (call.console, call.grant, call.body);
    let endpoints = &call.change.endpoints(endpoints(console, name)?)?;
    let done = match action {
        EndpointAction::Enable | EndpointAction::Test => {
            let Named { owner, id } = read_body(body)?;
            let owner = owner_for(endpoints, grant, owner.as_deref())?;
            no_nul("id", &id)?;
            if action == EndpointAction::Enable {
                endpoints.enable(owner, &id).await?;
                json!({ "owner": owner, "id": id, "enabled": true })
            } else {
                let event_id = endpoints.send_test(owner, &id).await?;
                json!({ "owner": owner, "id": id, "event_id": event_id })
            }
        }
        EndpointAction::Disable | EndpointAction::Pause => {
            let Hold { owner, id, reason } = read_body(body)?;
            let owner = owner_for(endpoints, grant, owner.as_deref())?;
            let reason = reason
                .filter(|reason| !reason.trim().is_empty())
                .unwrap_or_else(|| format!("{}d from the console", action.as_str()));
            no_nul("id", &id)?;
            no_nul("reason", &reason)?;
            if action == EndpointAction::Disable {
                endpoints.disable(owner, &id, &reason).await?;
            } else {
                endpoints.pause(owner, &id, &reason).await?;
            }
            json!({ "owner": owner, "id": id, "held": action.as_str(), "reason": reason })
        }
        EndpointAction::Rotate => {
            let Rotate {
                owner,
                id,
                secret,
                overlap_s,
            } = read_body(body)?;
            let owner = owner_for(endpoints, grant, owner.as_deref())?;
            no_nul("id", &id)?;
            let overlap = overlap_s.map_or(DEFAULT_OVERLAP, Duration::from_secs);
            if overlap > MOST_OVERLAP {
                return Err(Error::invalid(
                    "overlap_s",
                    format!("at most {} s (7 days)", MOST_OVERLAP.as_secs()),
                ));
            }
            let endpoint = endpoints
                .rotate_secret(owner, &id, &secret, overlap)
                .await?;
            json!({ "owner": owner, "id": id, "endpoint": EndpointView::of(console, grant, &endpoint) })
        }
        EndpointAction::Recover => {
            let Recover {
                owner,
                id,
                since_ms,
            } = read_body(body)?;
            let owner = owner_for(endpoints, grant, owner.as_deref())?;
            no_nul("id", &id)?;
            let recovered = endpoints
                .recover(owner, &id, Timestamp::from_unix_millis(since_ms)?)
                .await?;
            json!({
                "owner": owner, "id": id,
                "deliveries": recovered.deliveries,
                "next_since_ms": recovered.next_since.map(Timestamp::as_unix_millis),
            })
        }
    };
    Ok(done)
}

/// The endpoint a delivery route names, after checking it is the owner's.
async fn owned_endpoint<'q>(
    endpoints: &Endpoints,
    grant: &Grant,
    owner: Option<&'q str>,
    id: Option<&'q str>,
) -> Result<Endpoint> {
    let owner = owner_for(endpoints, grant, owner)?;
    let id = id.ok_or_else(|| Error::invalid("endpoint", "give the endpoint's id"))?;
    no_nul("endpoint", id)?;
    endpoints.get(owner, id).await
}

/// The outbox's endpoints and the owner's endpoint the query names
/// (`?owner=&endpoint=`).
async fn queried_endpoint<'a>(call: &Call<'a>, name: &str) -> Result<(&'a Endpoints, Endpoint)> {
    let endpoints = endpoints(call.console, name)?;
    let query = call.query;
    let endpoint = owned_endpoint(
        endpoints,
        call.grant,
        query.get("owner"),
        query.get("endpoint"),
    )
    .await?;
    Ok((endpoints, endpoint))
}

/// A page of an endpoint's deliveries in one state (default dead), as a
/// list of messages gives them.
pub(super) async fn deliveries(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let (console, grant, query) = (call.console, call.grant, call.query);
    let param = |name: &str| query.get(name);
    let (endpoints, endpoint) = queried_endpoint(call, name).await?;
    let mut filter = BrowseFilter::new(Listed::parse(param("state").unwrap_or("dead"))?);
    filter.topic = Some(endpoint.id);
    let after = param("after").map(BrowseCursor::parse).transpose()?;
    let limit = super::wire::whole("limit", param("limit"), PAGE, 100)?;
    let page = endpoints
        .outbox()
        .browse(&filter, after.as_ref(), limit, console.inner.scan)
        .await?;
    let seen = Seen::by(console, grant);
    let messages = page
        .messages
        .iter()
        .map(|message| MessageView::listed(message, seen, &[]))
        .collect();
    let (next, walk_cut) = if grant.owner.is_some() {
        // The walk's end is any row of the state, another owner's too:
        // a tenant goes on from its own last delivery, or not at all.
        let full = page.messages.len() == usize::try_from(limit).unwrap_or(usize::MAX);
        let next = match page.messages.last() {
            Some(last) if full => Some(BrowseCursor::of(&last.message).to_string()),
            _ => None,
        };
        (next, Some(!full && page.next.is_some()))
    } else {
        (page.next.as_ref().map(ToString::to_string), None)
    };
    Ok(json!(MessagePage {
        messages,
        next,
        scan: None,
        walk_cut,
    }))
}

/// One delivery of the endpoint, by its key, with its logged attempts.
pub(super) async fn delivery(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let (console, grant) = (call.console, call.grant);
    let (endpoints, endpoint) = queried_endpoint(call, name).await?;
    let key = call
        .query
        .get("key")
        .ok_or_else(|| Error::invalid("key", "give ?key="))?;
    let key = BrowseCursor::parse(key)?;
    let outbox = endpoints.outbox();
    let found = outbox
        .message_at(&key)
        .await?
        .filter(|found| found.message.topic == endpoint.id)
        .ok_or_else(|| Error::NotFound {
            what: "delivery of that endpoint at that key",
            id: key.to_string(),
        })?;
    let attempts = outbox.attempts_of(&found.message.id).await?;
    let message = MessageView::listed(&found, Seen::by(console, grant), &[]);
    Ok(json!({ "message": message, "attempts": attempt_views(&attempts) }))
}

/// A replay of an endpoint's dead deliveries: the oldest (at most
/// [`MAX_SELECTION`]), or those of `ids` among them.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Replay {
    owner: Option<String>,
    endpoint: String,
    ids: Option<Vec<String>>,
}

pub(super) async fn replay(call: &mut Call<'_>, name: &str) -> Result<Json> {
    let (console, grant) = (call.console, call.grant);
    let Replay {
        owner,
        endpoint,
        ids,
    } = read_body(call.body)?;
    let endpoints = endpoints(console, name)?;
    let endpoint =
        owned_endpoint(endpoints, grant, owner.as_deref(), Some(endpoint.as_str())).await?;
    let filter = DeadFilter {
        topic: Some(endpoint.id.clone()),
        ..DeadFilter::default()
    };
    let outbox = call.change.outbox(endpoints.outbox())?;
    let dead = outbox
        .dead_letters_matching(&filter, MAX_SELECTION, console.inner.scan)
        .await?;
    let full = dead.len() == MAX_SELECTION;
    let selected: Vec<String> = match ids {
        Some(ids) => dead.into_iter().filter(|id| ids.contains(id)).collect(),
        None => dead,
    };
    if selected.is_empty() {
        return Ok(json!({ "endpoint": endpoint.id, "selected": 0, "done": 0, "more": false }));
    }
    let done = outbox.replay_selected(&selected).await?;
    Ok(json!({
        "endpoint": endpoint.id,
        "selected": selected.len(),
        "done": done,
        "more": full,
    }))
}
