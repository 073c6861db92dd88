//! Outbox → Queue → consumer, for the relay tests: messages enqueued in D1,
//! relayed into the `EVENTS` Queue by drains (which a test may cut off),
//! applied once each by a consumer that throws on a share of its
//! deliveries, with a dead letter queue that records what reaches it.
//!
//! - `POST /relay/seed?count=N`: creates the tables, enqueues N messages
//!   (500 to a batch).
//! - `POST /relay/drain?die_after=K`: one drain into the Queue; with
//!   `die_after`, its database calls fail after K, as if its isolate died.
//! - `POST /relay/poison`: sends the Queue a message that is no envelope.
//! - `GET /relay/state`: outbox rows left, effects, distinct effects,
//!   deliveries the consumer saw again, dead letters.

use std::sync::Arc;
use std::time::Duration;

use worker::{Env, MessageBatch, Request, Response, Result};
use workers_outbox::drain::{BatchLimits, DeliverBatch};
use workers_outbox::future::BoxFuture;
use workers_outbox::queue::{Consumed, Envelope, QueueConsumer, QueueDeliverer};
use workers_outbox::testing::{Fault, FaultyDatabase, Strike};
use workers_outbox::{
    Batch, ClaimedMessage, D1Database, Database, Delivery, DrainLimits, Drainer, Inbox, Message,
    Outbox, RetryAdvice, Statement,
};

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS effects (id TEXT PRIMARY KEY, topic TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS consumer_log (n INTEGER PRIMARY KEY, kind TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS dead_letters (n INTEGER PRIMARY KEY, body TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS relay_log (n INTEGER PRIMARY KEY, messages INTEGER NOT NULL)",
];

struct Parts {
    db: Arc<dyn Database>,
    outbox: Outbox,
    inbox: Inbox,
}

async fn parts(env: &Env) -> Result<Parts> {
    let db = D1Database::shared(env.d1("DB")?);
    let outbox = Outbox::new(db.clone(), "relay_outbox")?;
    let inbox = Inbox::new(db.clone(), "relay_inbox")?;
    Ok(Parts { db, outbox, inbox })
}

/// The tables, made by `seed` (the first route a test calls): the consumer
/// and the other routes run no DDL, as a deployed Worker's would not.
async fn create_schema(parts: &Parts) -> Result<()> {
    parts.outbox.create_schema().await?;
    parts.inbox.create_schema().await?;
    for sql in SCHEMA {
        parts.db.execute(&Statement::new(*sql, Vec::new())).await?;
    }
    Ok(())
}

pub(crate) async fn route(request: Request, env: Env, route: &str) -> Result<Response> {
    let parts = parts(&env).await?;
    let url = request.url()?;
    let number = |name: &str| {
        url.query_pairs()
            .find(|(key, _)| key == name)
            .and_then(|(_, value)| value.parse::<u64>().ok())
    };
    match route {
        "seed" => {
            create_schema(&parts).await?;
            let count = number("count").unwrap_or(0);
            let mut batch = Batch::new(parts.db.clone());
            for n in 0..count {
                // 2^53 + 1: a JavaScript number on the way would round it.
                let payload = serde_json::json!({ "n": n, "big": 9_007_199_254_740_993_u64 });
                let message = Message::json("account.created", &payload)?;
                drop(batch.enqueue(&parts.outbox, message)?);
                if (n + 1) % 500 == 0 {
                    std::mem::replace(&mut batch, Batch::new(parts.db.clone()))
                        .commit()
                        .await?;
                }
            }
            batch.commit().await?;
            Response::from_json(&count)
        }
        // A message no consumer can read: it belongs in the dead letter queue.
        "poison" => {
            env.queue("EVENTS")?
                .send(serde_json::json!({ "not": "an outbox envelope" }))
                .await?;
            Response::from_json(&"sent")
        }
        "drain" => {
            let limits = DrainLimits {
                delivery_timeout: Duration::from_secs(2),
                settle_margin: Duration::from_secs(1),
                lease: Duration::from_secs(6),
                ..DrainLimits::scheduled()
            };
            let relay = CountingRelay {
                inner: QueueDeliverer::new(env.queue("EVENTS")?),
                db: parts.db.clone(),
            };
            // With `die_after`, the drain's database dies after that many
            // calls, as if its isolate were evicted: what it relayed after
            // that is never settled, and its leases stay.
            let outbox = match number("die_after") {
                None => parts.outbox.clone(),
                Some(calls) => {
                    // Every call after the first `calls` fails, for good.
                    let dying = FaultyDatabase::new(parts.db.clone()).advice(RetryAdvice::Never);
                    dying.inject(Fault::Calls {
                        first: calls + 1,
                        count: u64::MAX,
                        strike: Strike::Before,
                    });
                    // The port's one `Send` story: nothing crosses threads on wasm32.
                    #[allow(clippy::arc_with_non_send_sync)]
                    let dying: Arc<dyn Database> = Arc::new(dying);
                    Outbox::new(dying, "relay_outbox")?
                }
            };
            let drainer = Drainer::batch_builder(outbox, relay)
                .limits(limits)
                .build()?;
            Response::from_json(&drainer.drain().await)
        }
        _ => {
            let count = |sql: &'static str| {
                let db = parts.db.clone();
                async move {
                    let rows = db.query(&Statement::new(sql, Vec::new())).await?;
                    rows.first()
                        .map(|row| row.get::<i64>("n"))
                        .transpose()
                        .map_err(worker::Error::from)
                        .map(Option::unwrap_or_default)
                }
            };
            Response::from_json(&serde_json::json!({
                "outbox": count("SELECT count(*) AS n FROM relay_outbox").await?,
                "effects": count("SELECT count(*) AS n FROM effects").await?,
                "distinct_effects": count("SELECT count(DISTINCT id) AS n FROM effects").await?,
                "already_applied": count("SELECT count(*) AS n FROM consumer_log WHERE kind = 'again'").await?,
                "thrown": count("SELECT count(*) AS n FROM consumer_log WHERE kind = 'thrown'").await?,
                "dead_letters": count("SELECT count(*) AS n FROM dead_letters").await?,
                "relay_calls": count("SELECT count(*) AS n FROM relay_log").await?,
                "relayed": count("SELECT coalesce(sum(messages), 0) AS n FROM relay_log").await?,
            }))
        }
    }
}

/// The `EVENTS` consumer: applies each message once (an effect row, with
/// the inbox key in the same batch). A tenth of the effects fail (the
/// message is retried), and the consumer gives up on a fifth of the rest
/// as a throw would (all unacked messages retried), right after the effect
/// committed (or was found applied) and before the ack, the worst moment. The dead letter queue's consumer records what reaches it.
pub(crate) async fn consume(batch: MessageBatch<serde_json::Value>, env: Env) -> Result<()> {
    let parts = parts(&env).await?;
    let log = |kind: &'static str| {
        let db = parts.db.clone();
        async move {
            db.execute(&Statement::new(
                "INSERT INTO consumer_log (kind) VALUES (?)",
                vec![kind.into()],
            ))
            .await
            .map_err(worker::Error::from)
        }
    };
    if batch.queue() != "events" {
        for message in batch.raw_iter() {
            let body = js_sys::JSON::stringify(&message.body())
                .ok()
                .and_then(|text| text.as_string())
                .unwrap_or_default();
            parts
                .db
                .execute(&Statement::new(
                    "INSERT INTO dead_letters (body) VALUES (?)",
                    vec![body.into()],
                ))
                .await?;
        }
        batch.ack_all();
        return Ok(());
    }
    let consumer =
        QueueConsumer::new(parts.db.clone(), parts.inbox.clone()).retry_delay(Duration::ZERO);
    let apply = |envelope: &Envelope, effect: &mut Batch| {
        // The payload arrives as it was enqueued.
        let payload: serde_json::Value = envelope.payload_as()?;
        if !payload["n"].is_u64() || !envelope.payload.get().contains("9007199254740993") {
            return Err(workers_outbox::Error::database(format!(
                "unexpected payload {payload}"
            )));
        }
        if js_sys::Math::random() < 0.1 {
            return Err(workers_outbox::Error::database("the effect failed"));
        }
        effect.push(Statement::new(
            "INSERT INTO effects (id, topic) VALUES (?, ?)",
            vec![envelope.id.as_str().into(), envelope.topic.as_str().into()],
        ));
        Ok(())
    };
    for message in batch.raw_iter() {
        let consumed = consumer.consume_one(&message, &apply).await;
        if consumed == Consumed::AlreadyApplied {
            log("again").await?;
        }
        if consumed.is_done() && js_sys::Math::random() < 0.2 {
            log("thrown").await?;
            // What a throw does: every message not yet acked comes back.
            // (Not by returning an error: worker 0.8.7's queue glue turns it
            // into a panic, and the isolate's reset aborts every request in
            // flight beside it, the test's own among them.)
            batch.retry_all();
            return Ok(());
        }
        consumer.settle(&message, &consumed);
    }
    Ok(())
}

/// The Queue relay, logging each `send_batch` that succeeded and how many
/// messages it carried (in the database that does not die).
struct CountingRelay {
    inner: QueueDeliverer,
    db: Arc<dyn Database>,
}

impl DeliverBatch for CountingRelay {
    fn limits(&self) -> BatchLimits {
        self.inner.limits()
    }

    fn size_of(&self, message: &ClaimedMessage) -> usize {
        self.inner.size_of(message)
    }

    fn isolates_suspects(&self) -> bool {
        self.inner.isolates_suspects()
    }

    fn deliver_batch<'a>(&'a self, messages: &'a [ClaimedMessage]) -> BoxFuture<'a, Vec<Delivery>> {
        Box::pin(async move {
            // Logged before the send (and corrected if it failed), so a call
            // dropped after its send cannot go uncounted.
            let count = i64::try_from(messages.len()).unwrap_or(i64::MAX);
            let log = Statement::new(
                "INSERT INTO relay_log (messages) VALUES (?) RETURNING n",
                vec![count.into()],
            );
            let logged = match self.db.query(&log).await {
                Ok(rows) => rows.first().and_then(|row| row.get::<i64>("n").ok()),
                Err(error) => {
                    let error = format!("could not log a relay: {error}");
                    return messages
                        .iter()
                        .map(|_| Delivery::retry(error.clone()))
                        .collect();
                }
            };
            let verdicts = self.inner.deliver_batch(messages).await;
            let sent = verdicts
                .iter()
                .filter(|v| **v == Delivery::Delivered)
                .count();
            if let Some(n) = logged
                && sent < messages.len()
            {
                let fix = Statement::new(
                    "UPDATE relay_log SET messages = ? WHERE n = ?",
                    vec![i64::try_from(sent).unwrap_or(0).into(), n.into()],
                );
                if let Err(error) = self.db.execute(&fix).await {
                    log::warn!("could not correct a relay log: {error}");
                }
            }
            verdicts
        })
    }
}
