//! The drain's promises on time and on attempts: no deliverer call on a
//! lease without room for a timeout and a settle, and a message failing on
//! its own spends its attempts at the policy's pace, alone or among others.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{CaseResult, Failure, Harness, enqueue_message, ensure, ensure_eq};
use crate::drain::drainer::Drainer;
use crate::drain::{BatchLimits, CircuitBreaker, Deliver, DeliverBatch, DrainLimits, DrainReport};
use crate::future::BoxFuture;
use crate::manual_clock::ManualClock;
use crate::outbox::{ClaimedMessage, Delivery, Message, Outbox};
use crate::random::RandomSource;
use crate::retry::{Backoff, RetryPolicy};
use crate::time::Clock;

/// The value behind `mutex`, whether or not a panicking holder poisoned it.
fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Tight limits: a delivery needs 400 ms of its 800 ms lease.
fn tight() -> DrainLimits {
    DrainLimits {
        batch_size: 10,
        concurrency: 6,
        delivery_timeout: Duration::from_millis(250),
        lease: Duration::from_millis(800),
        settle_margin: Duration::from_millis(150),
        deadline: Duration::from_secs(2),
        flush_interval: Duration::from_millis(100),
        ..DrainLimits::scheduled()
    }
}

/// A receiver that blocks its thread on the first call it gets (the clock
/// jumps 1.1 s while nothing else runs, as under synchronous work, a
/// paused isolate or a long GC), and records how much lease each call had
/// left when it was made.
#[derive(Clone)]
struct Blocking {
    clock: ManualClock,
    calls: Arc<AtomicU32>,
    lease_left_ms: Arc<Mutex<Vec<i64>>>,
}

impl Blocking {
    fn new(h: &Harness) -> Self {
        Blocking {
            clock: h.clock().clone(),
            calls: Arc::default(),
            lease_left_ms: Arc::default(),
        }
    }

    /// Called synchronously as a deliverer is called.
    fn called(&self, messages: &[ClaimedMessage]) {
        let now = self.clock.now().as_unix_millis();
        locked(&self.lease_left_ms).extend(
            messages
                .iter()
                .map(|message| message.lease().until().as_unix_millis() - now),
        );
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            self.clock.advance(Duration::from_millis(1_100));
        }
    }

    fn lease_left_ms(&self) -> Vec<i64> {
        locked(&self.lease_left_ms).clone()
    }
}

impl Deliver for Blocking {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        self.called(std::slice::from_ref(message));
        Box::pin(async { Delivery::Delivered })
    }
}

impl DeliverBatch for Blocking {
    fn limits(&self) -> BatchLimits {
        BatchLimits {
            max_messages: 2,
            max_bytes: usize::MAX,
        }
    }

    fn deliver_batch<'a>(&'a self, messages: &'a [ClaimedMessage]) -> BoxFuture<'a, Vec<Delivery>> {
        self.called(messages);
        Box::pin(async move { messages.iter().map(|_| Delivery::Delivered).collect() })
    }
}

async fn enqueue_n(outbox: &Outbox, topic: &str, n: usize) -> Result<Vec<String>, Failure> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(enqueue_message(outbox, Message::raw_json(topic, "{}")).await?);
    }
    Ok(ids)
}

/// Drains 6 messages through `drainer` twice, and checks that the first
/// drain's blocked thread made every delivery queued behind it hand its
/// message back instead of calling the deliverer late.
async fn drain_past_a_blocked_thread(
    h: &Harness,
    outbox: &Outbox,
    receiver: &Blocking,
    drainer: &Drainer,
    refused: u32,
) -> CaseResult {
    let first = drainer.drain().await;
    ensure_eq!(
        (first.too_late_to_start, first.released, first.lease_lost),
        (refused, refused, 0)
    );
    let second = drainer.drain().await;
    ensure_eq!(first.delivered + second.delivered, 6);
    let room = i64::try_from((tight().delivery_timeout + tight().settle_margin).as_millis())
        .unwrap_or(i64::MAX);
    let left = receiver.lease_left_ms();
    ensure!(
        left.iter().all(|ms| *ms >= room),
        "the deliverer was called with less than {room} ms left on a lease: {left:?}"
    );
    ensure_eq!(left.len(), 6);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    Ok(())
}

pub(crate) async fn no_delivery_starts_on_a_lease_without_room(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    enqueue_n(&outbox, "mail", 6).await?;
    let receiver = Blocking::new(&h);
    let drainer = Drainer::builder(outbox.clone(), receiver.clone())
        .timer(Arc::new(h.clock().clone()))
        .limits(tight())
        .build()?;
    // One call blocks; the 5 queued behind it find their leases spent.
    drain_past_a_blocked_thread(&h, &outbox, &receiver, &drainer, 5).await
}

pub(crate) async fn no_batch_call_starts_on_a_lease_without_room(h: Harness) -> CaseResult {
    let outbox = h.outbox_named("batched", 3).await?;
    enqueue_n(&outbox, "mail", 6).await?;
    let receiver = Blocking::new(&h);
    let drainer = Drainer::batch_builder(outbox.clone(), receiver.clone())
        .timer(Arc::new(h.clock().clone()))
        .limits(tight())
        .build()?;
    // Calls of 2: one blocks, the 2 calls behind it hand back 4 messages.
    drain_past_a_blocked_thread(&h, &outbox, &receiver, &drainer, 4).await
}

/// A backoff without jitter: 1 s, 2 s, 4 s, … (capped at 64 s).
#[derive(Debug)]
struct Doubling;

impl Backoff for Doubling {
    fn delay(&self, attempt: u32, _random: &dyn RandomSource) -> Duration {
        Duration::from_secs(1 << attempt.saturating_sub(1).min(6))
    }
}

const MAX_ATTEMPTS: u32 = 4;

/// An outbox of 4 attempts with the [`Doubling`] backoff.
async fn paced_outbox(h: &Harness, name: &str) -> Result<Outbox, Failure> {
    let outbox = h
        .outbox_builder(h.db(), &h.table(name))
        .retry_policy(RetryPolicy::new(MAX_ATTEMPTS, Doubling)?)
        .build()?;
    outbox.create_schema().await?;
    Ok(outbox)
}

/// Answers 500 to the messages whose payload says `"fail"`, delivers the
/// rest; records when each message was delivered (ms since the start).
#[derive(Clone)]
struct FailsSome {
    clock: ManualClock,
    start: i64,
    deliveries: Arc<Mutex<BTreeMap<String, Vec<i64>>>>,
}

impl FailsSome {
    fn new(h: &Harness) -> Self {
        FailsSome {
            clock: h.clock().clone(),
            start: h.clock().now().as_unix_millis(),
            deliveries: Arc::default(),
        }
    }

    fn of(&self, id: &str) -> Vec<i64> {
        locked(&self.deliveries)
            .get(id)
            .cloned()
            .unwrap_or_default()
    }

    fn delivered(&self) -> BTreeMap<String, Vec<i64>> {
        locked(&self.deliveries).clone()
    }
}

impl Deliver for FailsSome {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin(async move {
            let at = self.clock.now().as_unix_millis() - self.start;
            locked(&self.deliveries)
                .entry(message.id.clone())
                .or_default()
                .push(at);
            if message.payload.contains("fail") {
                Delivery::retry("receiver answered 500")
            } else {
                Delivery::Delivered
            }
        })
    }
}

fn paced_limits() -> DrainLimits {
    DrainLimits {
        batch_size: 100,
        concurrency: 6,
        delivery_timeout: Duration::from_secs(10),
        lease: Duration::from_secs(30),
        settle_margin: Duration::from_secs(5),
        deadline: Duration::from_secs(25),
        breaker: Some(CircuitBreaker::default()),
        ..DrainLimits::scheduled()
    }
}

/// A drainer of `outbox` through `receiver` on the case's clock.
fn paced_drainer(h: &Harness, outbox: &Outbox, receiver: &FailsSome) -> Result<Drainer, Failure> {
    Ok(Drainer::builder(outbox.clone(), receiver.clone())
        .timer(Arc::new(h.clock().clone()))
        .limits(paced_limits())
        .build()?)
}

/// Drains every 250 ms of the manual clock for `seconds`.
async fn drain_every_quarter_second(
    h: &Harness,
    drainer: &Drainer,
    seconds: u64,
) -> Result<Vec<DrainReport>, Failure> {
    let mut reports = Vec::new();
    for _ in 0..seconds * 4 {
        reports.push(drainer.drain().await);
        h.clock().advance(Duration::from_millis(250));
    }
    Ok(reports)
}

/// Its deliveries, 1 s, 2 s and 4 s apart (the backoff after each attempt),
/// and its row dead after the policy's attempts.
async fn ensure_paced(outbox: &Outbox, receiver: &FailsSome, id: &str) -> CaseResult {
    let times = receiver.of(id);
    let gaps: Vec<i64> = times.windows(2).map(|pair| pair[1] - pair[0]).collect();
    ensure_eq!(gaps, vec![1_000, 2_000, 4_000]);
    let dead = outbox.list_dead(10, None).await?;
    let dead = dead
        .iter()
        .find(|message| message.id == id)
        .ok_or_else(|| Failure(format!("{id} is not dead")))?;
    ensure_eq!(dead.attempts, MAX_ATTEMPTS);
    let error = dead.last_error.clone().unwrap_or_default();
    ensure!(error.contains("attempts exhausted"), "{error}");
    Ok(())
}

pub(crate) async fn a_message_failing_alone_dies_at_the_policys_pace(h: Harness) -> CaseResult {
    let outbox = paced_outbox(&h, "alone").await?;
    let poison = enqueue_message(&outbox, Message::raw_json("webhook", r#""fail""#)).await?;
    let receiver = FailsSome::new(&h);
    let drainer = paced_drainer(&h, &outbox, &receiver)?;
    let reports = drain_every_quarter_second(&h, &drainer, 10).await?;
    ensure_paced(&outbox, &receiver, &poison).await?;
    let retried: u32 = reports.iter().map(|report| report.retried).sum();
    let deferred: u32 = reports.iter().map(|report| report.deferred).sum();
    ensure_eq!((retried, deferred), (MAX_ATTEMPTS - 1, 0));
    Ok(())
}

pub(crate) async fn the_head_of_a_key_failing_alone_dies_and_its_key_waits_as_ordered(
    h: Harness,
) -> CaseResult {
    let outbox = paced_outbox(&h, "keyed").await?;
    let keyed = |payload: &str| Message::raw_json("webhook", payload).ordering_key("customer-7");
    let head = enqueue_message(&outbox, keyed(r#""fail""#)).await?;
    let next = enqueue_message(&outbox, keyed("{}")).await?;
    let receiver = FailsSome::new(&h);
    let drainer = paced_drainer(&h, &outbox, &receiver)?;
    drain_every_quarter_second(&h, &drainer, 10).await?;
    ensure_paced(&outbox, &receiver, &head).await?;
    // A dead head holds its key until it is replayed or purged.
    ensure!(
        receiver.of(&next).is_empty(),
        "the next message overtook its dead head"
    );
    h.clock().advance(Duration::from_secs(1));
    ensure_eq!(outbox.purge_dead(h.clock().now()).await?, 1);
    drainer.drain().await;
    ensure_eq!(receiver.of(&next).len(), 1);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    Ok(())
}

pub(crate) async fn a_poison_webhook_among_healthy_ones_dies_alone(h: Harness) -> CaseResult {
    let outbox = paced_outbox(&h, "mixed").await?;
    let mut healthy = Vec::new();
    for _ in 0..10 {
        healthy.push(enqueue_message(&outbox, Message::raw_json("webhook", "{}")).await?);
    }
    let poison = enqueue_message(&outbox, Message::raw_json("webhook", r#""fail""#)).await?;
    let receiver = FailsSome::new(&h);
    let drainer = paced_drainer(&h, &outbox, &receiver)?;
    // New healthy webhooks keep arriving while the poison is retried.
    for _ in 0..10 {
        for report in drain_every_quarter_second(&h, &drainer, 1).await? {
            ensure!(
                report.tripped.is_empty(),
                "one failing webhook tripped its topic"
            );
        }
        healthy.push(enqueue_message(&outbox, Message::raw_json("webhook", "{}")).await?);
    }
    drain_every_quarter_second(&h, &drainer, 1).await?;
    ensure_paced(&outbox, &receiver, &poison).await?;
    let delivered = receiver.delivered();
    for id in &healthy {
        ensure_eq!(delivered.get(id).map(Vec::len), Some(1));
    }
    ensure_eq!(h.count(outbox.table().as_str()).await?, 1);
    Ok(())
}
