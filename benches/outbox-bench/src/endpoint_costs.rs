//! What endpoints cost: one event fanned out to N endpoints inside the
//! business batch, and the attempt log's writes on a failing drain.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use workers_outbox::drain::{AttemptRecord, Deliver};
use workers_outbox::endpoint::{Endpoints, Event, NewEndpoint};
use workers_outbox::future::BoxFuture;
use workers_outbox::{
    Batch, ClaimedMessage, Clock, Delivery, DrainLimits, Outbox, Result, Statement, SystemClock,
};

use crate::scenarios::{Algorithm, Bench, Kind, Meter};

/// The endpoint tables `Bench::reset` drops beside the outbox.
pub(crate) const TABLES: [&str; 4] = [
    "outbox_endpoints",
    "outbox_subscriptions",
    "outbox_events",
    "outbox_attempts",
];

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The endpoints of `outbox`: `endpoints` of them, each subscribed to
/// `account.created`.
pub(crate) async fn subscribed(outbox: &Outbox, endpoints: u32) -> Result<Endpoints> {
    let registry = Endpoints::new(outbox);
    for n in 0..endpoints {
        registry
            .create(
                NewEndpoint::new("acme", format!("https://hooks-{n}.example.com/in"), SECRET)
                    .event_types(["account.created"]),
            )
            .await?;
    }
    Ok(registry)
}

/// One fan-out size's figures, summed over its iterations.
#[derive(Debug, Clone, Serialize)]
pub struct FanOutRun {
    /// Endpoints subscribed to the event.
    pub endpoints: u32,
    /// Business batches measured.
    pub iterations: u32,
    /// Deliveries one publish wrote.
    pub deliveries_per_event: u64,
    /// What the business batch with the event cost (the account insert included).
    pub with_event: Meter,
    /// What the same batch without the event cost.
    pub alone: Meter,
    /// Mean batch time without the event, in milliseconds.
    pub alone_ms: f64,
    /// Mean batch time with the event, in milliseconds.
    pub with_event_ms: f64,
}

/// A failing drain's figures.
#[derive(Debug, Clone, Serialize)]
pub struct FailingRun {
    /// Whether the deliverer logged each attempt.
    pub logged: bool,
    /// Attempts made (each failed for good).
    pub attempts: u64,
    /// What the drain cost.
    pub meter: Meter,
    /// How long it took, in milliseconds.
    pub elapsed_ms: f64,
}

/// Answers `400` to everything, logging each answer as `HttpDeliverer`
/// does (status, content type, the body's start) when `logged`.
struct Refusing {
    logged: bool,
}

impl Deliver for Refusing {
    fn deliver<'a>(&'a self, _message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin(async { Delivery::permanent("receiver answered 400") })
    }

    fn deliver_logged<'a>(
        &'a self,
        _message: &'a ClaimedMessage,
    ) -> BoxFuture<'a, (Delivery, Option<AttemptRecord>)> {
        let record = self.logged.then(|| {
            let mut record = AttemptRecord::new(Some(400), Duration::from_millis(12));
            record.headers = vec![("content-type".into(), "application/json".into())];
            record.body =
                r#"{"error":"invalid_payload","detail":"field 'amount' is required"}"#.into();
            record
        });
        Box::pin(async move { (Delivery::permanent("receiver answered 400"), record) })
    }
}

impl Bench {
    /// One event of a type `endpoints` endpoints subscribe to, published in
    /// a business batch (an account insert) `iterations` times, beside the
    /// same batch without it.
    pub async fn fan_out(&self, endpoints: u32, iterations: u32) -> Result<FanOutRun> {
        self.reset().await?;
        let outbox = self.outbox()?;
        let registry = subscribed(&outbox, endpoints).await?;
        let account = |tag: &str, n: u32| {
            Statement::new(
                "INSERT INTO accounts (id, email, created_at) VALUES (?, ?, ?)",
                vec![
                    format!("{tag}{n}").into(),
                    format!("{tag}{n}@example.com").into(),
                    SystemClock.now().into(),
                ],
            )
        };
        let (mut alone, mut with_event) = (Meter::default(), Meter::default());
        let (mut alone_ms, mut with_event_ms) = (0.0, 0.0);
        let mut deliveries = 0;
        for n in 0..iterations {
            let (before, started) = (self.probe.meter(), self.probe.now_ms());
            self.db.batch_atomic(&[account("a", n)]).await?;
            alone_ms += self.probe.now_ms() - started;
            alone = crate::scenarios::add(alone, self.probe.meter().since(before));

            let mut batch = Batch::new(self.db.clone());
            batch.push(account("b", n));
            let event = batch.publish(
                &registry,
                Event::new(
                    "acme",
                    "account.created",
                    &serde_json::json!({ "account": n }),
                )?,
            )?;
            let (before, started) = (self.probe.meter(), self.probe.now_ms());
            let committed = batch.commit().await?;
            with_event_ms += self.probe.now_ms() - started;
            with_event = crate::scenarios::add(with_event, self.probe.meter().since(before));
            deliveries = committed.published(&event)?;
        }
        let mean = |total: f64| total / f64::from(iterations.max(1));
        Ok(FanOutRun {
            endpoints,
            iterations,
            deliveries_per_event: deliveries,
            with_event,
            alone,
            alone_ms: mean(alone_ms),
            with_event_ms: mean(with_event_ms),
        })
    }

    /// Drains `messages` due messages that all fail for good, with each
    /// attempt logged or not.
    pub async fn failing_drain(&self, logged: bool, messages: u32) -> Result<FailingRun> {
        self.reset().await?;
        self.seed(Algorithm::Ours, Kind::Due, u64::from(messages))
            .await?;
        let limits = DrainLimits {
            batch_size: 100,
            max_queries: 900,
            max_messages: messages,
            deadline: Duration::from_secs(3600),
            ..DrainLimits::scheduled()
        };
        let (before, started) = (self.probe.meter(), self.probe.now_ms());
        let report = self
            .drain_ours(self.outbox()?, Arc::new(Refusing { logged }), limits)
            .await?;
        Ok(FailingRun {
            logged,
            attempts: u64::from(report.dead),
            meter: self.probe.meter().since(before),
            elapsed_ms: self.probe.now_ms() - started,
        })
    }
}
