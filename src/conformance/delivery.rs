//! Delivery against real downstreams: streaming settles, poison messages,
//! outages, throttling, lost calls.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{CaseResult, Harness, LEASE, enqueue, ensure, ensure_eq, yield_now};
use crate::database::Database;
use crate::drain::drainer::Drainer;
use crate::drain::{Deliver, DrainLimits, DrainReport};
use crate::error::Result;
use crate::future::BoxFuture;
use crate::manual_clock::ManualClock;
use crate::outbox::{ClaimedMessage, Delivery, Outbox};
use crate::random::RandomSource;
use crate::retry::{Backoff, RetryPolicy};
use crate::testing::{Fault, FaultyDatabase, Strike, UnlessCrashed};
use crate::time::Clock;

fn limits() -> DrainLimits {
    DrainLimits {
        batch_size: 100,
        concurrency: 6,
        delivery_timeout: Duration::from_secs(10),
        lease: LEASE,
        settle_margin: Duration::from_secs(5),
        deadline: Duration::from_secs(60),
        ..DrainLimits::scheduled()
    }
}

/// What a scripted receiver does with one message.
type Script = dyn Fn(&ClaimedMessage, &ManualClock) -> Action + Send + Sync;

enum Action {
    Answer(Delivery),
    /// Kill the drainer: the isolate dies (or the task aborts) mid-delivery.
    Crash,
}

/// A receiver following a script, counting deliveries per message.
#[derive(Clone)]
struct Receiver {
    script: Arc<Script>,
    clock: ManualClock,
    crashed: Arc<AtomicBool>,
    deliveries: Arc<Mutex<BTreeMap<String, u32>>>,
}

impl Receiver {
    fn new(
        h: &Harness,
        script: impl Fn(&ClaimedMessage, &ManualClock) -> Action + Send + Sync + 'static,
    ) -> Self {
        Receiver {
            script: Arc::new(script),
            clock: h.clock().clone(),
            crashed: Arc::default(),
            deliveries: Arc::default(),
        }
    }

    fn deliveries(&self) -> BTreeMap<String, u32> {
        self.deliveries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Deliver for Receiver {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin(async move {
            yield_now().await;
            *self
                .deliveries
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(message.id.clone())
                .or_default() += 1;
            match (self.script)(message, &self.clock) {
                Action::Answer(delivery) => delivery,
                Action::Crash => {
                    self.crashed.store(true, Ordering::SeqCst);
                    std::future::pending().await
                }
            }
        })
    }
}

/// One drain run with `receiver`; `None` if the receiver crashed it.
async fn run_once(
    h: &Harness,
    outbox: &Outbox,
    receiver: &Receiver,
    limits: DrainLimits,
) -> Result<Option<DrainReport>> {
    receiver.crashed.store(false, Ordering::SeqCst);
    let drainer = Drainer::builder(outbox.clone(), receiver.clone())
        .timer(Arc::new(h.clock().clone()))
        .limits(limits)
        .build()?;
    Ok(UnlessCrashed::new(drainer.drain(), receiver.crashed.clone()).await)
}

async fn enqueue_many(
    outbox: &Outbox,
    topic: &str,
    n: usize,
) -> Result<Vec<String>, super::Failure> {
    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(enqueue(outbox, topic).await?);
    }
    Ok(ids)
}

pub(crate) async fn outcomes_ride_along_with_the_next_claim(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    enqueue_many(&outbox, "mail", 1_000).await?;
    let receiver = Receiver::new(&h, |_, _| Action::Answer(Delivery::Delivered));
    let before = h.counts();
    let report = run_once(&h, &outbox, &receiver, limits())
        .await?
        .ok_or_else(|| super::Failure("crashed".into()))?;
    // 10 claims, each settling the batch before it, and one claim that
    // finds nothing while settling the last batch: 11 calls for 1,000.
    ensure_eq!((report.delivered, report.queries), (1_000, 11));
    ensure_eq!(h.counts().round_trips - before.round_trips, 11);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    Ok(())
}

pub(crate) async fn a_poison_message_costs_no_other_message_an_attempt(h: Harness) -> CaseResult {
    let outbox = h.outbox_named("outbox", 4).await?;
    let mut ids = enqueue_many(&outbox, "mail", 120).await?;
    let poison = enqueue(&outbox, "poison").await?;
    ids.extend(enqueue_many(&outbox, "mail", 129).await?);
    let receiver = Receiver::new(&h, |message, _| {
        if message.topic == "poison" {
            Action::Crash
        } else {
            Action::Answer(Delivery::Delivered)
        }
    });
    let mut crashes = 0;
    for _ in 0..50 {
        if run_once(&h, &outbox, &receiver, limits()).await?.is_none() {
            crashes += 1;
        }
        let stats = outbox.stats().await?;
        if stats.pending == 0 && stats.leased == 0 {
            break;
        }
        h.clock().advance(LEASE);
    }
    let deliveries = receiver.deliveries();
    // Once inside a batch, then in suspect groups of 64, 32, … 2 (6 crashes,
    // none spending an attempt), then alone for each of its 4 attempts.
    ensure_eq!(crashes, 11);
    ensure_eq!(deliveries.get(&poison), Some(&11));
    for id in &ids {
        // Again after each crash of a group it was in (at least once).
        let times = deliveries.get(id).copied().unwrap_or(0);
        ensure!((1..=8).contains(&times), "{id} was delivered {times} times");
    }
    let dead = outbox.list_dead(10, None).await?;
    ensure_eq!(dead.len(), 1);
    ensure_eq!(dead[0].id, poison);
    // Everything else was delivered and deleted.
    ensure_eq!(h.count(outbox.table().as_str()).await?, 1);
    ensure_eq!(dead[0].attempts, 4);
    ensure!(dead[0].unsettled_leases > 0, "{:?}", dead[0]);
    let error = dead[0].last_error.clone().unwrap_or_default();
    ensure!(error.contains("outcome is unknown"), "{error}");
    Ok(())
}

/// `n` messages of `topic`, claimed by a drain that then died (a deploy
/// evicted it): once their lease ends they are suspects.
async fn suspects(
    h: &Harness,
    outbox: &Outbox,
    topic: &str,
    n: usize,
) -> Result<Vec<String>, super::Failure> {
    let ids = enqueue_many(outbox, topic, n).await?;
    drop(
        outbox
            .claim(u32::try_from(n).unwrap_or(u32::MAX), LEASE)
            .await?,
    );
    h.clock().advance(LEASE);
    Ok(ids)
}

pub(crate) async fn suspects_without_poison_are_all_delivered_in_one_drain(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    let ids = suspects(&h, &outbox, "mail", 100).await?;
    let receiver = Receiver::new(&h, |_, _| Action::Answer(Delivery::Delivered));
    let report = run_once(&h, &outbox, &receiver, limits())
        .await?
        .ok_or_else(|| super::Failure("crashed".into()))?;
    ensure_eq!((report.delivered, report.suspects), (100, 100));
    // The claim; the first group's re-lease (64), which gives the other 36
    // back; the claim that settles the first group and takes the 36 again;
    // their re-lease; and the claim that finds nothing left while settling
    // them: one at a time, it took 100 re-leases.
    ensure_eq!(report.queries, 5);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    let deliveries = receiver.deliveries();
    ensure!(
        ids.iter().all(|id| deliveries.get(id) == Some(&1)),
        "each delivered once: {deliveries:?}"
    );
    Ok(())
}

pub(crate) async fn one_poison_among_64_suspects_is_found_in_seven_crashes(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox_named("outbox", 4).await?;
    let mut innocent = enqueue_many(&outbox, "mail", 40).await?;
    let poison = enqueue(&outbox, "poison").await?;
    innocent.extend(enqueue_many(&outbox, "mail", 23).await?);
    drop(outbox.claim(64, LEASE).await?);
    h.clock().advance(LEASE);
    let receiver = Receiver::new(&h, |message, _| {
        if message.topic == "poison" {
            Action::Crash
        } else {
            Action::Answer(Delivery::Delivered)
        }
    });
    let attempts = format!("SELECT id, attempts FROM \"{}\"", outbox.table());
    let (mut crashes, mut found_after) = (0, None);
    for _ in 0..30 {
        if run_once(&h, &outbox, &receiver, limits()).await?.is_none() {
            crashes += 1;
        }
        let rows = h.sql(&attempts, vec![]).await?;
        for row in rows.iter() {
            let (id, spent) = (row.get::<String>("id")?, row.get::<i64>("attempts")?);
            if id == poison {
                if spent > 0 && found_after.is_none() {
                    found_after = Some(crashes);
                }
            } else {
                ensure_eq!((id.as_str(), spent), (id.as_str(), 0));
            }
        }
        if rows.len() == 1 && outbox.stats().await?.dead == 1 {
            break;
        }
        h.clock().advance(LEASE);
    }
    // Alone (spending its first attempt) on the 7th crash: groups of 64,
    // 32, 16, 8, 4 and 2 crashed before, spending nothing.
    ensure_eq!(found_after, Some(7));
    let deliveries = receiver.deliveries();
    ensure!(
        innocent.iter().all(|id| deliveries.contains_key(id)),
        "every innocent message was delivered"
    );
    let dead = outbox.list_dead(10, None).await?;
    ensure_eq!(dead.len(), 1);
    ensure_eq!(
        (dead[0].id.as_str(), dead[0].attempts),
        (poison.as_str(), 4)
    );
    ensure_eq!(h.count(outbox.table().as_str()).await?, 1);
    Ok(())
}

pub(crate) async fn a_lost_claim_spends_no_attempt(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    enqueue_many(&outbox, "mail", 10).await?;
    // The claim commits but its reply is lost: nobody delivers these rows.
    drop(outbox.claim(10, LEASE).await?);
    h.clock().advance(LEASE);
    // The receiver is down: its answers blame no message.
    let receiver = Receiver::new(&h, |_, _| {
        Action::Answer(Delivery::unavailable("503 Service Unavailable", None))
    });
    // Without the breaker, which would trip on the fifth failure and hand
    // the rest back.
    let no_breaker = DrainLimits {
        breaker: None,
        ..limits()
    };
    let report = run_once(&h, &outbox, &receiver, no_breaker)
        .await?
        .ok_or_else(|| super::Failure("crashed".into()))?;
    // Each answered alone (so none crashed it).
    ensure_eq!((report.suspects, report.deferred), (10, 10));
    let rows = h
        .sql(
            &format!(
                "SELECT attempts, unsettled_leases, deferrals FROM \"{}\"",
                outbox.table()
            ),
            vec![],
        )
        .await?;
    for row in rows.iter() {
        // Neither the lost claim nor the isolation spent an attempt; the
        // failure counts as a deferral, and nothing has cleared the row of
        // suspicion yet (so it is still delivered alone).
        ensure_eq!(
            (
                row.get::<i64>("attempts")?,
                row.get::<i64>("unsettled_leases")?,
                row.get::<i64>("deferrals")?
            ),
            (0, 1, 1)
        );
    }
    Ok(())
}

pub(crate) async fn a_long_outage_kills_no_message(h: Harness) -> CaseResult {
    let outbox = h.outbox_named("outbox", 3).await?;
    let ids = enqueue_many(&outbox, "mail", 500).await?;
    let back_at = h.later(Duration::from_secs(2 * 3600))?;
    // A deliverer that only ever says "retry" while the API is down.
    let receiver = Receiver::new(&h, move |_, clock| {
        if clock.now() < back_at {
            Action::Answer(Delivery::retry("mail API answered 503"))
        } else {
            Action::Answer(Delivery::Delivered)
        }
    });
    let mut tripped_runs = 0;
    for _ in 0..(3 * 60) {
        let report = run_once(&h, &outbox, &receiver, limits())
            .await?
            .ok_or_else(|| super::Failure("crashed".into()))?;
        ensure_eq!(report.dead, 0);
        if report.tripped == vec!["mail".to_owned()] {
            tripped_runs += 1;
        }
        if h.count(outbox.table().as_str()).await? == 0 {
            break;
        }
        if h.clock().now() < back_at {
            let spent = h
                .sql(
                    &format!(
                        "SELECT COUNT(*) AS spent FROM \"{}\" WHERE attempts > 0",
                        outbox.table()
                    ),
                    vec![],
                )
                .await?;
            let spent = spent.first().map(|row| row.get::<i64>("spent"));
            ensure_eq!(spent.transpose()?, Some(0));
        }
        h.clock().advance(Duration::from_secs(60)); // one cron a minute
    }
    ensure!(
        tripped_runs >= 119,
        "the breaker tripped in {tripped_runs} runs"
    );
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    let deliveries = receiver.deliveries();
    ensure!(
        ids.iter().all(|id| deliveries.contains_key(id)),
        "not every message was tried"
    );
    Ok(())
}

pub(crate) async fn a_recovered_receivers_held_messages_are_due_at_once(h: Harness) -> CaseResult {
    let outbox = h.outbox_backing_off().await?;
    enqueue_many(&outbox, "mail", 40).await?;
    let back_at = h.later(Duration::from_secs(30 * 60))?;
    let receiver = Receiver::new(&h, move |_, clock| {
        if clock.now() < back_at {
            Action::Answer(Delivery::unavailable("503 Service Unavailable", None))
        } else {
            Action::Answer(Delivery::Delivered)
        }
    });
    while h.clock().now() < back_at {
        run_once(&h, &outbox, &receiver, limits()).await?;
        h.clock().advance(Duration::from_secs(60)); // one cron a minute
    }
    // The outage held them back: most wait for backoffs it grew.
    let later = h
        .sql(
            &format!(
                "SELECT COUNT(*) AS n FROM \"{}\" WHERE due_at > ? AND attempts = 0",
                outbox.table()
            ),
            vec![h.clock().now().as_unix_millis().into()],
        )
        .await?;
    let later = later.first().map(|row| row.get::<i64>("n")).transpose()?;
    ensure!(later.is_some_and(|n| n > 20), "held back: {later:?}");
    // The first drain after the receiver is back delivers every one: its
    // first answer releases what its failures held.
    let report = run_once(&h, &outbox, &receiver, limits())
        .await?
        .ok_or_else(|| super::Failure("crashed".into()))?;
    ensure_eq!((report.delivered, report.retried, report.dead), (40, 0, 0));
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    Ok(())
}

pub(crate) async fn a_throttling_storm_kills_no_message(h: Harness) -> CaseResult {
    let outbox = h.outbox_named("outbox", 3).await?;
    enqueue_many(&outbox, "mail", 100).await?;
    let calm_at = h.later(Duration::from_secs(600))?;
    let receiver = Receiver::new(&h, move |message, clock| {
        if clock.now() < calm_at {
            let wait = Duration::from_secs(u64::from(message.id.len() % 2 == 0));
            Action::Answer(Delivery::unavailable("429 Too Many Requests", Some(wait)))
        } else {
            Action::Answer(Delivery::Delivered)
        }
    });
    let no_breaker = DrainLimits {
        breaker: None,
        ..limits()
    };
    for _ in 0..200 {
        let report = run_once(&h, &outbox, &receiver, no_breaker)
            .await?
            .ok_or_else(|| super::Failure("crashed".into()))?;
        ensure_eq!((report.dead, report.retried), (0, 0));
        if h.count(outbox.table().as_str()).await? == 0 {
            break;
        }
        h.clock().advance(Duration::from_secs(10));
    }
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    Ok(())
}

/// A backoff without jitter.
#[derive(Debug)]
struct FiveSeconds;

impl Backoff for FiveSeconds {
    fn delay(&self, _attempt: u32, _random: &dyn RandomSource) -> Duration {
        Duration::from_secs(5)
    }
}

pub(crate) async fn retry_after_waits_at_least_the_backoff(h: Harness) -> CaseResult {
    let outbox = h
        .outbox_builder(h.db(), &h.table("outbox"))
        .retry_policy(RetryPolicy::new(3, FiveSeconds)?)
        .build()?;
    outbox.create_schema().await?;
    let id = enqueue(&outbox, "mail").await?;
    let cases = [
        // A `Retry-After: 0` cannot bring the message back before its backoff.
        (
            Delivery::RetryAfter {
                error: "429".into(),
                delay: Duration::ZERO,
            },
            5_000,
            1,
        ),
        (
            Delivery::RetryAfter {
                error: "429".into(),
                delay: Duration::from_secs(9),
            },
            9_000,
            2,
        ),
        // Unavailable: the same wait, and the attempt is given back.
        (
            Delivery::unavailable("503", Some(Duration::from_millis(1))),
            5_000,
            2,
        ),
    ];
    for (delivery, wait_ms, attempts) in cases {
        let claim = outbox.claim(1, LEASE).await?;
        ensure_eq!(claim.messages.len(), 1);
        outbox
            .settle(&[(claim.messages[0].lease(), delivery)])
            .await?;
        let row = h
            .sql(
                &format!(
                    "SELECT due_at, attempts FROM \"{}\" WHERE id = ?",
                    outbox.table()
                ),
                vec![id.as_str().into()],
            )
            .await?;
        let row = row
            .first()
            .ok_or_else(|| super::Failure("row gone".into()))?;
        let wait = row.get::<i64>("due_at")? - h.clock().now().as_unix_millis();
        ensure_eq!((wait, row.get::<i64>("attempts")?), (wait_ms, attempts));
        h.clock().advance(Duration::from_millis(wait_ms as u64));
    }
    Ok(())
}

/// Drains 150 messages, batch 100, while the second database call (the
/// first batch's settle, riding with the next claim) fails once, before or
/// after committing.
async fn drain_through_a_lost_call(
    h: &Harness,
    after_commit: bool,
) -> Result<(Outbox, DrainReport, Receiver), super::Failure> {
    let outbox = h.outbox().await?;
    enqueue_many(&outbox, "mail", 150).await?;
    let flaky = FaultyDatabase::new(h.db());
    flaky.inject(Fault::Calls {
        first: 2,
        count: 1,
        strike: if after_commit {
            Strike::AfterCommit
        } else {
            Strike::Before
        },
    });
    let flaky: Arc<dyn Database> = Arc::new(flaky);
    let flaky_outbox = h.outbox_builder(flaky, outbox.table().as_str()).build()?;
    let receiver = Receiver::new(h, |_, _| Action::Answer(Delivery::Delivered));
    let report = run_once(h, &flaky_outbox, &receiver, limits())
        .await?
        .ok_or_else(|| super::Failure("crashed".into()))?;
    Ok((outbox, report, receiver))
}

pub(crate) async fn a_transient_settle_error_is_retried(h: Harness) -> CaseResult {
    let (outbox, report, receiver) = drain_through_a_lost_call(&h, false).await?;
    ensure_eq!((report.delivered, report.settle_retries), (150, 1));
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    ensure!(
        receiver.deliveries().values().all(|n| *n == 1),
        "a settle error caused a redelivery"
    );
    Ok(())
}

pub(crate) async fn a_claim_whose_reply_is_lost_is_read_back(h: Harness) -> CaseResult {
    // The call commits, and then its reply is lost.
    let (outbox, report, receiver) = drain_through_a_lost_call(&h, true).await?;
    // The settle sent again found its work done; the claim's rows were read
    // back by its lease token and delivered in the same run: nothing waits
    // for a lease to end, nothing becomes a suspect, nothing is sent twice.
    ensure_eq!(
        (
            report.settle_retries,
            report.lease_lost,
            report.delivered,
            report.suspects
        ),
        (1, 100, 50, 0)
    );
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    let deliveries = receiver.deliveries();
    ensure_eq!(deliveries.len(), 150);
    ensure!(
        deliveries.values().all(|n| *n == 1),
        "a lost reply caused a redelivery"
    );
    Ok(())
}
