//! Test-only Worker: runs each case of the adapter conformance suite
//! against the D1 binding `DB`, so D1 is held to the same contract as
//! SQLite. Driven from Node through Miniflare (`tests/e2e/`).
//!
//! - `GET /cases`: the case names.
//! - `POST /cases/<name>`: runs one case; `200 {"ok": true}` or
//!   `500 {"ok": false, "failure": "…"}`.

use worker::{Context, Env, Method, Request, Response, Result, event};
use workers_outbox::conformance::{Capabilities, cases};
use workers_outbox::database::d1::D1Database;

#[event(fetch)]
async fn fetch(request: Request, env: Env, _ctx: Context) -> Result<Response> {
    let path = request.path();
    match (request.method(), path.trim_matches('/').split_once('/')) {
        (Method::Get, None) if path.trim_matches('/') == "cases" => {
            let names: Vec<&str> = cases().iter().map(|case| case.name).collect();
            Response::from_json(&names)
        }
        (Method::Post, Some(("cases", name))) => {
            let Some(case) = cases().into_iter().find(|case| case.name == name) else {
                return Ok(Response::from_json(
                    &serde_json::json!({ "ok": false, "failure": "no such case" }),
                )?
                .with_status(404));
            };
            let db = D1Database::shared(env.d1("DB")?);
            match case.run(db, Capabilities::D1).await {
                Ok(()) => Response::from_json(&serde_json::json!({ "ok": true })),
                Err(failure) => Ok(Response::from_json(
                    &serde_json::json!({ "ok": false, "failure": failure.to_string() }),
                )?
                .with_status(500)),
            }
        }
        _ => Response::error("no such route", 404),
    }
}
