//! Example Worker built on workers-outbox.
//!
//! - `POST /signup {"email": …}` creates an account and, in the same D1
//!   batch, enqueues its confirmation mail; `wait_until` then delivers the
//!   mail at once, with one more D1 call.
//! - A cron trigger drains whatever that attempt missed.
//! - `/admin/…` (bearer token) shows and repairs the outbox.

mod admin;
mod app;
mod mail;
mod responses;
mod signup;

use worker::{
    Context, Env, Method, Request, Response, Result, ScheduleContext, ScheduledEvent, event,
};

use crate::app::App;
use crate::responses::json_error;

#[event(start)]
fn start() {
    // Fails only if a logger is already installed, which is fine.
    let _ = console_log::init_with_level(log::Level::Info);
}

#[event(fetch)]
async fn fetch(request: Request, env: Env, ctx: Context) -> Result<Response> {
    let app = match App::from_env(&env) {
        Ok(app) => app,
        Err(problem) => {
            log::error!("configuration error: {problem}");
            return json_error(500, &format!("configuration error: {problem}"));
        }
    };
    let path = request.path();
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    match (request.method(), segments.as_slice()) {
        (Method::Post, ["signup"]) => signup::handle(request, &app, &ctx).await,
        (_, ["admin", rest @ ..]) => {
            let rest: Vec<String> = rest.iter().map(|s| (*s).to_owned()).collect();
            admin::handle(request, &app, &rest).await
        }
        (_, ["signup"]) => json_error(405, "use POST"),
        _ => json_error(404, "no such route"),
    }
}

#[event(scheduled)]
async fn scheduled(_event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    match App::from_env(&env) {
        // The drain logs its report as one line.
        Ok(app) => match app.drainer(app.settings.scheduled) {
            Ok(drainer) => drop(drainer.drain().await),
            Err(error) => log::error!("cannot drain: {error}"),
        },
        Err(problem) => log::error!("configuration error: {problem}"),
    }
}
