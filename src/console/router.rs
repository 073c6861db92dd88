//! The router: serves the page and its assets, admits an API request by its
//! credentials, cross-site rules and role before a byte of its body is
//! read, then parses its route, checks the route's access once, runs its
//! handler, and logs and audits a change.

use http::request::Parts;
use http::{Method, Response, StatusCode, header};
use serde_json::{Value as Json, json};

use super::access::{Grant, Role, cross_site};
use super::audit::{Change, what_it_did};
use super::call::Call;
use super::routes::Route;
use super::wire::Query;
use super::{Console, page};
use crate::error::Error;

/// The largest request body the API reads.
pub(super) const MAX_BODY: usize = 64 * 1024;

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
/// body: the route's access is checked here, once, then its handler runs.
pub(super) async fn answer(
    console: &Console,
    parts: &Parts,
    grant: &Grant,
    body: &[u8],
) -> Response<String> {
    let Some(path) = console_path(console, parts).and_then(|rest| rest.strip_prefix("/api/"))
    else {
        return failure(StatusCode::NOT_FOUND, "no such page");
    };
    let query = match Query::parse(parts.uri.query().unwrap_or("")) {
        Ok(query) => query,
        Err(error) => return error_answer(&error),
    };
    let segments: Vec<&str> = path.split('/').collect();
    let Some(route) = Route::parse(&parts.method, &segments) else {
        return failure(
            StatusCode::NOT_FOUND,
            "no such API route (see docs/console.md)",
        );
    };
    let access = route.access();
    if grant.owner.is_some() && !access.tenants {
        return failure(
            StatusCode::FORBIDDEN,
            "a portal link reaches its own endpoints and their deliveries only",
        );
    }
    if grant.role < access.role {
        return failure(StatusCode::FORBIDDEN, access.refusal);
    }
    let mut call = Call {
        console,
        grant,
        query: &query,
        headers: &parts.headers,
        body,
        change: Change::new(grant, path, body),
    };
    let answer = route.run(&mut call).await;
    let (status, body) = match answer {
        Ok(body) => (StatusCode::OK, body),
        Err(error) => (status_of(&error), json!({ "error": error.to_string() })),
    };
    if route.changes() {
        let did = what_it_did(&body);
        log_change(path, grant, status, &did);
        // A refusal after a write (a test event the endpoint took none of)
        // is recorded as it was answered.
        call.change.record(&did).await;
    }
    page::json(status, &body)
}

fn status_of(error: &Error) -> StatusCode {
    StatusCode::from_u16(error.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

fn error_answer(error: &Error) -> Response<String> {
    page::json(status_of(error), &json!({ "error": error.to_string() }))
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
