//! `POST /signup`: the account and its confirmation mail, in one D1 batch.

use serde::{Deserialize, Serialize};
use worker::{Context, Request, Response};
use workers_outbox::defer::WaitUntil;
use workers_outbox::email::Mail;
use workers_outbox::endpoint::Event;
use workers_outbox::trace::TraceContext;
use workers_outbox::{
    Batch, Clock, Error, FastRandom, Message, RandomSource, Result, Statement, SystemClock,
    Timestamp, Topic,
};

use crate::app::App;
use crate::{error_response, json, json_error};

/// The confirmation mail: a library `Mail` under a topic of the example's
/// own, sent through the `send_email` binding (or POSTed as JSON to the mail
/// API at `MAIL_API_URL`, `Idempotency-Key`: its id).
#[derive(Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Confirmation(pub(crate) Mail);

impl Topic for Confirmation {
    const NAME: &'static str = "signup-confirmation";
}

/// The event other parts of the system consume, through the account-events
/// Queue (the welcome row is one: see `welcome.rs`).
#[derive(Serialize, Deserialize)]
pub(crate) struct AccountCreated {
    pub(crate) account_id: String,
    pub(crate) created_at: i64,
}

impl Topic for AccountCreated {
    const NAME: &'static str = ACCOUNT_CREATED;
}

/// The type of the event, in the Queue and to the integrations' endpoints.
pub(crate) const ACCOUNT_CREATED: &str = "account.created";

pub(crate) async fn handle(
    mut request: Request,
    app: &App,
    ctx: &Context,
) -> worker::Result<Response> {
    let length = request.headers().get("content-length")?;
    if length
        .and_then(|n| n.parse::<u64>().ok())
        .is_some_and(|n| n > 4096)
    {
        return json_error(413, "the body is over 4096 bytes");
    }
    // The caller's trace goes with the mail and the event to their
    // receivers; a malformed one is ignored (W3C: start a new trace).
    let trace = TraceContext::from_headers(request.headers()).ok().flatten();
    let body = request.bytes().await?;
    if body.len() > 4096 {
        return json_error(413, "the body is over 4096 bytes");
    }
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let Some(email) = body["email"].as_str().and_then(plausible_email) else {
        return json_error(400, "the body must be JSON with a plausible email address");
    };
    let random = FastRandom::from_entropy();
    let bits = (u128::from(random.next_u64()) << 64) | u128::from(random.next_u64());
    let now = SystemClock.now();
    let id = ulid::Ulid::from_parts(now.as_unix_millis().unsigned_abs(), bits).to_string();
    match signup(app, ctx, &id, &email, now, trace).await {
        Ok(outbox) => json(
            201,
            &serde_json::json!({ "account_id": id, "outbox_id": outbox }),
        ),
        Err(Error::Conflict { constraint }) if constraint == "accounts.email" => {
            json_error(409, "that email already has an account")
        }
        Err(error) => error_response(&error),
    }
}

/// The account, its mail and its `account.created` event commit together;
/// the mail then goes out at once through `wait_until`, and the event into
/// its Queue (a cron drain sends either if that fails).
async fn signup(
    app: &App,
    ctx: &Context,
    id: &str,
    email: &str,
    now: Timestamp,
    trace: Option<TraceContext>,
) -> Result<String> {
    let mail = Confirmation(
        Mail::new(&app.mail_from, email, "Confirm your account")
            .from_name("workers-outbox example")
            .text(format!(
                "Welcome! Your account {id} is ready once you confirm this address."
            )),
    );
    let mut batch = Batch::new(app.db.clone());
    batch.push(Statement::new(
        "INSERT INTO accounts (id, email, created_at) VALUES (?, ?, ?)",
        vec![id.into(), email.into(), now.into()],
    ));
    let mut message = Message::of(&mail)?.subject(id).dedup_key(email);
    let created = AccountCreated {
        account_id: id.into(),
        created_at: now.as_unix_millis(),
    };
    // To the integrations' endpoints too, in this batch (the cron drain sends them).
    let published = Event::new(crate::integrations::OWNER, ACCOUNT_CREATED, &created)?.subject(id);
    let _ = batch.publish(&app.endpoints, published)?;
    let mut event = Message::of(&created)?.subject(id);
    if let Some(trace) = trace {
        message = message.trace(trace.clone());
        event = event.trace(trace);
    }
    let mail = batch.enqueue_leased(&app.outbox, message, app.after_response.lease)?;
    let event = batch.enqueue_leased(&app.events, event, app.after_response.lease)?;
    let outbox_id = mail.id().to_owned();
    let drainer = app.drainer(app.after_response)?;
    let relay = app.relay(app.after_response)?;
    let mut committed = batch.commit().await?;
    let defer = WaitUntil::new(ctx);
    if let Some(mail) = committed.claimed(mail)? {
        drainer.deliver_now(&defer, mail);
    }
    if let (Some(event), Some(relay)) = (committed.claimed(event)?, relay) {
        relay.deliver_now(&defer, event);
    }
    Ok(outbox_id)
}

/// `local@domain.tld`, lower-cased, without spaces or controls, at most 254
/// bytes: plausible, not verified (the confirmation mail verifies it).
fn plausible_email(raw: &str) -> Option<String> {
    let email = raw.trim().to_lowercase();
    let (local, domain) = email.split_once('@')?;
    let labels: Vec<&str> = domain.split('.').collect();
    let plausible = email.len() <= 254 && (1..=64).contains(&local.len()) && labels.len() >= 2;
    let clean = !email
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '"');
    (plausible && clean && !domain.contains('@') && !labels.contains(&"")).then_some(email)
}
