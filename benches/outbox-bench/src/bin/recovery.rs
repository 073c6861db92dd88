//! Recovery: after a drain dies mid-run (a deploy, an eviction) and after a
//! long outage. Native SQLite in memory on a manual clock: a delivery takes
//! 250 ms of it, a drain runs once a minute (the cron), leases last 60 s.
//! `scripts/bench.sh` builds this one source against the library as it is
//! and as it was before suspects were group-tested and held messages were
//! released (`benches/recovery.mjs` names that commit), so both rules run
//! the same scenarios. Prints one JSON object per scenario.
//!
//! `outbox-bench-recovery suspects N POISON` — N rows leased by a drain that
//! died, POISON (0 or 1) of them crashing every drain that delivers them:
//! drains, database calls and seconds until every other one is delivered.
//! `outbox-bench-recovery outage` — 500 messages, 2 hours of a receiver
//! answering 503: minutes from its recovery to the last delivery.

#![allow(clippy::print_stdout)]

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    native::main();
}

/// Native only: SQLite in memory.
#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::collections::BTreeMap;
    use std::future::Future;
    use std::pin::pin;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex, PoisonError};
    use std::task::{Context, Poll, Waker};
    use std::time::Duration;

    use workers_outbox::drain::Deliver;
    use workers_outbox::future::BoxFuture;
    use workers_outbox::testing::{CountingDatabase, ManualClock, UnlessCrashed};
    use workers_outbox::{
        ClaimedMessage, Clock, Delivery, DrainLimits, Drainer, FastRandom, Message, Outbox,
        SqliteDatabase, Timer, Timestamp,
    };

    const LEASE: Duration = Duration::from_secs(60);
    const CRON: Duration = Duration::from_secs(60);
    const DELIVERY: Duration = Duration::from_millis(250);
    /// How far the clock moves while a drain waits (for a delivery, a flush).
    const TICK: Duration = Duration::from_millis(10);

    type Script = dyn Fn(&ClaimedMessage, Timestamp) -> Option<Delivery> + Send + Sync;

    /// A receiver that takes [`DELIVERY`] to answer as its script says; `None`
    /// crashes the drain delivering it.
    struct Receiver {
        clock: ManualClock,
        script: Box<Script>,
        crashed: Arc<AtomicBool>,
        /// Each message delivered: when, and its attempt then.
        delivered: Arc<Mutex<BTreeMap<String, (Timestamp, u32)>>>,
    }

    impl Deliver for Receiver {
        fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
            Box::pin(async move {
                self.clock.sleep(DELIVERY).await;
                let now = self.clock.now();
                let Some(delivery) = (self.script)(message, now) else {
                    self.crashed.store(true, Ordering::SeqCst);
                    return std::future::pending().await;
                };
                if delivery == Delivery::Delivered {
                    self.delivered
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(message.id.clone(), (now, message.attempt()));
                }
                delivery
            })
        }
    }

    struct World {
        clock: ManualClock,
        db: CountingDatabase<Arc<SqliteDatabase>>,
        outbox: Outbox,
        crashed: Arc<AtomicBool>,
        delivered: Arc<Mutex<BTreeMap<String, (Timestamp, u32)>>>,
        drainer: Drainer,
    }

    impl World {
        fn new(script: Box<Script>) -> World {
            let clock =
                ManualClock::new(Timestamp::from_unix_millis(1_700_000_000_000).expect("a time"));
            let db =
                CountingDatabase::new(Arc::new(SqliteDatabase::open_in_memory().expect("SQLite")));
            let outbox = Outbox::builder(Arc::new(db.clone()), "outbox")
                .clock(Arc::new(clock.clone()))
                // Seeded: ids, and so claim order, repeat from run to run.
                .random(Arc::new(FastRandom::seeded(7)))
                .build()
                .expect("an outbox");
            drive(&clock, outbox.create_schema()).expect("schema");
            let crashed = Arc::new(AtomicBool::new(false));
            let delivered = Arc::new(Mutex::new(BTreeMap::new()));
            let receiver = Receiver {
                clock: clock.clone(),
                script,
                crashed: crashed.clone(),
                delivered: delivered.clone(),
            };
            let drainer = Drainer::builder(outbox.clone(), receiver)
                .timer(Arc::new(clock.clone()))
                .limits(DrainLimits::scheduled())
                .build()
                .expect("a drainer");
            World {
                clock,
                db,
                outbox,
                crashed,
                delivered,
                drainer,
            }
        }

        fn enqueue(&self, topic: &str) -> String {
            let enqueued = drive(
                &self.clock,
                self.outbox.enqueue_alone(Message::raw_json(topic, "{}")),
            );
            enqueued.expect("enqueued").id
        }

        /// One cron run: `true` if it crashed. The clock is then at the next
        /// cron tick.
        fn cron(&self) -> bool {
            let start = self.clock.now();
            self.crashed.store(false, Ordering::SeqCst);
            let report = drive(
                &self.clock,
                UnlessCrashed::new(self.drainer.drain(), self.crashed.clone()),
            );
            let next = start.checked_add(CRON).expect("in range");
            if self.clock.now() < next {
                self.clock.set(next);
            }
            report.is_none()
        }

        fn delivered(&self) -> BTreeMap<String, (Timestamp, u32)> {
            self.delivered
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        }
    }

    /// Polls `future` to its end, moving the clock a tick whenever it waits.
    fn drive<F: Future>(clock: &ManualClock, future: F) -> F::Output {
        let mut future = pin!(future);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
                return output;
            }
            clock.advance(TICK);
        }
    }

    fn suspects(n: usize, poison: bool) {
        let world = World::new(Box::new(|message, _| {
            (message.topic != "poison").then_some(Delivery::Delivered)
        }));
        let mut innocent = Vec::with_capacity(n);
        for index in 0..n {
            if poison && index == n / 2 {
                world.enqueue("poison");
            } else {
                innocent.push(world.enqueue("mail"));
            }
        }
        // A drain leased them all, then died: they come back after the lease.
        let mut leased = 0;
        while leased < n {
            let claim = drive(&world.clock, world.outbox.claim(500, LEASE));
            leased += claim.expect("claimed").messages.len();
        }
        let died_at = world.clock.now();
        world.clock.advance(LEASE);
        let calls_before = world.db.counts().round_trips;
        let (mut drains, mut crashes) = (0, 0);
        while drains < 10_000 {
            drains += 1;
            crashes += u32::from(world.cron());
            let delivered = world.delivered();
            if innocent.iter().all(|id| delivered.contains_key(id)) {
                break;
            }
        }
        let delivered = world.delivered();
        let last = innocent
            .iter()
            .filter_map(|id| delivered.get(id))
            .map(|(at, _)| *at)
            .max()
            .unwrap_or(died_at);
        let lost: u32 = innocent
            .iter()
            .filter_map(|id| delivered.get(id))
            .map(|(_, attempt)| attempt - 1)
            .sum();
        println!(
            "{}",
            serde_json::json!({
                "scenario": "suspects",
                "suspects": n,
                "poison": u32::from(poison),
                "drains": drains,
                "crashes": crashes,
                "calls": world.db.counts().round_trips - calls_before,
                "seconds": last.duration_since(died_at).as_secs_f64(),
                "innocent_attempts_lost": lost,
            })
        );
    }

    fn outage() {
        const MESSAGES: usize = 500;
        let start = Timestamp::from_unix_millis(1_700_000_000_000).expect("a time");
        let back_at = start
            .checked_add(Duration::from_secs(2 * 3600))
            .expect("in range");
        let world = World::new(Box::new(move |_, now| {
            Some(if now < back_at {
                Delivery::unavailable("503 Service Unavailable", None)
            } else {
                Delivery::Delivered
            })
        }));
        let ids: Vec<String> = (0..MESSAGES).map(|_| world.enqueue("mail")).collect();
        let calls_before = world.db.counts().round_trips;
        let mut drains = 0;
        while drains < 100_000 {
            drains += 1;
            world.cron();
            if world.delivered().len() == ids.len() {
                break;
            }
        }
        let delivered = world.delivered();
        let last = delivered
            .values()
            .map(|(at, _)| *at)
            .max()
            .unwrap_or(back_at);
        let spent: u32 = delivered.values().map(|(_, attempt)| attempt - 1).sum();
        println!(
            "{}",
            serde_json::json!({
                "scenario": "outage",
                "messages": MESSAGES,
                "drains": drains,
                "calls": world.db.counts().round_trips - calls_before,
                "minutes_after_recovery": last.duration_since(back_at).as_secs_f64() / 60.0,
                "attempts_spent": spent,
            })
        );
    }

    pub(crate) fn main() {
        let args: Vec<String> = std::env::args().skip(1).collect();
        match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["suspects", n, poison] => {
                suspects(n.parse().expect("a number of suspects"), poison == "1")
            }
            ["outage"] => outage(),
            _ => {
                eprintln!("usage: outbox-bench-recovery suspects N POISON | outage");
                std::process::exit(2);
            }
        }
    }
}
