//! What one message costs in the rows D1 bills, on each path, with the
//! rollups on and off: its enqueue (the rows its batch adds) and its
//! delivery (the settle that follows at once, or a drain's claim and
//! settle), measured apart.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use workers_outbox::drain::deliver_fn;
use workers_outbox::{Batch, ClaimedMessage, Delivery, DrainLimits, Message, Outbox, Result};

use crate::scenarios::{Bench, Meter, add};

const LEASE: Duration = Duration::from_secs(300);

/// A drain's batch, as the drain figures run it.
const DRAIN_BATCH: u32 = 100;

/// One path's cost, summed over its messages.
#[derive(Debug, Clone, Serialize)]
pub struct PathCost {
    /// `immediate` or `drained`.
    pub path: &'static str,
    /// Rollups on.
    pub rollups: bool,
    /// Messages delivered.
    pub messages: u64,
    /// Their enqueues: the rows their batches added.
    pub enqueue: Meter,
    /// Their deliveries: the settles (immediate), or the drain's claims and
    /// settles.
    pub deliver: Meter,
}

impl Bench {
    fn plain_outbox(&self, rollups: bool) -> Result<Outbox> {
        Outbox::builder(self.db.clone(), "outbox")
            .rollups(rollups)
            .build()
    }

    /// `messages` plain messages through each path, with the rollups as
    /// `rollups` says: **immediate** enqueues each leased in a batch of its
    /// own and settles it at once (the `wait_until` attempt); **drained**
    /// enqueues them 100 to a batch and drains them at batch 100 with a
    /// no-op deliverer.
    pub async fn cost(&self, rollups: bool, messages: u32) -> Result<Vec<PathCost>> {
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
        let immediate = PathCost {
            path: "immediate",
            rollups,
            messages: u64::from(messages),
            enqueue,
            deliver,
        };

        self.reset().await?;
        let mut enqueue = Meter::default();
        let mut left = messages;
        while left > 0 {
            let mut batch = Batch::new(self.db.clone());
            for _ in 0..left.min(DRAIN_BATCH) {
                // Its ticket is not read: the drain below delivers it.
                let _ticket = batch.enqueue(&outbox, Message::raw_json("webhook", "{\"n\":1}"))?;
            }
            left -= left.min(DRAIN_BATCH);
            let before = self.probe.meter();
            batch.commit().await?;
            enqueue = add(enqueue, self.probe.meter().since(before));
        }
        let limits = DrainLimits {
            batch_size: DRAIN_BATCH,
            max_queries: 900,
            max_messages: messages,
            lease: LEASE,
            deadline: Duration::from_secs(3600),
            ..DrainLimits::scheduled()
        };
        let before = self.probe.meter();
        let report = self
            .drain_ours(
                outbox,
                Arc::new(deliver_fn(|_: ClaimedMessage| async {
                    Delivery::Delivered
                })),
                limits,
            )
            .await?;
        let drained = PathCost {
            path: "drained",
            rollups,
            messages: u64::from(report.delivered),
            enqueue,
            deliver: self.probe.meter().since(before),
        };
        Ok(vec![immediate, drained])
    }
}
