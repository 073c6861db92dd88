//! What one message costs in the rows D1 bills, on each path, with the
//! rollups on and off, beside the original algorithm: its enqueue (the rows
//! its batch adds) and its delivery (the settle that follows at once, or a
//! drain's claims and settles), measured apart.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use workers_outbox::drain::{BatchLimits, DeliverBatch, StopReason, deliver_fn};
use workers_outbox::endpoint::Event;
use workers_outbox::future::BoxFuture;
use workers_outbox::{
    Batch, ClaimedMessage, Clock, Delivery, DrainLimits, Drainer, Message, Outbox, Result,
    SystemClock,
};

use crate::baseline::Baseline;
use crate::endpoint_costs::subscribed;
use crate::scenarios::{Bench, Meter, add};

const LEASE: Duration = Duration::from_secs(300);

/// A drain's batch, as the drain figures run it.
const DRAIN_BATCH: u32 = 100;

/// The endpoints an event is fanned out to, one row of the table each.
pub const FAN_OUT: [u32; 2] = [1, 10];

/// One path's cost, summed over its messages.
#[derive(Debug, Clone, Serialize)]
pub struct PathCost {
    /// `immediate`, `drained`, `relayed` or `fanned out to N`.
    pub path: String,
    /// `ours` or `original`.
    pub algorithm: &'static str,
    /// Rollups on (the original has none).
    pub rollups: bool,
    /// Messages its figures are per: messages delivered, or events
    /// published (fanned out).
    pub messages: u64,
    /// Their enqueues: the rows their batches added.
    pub enqueue: Meter,
    /// Their deliveries: the settles (immediate), or the drain's claims and
    /// settles.
    pub deliver: Meter,
}

/// A relay's batch deliverer, as a Queue's: every message of a call is
/// delivered once its one `send_batch` succeeds (here it always does).
struct Relay;

impl DeliverBatch for Relay {
    fn limits(&self) -> BatchLimits {
        BatchLimits {
            max_messages: 100,
            max_bytes: 256 * 1024,
        }
    }

    fn deliver_batch<'a>(&'a self, messages: &'a [ClaimedMessage]) -> BoxFuture<'a, Vec<Delivery>> {
        Box::pin(async move { vec![Delivery::Delivered; messages.len()] })
    }
}

impl Bench {
    fn plain_outbox(&self, rollups: bool) -> Result<Outbox> {
        Outbox::builder(self.db.clone(), "outbox")
            .rollups(rollups)
            .build()
    }

    /// `messages` plain messages through each of our paths, with the
    /// rollups as `rollups` says: **immediate** enqueues each leased in a
    /// batch of its own and settles it at once (the `wait_until` attempt);
    /// **drained** enqueues them 100 to a batch and drains them at batch 100
    /// with a no-op deliverer; **relayed** the same, through a batch
    /// deliverer as a Queue relay's (one call per 100); **fanned out to N**
    /// publishes events (`messages / N` of them, one per batch) that N
    /// endpoints subscribe to, and drains their deliveries.
    pub async fn cost(&self, rollups: bool, messages: u32) -> Result<Vec<PathCost>> {
        let mut paths = vec![
            self.immediate_cost(rollups, messages).await?,
            self.drained_cost(rollups, messages, false).await?,
            self.drained_cost(rollups, messages, true).await?,
        ];
        for endpoints in FAN_OUT {
            let events = (messages / endpoints).max(1);
            paths.push(self.fan_out_cost(rollups, endpoints, events).await?);
        }
        Ok(paths)
    }

    async fn immediate_cost(&self, rollups: bool, messages: u32) -> Result<PathCost> {
        self.reset().await?;
        let outbox = self.plain_outbox(rollups)?;
        let mut enqueue = Meter::default();
        let mut deliver = Meter::default();
        for _ in 0..messages {
            let mut batch = Batch::new(self.db.clone());
            let key =
                batch.enqueue_leased(&outbox, Message::raw_json("webhook", "{\"n\":1}"), LEASE)?;
            let before = self.probe.meter();
            let mut committed = batch.commit().await?;
            enqueue = add(enqueue, self.probe.meter().since(before));
            let claimed = committed.claimed(key)?.ok_or_else(|| {
                workers_outbox::Error::database("a cost benchmark's enqueue was not leased")
            })?;
            let before = self.probe.meter();
            outbox.complete(claimed.lease()).await?;
            deliver = add(deliver, self.probe.meter().since(before));
        }
        Ok(PathCost {
            path: "immediate".to_owned(),
            algorithm: "ours",
            rollups,
            messages: u64::from(messages),
            enqueue,
            deliver,
        })
    }

    /// Enqueues `messages` plain messages, 100 to a batch: what their
    /// batches cost.
    async fn enqueue_plain(&self, outbox: &Outbox, messages: u32) -> Result<Meter> {
        let mut enqueue = Meter::default();
        let mut left = messages;
        while left > 0 {
            let mut batch = Batch::new(self.db.clone());
            for _ in 0..left.min(DRAIN_BATCH) {
                // Its ticket is not read: the drain delivers it.
                let _ticket = batch.enqueue(outbox, Message::raw_json("webhook", "{\"n\":1}"))?;
            }
            left -= left.min(DRAIN_BATCH);
            let before = self.probe.meter();
            batch.commit().await?;
            enqueue = add(enqueue, self.probe.meter().since(before));
        }
        Ok(enqueue)
    }

    /// One drain of `outbox` at batch 100, delivering everything: each
    /// message on its own, or through [`Relay`]. What it cost, and how many
    /// it delivered.
    async fn drain_all(&self, outbox: Outbox, messages: u32, relay: bool) -> Result<(Meter, u64)> {
        let limits = DrainLimits {
            batch_size: DRAIN_BATCH,
            max_queries: 900,
            max_messages: messages,
            lease: LEASE,
            deadline: Duration::from_secs(3600),
            ..DrainLimits::scheduled()
        };
        let before = self.probe.meter();
        let delivered = if relay {
            let report = Drainer::batch_builder(outbox, Relay)
                .timer(self.timer.clone())
                .limits(limits)
                .build()?
                .drain()
                .await;
            if let StopReason::DatabaseError(error) = report.stopped {
                return Err(error);
            }
            report.delivered
        } else {
            self.drain_ours(
                outbox,
                Arc::new(deliver_fn(|_: ClaimedMessage| async {
                    Delivery::Delivered
                })),
                limits,
            )
            .await?
            .delivered
        };
        Ok((self.probe.meter().since(before), u64::from(delivered)))
    }

    async fn drained_cost(&self, rollups: bool, messages: u32, relay: bool) -> Result<PathCost> {
        self.reset().await?;
        let outbox = self.plain_outbox(rollups)?;
        let enqueue = self.enqueue_plain(&outbox, messages).await?;
        let (deliver, delivered) = self.drain_all(outbox, messages, relay).await?;
        if delivered != u64::from(messages) {
            return Err(workers_outbox::Error::database(format!(
                "a cost benchmark's drain delivered {delivered} of {messages} messages"
            )));
        }
        Ok(PathCost {
            path: if relay { "relayed" } else { "drained" }.to_owned(),
            algorithm: "ours",
            rollups,
            messages: delivered,
            enqueue,
            deliver,
        })
    }

    /// `events` events, each published in a batch of its own to the
    /// `endpoints` endpoints that subscribe to its type, then drained: per
    /// event.
    async fn fan_out_cost(&self, rollups: bool, endpoints: u32, events: u32) -> Result<PathCost> {
        self.reset().await?;
        let outbox = self.plain_outbox(rollups)?;
        let registry = subscribed(&outbox, endpoints).await?;
        let mut enqueue = Meter::default();
        for n in 0..events {
            let mut batch = Batch::new(self.db.clone());
            let event = Event::new(
                "acme",
                "account.created",
                &serde_json::json!({ "account": n }),
            )?;
            let ticket = batch.publish(&registry, event)?;
            let before = self.probe.meter();
            let committed = batch.commit().await?;
            enqueue = add(enqueue, self.probe.meter().since(before));
            if committed.published(&ticket)? != u64::from(endpoints) {
                return Err(workers_outbox::Error::database(
                    "a cost benchmark's event did not reach every endpoint",
                ));
            }
        }
        let (deliver, delivered) = self.drain_all(outbox, events * endpoints, false).await?;
        if delivered != u64::from(events * endpoints) {
            return Err(workers_outbox::Error::database(format!(
                "a cost benchmark's drain delivered {delivered} of {} deliveries",
                events * endpoints
            )));
        }
        Ok(PathCost {
            path: format!("fanned out to {endpoints}"),
            algorithm: "ours",
            rollups,
            messages: u64::from(events),
            enqueue,
            deliver,
        })
    }

    /// The original algorithm's immediate and drained paths, `messages`
    /// each: an insert per message (100 to a batch when drained), then its
    /// claim (a select, and an update per row) and a delete per row.
    pub async fn original_cost(&self, messages: u32) -> Result<Vec<PathCost>> {
        let baseline = Baseline::new(self.db.clone());
        let id = |n: u32| format!("m{n:08}");
        self.reset().await?;
        let (mut enqueue, mut deliver) = (Meter::default(), Meter::default());
        for n in 0..messages {
            let before = self.probe.meter();
            self.db
                .batch_atomic(&[crate::baseline::enqueue(&id(n), SystemClock.now())])
                .await?;
            enqueue = add(enqueue, self.probe.meter().since(before));
            let before = self.probe.meter();
            let now = SystemClock.now();
            for record in baseline.claim_due(now, now.checked_add(LEASE)?, 1).await? {
                baseline.complete(&record.id).await?;
            }
            deliver = add(deliver, self.probe.meter().since(before));
        }
        let immediate = PathCost {
            path: "immediate".to_owned(),
            algorithm: "original",
            rollups: false,
            messages: u64::from(messages),
            enqueue,
            deliver,
        };

        self.reset().await?;
        let mut enqueue = Meter::default();
        for first in (0..messages).step_by(DRAIN_BATCH as usize) {
            let now = SystemClock.now();
            let batch: Vec<_> = (first..messages.min(first + DRAIN_BATCH))
                .map(|n| crate::baseline::enqueue(&id(n), now))
                .collect();
            let before = self.probe.meter();
            self.db.batch_atomic(&batch).await?;
            enqueue = add(enqueue, self.probe.meter().since(before));
        }
        let before = self.probe.meter();
        let mut delivered = 0u64;
        loop {
            let now = SystemClock.now();
            let records = baseline
                .claim_due(now, now.checked_add(LEASE)?, u64::from(DRAIN_BATCH))
                .await?;
            if records.is_empty() {
                break;
            }
            for record in &records {
                baseline.complete(&record.id).await?;
            }
            delivered += records.len() as u64;
        }
        let drained = PathCost {
            path: "drained".to_owned(),
            algorithm: "original",
            rollups: false,
            messages: delivered,
            enqueue,
            deliver: self.probe.meter().since(before),
        };
        Ok(vec![immediate, drained])
    }
}
