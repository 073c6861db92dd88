//! What the operator console costs per request on a large outbox: each
//! request of its page and API, and the rows the database read for it.

use serde::Serialize;
use workers_outbox::Result;
use workers_outbox::console::{BearerToken, Console};

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
            .authorize(BearerToken::viewer(TOKEN))
            .build()?;
        let mut reads = Vec::with_capacity(REQUESTS.len());
        for (request, path) in REQUESTS {
            let http = http::Request::get(format!("https://bench.test/console{path}"))
                .header("authorization", format!("Bearer {TOKEN}"))
                .body(Vec::new())
                .map_err(|error| workers_outbox::Error::InvalidInput {
                    what: "console request",
                    reason: error.to_string(),
                })?;
            let before = self.probe.meter();
            let started = self.probe.now_ms();
            let response = console.handle(http).await;
            reads.push(ConsoleRead {
                request,
                path,
                status: response.status().as_u16(),
                ms: self.probe.now_ms() - started,
                meter: self.probe.meter().since(before),
            });
        }
        Ok(reads)
    }
}
