//! Example Worker: webhooks from a Durable Object per customer.
//!
//! - `POST /customers/<id>/events {"type": …, "data": …}`: the customer's
//!   object records the event and, in the same atomic write, enqueues its
//!   webhook and sets its alarm; the alarm delivers it through the library's
//!   HTTP deliverer, in order per customer, with retries and dead letters.
//! - `GET /customers/<id>/events`: the customer's events.
//! - `POST /hooks`: the receiving side, here for the demo: it applies each
//!   webhook once, whatever the redeliveries, with an inbox keyed by the
//!   `Idempotency-Key`; `GET /hooks` lists what it received.
//! - `/admin/customers/<id>/outbox` (stats), `…/outbox/dead` (dead letters),
//!   `POST …/outbox/dead/<message id>/replay`, `POST …/outbox/dead/purge`:
//!   bearer `ADMIN_TOKEN`.

// `#[durable_object]` generates undocumented methods.
#[allow(missing_docs)]
mod customer;
#[allow(missing_docs)]
mod receiver;

use serde::Serialize;
use subtle::ConstantTimeEq;
use worker::{Context, Env, Method, Request, Response, Result};

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
        (_, ["customers", id, "events"]) => forward(&env, "CUSTOMERS", id, request).await,
        (_, ["admin", "customers", id, "outbox", ..]) => {
            if !authorized(&request, &env)? {
                return json_error(401, "missing or wrong bearer token");
            }
            forward(&env, "CUSTOMERS", id, request).await
        }
        (Method::Post | Method::Get, ["hooks"]) => {
            forward(&env, "RECEIVER", "receiver", request).await
        }
        _ => json_error(404, "no such route"),
    }
}

/// Hands the request to the object named `name` of `binding`.
async fn forward(env: &Env, binding: &str, name: &str, request: Request) -> Result<Response> {
    if name.is_empty() || name.len() > 64 {
        return json_error(400, "an id is 1 to 64 characters");
    }
    let stub = env
        .durable_object(binding)?
        .id_from_name(name)?
        .get_stub()?;
    stub.fetch_with_request(request).await
}

/// The bearer token, compared in constant time; no token configured means
/// no admin access.
fn authorized(request: &Request, env: &Env) -> Result<bool> {
    let token = env.secret("ADMIN_TOKEN").map(|t| t.to_string()).ok();
    let header = request.headers().get("authorization")?.unwrap_or_default();
    Ok(
        match (
            token.filter(|t| !t.is_empty()),
            header.strip_prefix("Bearer "),
        ) {
            (Some(token), Some(given)) => bool::from(given.as_bytes().ct_eq(token.as_bytes())),
            _ => false,
        },
    )
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
