//! Example Worker: webhooks from a Durable Object per customer.
//!
//! - `POST /customers/<id>/endpoints {"url", "secret", "event_types"?,
//!   "rate_limit_per_second"?, "body"?}`: the customer registers an endpoint.
//!   `GET …/endpoints` lists them (their state), `POST …/endpoints/<ep>/enable`
//!   enables one again, `GET …/endpoints/<ep>/attempts` shows what its
//!   receiver answered.
//! - `POST /customers/<id>/events {"type": …, "data": …}`: the customer's
//!   object records the event and, in the same atomic write, publishes it to
//!   the customer's endpoints subscribed to its type and sets its alarm; the
//!   alarm delivers each through the library's endpoint deliverer, signed
//!   with the endpoint's own secret (Standard Webhooks), in order per
//!   endpoint, with retries and dead letters; a `410` disables that endpoint
//!   alone.
//! - `GET /customers/<id>/events`: the customer's events.
//! - `POST /admin/customers/<id>/endpoints` (bearer `ADMIN_TOKEN`): the
//!   operator's endpoint in that customer's object, for its operational
//!   events (`outbox.endpoint.disabled`, `outbox.message.dead`, …); `"body":
//!   "slack"` makes it a chat's incoming webhook.
//! - `POST /hooks`: a receiving side, here for the demo: it verifies each
//!   webhook's signature with `WEBHOOK_SECRET` (401 if it does not verify;
//!   register an endpoint here with that secret) and applies it once,
//!   whatever the redeliveries, with an inbox keyed by its `webhook-id`;
//!   `GET /hooks` lists what it received.
//! - `/admin/customers/<id>/console/`: the library's operator console over
//!   the customer's outbox, served by its object (bearer `ADMIN_TOKEN`).
//! - `/admin/console/`: the fleet view (bearer `ADMIN_TOKEN`): every
//!   customer's outbox as its object's alarm last reported it into D1
//!   (backlog, dead letters, the oldest due message, the last error), most
//!   dead letters or most overdue first, each linking to its console.
//!
//! A request this Worker refuses (a declared body over its route's limit, a
//! webhook without its key) is answered here and never
//! reaches an object; an object reads a forwarded body to its end before it
//! answers, even to refuse it, since answering first breaks the isolate's
//! next request.

// `#[durable_object]` generates undocumented methods.
#[allow(missing_docs)]
mod customer;
#[allow(missing_docs)]
mod receiver;

use std::sync::Arc;

use futures_util::StreamExt;
use serde::Serialize;
use worker::{Context, Env, Method, Request, Response, Result};
use workers_outbox::console::{BearerToken, Console};
use workers_outbox::fleet::Fleet;
use workers_outbox::{D1Database, Database, webhook};

pub use customer::Customer;
pub use receiver::WebhookReceiver;

#[worker::event(start)]
fn start() {
    let _ = console_log::init_with_level(log::Level::Info);
}

#[worker::event(fetch)]
async fn fetch(request: Request, env: Env, _ctx: Context) -> Result<Response> {
    let path = request.path();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (request.method(), segments.as_slice()) {
        (_, ["customers", id, "endpoints", ..] | ["admin", "customers", id, "endpoints"]) => {
            if declared_over(&request, customer::EVENT_BODY_LIMIT)? {
                return json_error(413, "the body is over 16 KiB");
            }
            forward(&env, "CUSTOMERS", id, request).await
        }
        (_, ["customers", id, "events"]) => {
            if declared_over(&request, customer::EVENT_BODY_LIMIT)? {
                return json_error(413, "the body is over 16 KiB");
            }
            forward(&env, "CUSTOMERS", id, request).await
        }
        // The object's console checks the token itself: its page and
        // assets hold no data and are served to anyone.
        (_, ["admin", "customers", id, "console", ..]) => {
            if declared_over(&request, CONSOLE_BODY_LIMIT)? {
                return json_error(413, "the body is over 64 KiB");
            }
            forward(&env, "CUSTOMERS", id, request).await
        }
        (_, ["admin", "console", ..]) => fleet_console(&env, request).await,
        (Method::Post, ["hooks"]) => {
            if request.headers().get(webhook::WEBHOOK_SIGNATURE)?.is_none() {
                return json_error(401, receiver::SIGNATURE_REQUIRED);
            }
            if declared_over(&request, receiver::HOOK_BODY_LIMIT)? {
                return json_error(413, "the body is over 64 KiB");
            }
            forward(&env, "RECEIVER", "receiver", request).await
        }
        (Method::Get, ["hooks"]) => forward(&env, "RECEIVER", "receiver", request).await,
        _ => json_error(404, "no such route"),
    }
}

/// The registry of every customer's outbox, in D1 (`migrations/` creates
/// its table).
pub(crate) fn fleet(db: Arc<dyn Database>) -> workers_outbox::Result<Fleet> {
    Fleet::new(db, "outbox_fleet")
}

/// The fleet view at `/admin/console/`: every customer's outbox, each
/// linking to its own console (bearer `ADMIN_TOKEN`; none set, none
/// served).
async fn fleet_console(env: &Env, request: Request) -> Result<Response> {
    let Ok(token) = env.secret("ADMIN_TOKEN") else {
        return json_error(404, "no console: set ADMIN_TOKEN");
    };
    let console = fleet(D1Database::shared(env.d1("DB")?)).and_then(|fleet| {
        Console::builder()
            .prefix("/admin/console")
            .fleet(fleet, "/admin/customers/{member}/console/")
            .authorize(BearerToken::operator(&token.to_string()))
            .build()
    });
    match console {
        Ok(console) => console.handle_worker(request).await,
        Err(error) => error_response(&error),
    }
}

/// The largest body a console request may declare.
const CONSOLE_BODY_LIMIT: usize = 64 * 1024;

/// Whether the request declares a body longer than `limit` bytes.
fn declared_over(request: &Request, limit: usize) -> Result<bool> {
    Ok(request
        .headers()
        .get("content-length")?
        .and_then(|n| n.parse::<usize>().ok())
        .is_some_and(|n| n > limit))
}

/// A request body, read to its end.
pub(crate) enum Body {
    /// Within the limit: all of it.
    Within(Vec<u8>),
    /// Over the limit: read and dropped.
    Over,
}

/// Reads the body to its end, keeping at most `limit` bytes, so that the
/// answer, whatever it is, comes after the body was consumed.
pub(crate) async fn read_body(request: &mut Request, limit: usize) -> Result<Body> {
    if request.inner().body().is_none() {
        return Ok(Body::Within(Vec::new()));
    }
    let mut stream = request.stream()?;
    let mut kept = Vec::new();
    let mut over = false;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        if over {
            continue;
        }
        if kept.len() + chunk.len() > limit {
            over = true;
            kept = Vec::new();
        } else {
            kept.extend_from_slice(&chunk);
        }
    }
    Ok(if over { Body::Over } else { Body::Within(kept) })
}

/// Hands the request to the object named `name` of `binding`. A name is
/// what its path segment says, so it is kept to characters a path carries
/// as they are: the fleet view's link to the object's console names it so.
async fn forward(env: &Env, binding: &str, name: &str, request: Request) -> Result<Response> {
    let plain = name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if name.is_empty() || name.len() > 64 || !plain {
        return json_error(400, "an id is 1 to 64 letters, digits, - or _");
    }
    let stub = env
        .durable_object(binding)?
        .id_from_name(name)?
        .get_stub()?;
    stub.fetch_with_request(request).await
}

pub(crate) fn json<T: Serialize>(status: u16, body: &T) -> Result<Response> {
    Ok(Response::from_json(body)?.with_status(status))
}

pub(crate) fn json_error(status: u16, message: &str) -> Result<Response> {
    if status >= 500 {
        log::error!("request failed: {message}");
    }
    json(status, &serde_json::json!({ "error": message }))
}

/// A library error as a response: its status says whether to retry.
pub(crate) fn error_response(error: &workers_outbox::Error) -> Result<Response> {
    json_error(error.http_status(), &error.to_string())
}
