//! `/admin/…`: outbox stats, dead letters, drains, and subject export and
//! erasure. Every route needs `Authorization: Bearer <ADMIN_TOKEN>`.

use percent_encoding::percent_decode_str;
use subtle::ConstantTimeEq;
use worker::{Method, Request, Response, Result};
use workers_outbox::database::Value;
use workers_outbox::drain::DrainLimits;
use workers_outbox::subject::export_subject;
use workers_outbox::{Outbox, Statement};

use crate::app::App;
use crate::responses::{error_response, json, json_error};

pub(crate) async fn handle(request: Request, app: &App, path: &[String]) -> Result<Response> {
    if !authorized(&request, app.settings.admin_token.as_deref())? {
        let mut response = json_error(401, "missing or wrong bearer token")?;
        response.headers_mut().set("www-authenticate", "Bearer")?;
        return Ok(response);
    }
    let path: Vec<&str> = path.iter().map(String::as_str).collect();
    let query = request.url()?;
    let param = |name: &str| {
        query
            .query_pairs()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    };
    match (request.method(), path.as_slice()) {
        (Method::Get, ["outbox"]) => match app.outbox.stats().await {
            Ok(stats) => json(200, &stats),
            Err(error) => error_response(&error),
        },
        (Method::Get, ["outbox", "dead"]) => {
            let limit = match number(param("limit"), 100) {
                Ok(limit) => limit.min(Outbox::MAX_CLAIM),
                Err(problem) => return json_error(400, &problem),
            };
            match app.outbox.list_dead(limit, None).await {
                Ok(dead) => json(200, &dead),
                Err(error) => error_response(&error),
            }
        }
        (Method::Post, ["outbox", "dead", id, "replay"]) => {
            let id = decode(id);
            match app.outbox.replay(&id).await {
                Ok(()) => json(200, &serde_json::json!({ "replayed": id })),
                Err(error) => error_response(&error),
            }
        }
        (Method::Post, ["outbox", "drain"]) => {
            let base = app.settings.scheduled;
            let limits = (|| {
                Ok::<_, String>(DrainLimits {
                    batch_size: number(param("batch_size"), base.batch_size)?,
                    max_queries: number(param("max_queries"), base.max_queries)?,
                    max_messages: number(param("max_messages"), base.max_messages)?,
                    ..base
                })
            })();
            let limits = match limits {
                Ok(limits) => limits,
                Err(problem) => return json_error(400, &problem),
            };
            match app.drainer(limits) {
                Ok(drainer) => json(200, &drainer.drain().await),
                Err(error) => error_response(&error),
            }
        }
        (Method::Get, ["subjects", subject]) => export(app, &decode(subject)).await,
        (Method::Delete, ["subjects", subject]) => erase(app, &decode(subject)).await,
        _ => json_error(404, "no such admin route"),
    }
}

/// The bearer token, compared in constant time. No token configured means
/// no admin access at all.
fn authorized(request: &Request, token: Option<&str>) -> Result<bool> {
    let Some(token) = token else {
        return Ok(false);
    };
    let header = request.headers().get("authorization")?.unwrap_or_default();
    let Some(given) = header.strip_prefix("Bearer ") else {
        return Ok(false);
    };
    Ok(bool::from(given.as_bytes().ct_eq(token.as_bytes())))
}

/// A whole-number query parameter, or `default` when absent.
fn number(value: Option<String>, default: u32) -> std::result::Result<u32, String> {
    match value {
        None => Ok(default),
        Some(text) => text
            .parse()
            .map_err(|_| format!("{text:?} is not a whole number")),
    }
}

fn decode(segment: &str) -> String {
    percent_decode_str(segment).decode_utf8_lossy().into_owned()
}

/// Everything about one account: its row, its outbox messages, its inbox keys.
async fn export(app: &App, subject: &str) -> Result<Response> {
    let account = Statement::new(
        "SELECT id, email, created_at FROM accounts WHERE id = ?",
        vec![Value::from(subject)],
    );
    let rows = match app.db.query(&account).await {
        Ok(rows) => rows,
        Err(error) => return error_response(&error),
    };
    let account = match rows.first().map(|row| -> workers_outbox::Result<_> {
        Ok(serde_json::json!({
            "id": row.get::<String>("id")?,
            "email": row.get::<String>("email")?,
            "created_at": row.get::<i64>("created_at")?,
        }))
    }) {
        None => None,
        Some(Ok(account)) => Some(account),
        Some(Err(error)) => return error_response(&error),
    };
    match export_subject(&app.outbox, &app.inbox, subject).await {
        Ok(export) => json(
            200,
            &serde_json::json!({
                "subject": export.subject,
                "account": account,
                "outbox": export.outbox,
                "inbox": export.inbox,
            }),
        ),
        Err(error) => error_response(&error),
    }
}

/// Deletes the account, its outbox messages and inbox keys in one batch.
async fn erase(app: &App, subject: &str) -> Result<Response> {
    let statements = (|| -> workers_outbox::Result<Vec<Statement>> {
        let mut statements = app.outbox.erase_subject_statements(subject)?;
        statements.push(app.inbox.erase_subject_statement(subject)?);
        statements.push(Statement::new(
            "DELETE FROM accounts WHERE id = ?",
            vec![Value::from(subject)],
        ));
        Ok(statements)
    })();
    let statements = match statements {
        Ok(statements) => statements,
        Err(error) => return error_response(&error),
    };
    let removed = |outcomes: &[workers_outbox::Outcome], index: usize| {
        outcomes
            .get(index)
            .map_or(0, |outcome| outcome.rows_affected)
    };
    match app.db.batch_atomic(&statements).await {
        Ok(outcomes) => {
            let last = statements.len() - 1;
            json(
                200,
                &serde_json::json!({
                    "outbox": removed(&outcomes, Outbox::ERASE_DELETE),
                    "inbox": removed(&outcomes, last - 1),
                    "accounts": removed(&outcomes, last),
                }),
            )
        }
        Err(error) => error_response(&error),
    }
}
