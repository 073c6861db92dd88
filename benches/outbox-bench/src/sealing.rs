//! Sealed payloads against clear ones: the same sign-up mails (an address
//! in the payload; with a subject and a dedup key, or without) through the
//! immediate path and through enqueue-then-drain, with the outbox's key
//! ring on or off. With a subject, a sealed mail has a data key of its own
//! (a row written beside it, deleted with it); without, it is sealed under
//! the ring's key alone: the two tell the crypto's cost from the key rows'.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use workers_outbox::drain::deliver_fn;
use workers_outbox::seal::KeyRing;
use workers_outbox::{Batch, ClaimedMessage, Delivery, DrainLimits, Message, Outbox, Result};

use crate::scenarios::{Bench, Meter};

const LEASE: Duration = Duration::from_secs(300);
/// Enqueues per batch on the drained path.
const PER_BATCH: u32 = 100;

/// One path's cost for `messages` messages.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PathCost {
    /// Wall-clock milliseconds.
    pub ms: f64,
    /// What the database was asked.
    pub meter: Meter,
}

/// One run of each path, sealed or clear.
#[derive(Debug, Clone, Serialize)]
pub struct SealingRun {
    /// Whether the outbox sealed.
    pub sealed: bool,
    /// Whether the mails had subjects (and dedup keys).
    pub subjects: bool,
    /// Messages per path.
    pub messages: u32,
    /// Enqueued leased in their own batch, delivered at once, settled.
    pub immediate: PathCost,
    /// Enqueued 100 to a batch.
    pub enqueue: PathCost,
    /// Drained by a no-op deliverer at batch 100.
    pub drain: PathCost,
}

/// The ring of the sealed runs (fixed keys: a benchmark seals nothing secret).
fn ring() -> Result<KeyRing> {
    KeyRing::builder()
        .hash_key(&[7; 32])
        .key("bench-1", &[1; 32])
        .build()
}

fn mail(n: u32, tag: &str, subjects: bool) -> Result<Message> {
    let email = format!("{tag}{n}@example.com");
    let message = Message::json(
        "signup-confirmation",
        &serde_json::json!({ "to": email, "name": format!("Person {n}"), "template": "welcome" }),
    )?;
    Ok(if subjects {
        message.subject(format!("{tag}{n}")).dedup_key(email)
    } else {
        message
    })
}

impl Bench {
    fn sealing_outbox(&self, sealed: bool) -> Result<Outbox> {
        let builder = Outbox::builder(self.db.clone(), "outbox");
        if sealed {
            builder.key_ring(ring()?).hash_keys(true).build()
        } else {
            builder.build()
        }
    }

    /// `messages` sign-up mails through each path, sealed or clear, with
    /// subjects or without, on a fresh outbox.
    pub async fn sealing(&self, sealed: bool, subjects: bool, messages: u32) -> Result<SealingRun> {
        self.reset().await?;
        let outbox = self.sealing_outbox(sealed)?;

        let before = self.probe.meter();
        let started = self.probe.now_ms();
        for n in 0..messages {
            let mut batch = Batch::new(self.db.clone());
            let ticket = batch.enqueue_leased(&outbox, mail(n, "now", subjects)?, LEASE)?;
            let mut committed = batch.commit().await?;
            let claimed: Option<ClaimedMessage> = committed.claimed(ticket)?;
            let claimed = claimed.ok_or_else(|| {
                workers_outbox::Error::database("a benchmark mail was deduplicated")
            })?;
            outbox.complete(claimed.lease()).await?;
        }
        let immediate = PathCost {
            ms: self.probe.now_ms() - started,
            meter: self.probe.meter().since(before),
        };

        let before = self.probe.meter();
        let started = self.probe.now_ms();
        let mut n = 0;
        while n < messages {
            let mut batch = Batch::new(self.db.clone());
            for _ in 0..PER_BATCH.min(messages - n) {
                let _written = batch.enqueue(&outbox, mail(n, "later", subjects)?)?;
                n += 1;
            }
            batch.commit().await?;
        }
        let enqueue = PathCost {
            ms: self.probe.now_ms() - started,
            meter: self.probe.meter().since(before),
        };

        let before = self.probe.meter();
        let started = self.probe.now_ms();
        let limits = DrainLimits {
            batch_size: 100,
            max_queries: u32::MAX,
            max_messages: u32::MAX,
            lease: LEASE,
            deadline: Duration::from_secs(3600),
            ..DrainLimits::scheduled()
        };
        let deliver = deliver_fn(|message: ClaimedMessage| async move {
            // The payload opened: a deliverer reads it.
            if message.payload.contains("@example.com") {
                Delivery::Delivered
            } else {
                Delivery::permanent("the payload did not open")
            }
        });
        let report = self.drain_ours(outbox, Arc::new(deliver), limits).await?;
        let drain = PathCost {
            ms: self.probe.now_ms() - started,
            meter: self.probe.meter().since(before),
        };
        if report.delivered != messages {
            return Err(workers_outbox::Error::database(format!(
                "the sealing drain delivered {} of {messages}",
                report.delivered
            )));
        }
        Ok(SealingRun {
            sealed,
            subjects,
            messages,
            immediate,
            enqueue,
            drain,
        })
    }
}
