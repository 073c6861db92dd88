//! What the bench Worker's entry point and its Durable Object share: the
//! delaying sink and JSON answers.

use serde::Serialize;
use worker::{Response, Result};

use crate::latency::Sink;

/// A subrequest to the bench's sink (Miniflare's outbound service), which
/// answers after the given time.
pub(crate) struct DelayingSink;

impl Sink for DelayingSink {
    fn visit(&self, ms: f64) -> workers_outbox::future::BoxFuture<'static, ()> {
        let url = format!("https://sink.test/delay?ms={ms:.1}");
        Box::pin(async move {
            if let Ok(request) = worker::Request::new(&url, worker::Method::Post) {
                drop(worker::Fetch::Request(request).send().await);
            }
        })
    }
}

/// A result as JSON: the value, or `{"error": …}` with status 500.
pub(crate) fn answer<T: Serialize>(result: workers_outbox::Result<T>) -> Result<Response> {
    match result {
        Ok(value) => Response::from_json(&value),
        Err(error) => Ok(
            Response::from_json(&serde_json::json!({ "error": error.to_string() }))?
                .with_status(500),
        ),
    }
}
