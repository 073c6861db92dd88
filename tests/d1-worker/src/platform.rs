//! The platform's own destinations against the real bindings under
//! Miniflare: `send_email` (`MAIL`), a service binding (`BILLING`), a
//! Workflow (`ONBOARDING`), a Queue (`EVENTS`).
//!
//! - `POST /platform/deliver/<kind>?…`: one message in an outbox of its
//!   own, drained once by the kind's deliverer wrapped so that each message
//!   is delivered **twice** (the first reply lost); answers the message id,
//!   both verdicts and the drain's report. `kind` is `email` (`to=`),
//!   `service` (`path=`, `timeout_ms=`), `workflow`; `shim=<error>` swaps the binding for
//!   one whose calls fail with `<error>`, for the failures Miniflare's own
//!   bindings cannot give (`shim_get=found`: a Workflow's `get` finds the
//!   instance all the same; `shim_get=real`: the real binding's `get`
//!   looks).
//! - `POST /platform/bench/<kind>?count=N`: N messages drained by the
//!   kind's deliverer (`email`, `service`, `workflow`) until none is due;
//!   answers the messages, the D1 queries, the milliseconds and, for the
//!   Workflow, its binding's calls (`create`, `get`: a mail's and a
//!   request's land where the bench counts them), for the bench's table of
//!   subrequests per message.
//! - `POST /platform/endpoints`: endpoints of every kind (and a service
//!   endpoint that answers 500, an address the binding refuses), an event
//!   published to them, one drain logging every attempt; answers the event,
//!   the endpoints before and after with their attempt logs, and the
//!   report.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::{Arc, Mutex, PoisonError};

use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use worker::{Env, Request, Response, Result};
use workers_outbox::drain::{AttemptLog, AttemptRecord, Deliver};
use workers_outbox::email::{EmailDeliverer, Mail};
use workers_outbox::endpoint::{EndpointDeliverer, Endpoints, Event, NewEndpoint};
use workers_outbox::future::BoxFuture;
use workers_outbox::http::HttpDeliverer;
use workers_outbox::webhook::{Secret, Signer};
use workers_outbox::workflow::{WorkflowBinding, WorkflowDeliverer};
use workers_outbox::{
    Batch, ClaimedMessage, D1Database, Delivery, DrainLimits, Drainer, Message, Outbox,
};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// A verdict as the Node side reads it.
fn shown(verdict: &Delivery) -> String {
    match verdict {
        Delivery::Delivered => "delivered".to_owned(),
        Delivery::Retry { error } => format!("retry: {error}"),
        Delivery::Permanent { error } => format!("permanent: {error}"),
        Delivery::Unavailable { error, .. } => format!("unavailable: {error}"),
        Delivery::Gone { error } => format!("gone: {error}"),
        other => format!("{other:?}"),
    }
}

/// Delivers each message twice, as a relay whose first reply was lost
/// does, and keeps both verdicts.
struct Twice<D> {
    inner: D,
    verdicts: Arc<Mutex<Vec<String>>>,
}

impl<D: Deliver> Deliver for Twice<D> {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin(async move { self.deliver_logged(message).await.0 })
    }

    fn deliver_logged<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> BoxFuture<'a, (Delivery, Option<AttemptRecord>)> {
        Box::pin(async move {
            let (lost, _) = self.inner.deliver_logged(message).await;
            let (verdict, record) = self.inner.deliver_logged(message).await;
            let mut verdicts = self.verdicts.lock().unwrap_or_else(PoisonError::into_inner);
            verdicts.push(shown(&lost));
            verdicts.push(shown(&verdict));
            (verdict, record)
        })
    }
}

/// A stand-in binding whose `methods` all fail with `error`, but for
/// `answering`, which succeeds.
fn failing(methods: &[&str], error: &str, answering: Option<&str>) -> JsValue {
    let object = js_sys::Object::new();
    for method in methods {
        let error = error.to_owned();
        let answers = answering == Some(*method);
        let call = Closure::<dyn FnMut(JsValue) -> js_sys::Promise>::new(move |_| {
            if answers {
                js_sys::Promise::resolve(&JsValue::from(js_sys::Object::new()))
            } else {
                js_sys::Promise::reject(&js_sys::Error::new(&error).into())
            }
        });
        let _ = js_sys::Reflect::set(&object, &JsValue::from_str(method), call.as_ref());
        call.forget();
    }
    object.into()
}

pub(crate) async fn route(request: Request, env: Env, route: &str) -> Result<Response> {
    let url = request.url()?;
    let param = |name: &str| {
        url.query_pairs()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    };
    match route.split_once('/') {
        Some(("deliver", kind)) => deliver(&env, kind, &param).await,
        Some(("bench", kind)) => bench(&env, kind, &param).await,
        None if route == "endpoints" => endpoints(&env).await,
        _ => Response::error("no such route", 404),
    }
}

async fn outbox(env: &Env, name: &str) -> Result<Outbox> {
    let db = D1Database::shared(env.d1("DB")?);
    let outbox = Outbox::new(db, name)?;
    outbox.create_schema().await?;
    Ok(outbox)
}

fn limits() -> DrainLimits {
    DrainLimits {
        deadline: std::time::Duration::from_secs(25),
        ..DrainLimits::after_response()
    }
}

async fn deliver(
    env: &Env,
    kind: &str,
    param: &dyn Fn(&str) -> Option<String>,
) -> Result<Response> {
    let shim = param("shim");
    let table = format!("platform_{kind}_{}", js_sys::Date::now() as u64);
    let outbox = outbox(env, &table).await?;
    let verdicts = Arc::new(Mutex::new(Vec::new()));
    let (payload, deliverer): (
        serde_json::Value,
        Box<dyn FnOnce(Outbox) -> Result<Drainer>>,
    ) = match kind {
        "email" => {
            let to = param("to").unwrap_or_else(|| "ada@example.com".into());
            let binding: worker::SendEmail = match &shim {
                Some(error) => failing(&["send"], error, None).unchecked_into(),
                None => env.send_email("MAIL")?,
            };
            let mail = Mail::new("outbox@app.example", to, "Platform test").text("hello");
            let twice = Twice {
                inner: EmailDeliverer::new(binding),
                verdicts: verdicts.clone(),
            };
            (
                serde_json::to_value(&mail)?,
                Box::new(move |outbox| {
                    Ok(Drainer::builder(outbox, twice).limits(limits()).build()?)
                }),
            )
        }
        "service" => {
            let path = param("path").unwrap_or_else(|| "/ok".into());
            let signer = Signer::new(vec![Secret::parse(SECRET)?])?;
            let timeout = param("timeout_ms").and_then(|ms| ms.parse().ok());
            let mut service = HttpDeliverer::service(
                env.service("BILLING")?,
                &format!("https://billing.internal{path}"),
            )?
            .signed(signer);
            if let Some(ms) = timeout {
                service = service.timeout(std::time::Duration::from_millis(ms));
            }
            let twice = Twice {
                inner: service,
                verdicts: verdicts.clone(),
            };
            (
                serde_json::json!({ "invoice": "inv-1" }),
                Box::new(move |outbox| {
                    Ok(Drainer::builder(outbox, twice).limits(limits()).build()?)
                }),
            )
        }
        "workflow" => {
            let binding = match (&shim, param("shim_get").as_deref()) {
                // `create` fails, and the real binding's `get` looks.
                (Some(error), Some("real")) => {
                    let real: JsValue = WorkflowBinding::from_env(env, "ONBOARDING")?.into();
                    let get = js_sys::Reflect::get(&real, &JsValue::from_str("get"))?
                        .unchecked_into::<js_sys::Function>()
                        .bind0(&real);
                    let stand_in = failing(&["create"], error, None);
                    js_sys::Reflect::set(&stand_in, &JsValue::from_str("get"), &get)?;
                    stand_in.unchecked_into()
                }
                // `found`: `create` fails, the instance is there.
                (Some(error), found) => {
                    let found = found == Some("found");
                    failing(&["create", "get"], error, found.then_some("get")).unchecked_into()
                }
                (None, _) => WorkflowBinding::from_env(env, "ONBOARDING")?,
            };
            let twice = Twice {
                inner: WorkflowDeliverer::new(binding, "ONBOARDING"),
                verdicts: verdicts.clone(),
            };
            (
                serde_json::json!({ "account": "a-1" }),
                Box::new(move |outbox| {
                    Ok(Drainer::builder(outbox, twice).limits(limits()).build()?)
                }),
            )
        }
        _ => return Response::error("no such kind", 404),
    };
    let enqueued = outbox
        .enqueue_alone(Message::json("platform", &payload)?)
        .await?;
    let report = deliverer(outbox.clone())?.drain().await;
    let verdicts = verdicts
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    Response::from_json(&serde_json::json!({
        "id": enqueued.id,
        "verdicts": verdicts,
        "delivered": report.delivered,
    }))
}

async fn endpoints(env: &Env) -> Result<Response> {
    let outbox = outbox(
        env,
        &format!("platform_endpoints_{}", js_sys::Date::now() as u64),
    )
    .await?;
    let endpoints = Endpoints::new(&outbox)
        .allow_email_to(["acme.example"])
        .allow_bindings(["BILLING", "ONBOARDING", "EVENTS"]);
    let mut made = serde_json::Map::new();
    for (name, new) in [
        (
            "email",
            NewEndpoint::unsigned("acme", "mailto:ops@acme.example"),
        ),
        (
            "service",
            NewEndpoint::new("acme", "service://BILLING/hooks", SECRET),
        ),
        (
            "failing",
            NewEndpoint::new("acme", "service://BILLING/status/500", SECRET),
        ),
        (
            "workflow",
            NewEndpoint::unsigned("acme", "workflow://ONBOARDING"),
        ),
        ("queue", NewEndpoint::unsigned("acme", "queue://EVENTS")),
        // An address of an allowed domain that the binding refuses.
        (
            "refused",
            NewEndpoint::unsigned("acme", "mailto:bob@acme.example"),
        ),
    ] {
        let endpoint = endpoints.create(new).await?;
        made.insert(name.to_owned(), serde_json::to_value(&endpoint)?);
    }
    let mut batch = Batch::new(outbox.database().clone());
    let event = batch.publish(
        &endpoints,
        Event::raw_json("acme", "account.created", r#"{"account":"a-2"}"#),
    )?;
    let published = batch.commit().await?.published(&event)?;
    let deliver = EndpointDeliverer::new()?
        .email(env.send_email("MAIL")?, "outbox@app.example")?
        .service("BILLING", env.service("BILLING")?)
        .workflow("ONBOARDING", WorkflowBinding::from_env(env, "ONBOARDING")?)
        .queue("EVENTS", env.queue("EVENTS")?)
        .attempt_log(AttemptLog::All);
    let report = Drainer::builder(outbox.clone(), deliver)
        .limits(limits())
        .build()?
        .drain()
        .await;
    // Each endpoint as the drain left it, and its attempt log.
    let mut after = serde_json::Map::new();
    for (name, endpoint) in &made {
        let id = endpoint["id"].as_str().unwrap_or_default();
        after.insert(
            name.clone(),
            serde_json::json!({
                "endpoint": endpoints.get("acme", id).await?,
                "attempts": endpoints.attempts("acme", id, 10).await?,
            }),
        );
    }
    Response::from_json(&serde_json::json!({
        "event": event.id(),
        "published": published,
        "endpoints": made,
        "after": after,
        "delivered": report.delivered,
        "retried": report.retried,
    }))
}

/// `binding` with every method call counted in `calls` (`constructor`
/// aside, so the binding still reads as its type).
fn counted(binding: &JsValue, calls: &Rc<Cell<u32>>) -> JsValue {
    let calls = calls.clone();
    let get = Closure::<dyn FnMut(JsValue, JsValue) -> JsValue>::new(
        move |target: JsValue, property: JsValue| {
            let value = js_sys::Reflect::get(&target, &property).unwrap_or(JsValue::UNDEFINED);
            let method = match value.dyn_ref::<js_sys::Function>() {
                Some(method) if property.as_string().as_deref() != Some("constructor") => {
                    method.clone()
                }
                _ => return value,
            };
            let calls = calls.clone();
            // Every method the deliverers call takes one argument.
            Closure::<dyn FnMut(JsValue) -> JsValue>::new(move |argument: JsValue| {
                calls.set(calls.get() + 1);
                method
                    .call1(&target, &argument)
                    .unwrap_or_else(|error| js_sys::Promise::reject(&error).into())
            })
            .into_js_value()
        },
    );
    let handler = js_sys::Object::new();
    let _ = js_sys::Reflect::set(&handler, &JsValue::from_str("get"), get.as_ref());
    get.forget();
    js_sys::Proxy::new(binding, &handler).into()
}

async fn bench(env: &Env, kind: &str, param: &dyn Fn(&str) -> Option<String>) -> Result<Response> {
    let count: u32 = param("count").and_then(|n| n.parse().ok()).unwrap_or(100);
    let outbox = outbox(
        env,
        &format!("platform_bench_{kind}_{}", js_sys::Date::now() as u64),
    )
    .await?;
    let calls = Rc::new(Cell::new(0));
    let limits = DrainLimits {
        deadline: std::time::Duration::from_secs(25),
        ..DrainLimits::scheduled()
    };
    let (drainer, payload) = match kind {
        "email" => {
            // A stub of Miniflare's mail service cannot be wrapped: its calls
            // are counted where they land (the bench reads the .eml lines).
            let binding = env.send_email("MAIL")?;
            let mail = Mail::new("outbox@app.example", "ada@example.com", "Bench").text("hello");
            let drainer = Drainer::builder(outbox.clone(), EmailDeliverer::new(binding));
            (drainer, serde_json::to_value(&mail)?)
        }
        "service" => {
            // Counted where they land: the other Worker's requests.
            let deliverer =
                HttpDeliverer::service(env.service("BILLING")?, "https://billing.internal/ok")?
                    .signed(Signer::new(vec![Secret::parse(SECRET)?])?);
            let drainer = Drainer::builder(outbox.clone(), deliverer);
            (drainer, serde_json::json!({ "invoice": "inv-1" }))
        }
        "workflow" => {
            let raw: JsValue = WorkflowBinding::from_env(env, "ONBOARDING")?.into();
            let binding = counted(&raw, &calls).unchecked_into();
            let drainer = Drainer::builder(
                outbox.clone(),
                WorkflowDeliverer::new(binding, "ONBOARDING"),
            );
            (drainer, serde_json::json!({ "account": "a-1" }))
        }
        _ => return Response::error("no such kind", 404),
    };
    let drainer = drainer.limits(limits).build()?;
    let mut batch = Batch::new(outbox.database().clone());
    for _ in 0..count {
        drop(batch.enqueue(&outbox, Message::json("platform", &payload)?)?);
    }
    batch.commit().await?;
    let started = js_sys::Date::now();
    let (mut delivered, mut queries) = (0, 0);
    // A drain runs until nothing is due; another starts only if its
    // deadline or budget stopped it.
    loop {
        let report = drainer.drain().await;
        if report.claimed == 0 {
            break;
        }
        delivered += report.delivered;
        queries += report.queries;
    }
    Response::from_json(&serde_json::json!({
        "messages": count,
        "delivered": delivered,
        "calls": calls.get(),
        "queries": queries,
        "wall_ms": js_sys::Date::now() - started,
    }))
}
