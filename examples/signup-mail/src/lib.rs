//! Example Worker built on workers-outbox.
//!
//! - `POST /signup {"email": …}` creates an account and, in the same D1
//!   batch, enqueues its confirmation mail; `wait_until` then delivers the
//!   mail at once, with one more D1 call.
//! - The same batch enqueues an `account.created` event in a second outbox,
//!   relayed into the `account-events` Queue (100 events to a subrequest);
//!   its consumer, in this Worker, writes the account's welcome row exactly
//!   once.
//! - A cron trigger drains whatever those attempts missed; with a large mail
//!   backlog it fans the mail drains out through the `drain-requests`
//!   Queue, one drain per consumer invocation.
//! - The same batch publishes `account.created` to the application's
//!   integrations: endpoints an operator registers at `/admin/endpoints`
//!   (bearer `ADMIN_TOKEN`), delivered signed by the cron drain.
//! - `/console/` is the library's operator console over both outboxes and
//!   the inbox, and over an account's rows for its export and erasure
//!   (bearer token `ADMIN_TOKEN`).

mod accounts;
mod app;
mod integrations;
mod signup;
mod welcome;

use serde::Serialize;
use worker::{
    Context, Env, MessageBatch, Method, Request, Response, Result, ScheduleContext, ScheduledEvent,
};
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
        (_, ["console", ..]) => app.console(&env)?.handle_worker(request).await,
        (_, ["admin", "endpoints"]) => integrations::handle(request, &app).await,
        (Method::Get, ["admin", "portal-link"]) => integrations::portal_link(&request, &app, &env),
        _ => json_error(404, "no such route"),
    }
}

#[worker::event(scheduled)]
async fn scheduled(_event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    let app = match App::from_env(&env) {
        Ok(app) => app,
        Err(problem) => return log::error!("configuration error: {problem}"),
    };
    // Events first, on a small budget of their own: relaying is cheap (100
    // to a subrequest). Drains log their reports as one line.
    let relay_limits = app::relay_limits();
    match app.relay(relay_limits) {
        Ok(Some(relay)) => drop(relay.drain().await),
        Ok(None) => log::warn!("no ACCOUNT_EVENTS binding: account events wait in their outbox"),
        Err(error) => log::error!("cannot relay: {error}"),
    }
    // The mail: this run drains once itself, and a backlog beyond one
    // drain's share asks for more drains, each run by the drain-requests
    // consumer in an invocation of its own.
    if let Some(queue) = &app.drain_requests {
        let counted = app
            .fan_out
            .max_drains
            .saturating_mul(app.fan_out.messages_per_drain);
        if let Ok(due) = app.outbox.count_due(counted).await {
            let more = app.fan_out.drains_for(due).saturating_sub(1);
            let now = workers_outbox::Clock::now(&workers_outbox::SystemClock);
            if more > 0 {
                match workers_outbox::queue::request_drains(queue, more, now).await {
                    Ok(()) => log::info!("{due} mails due: {more} more drains requested"),
                    Err(error) => log::error!("{error}"),
                }
            }
        }
    }
    // What the relay used is not the mail drain's.
    let mail_limits = workers_outbox::DrainLimits {
        deadline: app.scheduled.deadline.saturating_sub(relay_limits.deadline),
        max_queries: app
            .scheduled
            .max_queries
            .saturating_sub(relay_limits.max_queries + 1),
        ..app.scheduled
    };
    match app.drainer(mail_limits) {
        Ok(drainer) => drop(drainer.drain().await),
        Err(error) => log::error!("cannot drain: {error}"),
    }
}

#[worker::event(queue)]
async fn queue(batch: MessageBatch<serde_json::Value>, env: Env, _ctx: Context) -> Result<()> {
    let app = App::from_env(&env)?;
    match batch.queue().as_str() {
        "drain-requests" => welcome::run_drains(&app, &batch).await,
        _ => welcome::consume_events(&app, &batch).await,
    }
    Ok(())
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
