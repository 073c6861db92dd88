//! Example Worker built on workers-outbox.
//!
//! - `POST /signup {"email": …}` creates an account and, in the same D1
//!   batch, enqueues its confirmation mail; `wait_until` then delivers the
//!   mail at once, with one more D1 call.
//! - A cron trigger drains whatever that attempt missed.
//! - `/admin/…` (bearer token) shows and repairs the outbox.

mod admin;
mod app;
mod signup;

use serde::Serialize;
use worker::{Context, Env, Method, Request, Response, Result, ScheduleContext, ScheduledEvent};
use workers_outbox::Error;

use crate::app::App;

#[worker::event(start)]
fn start() {
    let _ = console_log::init_with_level(log::Level::Info);
}

#[worker::event(fetch)]
async fn fetch(request: Request, env: Env, ctx: Context) -> Result<Response> {
    let app = match App::from_env(&env) {
        Ok(app) => app,
        Err(problem) => return json_error(500, &format!("configuration error: {problem}")),
    };
    let path = request.path();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (request.method(), segments.as_slice()) {
        (Method::Post, ["signup"]) => signup::handle(request, &app, &ctx).await,
        (_, ["signup"]) => json_error(405, "use POST"),
        (_, ["admin", rest @ ..]) => admin::handle(request, &app, rest).await,
        _ => json_error(404, "no such route"),
    }
}

#[worker::event(scheduled)]
async fn scheduled(_event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    // The drain logs its report as one line.
    match App::from_env(&env).map(|app| app.drainer(app.scheduled)) {
        Ok(Ok(drainer)) => drop(drainer.drain().await),
        Ok(Err(error)) => log::error!("cannot drain: {error}"),
        Err(problem) => log::error!("configuration error: {problem}"),
    }
}

fn json<T: Serialize>(status: u16, body: &T) -> Result<Response> {
    Ok(Response::from_json(body)?.with_status(status))
}

fn json_error(status: u16, message: &str) -> Result<Response> {
    if status >= 500 {
        log::error!("request failed: {message}");
    }
    json(status, &serde_json::json!({ "error": message }))
}

/// A library error with its HTTP status (a 503 with `Retry-After: 1`).
fn error_response(error: &Error) -> Result<Response> {
    let mut response = json_error(error.http_status(), &error.to_string())?;
    if error.http_status() == 503 {
        response.headers_mut().set("retry-after", "1")?;
    }
    Ok(response)
}
