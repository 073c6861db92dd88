//! The drain loop: delivers, settles, and stops at each of its limits.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::join;

use super::{CaseResult, Failure, Harness, LEASE, enqueue, ensure, ensure_eq, yield_now};
use crate::drain::drainer::Drainer;
use crate::drain::{CircuitBreaker, Deliver, DrainLimits, StopReason, deliver_fn};
use crate::manual_clock::ManualClock;
use crate::outbox::{ClaimedMessage, Delivery, Message, Outbox};

/// The limits most drain cases use.
pub(super) fn limits() -> DrainLimits {
    DrainLimits {
        batch_size: 10,
        concurrency: 3,
        delivery_timeout: Duration::from_secs(10),
        lease: LEASE,
        settle_margin: Duration::from_secs(5),
        deadline: Duration::from_secs(60),
        max_queries: 1_000,
        max_messages: 10_000,
        flush_interval: Duration::from_secs(1),
        breaker: Some(CircuitBreaker::default()),
    }
}

fn drainer(
    h: &Harness,
    outbox: &Outbox,
    deliver: impl Deliver + 'static,
    limits: DrainLimits,
) -> Result<Drainer, Failure> {
    Ok(Drainer::builder(outbox.clone(), deliver)
        .timer(Arc::new(h.clock().clone()))
        .limits(limits)
        .build()?)
}

/// Delivers everything, remembering what it delivered.
#[derive(Clone, Default)]
struct Recorder {
    delivered: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn ids(&self) -> Vec<String> {
        self.delivered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Deliver for Recorder {
    fn deliver<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> crate::future::BoxFuture<'a, Delivery> {
        Box::pin(async move {
            yield_now().await;
            self.delivered
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(message.id.clone());
            Delivery::Delivered
        })
    }
}

pub(crate) async fn drains_everything_and_reports(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for _ in 0..25 {
        enqueue(&outbox, "mail").await?;
    }
    let recorder = Recorder::default();
    let before = h.counts();
    let report = drainer(&h, &outbox, recorder.clone(), limits())?
        .drain()
        .await;
    ensure_eq!(
        (
            report.claimed,
            report.delivered,
            report.batches,
            report.queries
        ),
        (25, 25, 3, 4)
    );
    ensure_eq!(report.stopped, StopReason::Drained);
    ensure_eq!(recorder.ids().len(), 25);
    // Outcomes ride along with the next claim: 3 claims and the last settle.
    ensure_eq!(h.counts().round_trips - before.round_trips, 4);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    ensure!(
        report.to_string().starts_with(&format!(
            "outbox drain of {} [mail 25]: 25 claimed, 25 delivered",
            outbox.table()
        )),
        "{report}"
    );
    Ok(())
}

pub(crate) async fn stops_at_its_query_budget(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for _ in 0..50 {
        enqueue(&outbox, "mail").await?;
    }
    let budget = DrainLimits {
        max_queries: 5,
        ..limits()
    };
    let report = drainer(&h, &outbox, Recorder::default(), budget)?
        .drain()
        .await;
    ensure_eq!(report.stopped, StopReason::QueryBudget);
    // Four claims, each settling the batch before; the fifth query is kept
    // for the last settle.
    ensure_eq!((report.delivered, report.queries), (40, 5));
    let stats = outbox.stats().await?;
    ensure_eq!((stats.due, stats.leased), (10, 0));
    Ok(())
}

pub(crate) async fn stops_at_its_message_cap(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for _ in 0..30 {
        enqueue(&outbox, "mail").await?;
    }
    let capped = DrainLimits {
        max_messages: 15,
        ..limits()
    };
    let report = drainer(&h, &outbox, Recorder::default(), capped)?
        .drain()
        .await;
    ensure_eq!(report.stopped, StopReason::MessageCap);
    ensure_eq!(report.delivered, 15);
    ensure_eq!(outbox.stats().await?.due, 15);
    Ok(())
}

pub(crate) async fn settles_each_outcome(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for topic in ["ok", "flaky", "bad"] {
        enqueue(&outbox, topic).await?;
    }
    let deliver = deliver_fn(|message: ClaimedMessage| async move {
        match message.topic.as_str() {
            "ok" => Delivery::Delivered,
            "flaky" => Delivery::Retry {
                error: "503".into(),
            },
            _ => Delivery::Permanent {
                error: "400".into(),
            },
        }
    });
    let report = drainer(&h, &outbox, deliver, limits())?.drain().await;
    // One failure of one message shows no outage: the attempt is spent, as
    // the verdict says.
    ensure_eq!(
        (
            report.delivered,
            report.retried,
            report.deferred,
            report.dead
        ),
        (1, 1, 0, 1)
    );
    let stats = outbox.stats().await?;
    ensure_eq!((stats.pending, stats.dead), (1, 1));
    Ok(())
}

pub(crate) async fn slow_delivery_times_out_and_is_retried(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    enqueue(&outbox, "slow").await?;
    enqueue(&outbox, "fast").await?;
    let clock: ManualClock = h.clock().clone();
    let deliver = deliver_fn(move |message: ClaimedMessage| {
        let clock = clock.clone();
        async move {
            if message.topic == "slow" {
                clock.advance(Duration::from_secs(11));
                std::future::pending::<()>().await;
            }
            Delivery::Delivered
        }
    });
    let report = drainer(&h, &outbox, deliver, limits())?.drain().await;
    // A timeout of one message is its own failure: an attempt spent.
    ensure_eq!(
        (report.delivered, report.retried, report.timed_out),
        (1, 1, 1)
    );
    let stats = outbox.stats().await?;
    ensure_eq!((stats.pending, stats.leased), (1, 0));
    Ok(())
}

pub(crate) async fn respects_its_deadline(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for _ in 0..10 {
        enqueue(&outbox, "mail").await?;
    }
    let clock: ManualClock = h.clock().clone();
    let deliver = deliver_fn(move |_message: ClaimedMessage| {
        let clock = clock.clone();
        async move {
            clock.advance(Duration::from_secs(8));
            Delivery::Delivered
        }
    });
    let tight = DrainLimits {
        concurrency: 1,
        lease: Duration::from_secs(120),
        ..limits()
    };
    // Deliveries start at +0 s, +8 s … +40 s; one at +48 s could not time
    // out and settle before the 60 s deadline.
    let report = drainer(&h, &outbox, deliver, tight)?.drain().await;
    ensure_eq!(report.stopped, StopReason::Deadline);
    ensure_eq!((report.delivered, report.released), (6, 4));
    let rest = outbox.claim(10, LEASE).await?;
    ensure_eq!(rest.messages.len(), 4);
    ensure!(
        rest.messages.iter().all(|m| m.attempt() == 1),
        "an unattempted delivery used up an attempt"
    );
    Ok(())
}

pub(crate) async fn overlapping_drains_never_deliver_a_leased_row(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for _ in 0..30 {
        enqueue(&outbox, "mail").await?;
    }
    let recorder = Recorder::default();
    let small = DrainLimits {
        batch_size: 5,
        concurrency: 2,
        ..limits()
    };
    let first = drainer(&h, &outbox, recorder.clone(), small)?;
    let second = drainer(&h, &outbox, recorder.clone(), small)?;
    let (a, b) = join(first.drain(), second.drain()).await;
    let mut times: BTreeMap<String, u32> = BTreeMap::new();
    for id in recorder.ids() {
        *times.entry(id).or_default() += 1;
    }
    ensure_eq!(times.len(), 30);
    ensure!(
        times.values().all(|n| *n == 1),
        "delivered twice: {times:?}"
    );
    ensure_eq!(
        (a.delivered + b.delivered, a.lease_lost + b.lease_lost),
        (30, 0)
    );
    Ok(())
}

pub(crate) async fn immediate_delivery_costs_one_call(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let claimed = super::enqueue_leased(&h, &outbox, Message::raw_json("mail", "{}"))
        .await?
        .ok_or_else(|| Failure("not confirmed".into()))?;
    let before = h.counts();
    let report = drainer(
        &h,
        &outbox,
        Recorder::default(),
        DrainLimits::after_response(),
    )?
    .deliver_claimed(vec![claimed])
    .await;
    ensure_eq!((report.delivered, report.queries), (1, 1));
    ensure_eq!(h.counts().round_trips - before.round_trips, 1);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    Ok(())
}
