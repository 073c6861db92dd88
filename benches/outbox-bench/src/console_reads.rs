//! What the operator console costs per request on a large outbox: each
//! request of its page and API, an operator's audited changes, a tenant's
//! portal pages, and the rows the database read and wrote for each; and
//! what a drain's alert rules read at its sweep.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use workers_outbox::console::{BearerToken, Console, MUTATION_HEADER, PORTAL_HEADER, Portal};
use workers_outbox::drain::deliver_fn;
use workers_outbox::endpoint::{Endpoints, NewEndpoint};
use workers_outbox::fleet::{Fleet, FleetMember};
use workers_outbox::outbox::Alert;
use workers_outbox::{ClaimedMessage, Delivery, DrainLimits, Outbox, Result, Statement};

use crate::scenarios::{Bench, FLEET_TABLE, Meter};

/// One console request and what it cost.
#[derive(Debug, Clone, Serialize)]
pub struct ConsoleRead {
    /// What was asked.
    pub request: &'static str,
    /// The path, under the console's prefix.
    pub path: String,
    /// The answer's status.
    pub status: u16,
    /// Calls, rows read and rows written for it.
    pub meter: Meter,
    /// Wall time, ms.
    pub ms: f64,
}

/// One drain's sweep with a set of alert rules, and what it cost.
#[derive(Debug, Clone, Serialize)]
pub struct AlertSweep {
    /// The rules it checked.
    pub rules: &'static str,
    /// Whether it told an alert (the first sweep of a window that holds).
    pub told: bool,
    /// What the whole drain cost (it claimed nothing: a claim and the sweep).
    pub meter: Meter,
}

/// Who sends a console request.
enum Caller<'a> {
    Operator,
    /// A tenant, by its portal link's token.
    Tenant(&'a str),
}

const TOKEN: &str = "bench-console-token";

/// The requests a page view makes, then the ones a user's filters make.
const REQUESTS: [(&str, &str); 12] = [
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
    (
        "an auto-refresh: due now, oldest, paused",
        "/api/outboxes/bench/live",
    ),
    (
        "an auto-refresh: the charts' last 2 minutes",
        "/api/outboxes/bench/rollups?minutes=2",
    ),
];

/// How many members the fleet's registry holds.
const FLEET_MEMBERS: u32 = 10_000;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The endpoint owner whose operator the alerts are told to.
const OPERATOR: &str = "ops";

impl Bench {
    /// Sends each console request once to a console over the bench's
    /// outbox (default count cap and scan bound), metering each: a page
    /// view, an operator's changes and the audit log, then a tenant's
    /// portal (one endpoint, no delivery of its own among the rows).
    pub async fn console_reads(&self) -> Result<Vec<ConsoleRead>> {
        let outbox = self.outbox()?;
        let endpoints = Endpoints::new(&outbox);
        let tenant = endpoints
            .create(NewEndpoint::new(
                "tenant",
                "https://hooks.tenant.example/in",
                SECRET,
            ))
            .await?;
        let console = Console::builder()
            .prefix("/console")
            .outbox("bench", outbox)
            .endpoints("bench", endpoints)
            .portal(Portal::new(&[7; 32])?)
            .authorize(BearerToken::operator(TOKEN))
            .build()?;
        let mut reads = Vec::with_capacity(REQUESTS.len() + 10);
        for (request, path) in REQUESTS {
            reads.push(
                self.console_read(&console, request, path.into(), None, &Caller::Operator)
                    .await?,
            );
        }
        // An operator makes the first 100 scheduled messages due now: the
        // keys a page of them gave, one primary-key lookup each.
        let page = console
            .handle(get(
                "/api/outboxes/bench/messages?state=scheduled&limit=100",
                &Caller::Operator,
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
        let changes = [
            (
                "reschedule 100 scheduled messages",
                "/api/outboxes/bench/messages/reschedule",
                body,
            ),
            (
                "pause a topic",
                "/api/outboxes/bench/topics/pause",
                r#"{"topic": "bench", "reason": "bench"}"#.to_owned(),
            ),
            (
                "resume it",
                "/api/outboxes/bench/topics/resume",
                r#"{"topic": "bench"}"#.to_owned(),
            ),
        ];
        for (request, path, body) in changes {
            reads.push(
                self.console_read(
                    &console,
                    request,
                    path.into(),
                    Some(body),
                    &Caller::Operator,
                )
                .await?,
            );
        }
        reads.push(
            self.console_read(
                &console,
                "the audit log, a page",
                "/api/outboxes/bench/audit".into(),
                None,
                &Caller::Operator,
            )
            .await?,
        );
        let link = console.portal_link("tenant", Duration::from_secs(3600))?;
        let token = link.rsplit_once("#portal=").map_or("", |(_, token)| token);
        let id = &tenant.id;
        let portal = [
            ("portal: session", "/api/session".to_owned()),
            (
                "portal: its endpoints",
                "/api/outboxes/bench/endpoints".to_owned(),
            ),
            (
                "portal: an endpoint and its attempts",
                format!("/api/outboxes/bench/endpoint?id={id}"),
            ),
            (
                "portal: its dead deliveries",
                format!("/api/outboxes/bench/deliveries?endpoint={id}"),
            ),
            (
                "portal: another route (refused)",
                "/api/outboxes/bench".to_owned(),
            ),
        ];
        for (request, path) in portal {
            reads.push(
                self.console_read(&console, request, path, None, &Caller::Tenant(token))
                    .await?,
            );
        }
        reads.extend(self.fleet_reads().await?);
        Ok(reads)
    }

    /// The fleet view over a registry of [`FLEET_MEMBERS`] members (one in
    /// ten with dead letters, one in five with a message due): its first
    /// page in each order and the next page by name; then a member's report
    /// of the bench's outbox, written (the first) and not (nothing changed).
    async fn fleet_reads(&self) -> Result<Vec<ConsoleRead>> {
        let fleet = Fleet::new(self.db.clone(), FLEET_TABLE)?;
        fleet.create_schema().await?;
        self.db
            .execute(&Statement::new(
                format!(
                    "INSERT INTO {FLEET_TABLE} \
                     (member, outbox, backlog, dead, oldest_due_at, last_error, reported_at) \
                     WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?) \
                     SELECT printf('customer-%06d', i), 'outbox', i % 7, \
                     CASE WHEN i % 10 = 0 THEN i % 13 + 1 ELSE 0 END, \
                     CASE WHEN i % 5 = 0 THEN 1700000000000 + i ELSE NULL END, \
                     CASE WHEN i % 10 = 0 THEN 'receiver answered 500' ELSE NULL END, \
                     1700000000000 FROM n"
                ),
                vec![i64::from(FLEET_MEMBERS).into()],
            ))
            .await?;
        let console = Console::builder()
            .prefix("/console")
            .fleet(fleet.clone(), "/customers/{member}/console/")
            .authorize(BearerToken::operator(TOKEN))
            .build()?;
        let mut reads = Vec::new();
        let orders = [
            (
                "name",
                "fleet: a page by name",
                "fleet: the next page by name",
            ),
            (
                "dead",
                "fleet: a page, most dead letters first",
                "fleet: the next page, most dead letters first",
            ),
            (
                "oldest_due",
                "fleet: a page, most overdue first",
                "fleet: the next page, most overdue first",
            ),
        ];
        for (order, first_page, next_page) in orders {
            let first = format!("/api/fleet?order={order}");
            let page = console.handle(get(&first, &Caller::Operator)?).await;
            let page: serde_json::Value =
                serde_json::from_str(page.body()).map_err(|error| invalid(&error))?;
            let after = page["next"].as_str().unwrap_or_default();
            let after: String = form_urlencoded::byte_serialize(after.as_bytes()).collect();
            let next = format!("{first}&after={after}");
            for (request, path) in [(first_page, first), (next_page, next)] {
                reads.push(
                    self.console_read(&console, request, path, None, &Caller::Operator)
                        .await?,
                );
            }
        }
        let member = FleetMember::new(fleet, "customer-bench")?;
        let outbox = self.outbox()?;
        for request in [
            "a member's report: summary read, row written",
            "a member's report again: nothing changed, nothing written",
        ] {
            let before = self.probe.meter();
            let started = self.probe.now_ms();
            let written = member.report(&outbox).await?;
            reads.push(ConsoleRead {
                request,
                path: "(FleetMember::report, after a drain)".into(),
                status: if written { 201 } else { 200 },
                ms: self.probe.now_ms() - started,
                meter: self.probe.meter().since(before),
            });
        }
        Ok(reads)
    }

    /// A drain's sweep on the console's rows (after a drain that delivered
    /// what was due): with no rule, then with two rules twice, the first
    /// sweep of the window telling the rule that holds, the second not.
    /// Each drain claims nothing, so the difference is the rules' cost.
    pub async fn alert_sweeps(&self) -> Result<Vec<AlertSweep>> {
        Endpoints::new(&self.outbox()?)
            .create(
                NewEndpoint::new(OPERATOR, "https://ops.example/alerts", SECRET)
                    .event_types([workers_outbox::outbox::operational::ALERT]),
            )
            .await?;
        let plain = Outbox::builder(self.db.clone(), "outbox")
            .operational_events(OPERATOR)
            .build()?;
        self.sweep(plain.clone()).await?;
        let alerting = Outbox::builder(self.db.clone(), "outbox")
            .operational_events(OPERATOR)
            .alert(Alert::dead_letters(10, Duration::from_secs(3600)))
            .alert(Alert::oldest_due(Duration::from_secs(300)))
            .build()?;
        let rules = "dead letters ≥ 10 in an hour, oldest due > 5 min";
        let mut sweeps = vec![AlertSweep {
            rules: "none",
            told: false,
            meter: self.sweep(plain).await?,
        }];
        for told in [true, false] {
            let meter = self.sweep(alerting.clone()).await?;
            sweeps.push(AlertSweep { rules, told, meter });
        }
        Ok(sweeps)
    }

    /// One drain by a new drainer (so it sweeps at its first claim) with a
    /// no-op deliverer, metered.
    async fn sweep(&self, outbox: Outbox) -> Result<Meter> {
        let before = self.probe.meter();
        let deliver = deliver_fn(|_: ClaimedMessage| async { Delivery::Delivered });
        self.drain_ours(outbox, Arc::new(deliver), DrainLimits::scheduled())
            .await?;
        Ok(self.probe.meter().since(before))
    }

    /// One metered console request: a GET, or a POST of `body`.
    async fn console_read(
        &self,
        console: &Console,
        request: &'static str,
        path: String,
        body: Option<String>,
        caller: &Caller<'_>,
    ) -> Result<ConsoleRead> {
        let http = match body {
            None => get(&path, caller)?,
            Some(body) => with_caller(
                http::Request::post(format!("https://bench.test/console{path}")),
                caller,
            )
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

fn get(path: &str, caller: &Caller<'_>) -> Result<http::Request<Vec<u8>>> {
    with_caller(
        http::Request::get(format!("https://bench.test/console{path}")),
        caller,
    )
    .body(Vec::new())
    .map_err(|error| invalid(&error))
}

fn with_caller(request: http::request::Builder, caller: &Caller<'_>) -> http::request::Builder {
    match caller {
        Caller::Operator => request.header("authorization", format!("Bearer {TOKEN}")),
        Caller::Tenant(token) => request.header(PORTAL_HEADER, *token),
    }
}

fn invalid(error: &dyn std::fmt::Display) -> workers_outbox::Error {
    workers_outbox::Error::InvalidInput {
        what: "console request",
        reason: error.to_string(),
    }
}
