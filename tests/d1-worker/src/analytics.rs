//! `POST /analytics/drain`: drains an outbox on D1 into an Analytics Engine
//! dataset that records what it is given (a JavaScript object with the
//! binding's `writeDataPoint`, as Miniflare's own binding discards every
//! point), and answers the points written, as JSON.

use std::sync::Arc;

use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::Closure;
use worker::{AnalyticsEngineDataset, Env, Response, Result};
use workers_outbox::drain::deliver_fn;
use workers_outbox::telemetry::AnalyticsEngineTelemetry;
use workers_outbox::{D1Database, Database, Delivery, Drainer, Message, Outbox};

pub(crate) async fn drain(env: &Env) -> Result<Response> {
    let db: Arc<dyn Database> = D1Database::shared(env.d1("DB")?);
    let outbox = Outbox::new(db.clone(), "analytics_outbox")?;
    outbox.create_schema().await?;
    for topic in ["mail", "mail", "mail", "hooks"] {
        let message = Message::json(topic, &serde_json::json!({ "to": "ada@example.com" }))?;
        let enqueue = outbox.enqueue(message)?;
        db.batch_atomic(enqueue.statements()).await?;
    }
    let written = js_sys::Array::new();
    let record = written.clone();
    let write = Closure::<dyn Fn(wasm_bindgen::JsValue)>::new(move |point| {
        record.push(&point);
    });
    let dataset = js_sys::Object::new();
    js_sys::Reflect::set(&dataset, &"writeDataPoint".into(), write.as_ref())?;
    let telemetry =
        AnalyticsEngineTelemetry::new(dataset.unchecked_into::<AnalyticsEngineDataset>());
    let deliver = deliver_fn(|message| async move {
        if message.topic == "hooks" {
            Delivery::permanent("410 is not 400")
        } else {
            Delivery::Delivered
        }
    });
    let report = Drainer::builder(outbox, deliver)
        .telemetry(Arc::new(telemetry))
        .build()?
        .drain()
        .await;
    drop(write);
    let points = js_sys::JSON::stringify(&written)?
        .as_string()
        .unwrap_or_default();
    Response::from_json(&serde_json::json!({
        "delivered": report.delivered,
        "dead": report.dead,
        "points": serde_json::from_str::<serde_json::Value>(&points)
            .map_err(|error| worker::Error::RustError(error.to_string()))?,
    }))
}
