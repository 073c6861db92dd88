//! The Postgres guide's Hyperdrive quickstart (docs/postgres.md), compiled in CI (`tests/readme.rs` keeps the two equal).
#![cfg(target_arch = "wasm32")]

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use worker::{Context, Env, Request, Response, ScheduleContext, ScheduledEvent, event};
use workers_outbox::defer::WaitUntil;
use workers_outbox::http::HttpDeliverer;
use workers_outbox::{
    Batch, DrainLimits, Drainer, HyperdriveDatabase, Message, Outbox, Result, Statement, Topic,
};

#[derive(Serialize, Deserialize)]
struct WelcomeMail {
    to: String,
}

impl Topic for WelcomeMail {
    const NAME: &'static str = "welcome-mail";
}

async fn outbox(env: &Env) -> Result<Outbox> {
    let binding = env.hyperdrive("HYPERDRIVE")?;
    let db = HyperdriveDatabase::connect(&binding).await?;
    Outbox::new(Arc::new(db), "outbox") // tables from migrations/postgres/
}

fn drainer(outbox: &Outbox, limits: DrainLimits) -> Result<Drainer> {
    let mail_api = HttpDeliverer::new("https://mail.example/send")?; // Idempotency-Key: message id
    Drainer::builder(outbox.clone(), mail_api)
        .limits(limits)
        .build()
}

async fn sign_up(env: &Env, ctx: &Context, email: &str) -> Result<()> {
    let outbox = outbox(env).await?;
    // The account and its mail commit in one Postgres transaction, or neither does.
    let mut batch = Batch::new(outbox.database().clone());
    batch.push(Statement::new(
        "INSERT INTO accounts (email) VALUES ($1)",
        vec![email.into()],
    ));
    let mail = Message::of(&WelcomeMail { to: email.into() })?.dedup_key(email);
    let mail = batch.enqueue_leased(&outbox, mail, std::time::Duration::from_secs(60))?;
    if let Some(mail) = batch.commit().await?.claimed(mail)? {
        // Delivered after the response; a cron drain sends it if this fails.
        drainer(&outbox, DrainLimits::after_response())?.deliver_now(&WaitUntil::new(ctx), mail);
    }
    Ok(())
}

#[event(fetch)]
async fn fetch(_request: Request, env: Env, ctx: Context) -> worker::Result<Response> {
    match sign_up(&env, &ctx, "ada@example.com").await {
        Ok(()) => Response::ok("signed up"),
        Err(error) => Response::error(error.to_string(), error.http_status()),
    }
}

#[event(scheduled)]
async fn scheduled(_event: ScheduledEvent, env: Env, _ctx: ScheduleContext) {
    if let Ok(drainer) = outbox(&env)
        .await
        .and_then(|outbox| drainer(&outbox, DrainLimits::scheduled()))
    {
        drainer.drain().await; // logs one line: claimed, delivered, deferred, dead, …
    }
}
