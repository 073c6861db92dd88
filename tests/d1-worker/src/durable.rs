//! Durable Objects for the tests: the conformance suite on an object's SQL
//! storage, and an alarm-driven outbox whose deliveries are recorded.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use worker::{DurableObject, Env, Request, Response, Result, State, durable_object};
use workers_outbox::conformance::{Capabilities, cases};
use workers_outbox::drain::Deliver;
use workers_outbox::future::BoxFuture;
use workers_outbox::{
    Backoff, Batch, ClaimedMessage, Clock, Database, Delivery, DrainLimits, Drainer,
    DurableObjectDatabase, Message, Outbox, RandomSource, RetryPolicy, Statement, SystemClock,
};

use crate::case_response;

/// Runs one conformance case on its own object (`/cases/<name>`).
#[durable_object]
pub struct ConformanceObject {
    state: State,
}

impl DurableObject for ConformanceObject {
    fn new(state: State, _env: Env) -> Self {
        ConformanceObject { state }
    }

    async fn fetch(&self, request: Request) -> Result<Response> {
        let path = request.path();
        let name = path.trim_start_matches("/cases/");
        let Some(case) = cases().into_iter().find(|case| case.name == name) else {
            return Response::error("no such case", 404);
        };
        let db = DurableObjectDatabase::new(&self.state).shared();
        case_response(case.run(db, Capabilities::DURABLE_OBJECT).await)
    }
}

/// A fixed wait between attempts, so a test knows when a retry falls due.
#[derive(Debug)]
struct Fixed(Duration);

impl Backoff for Fixed {
    fn delay(&self, _attempt: u32, _random: &dyn RandomSource) -> Duration {
        self.0
    }
}

/// The payload of a test message: fail the first `fail` attempts.
#[derive(Deserialize)]
struct Plan {
    #[serde(default)]
    fail: u32,
}

/// Records every attempt in the object's `attempts` table, failing the
/// first `fail` of each message.
struct Recorder {
    db: Arc<DurableObjectDatabase>,
}

impl Deliver for Recorder {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin(async move {
            let fail = message.payload_as::<Plan>().map_or(0, |plan| plan.fail);
            // Attempts are counted here: a failure the outbox does not
            // charge (a lone failure in a run) leaves `attempt()` unchanged.
            let record = Statement::new(
                "INSERT INTO attempts (id, attempt, at, delivered) \
                 SELECT ?1, count(*) + 1, ?2, count(*) >= ?3 FROM attempts WHERE id = ?1 \
                 RETURNING delivered",
                vec![
                    message.id.as_str().into(),
                    SystemClock.now().into(),
                    i64::from(fail).into(),
                ],
            );
            let delivered = match self.db.query(&record).await {
                Ok(rows) => rows
                    .first()
                    .and_then(|row| row.get::<bool>("delivered").ok())
                    .unwrap_or(false),
                Err(error) => {
                    return Delivery::Retry {
                        error: format!("could not record: {error}"),
                    };
                }
            };
            if delivered {
                Delivery::Delivered
            } else {
                Delivery::Retry {
                    error: "planned failure".into(),
                }
            }
        })
    }
}

/// An outbox kept in the object and drained by its alarm.
///
/// - `POST /enqueue` `{"messages": [{"fail": 1, "ordering_key": "k",
///   "subject": "s", "delay_ms": 60000}, …]}` (all but `fail` optional):
///   enqueues them in one batch; answers their ids.
/// - `POST /erase?<subject>`: erases the subject's messages; answers how
///   many.
/// - `POST /abandon`: enqueues a message leased to the request (1.5 s) and
///   never delivers it; answers `{"id", "until"}`.
/// - `GET /attempts`: every attempt, in order: id, attempt, at, delivered.
/// - `GET /outbox`: the outbox rows: id, state, due_at, attempts, deferrals.
/// - `GET /alarm`: the alarm's time (epoch ms) or null.
#[durable_object]
pub struct AlarmedOutbox {
    state: State,
    db: Arc<DurableObjectDatabase>,
    outbox: Outbox,
}

#[derive(Deserialize)]
struct Enqueue {
    messages: Vec<Planned>,
}

#[derive(Deserialize)]
struct Planned {
    #[serde(default)]
    fail: u32,
    ordering_key: Option<String>,
    subject: Option<String>,
    /// Due this long after now.
    delay_ms: Option<u64>,
}

impl AlarmedOutbox {
    fn drainer(&self) -> workers_outbox::Result<Drainer> {
        let recorder = Recorder {
            db: Arc::clone(&self.db),
        };
        Drainer::builder(self.outbox.clone(), recorder)
            .limits(DrainLimits::alarm())
            .build()
    }

    async fn enqueue(&self, mut request: Request) -> Result<Response> {
        let plan: Enqueue = request.json().await?;
        let mut batch = Batch::new(self.db.clone());
        let mut tickets = Vec::new();
        for planned in plan.messages {
            let mut message = Message::json("test", &serde_json::json!({ "fail": planned.fail }))?;
            if let Some(key) = planned.ordering_key {
                message = message.ordering_key(key);
            }
            if let Some(subject) = planned.subject {
                message = message.subject(subject);
            }
            if let Some(delay) = planned.delay_ms {
                let due = SystemClock
                    .now()
                    .checked_add(Duration::from_millis(delay))?;
                message = message.not_before(due);
            }
            tickets.push(batch.enqueue(&self.outbox, message)?);
        }
        batch.commit().await?;
        let ids: Vec<&str> = tickets.iter().map(|ticket| ticket.id()).collect();
        Response::from_json(&ids)
    }

    /// Enqueues a message leased to this request, as a handler would before
    /// delivering it at once, and then never delivers it: a request that
    /// died after its commit. Answers the id and the lease's end.
    async fn abandon(&self) -> Result<Response> {
        let mut batch = Batch::new(self.db.clone());
        let message = Message::json("test", &serde_json::json!({ "fail": 0 }))?;
        let ticket = batch.enqueue_leased(&self.outbox, message, Duration::from_millis(1500))?;
        let mut committed = batch.commit().await?;
        let Some(claimed) = committed.claimed(ticket)? else {
            return Response::error("the leased message was not claimed", 500);
        };
        Response::from_json(&serde_json::json!({
            "id": claimed.id,
            "until": claimed.lease().until().as_unix_millis(),
        }))
    }

    async fn rows(&self, sql: &str) -> Result<Response> {
        let rows = self.db.query(&Statement::new(sql, Vec::new())).await?;
        let json: Vec<serde_json::Value> = rows
            .iter()
            .map(|row| {
                rows.columns()
                    .iter()
                    .map(|column| {
                        let value = match row.value(column) {
                            Some(workers_outbox::Value::Integer(n)) => serde_json::json!(n),
                            Some(workers_outbox::Value::Text(t)) => serde_json::json!(t),
                            _ => serde_json::Value::Null,
                        };
                        (column.clone(), value)
                    })
                    .collect()
            })
            .collect();
        Response::from_json(&json)
    }
}

impl DurableObject for AlarmedOutbox {
    fn new(state: State, _env: Env) -> Self {
        let db = DurableObjectDatabase::new(&state)
            .wake_for(Outbox::next_due("outbox").expect("a valid table name"))
            .expect("the alarm follows one outbox")
            .shared();
        let retry = RetryPolicy::new(5, Fixed(Duration::from_secs(2))).expect("a valid policy");
        let outbox = Outbox::builder(db.clone(), "outbox")
            .retry_policy(retry)
            .build()
            .expect("a valid outbox");
        let (schema_outbox, schema_db) = (outbox.clone(), Arc::clone(&db));
        // The runtime holds every event until the tables exist.
        drop(state.block_concurrency_while(async move {
            schema_outbox.create_schema().await?;
            schema_db
                .execute(&Statement::new(
                    "CREATE TABLE IF NOT EXISTS attempts (n INTEGER PRIMARY KEY, id TEXT, \
                     attempt INTEGER, at INTEGER, delivered INTEGER)",
                    Vec::new(),
                ))
                .await?;
            Ok(())
        }));
        AlarmedOutbox { state, db, outbox }
    }

    async fn fetch(&self, request: Request) -> Result<Response> {
        match (request.method(), request.path().as_str()) {
            (worker::Method::Post, "/enqueue") => self.enqueue(request).await,
            (worker::Method::Post, "/abandon") => self.abandon().await,
            (worker::Method::Post, "/erase") => {
                let subject = request.url()?.query().unwrap_or_default().to_owned();
                let mut batch = Batch::new(self.db.clone());
                let erased = batch.erase_outbox_subject(&self.outbox, &subject)?;
                let committed = batch.commit().await?;
                Response::from_json(&committed.erased(&erased)?)
            }
            (worker::Method::Get, "/attempts") => {
                self.rows("SELECT id, attempt, at, delivered FROM attempts ORDER BY n")
                    .await
            }
            (worker::Method::Get, "/outbox") => {
                self.rows(
                    "SELECT id, state, due_at, attempts, deferrals FROM outbox ORDER BY due_at, id",
                )
                .await
            }
            (worker::Method::Get, "/alarm") => {
                Response::from_json(&self.state.storage().get_alarm().await?)
            }
            _ => Response::error("no such route", 404),
        }
    }

    async fn alarm(&self) -> Result<Response> {
        let drainer = self.drainer()?;
        let report = drainer.run_alarm(&self.db).await?;
        Response::ok(report.to_string())
    }
}
