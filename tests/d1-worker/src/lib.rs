//! Test-only Worker: runs each case of the adapter conformance suite
//! against D1 (the binding `DB`) and against a Durable Object's SQL storage,
//! so both are held to the same contract as SQLite; and hosts an
//! alarm-driven outbox in a Durable Object. Driven from Node through
//! Miniflare (`tests/e2e/`).
//!
//! - `GET /cases`: the case names.
//! - `POST /cases/<name>`: runs one case on D1; `200 {"ok": true}` or
//!   `500 {"ok": false, "failure": "…"}`.
//! - `POST /do-cases/<name>`: the same, in a Durable Object of its own.
//! - `POST /pg-cases/<name>`: the same, on Postgres through the Hyperdrive
//!   binding `HYPERDRIVE` (a connection of its own).
//! - `/alarmed/<object>/<route>`: the route of the `AlarmedOutbox` object
//!   named `<object>` (see `durable.rs`).
//! - `/relay/<route>` and the Queue consumers: outbox → Queue → consumer
//!   (see `relay.rs`).
//! - `POST /platform/…`: the platform's destinations (`send_email`, a
//!   service binding, Workflows, a Queue) with real bindings (see
//!   `platform.rs`).
//! - `POST /analytics/drain`: a drain's Analytics Engine data points (see
//!   `analytics.rs`).

mod analytics;
// The `#[durable_object]` macro generates undocumented methods.
#[allow(missing_docs)]
mod durable;
mod platform;
mod relay;

use worker::{Context, Env, Method, Request, Response, Result, event};
use workers_outbox::conformance::{Capabilities, CaseResult, cases};
use workers_outbox::{D1Database, HyperdriveDatabase};

pub use durable::{AlarmedOutbox, ConformanceObject};

#[event(fetch)]
async fn fetch(request: Request, env: Env, _ctx: Context) -> Result<Response> {
    let path = request.path();
    let route = path.trim_matches('/');
    if route == "cases" && request.method() == Method::Get {
        let names: Vec<&str> = cases().iter().map(|case| case.name).collect();
        return Response::from_json(&names);
    }
    let Some((kind, rest)) = route.split_once('/') else {
        return Response::error("no such route", 404);
    };
    match (request.method(), kind) {
        (Method::Post, "cases") => {
            let Some(case) = cases().into_iter().find(|case| case.name == rest) else {
                return Response::error("no such case", 404);
            };
            let db = D1Database::shared(env.d1("DB")?);
            case_response(case.run(db, Capabilities::D1).await)
        }
        (Method::Post, "session-cases") => {
            let Some(case) = cases().into_iter().find(|case| case.name == rest) else {
                return Response::error("no such case", 404);
            };
            let db = D1Database::replica_reads(env.d1("DB")?)?;
            case_response(case.run(db, Capabilities::D1).await)
        }
        (Method::Post, "pg-cases") => {
            let Some(case) = cases().into_iter().find(|case| case.name == rest) else {
                return Response::error("no such case", 404);
            };
            let db = HyperdriveDatabase::connect(&env.hyperdrive("HYPERDRIVE")?).await?;
            case_response(
                case.run(std::sync::Arc::new(db), Capabilities::POSTGRES)
                    .await,
            )
        }
        (Method::Post, "do-cases") => {
            let stub = env
                .durable_object("CONFORMANCE")?
                .id_from_name(rest)?
                .get_stub()?;
            stub.fetch_with_str(&format!("http://object/cases/{rest}"))
                .await
        }
        (_, "relay") => relay::route(request, env, rest).await,
        (Method::Post, "platform") => platform::route(request, env, rest)
            .await
            .or_else(|error| Response::error(error.to_string(), 500)),
        (Method::Post, "analytics") if rest == "drain" => analytics::drain(&env).await,
        (_, "alarmed") => {
            let (object, inner) = rest.split_once('/').unwrap_or((rest, ""));
            let stub = env
                .durable_object("ALARMED")?
                .id_from_name(object)?
                .get_stub()?;
            let query = request
                .url()?
                .query()
                .map(|query| format!("?{query}"))
                .unwrap_or_default();
            let url = format!("http://object/{inner}{query}");
            let mut init = worker::RequestInit::new();
            init.with_method(request.method());
            let mut request = request;
            if request.method() == Method::Post {
                init.with_body(Some(request.text().await?.into()));
            }
            stub.fetch_with_request(Request::new_with_init(&url, &init)?)
                .await
        }
        _ => Response::error("no such route", 404),
    }
}

#[event(queue)]
async fn queue(
    batch: worker::MessageBatch<serde_json::Value>,
    env: Env,
    _ctx: Context,
) -> Result<()> {
    relay::consume(batch, env).await
}

/// A case's result as the JSON the Node side reads.
fn case_response(result: CaseResult) -> Result<Response> {
    match result {
        Ok(()) => Response::from_json(&serde_json::json!({ "ok": true })),
        Err(failure) => Ok(Response::from_json(
            &serde_json::json!({ "ok": false, "failure": failure.to_string() }),
        )?
        .with_status(500)),
    }
}
