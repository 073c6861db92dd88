//! A receiving side for the demo: each webhook verified (Standard Webhooks,
//! with `WEBHOOK_SECRET`: the secret a customer gives an endpoint it
//! registers at this route) and applied once, however often it is
//! delivered, by an inbox keyed by its `webhook-id`.

use std::sync::Arc;

use serde::Deserialize;
use worker::{DurableObject, Env, Method, Request, Response, Result, State, durable_object};
use workers_outbox::webhook::{self, Verifier};
use workers_outbox::{
    Batch, Clock, Database, DurableObjectDatabase, Inbox, Statement, SystemClock, Value,
    worker_vars,
};

use crate::{Body, error_response, json, json_error, read_body};

/// The largest webhook body the receiver takes.
pub(crate) const HOOK_BODY_LIMIT: usize = 64 * 1024;
/// The answer to a webhook without its signature.
pub(crate) const SIGNATURE_REQUIRED: &str = "a signed webhook is required (webhook-signature)";

const RECEIVED_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS received (
    key TEXT PRIMARY KEY, customer TEXT NOT NULL, type TEXT NOT NULL, body TEXT NOT NULL,
    at INTEGER NOT NULL)";

/// `POST /hooks` verifies a webhook and applies it once; `GET /hooks` lists
/// them.
///
/// With `RECEIVER_STATUS` set (`RECEIVER_STATUS=500 npm run dev:durable`),
/// it answers every webhook with that status instead, applying nothing: to
/// watch the sender retry, defer or dead-letter.
#[durable_object]
pub struct WebhookReceiver {
    db: Arc<DurableObjectDatabase>,
    inbox: std::result::Result<Inbox, String>,
    verifier: std::result::Result<Verifier, String>,
    refuse_with: std::result::Result<Option<u16>, String>,
}

/// The verifier of `WEBHOOK_SECRET` (one secret, or several during a
/// rotation).
fn verifier(env: &Env) -> std::result::Result<Verifier, String> {
    let Some(secrets) = worker_vars(env)("WEBHOOK_SECRET") else {
        return Err("WEBHOOK_SECRET is not set: which secret signs the webhooks?".into());
    };
    webhook::secrets(&secrets)
        .and_then(Verifier::new)
        .map_err(|error| format!("WEBHOOK_SECRET: {error}"))
}

/// The status `RECEIVER_STATUS` asks every webhook to be answered with.
fn refusal(env: &Env) -> std::result::Result<Option<u16>, String> {
    let Ok(raw) = env.var("RECEIVER_STATUS").map(|v| v.to_string()) else {
        return Ok(None);
    };
    match raw.trim().parse::<u16>() {
        Ok(status) if (200..=599).contains(&status) => Ok(Some(status)),
        _ => Err(format!(
            "RECEIVER_STATUS={raw:?} is not an HTTP status (200 to 599)"
        )),
    }
}

#[derive(Deserialize)]
struct Hook {
    customer: String,
    #[serde(rename = "type")]
    kind: String,
}

impl DurableObject for WebhookReceiver {
    fn new(state: State, env: Env) -> Self {
        let db = DurableObjectDatabase::new(&state).shared();
        let inbox = Inbox::new(db.clone(), "inbox").map_err(|e| e.to_string());
        if let Ok(inbox) = &inbox {
            let (inbox, db) = (inbox.clone(), db.clone());
            drop(state.block_concurrency_while(async move {
                inbox.create_schema().await?;
                db.execute(&Statement::new(RECEIVED_SCHEMA, Vec::new()))
                    .await?;
                Ok(())
            }));
        }
        WebhookReceiver {
            db,
            inbox,
            verifier: verifier(&env),
            refuse_with: refusal(&env),
        }
    }

    async fn fetch(&self, mut request: Request) -> Result<Response> {
        // Read first: every answer below comes after the body is consumed.
        let body = read_body(&mut request, HOOK_BODY_LIMIT).await?;
        let inbox = match &self.inbox {
            Ok(inbox) => inbox,
            Err(problem) => return json_error(500, &format!("configuration error: {problem}")),
        };
        if request.method() == Method::Get {
            return self.list().await;
        }
        let verifier = match &self.verifier {
            Ok(verifier) => verifier,
            Err(problem) => return json_error(500, &format!("configuration error: {problem}")),
        };
        let Body::Within(body) = body else {
            return json_error(413, "the body is over 64 KiB");
        };
        match &self.refuse_with {
            Ok(None) => {}
            Ok(Some(status)) => {
                return json_error(*status, &format!("RECEIVER_STATUS={status}: refused"));
            }
            Err(problem) => return json_error(500, &format!("configuration error: {problem}")),
        }
        // Verified first: nothing of an unsigned or tampered request is read.
        let webhook = match inbox.verify_webhook(verifier, request.headers(), &body) {
            Ok(webhook) => webhook,
            Err(error) => return error_response(&error),
        };
        let Ok(hook) = serde_json::from_slice::<Hook>(&body) else {
            // Permanent: the sender's outbox dead-letters it instead of retrying.
            return json_error(422, "the body is not a customer event");
        };
        let body = String::from_utf8_lossy(&body).into_owned();
        let key = webhook.id;
        let mut batch = Batch::new(self.db.clone());
        // Keyed by `webhook-id`: a redelivery changes nothing twice.
        let seen = match batch.inbox_key(inbox, &key, Some(&hook.customer)) {
            Ok(seen) => seen,
            // A key the inbox refuses (too long) never will pass.
            Err(error) => return json_error(400, &error.to_string()),
        };
        batch.push(Statement::new(
            "INSERT INTO received (key, customer, type, body, at) VALUES (?, ?, ?, ?, ?)",
            vec![
                key.as_str().into(),
                hook.customer.as_str().into(),
                hook.kind.as_str().into(),
                body.as_str().into(),
                SystemClock.now().into(),
            ],
        ));
        match batch.commit().await {
            Ok(_) => json(201, &serde_json::json!({ "applied": key })),
            Err(error) if seen.already_processed(&error) => {
                json(200, &serde_json::json!({ "already_applied": key }))
            }
            // Dropped on purpose, and said with a 2xx: a 410 would tell the
            // sender this endpoint is gone, and it would pause the topic.
            Err(workers_outbox::Error::SubjectErased { subjects }) => json(
                200,
                &serde_json::json!({ "dropped": key, "erased": subjects }),
            ),
            Err(error) => error_response(&error),
        }
    }
}

impl WebhookReceiver {
    async fn list(&self) -> Result<Response> {
        let select = Statement::new(
            "SELECT key, customer, type, at FROM received ORDER BY at, key",
            Vec::new(),
        );
        let rows = match self.db.query(&select).await {
            Ok(rows) => rows,
            Err(error) => return error_response(&error),
        };
        let received: Vec<serde_json::Value> = rows
            .iter()
            .map(|row| {
                let text = |column| match row.value(column) {
                    Some(Value::Text(text)) => serde_json::json!(text),
                    Some(Value::Integer(n)) => serde_json::json!(n),
                    _ => serde_json::Value::Null,
                };
                serde_json::json!({
                    "key": text("key"), "customer": text("customer"),
                    "type": text("type"), "at": text("at"),
                })
            })
            .collect();
        json(200, &received)
    }
}
