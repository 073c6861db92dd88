//! `POST /signup`: the account and its confirmation mail, in one D1 batch.

use serde::{Deserialize, Serialize};
use worker::{Context, Request, Response, Result};
use workers_outbox::defer::{Defer, WaitUntil};
use workers_outbox::{Clock, Error, FastRandom, Message, RandomSource, Statement, SystemClock};

use crate::app::App;
use crate::mail::{CONFIRMATION_TOPIC, Mail};
use crate::responses::{error_response, json, json_error, read_body};

const MAX_BODY_BYTES: usize = 4 * 1024;

#[derive(Deserialize)]
struct SignupRequest {
    email: String,
}

#[derive(Serialize)]
struct Created<'a> {
    account_id: &'a str,
    outbox_id: &'a str,
}

pub(crate) async fn handle(mut request: Request, app: &App, ctx: &Context) -> Result<Response> {
    let body = match read_body(&mut request, MAX_BODY_BYTES).await? {
        Ok(body) => body,
        Err(too_large) => return Ok(too_large),
    };
    let Ok(SignupRequest { email }) = serde_json::from_slice(&body) else {
        return json_error(
            400,
            r#"the body must be JSON like {"email": "ada@example.com"}"#,
        );
    };
    let Some(email) = plausible_email(&email) else {
        return json_error(400, "that is not a plausible email address");
    };
    let account_id = new_account_id();

    let payload = Mail::confirmation(&email, &account_id);
    let message = match Message::json(CONFIRMATION_TOPIC, &payload) {
        Ok(message) => message.subject(&account_id).dedup_key(&email),
        Err(error) => return error_response(&error),
    };
    // The row is written already leased to this request, so the attempt
    // below needs no claim: one more D1 call (its settle) per signup.
    let mail = match app.outbox.enqueue_leased(message, app.settings.lease) {
        Ok(mail) => mail,
        Err(error) => return error_response(&error),
    };
    let account = Statement::new(
        "INSERT INTO accounts (id, email, created_at) VALUES (?, ?, ?)",
        vec![
            account_id.as_str().into(),
            email.as_str().into(),
            SystemClock.now().into(),
        ],
    );
    let outcomes = match app
        .db
        .batch_atomic(&[account, mail.statement().clone()])
        .await
    {
        Ok(outcomes) => outcomes,
        Err(Error::Conflict { constraint }) if constraint == "accounts.email" => {
            return json_error(409, "that email already has an account");
        }
        Err(error) => return error_response(&error),
    };
    let outbox_id = mail.id().to_owned();
    if let Some(claimed) = mail.confirm(&outcomes[1]) {
        match app.drainer(app.settings.after_response) {
            Ok(drainer) => WaitUntil::new(ctx).defer(Box::pin(async move {
                drainer.deliver_claimed(vec![claimed]).await;
            })),
            // The mail is stored; the cron drain will send it.
            Err(error) => log::error!("no immediate delivery: {error}"),
        }
    }
    json(
        201,
        &Created {
            account_id: &account_id,
            outbox_id: &outbox_id,
        },
    )
}

/// `local@domain.tld`, lower-cased, without spaces or controls, at most 254
/// bytes: plausible, not verified (the confirmation mail verifies it).
fn plausible_email(raw: &str) -> Option<String> {
    let email = raw.trim().to_lowercase();
    if email.len() > 254 || email.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return None;
    }
    let (local, domain) = email.split_once('@')?;
    let labels: Vec<&str> = domain.split('.').collect();
    let plausible = !local.is_empty()
        && local.len() <= 64
        && !domain.contains('@')
        && labels.len() >= 2
        && labels.iter().all(|label| !label.is_empty());
    plausible.then_some(email)
}

fn new_account_id() -> String {
    let random = FastRandom::from_entropy();
    let bits = (u128::from(random.next_u64()) << 64) | u128::from(random.next_u64());
    let millis = u64::try_from(SystemClock.now().as_unix_millis()).unwrap_or(0);
    ulid::Ulid::from_parts(millis, bits).to_string()
}
