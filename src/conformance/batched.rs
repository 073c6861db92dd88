//! Delivery through a [`DeliverBatch`]: calls within the deliverer's limits,
//! one verdict per message, timeouts per call.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{CaseResult, Failure, Harness, enqueue_message, ensure, ensure_eq, yield_now};
use crate::drain::drainer::Drainer;
use crate::drain::{BatchLimits, CircuitBreaker, DeliverBatch, DrainLimits};
use crate::future::BoxFuture;
use crate::manual_clock::ManualClock;
use crate::outbox::{ClaimedMessage, Delivery, Message, Outbox};

const LIMITS: BatchLimits = BatchLimits {
    max_messages: 40,
    max_bytes: 4_000,
};

/// Records each call's messages; fails messages whose payload asks to, and
/// drops the last verdict of the first call; hangs once if told to.
#[derive(Clone, Default)]
struct Bulk {
    calls: Arc<Mutex<Vec<Vec<String>>>>,
    hang_first_call: Option<ManualClock>,
}

impl Bulk {
    fn calls(&self) -> Vec<Vec<String>> {
        self.calls
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl DeliverBatch for Bulk {
    fn limits(&self) -> BatchLimits {
        LIMITS
    }

    fn deliver_batch<'a>(&'a self, messages: &'a [ClaimedMessage]) -> BoxFuture<'a, Vec<Delivery>> {
        Box::pin(async move {
            yield_now().await;
            let first = {
                let mut calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
                calls.push(messages.iter().map(|m| m.id.clone()).collect());
                calls.len() == 1
            };
            if first && let Some(clock) = &self.hang_first_call {
                clock.advance(Duration::from_secs(11));
                std::future::pending::<()>().await;
            }
            let mut verdicts: Vec<Delivery> = messages
                .iter()
                .map(|message| {
                    if message.payload.contains("fail") && message.attempt() == 1 {
                        Delivery::retry("asked to fail once")
                    } else {
                        Delivery::Delivered
                    }
                })
                .collect();
            if first {
                verdicts.pop();
            }
            verdicts
        })
    }
}

fn limits() -> DrainLimits {
    DrainLimits {
        batch_size: 100,
        concurrency: 2,
        delivery_timeout: Duration::from_secs(10),
        lease: Duration::from_secs(60),
        settle_margin: Duration::from_secs(5),
        deadline: Duration::from_secs(60),
        max_queries: 1_000,
        max_messages: 10_000,
        flush_interval: Duration::from_secs(1),
        // Failures here are the messages' own: no breaker to hold them.
        breaker: None::<CircuitBreaker>,
    }
}

fn drainer(h: &Harness, outbox: &Outbox, bulk: &Bulk) -> Result<Drainer, Failure> {
    Ok(Drainer::batch_builder(outbox.clone(), bulk.clone())
        .timer(Arc::new(h.clock().clone()))
        .limits(limits())
        .build()?)
}

pub(crate) async fn batch_calls_stay_within_their_limits(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let mut sizes = std::collections::HashMap::new();
    let topic = "bulk";
    // Tiny ones first: the message limit binds before the byte limit.
    for _ in 0..80 {
        let id = enqueue_message(&outbox, Message::raw_json(topic, "{}")).await?;
        sizes.insert(id.clone(), 2 + topic.len() + 64 + id.len());
    }
    // Due before the others, so they are claimed (and grouped) first.
    h.clock().advance(Duration::from_millis(1));
    for n in 0..150usize {
        // Payloads of 10 to 400 bytes; every tenth asks to fail once.
        let pad = "x".repeat(10 + (n * 37) % 390);
        let word = if n % 10 == 0 { "fail" } else { "pass" };
        let payload = format!("{{\"{word}\":\"{pad}\"}}");
        let size = payload.len() + topic.len() + 64;
        let id = enqueue_message(&outbox, Message::raw_json(topic, payload)).await?;
        sizes.insert(id.clone(), size + id.len());
    }
    let bulk = Bulk::default();
    let drainer = drainer(&h, &outbox, &bulk)?;
    let first = drainer.drain().await;
    ensure_eq!(first.claimed, 230);
    // 15 asked to fail, and the first call's last message had no verdict
    // (unless it was one of them).
    ensure_eq!(first.delivered + first.retried, 230);
    ensure!(
        (15..=16).contains(&first.retried),
        "{} retried",
        first.retried
    );
    h.clock().advance(Duration::from_secs(3_600));
    let second = drainer.drain().await;
    ensure_eq!(
        (second.claimed, second.delivered),
        (first.retried, first.retried)
    );
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    let calls = bulk.calls();
    for call in &calls {
        ensure!(
            !call.is_empty() && call.len() <= LIMITS.max_messages,
            "a call of {} messages",
            call.len()
        );
    }
    // Each message counts its payload, id, topic and 64 bytes.
    for call in &calls {
        let bytes: usize = call
            .iter()
            .map(|id| sizes.get(id).copied().unwrap_or(0))
            .sum();
        ensure!(bytes <= LIMITS.max_bytes, "a call of {bytes} bytes");
    }
    ensure!(
        calls.iter().any(|call| call.len() == LIMITS.max_messages),
        "no call carried {} messages: {:?}",
        LIMITS.max_messages,
        calls.iter().map(Vec::len).collect::<Vec<_>>()
    );
    let delivered: std::collections::BTreeSet<&String> = calls.iter().flatten().collect();
    ensure_eq!(delivered.len(), 230);
    Ok(())
}

pub(crate) async fn a_hung_batch_call_times_out_all_its_messages(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for _ in 0..30 {
        enqueue_message(&outbox, Message::raw_json("bulk", "{}")).await?;
    }
    let bulk = Bulk {
        hang_first_call: Some(h.clock().clone()),
        ..Bulk::default()
    };
    let report = drainer(&h, &outbox, &bulk)?.drain().await;
    // One call of all 30 hung: each of them timed out, none was lost.
    ensure_eq!((report.timed_out, report.delivered), (30, 0));
    let stats = outbox.stats().await?;
    ensure_eq!((stats.pending, stats.leased, stats.dead), (30, 0, 0));
    h.clock().advance(Duration::from_secs(3_600));
    let report = drainer(&h, &outbox, &bulk)?.drain().await;
    ensure_eq!(report.delivered, 30);
    Ok(())
}
