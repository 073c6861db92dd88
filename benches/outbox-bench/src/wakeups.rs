//! How soon a message is delivered after it falls due: outboxes in Durable
//! Objects woken by their alarms, against a D1 outbox drained by cron runs.
//!
//! Both record every delivery in a `deliveries` table of their own database
//! (`due` from the payload, `at` when delivered); each delivery first visits
//! the delaying sink for the payload's `delay_ms`.
//!
//! - Object `/wake/<name>/seed?count=&delay_ms=&due=&spread_ms=`: enqueues
//!   `count` messages due from `due` (epoch ms) spread over `spread_ms`, in
//!   one atomic write that also sets the alarm.
//! - Object `/wake/<name>/deliveries`: `[[due, at], …]`.
//! - Worker `/cron/seed` (same parameters), `/cron/drain` (one drain with the
//!   cron limits, like one `scheduled` run: several at once are fanned-out
//!   drains), `/cron/deliveries`, `/cron/counts` (`[total, distinct]`),
//!   `/cron/reset`.

use std::sync::Arc;

use serde::Deserialize;
use worker::{DurableObject, Env, Request, Response, Result, State, durable_object};
use workers_outbox::drain::Deliver;
use workers_outbox::future::BoxFuture;
use workers_outbox::{
    Batch, ClaimedMessage, Clock, Database, Delivery, DrainLimits, Drainer, DurableObjectDatabase,
    Message, Outbox, Statement, SystemClock, Timestamp,
};

use crate::latency::Sink;

/// Every delivery, repeats included (a message delivered twice has two rows).
const DELIVERIES: &str = "CREATE TABLE IF NOT EXISTS deliveries (n INTEGER PRIMARY KEY, id TEXT, due INTEGER, at INTEGER)";

/// What a bench message asks of its delivery.
#[derive(Deserialize, serde::Serialize)]
struct Plan {
    due: i64,
    delay_ms: f64,
}

/// Visits the sink for the message's delay, then records the delivery.
pub(crate) struct Recorder {
    pub(crate) db: Arc<dyn Database>,
    pub(crate) sink: Arc<dyn Sink>,
}

impl Deliver for Recorder {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin(async move {
            let Ok(plan) = message.payload_as::<Plan>() else {
                return Delivery::Permanent {
                    error: "not a bench message".into(),
                };
            };
            if plan.delay_ms > 0.0 {
                self.sink.visit(plan.delay_ms).await;
            }
            let record = Statement::new(
                "INSERT INTO deliveries (id, due, at) VALUES (?, ?, ?)",
                vec![
                    message.id.as_str().into(),
                    plan.due.into(),
                    SystemClock.now().into(),
                ],
            );
            match self.db.execute(&record).await {
                Ok(_) => Delivery::Delivered,
                Err(error) => Delivery::Retry {
                    error: error.to_string(),
                },
            }
        })
    }
}

/// The parameters of a seed.
pub(crate) struct Seed {
    pub(crate) count: u32,
    pub(crate) delay_ms: f64,
    pub(crate) due: i64,
    pub(crate) spread_ms: i64,
}

impl Seed {
    pub(crate) fn from_url(url: &worker::Url) -> Seed {
        let param = |name: &str| {
            url.query_pairs()
                .find(|(key, _)| key == name)
                .and_then(|(_, value)| value.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Seed {
            count: param("count") as u32,
            delay_ms: param("delay_ms"),
            due: param("due") as i64,
            spread_ms: param("spread_ms") as i64,
        }
    }

    /// Enqueues the messages, 500 to an atomic write, with due times spread
    /// evenly over the window in a fixed shuffled order.
    pub(crate) async fn enqueue(
        &self,
        db: &Arc<dyn Database>,
        outbox: &Outbox,
    ) -> workers_outbox::Result<()> {
        let count = i64::from(self.count.max(1));
        let mut batch = Batch::new(db.clone());
        for n in 0..self.count {
            // A multiplicative shuffle of the slots: due times do not follow
            // the order of the ids.
            let slot = (i64::from(n) * 7_919) % count;
            let due = self.due + self.spread_ms * slot / count;
            let plan = Plan {
                due,
                delay_ms: self.delay_ms,
            };
            let message =
                Message::json("bench", &plan)?.not_before(Timestamp::from_unix_millis(due)?);
            drop(batch.enqueue(outbox, message)?);
            if (n + 1) % 500 == 0 {
                std::mem::replace(&mut batch, Batch::new(db.clone()))
                    .commit()
                    .await?;
            }
        }
        batch.commit().await?;
        Ok(())
    }
}

/// Deliveries in all, and distinct messages delivered.
pub(crate) async fn delivery_counts(db: &dyn Database) -> workers_outbox::Result<(i64, i64)> {
    let rows = db
        .query(&Statement::new(
            "SELECT count(*) AS total, count(DISTINCT id) AS distinct_ids FROM deliveries",
            Vec::new(),
        ))
        .await?;
    let row = rows.first();
    let total = row
        .map(|row| row.get::<i64>("total"))
        .transpose()?
        .unwrap_or(0);
    let distinct = row
        .map(|row| row.get::<i64>("distinct_ids"))
        .transpose()?
        .unwrap_or(0);
    Ok((total, distinct))
}

/// The recorded `[due, at]` pairs.
pub(crate) async fn deliveries(db: &dyn Database) -> workers_outbox::Result<Vec<(i64, i64)>> {
    let rows = db
        .query(&Statement::new(
            "SELECT due, at FROM deliveries ORDER BY at",
            Vec::new(),
        ))
        .await?;
    rows.iter()
        .map(|row| Ok((row.get::<i64>("due")?, row.get::<i64>("at")?)))
        .collect()
}

/// Creates the outbox and the deliveries table.
pub(crate) async fn create_tables(
    db: &dyn Database,
    outbox: &Outbox,
) -> workers_outbox::Result<()> {
    outbox.create_schema().await?;
    db.execute(&Statement::new(DELIVERIES, Vec::new())).await?;
    Ok(())
}

/// An outbox in a Durable Object, drained by its alarm.
#[durable_object]
pub struct WakeObject {
    db: Arc<DurableObjectDatabase>,
    outbox: Outbox,
    drainer: Drainer,
}

impl DurableObject for WakeObject {
    fn new(state: State, _env: Env) -> Self {
        let db = DurableObjectDatabase::new(&state)
            .wake_for(Outbox::next_due("outbox").expect("a valid table name"))
            .expect("the alarm follows one outbox")
            .shared();
        let outbox = Outbox::new(db.clone(), "outbox").expect("a valid outbox");
        let recorder = Recorder {
            db: db.clone(),
            sink: Arc::new(crate::worker_glue::DelayingSink),
        };
        let drainer = Drainer::builder(outbox.clone(), recorder)
            .limits(DrainLimits::alarm())
            .build()
            .expect("valid limits");
        let (schema_db, schema_outbox) = (db.clone(), outbox.clone());
        drop(state.block_concurrency_while(async move {
            create_tables(&*schema_db, &schema_outbox)
                .await
                .map_err(|e| worker::Error::RustError(e.to_string()))
        }));
        WakeObject {
            db,
            outbox,
            drainer,
        }
    }

    async fn fetch(&self, request: Request) -> Result<Response> {
        let url = request.url()?;
        let db: Arc<dyn Database> = self.db.clone();
        if url.path().ends_with("/seed") {
            let seeded = Seed::from_url(&url).enqueue(&db, &self.outbox).await;
            crate::worker_glue::answer(seeded.map(|()| "seeded"))
        } else {
            crate::worker_glue::answer(deliveries(&*db).await)
        }
    }

    async fn alarm(&self) -> Result<Response> {
        let report = self
            .drainer
            .run_alarm(&self.db)
            .await
            .map_err(|e| worker::Error::RustError(e.to_string()))?;
        Response::ok(report.to_string())
    }
}
