//! What the operator console costs per request on a large outbox: each
//! request of its page and API, and the rows the database read for it.

use serde::Serialize;
use workers_outbox::Result;
use workers_outbox::console::{BearerToken, Console, MUTATION_HEADER};

use crate::scenarios::{Bench, Meter};

/// One console request and what it cost.
#[derive(Debug, Clone, Serialize)]
pub struct ConsoleRead {
    /// What was asked.
    pub request: &'static str,
    /// The path, under the console's prefix.
    pub path: &'static str,
    /// The answer's status.
    pub status: u16,
    /// Calls and rows read for it.
    pub meter: Meter,
    /// Wall time, ms.
    pub ms: f64,
}

const TOKEN: &str = "bench-console-token";

/// The requests a page view makes, then the ones a user's filters make.
const REQUESTS: [(&str, &str); 10] = [
    ("the page", "/"),
    ("session", "/api/session"),
    ("overview: counts per state", "/api/outboxes/bench"),
    (
        "rollups, last hour",
        "/api/outboxes/bench/rollups?minutes=60",
    ),
    ("dead letters grouped", "/api/outboxes/bench/dead/groups"),
    (
        "a page of dead letters",
        "/api/outboxes/bench/messages?state=dead",
    ),
    (
        "a page of due messages",
        "/api/outboxes/bench/messages?state=due",
    ),
    (
        "a page of scheduled messages",
        "/api/outboxes/bench/messages?state=scheduled",
    ),
    (
        "a topic no message has (a full walk)",
        "/api/outboxes/bench/messages?state=dead&topic=nothing",
    ),
    (
        "rollups, last day",
        "/api/outboxes/bench/rollups?minutes=1440",
    ),
];

impl Bench {
    /// Sends each console request once to a console over the bench's
    /// outbox (default count cap and scan bound), metering each.
    pub async fn console_reads(&self) -> Result<Vec<ConsoleRead>> {
        let console = Console::builder()
            .prefix("/console")
            .outbox("bench", self.outbox()?)
            .authorize(BearerToken::operator(TOKEN))
            .build()?;
        let mut reads = Vec::with_capacity(REQUESTS.len() + 1);
        for (request, path) in REQUESTS {
            reads.push(self.console_read(&console, request, path, None).await?);
        }
        // An operator makes the first 100 scheduled messages due now: the
        // keys a page of them gave, one primary-key lookup each.
        let page = console
            .handle(get(
                "/api/outboxes/bench/messages?state=scheduled&limit=100",
            )?)
            .await;
        let page: serde_json::Value =
            serde_json::from_str(page.body()).map_err(|error| invalid(&error))?;
        let keys: Vec<String> = page["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| format!("{}.{}", m["due_at"], m["id"].as_str().unwrap_or("")))
            .collect();
        let body = serde_json::json!({ "keys": keys }).to_string();
        reads.push(
            self.console_read(
                &console,
                "reschedule 100 scheduled messages",
                "/api/outboxes/bench/messages/reschedule",
                Some(body),
            )
            .await?,
        );
        Ok(reads)
    }

    /// One metered console request: a GET, or a POST of `body`.
    async fn console_read(
        &self,
        console: &Console,
        request: &'static str,
        path: &'static str,
        body: Option<String>,
    ) -> Result<ConsoleRead> {
        let http = match body {
            None => get(path)?,
            Some(body) => http::Request::post(format!("https://bench.test/console{path}"))
                .header("authorization", format!("Bearer {TOKEN}"))
                .header("host", "bench.test")
                .header(MUTATION_HEADER, "1")
                .body(body.into_bytes())
                .map_err(|error| invalid(&error))?,
        };
        let before = self.probe.meter();
        let started = self.probe.now_ms();
        let response = console.handle(http).await;
        Ok(ConsoleRead {
            request,
            path,
            status: response.status().as_u16(),
            ms: self.probe.now_ms() - started,
            meter: self.probe.meter().since(before),
        })
    }
}

fn get(path: &str) -> Result<http::Request<Vec<u8>>> {
    http::Request::get(format!("https://bench.test/console{path}"))
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(Vec::new())
        .map_err(|error| invalid(&error))
}

fn invalid(error: &dyn std::fmt::Display) -> workers_outbox::Error {
    workers_outbox::Error::InvalidInput {
        what: "console request",
        reason: error.to_string(),
    }
}
