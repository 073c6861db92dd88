//! Model-based property test: random sequences of enqueue, claim, settle,
//! expire, replay and purge run against the real outbox (on SQLite) and
//! against a plain in-memory model of its state machine. After every step
//! the two must agree on what each call returned and on every stored row;
//! a divergence fails with the shrunk sequence that shows it.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use futures_executor::block_on;
use proptest::prelude::*;
use workers_outbox::outbox::LeaseHandle;
use workers_outbox::testing::ManualClock;
use workers_outbox::{
    Backoff, Database, Delivery, Error, Message, Outbox, RandomSource, RetryPolicy, SqliteDatabase,
    Statement, Timestamp,
};

const MAX_ATTEMPTS: u32 = 3;
const LEASE_MS: i64 = 10_000;
const BACKOFF_MS: i64 = 5_000;
const START: i64 = 1_700_000_000_000;

/// A backoff without jitter, so the model can predict it.
#[derive(Debug)]
struct Fixed;

impl Backoff for Fixed {
    fn delay(&self, _attempt: u32, _random: &dyn RandomSource) -> Duration {
        Duration::from_millis(BACKOFF_MS as u64)
    }
}

#[derive(Debug, Clone, Copy)]
enum Outcome {
    Delivered,
    Retry,
    Unavailable,
    Permanent,
    Release,
}

#[derive(Debug, Clone)]
enum Op {
    Enqueue {
        key: Option<u8>,
        delay_s: Option<u8>,
        dedup: Option<u8>,
    },
    Claim {
        n: u8,
    },
    Settle {
        lease: u8,
        outcome: Outcome,
    },
    Advance {
        seconds: u8,
    },
    Replay {
        dead: u8,
    },
    Purge,
}

fn op() -> impl Strategy<Value = Op> {
    let outcome = prop_oneof![
        Just(Outcome::Delivered),
        Just(Outcome::Retry),
        Just(Outcome::Unavailable),
        Just(Outcome::Permanent),
        Just(Outcome::Release),
    ];
    prop_oneof![
        4 => (proptest::option::of(0u8..2), proptest::option::of(1u8..20), proptest::option::of(0u8..3))
            .prop_map(|(key, delay_s, dedup)| Op::Enqueue { key, delay_s, dedup }),
        3 => (1u8..5).prop_map(|n| Op::Claim { n }),
        4 => (any::<u8>(), outcome).prop_map(|(lease, outcome)| Op::Settle { lease, outcome }),
        2 => (0u8..30).prop_map(|seconds| Op::Advance { seconds }),
        1 => any::<u8>().prop_map(|dead| Op::Replay { dead }),
        1 => Just(Op::Purge),
    ]
}

type Snapshot = (String, &'static str, i64, bool, u32, u32, u32);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Ready,
    Waiting,
    Dead,
}

#[derive(Debug, Clone)]
struct Row {
    id: String,
    state: State,
    due: i64,
    /// The lease generation holding the row, if leased.
    lease: Option<u64>,
    attempts: u32,
    /// Leases in a row that expired without a settle.
    unsettled: u32,
    /// Failures that spent no attempt.
    deferrals: u32,
    key: Option<u8>,
    seq: u32,
    dedup: Option<u8>,
}

#[derive(Default)]
struct Model {
    rows: Vec<Row>,
    now: i64,
    generations: u64,
}

impl Model {
    fn row(&mut self, id: &str) -> Option<&mut Row> {
        self.rows.iter_mut().find(|row| row.id == id)
    }

    fn promote_heads(&mut self) {
        let keys: Vec<u8> = self.rows.iter().filter_map(|row| row.key).collect();
        for key in keys {
            if let Some(head) = self
                .rows
                .iter_mut()
                .filter(|row| row.key == Some(key))
                .min_by_key(|row| row.seq)
                && head.state == State::Waiting
            {
                head.state = State::Ready;
            }
        }
    }

    /// The rows as (id, state, due, leased, attempts, unsettled leases),
    /// sorted by id.
    fn snapshot(&self) -> Vec<Snapshot> {
        let mut rows: Vec<_> = self
            .rows
            .iter()
            .map(|row| {
                let state = match row.state {
                    State::Ready => "ready",
                    State::Waiting => "waiting",
                    State::Dead => "dead",
                };
                (
                    row.id.clone(),
                    state,
                    row.due,
                    row.lease.is_some(),
                    row.attempts,
                    row.unsettled,
                    row.deferrals,
                )
            })
            .collect();
        rows.sort();
        rows
    }
}

struct Real {
    db: Arc<dyn Database>,
    outbox: Outbox,
    clock: ManualClock,
    /// Leases handed out, with the model's generation for each.
    leases: Vec<(LeaseHandle, u64)>,
}

impl Real {
    fn new() -> Self {
        let db: Arc<dyn Database> = Arc::new(SqliteDatabase::open_in_memory().unwrap());
        let clock = ManualClock::new(Timestamp::from_unix_millis(START).unwrap());
        let outbox = Outbox::builder(db.clone(), "outbox")
            .clock(Arc::new(clock.clone()))
            .random(Arc::new(workers_outbox::FastRandom::seeded(9)))
            .retry_policy(RetryPolicy::new(MAX_ATTEMPTS, Fixed).unwrap())
            .build()
            .unwrap();
        block_on(outbox.create_schema()).unwrap();
        Real {
            db,
            outbox,
            clock,
            leases: Vec::new(),
        }
    }

    fn snapshot(&self) -> Vec<Snapshot> {
        let rows = block_on(self.db.query(&Statement::new(
            "SELECT id, state, due_at, lease_token, attempts, unsettled_leases, deferrals FROM outbox ORDER BY id",
            vec![],
        )))
        .unwrap();
        rows.iter()
            .map(|row| {
                let state = match row.get::<String>("state").unwrap().as_str() {
                    "ready" => "ready",
                    "waiting" => "waiting",
                    _ => "dead",
                };
                (
                    row.get("id").unwrap(),
                    state,
                    row.get("due_at").unwrap(),
                    row.get::<Option<String>>("lease_token").unwrap().is_some(),
                    row.get("attempts").unwrap(),
                    row.get("unsettled_leases").unwrap(),
                    row.get("deferrals").unwrap(),
                )
            })
            .collect()
    }
}

fn step(model: &mut Model, real: &mut Real, op: &Op) -> Result<(), TestCaseError> {
    match *op {
        Op::Enqueue {
            key,
            delay_s,
            dedup,
        } => {
            let mut message = Message::raw_json("t", "{}");
            if let Some(key) = key {
                message = message.ordering_key(format!("k{key}"));
            }
            let due = model.now + i64::from(delay_s.unwrap_or(0)) * 1000;
            if delay_s.is_some() {
                message = message.not_before(Timestamp::from_unix_millis(due).unwrap());
            }
            if let Some(dedup) = dedup {
                message = message.dedup_key(format!("d{dedup}"));
            }
            let enqueued = block_on(real.outbox.enqueue_alone(message)).unwrap();
            let inserted = enqueued.written;
            let duplicate = dedup.is_some() && model.rows.iter().any(|row| row.dedup == dedup);
            prop_assert_eq!(inserted, !duplicate, "dedup verdict");
            if inserted {
                let same_key = model
                    .rows
                    .iter()
                    .filter(|row| key.is_some() && row.key == key);
                let latest = same_key.map(|row| row.seq).max();
                model.rows.push(Row {
                    id: enqueued.id.clone(),
                    state: if latest.is_some() {
                        State::Waiting
                    } else {
                        State::Ready
                    },
                    due,
                    lease: None,
                    attempts: 0,
                    unsettled: 0,
                    deferrals: 0,
                    key,
                    seq: latest.map_or(1, |seq| seq + 1),
                    dedup,
                });
            }
        }
        Op::Claim { n } => {
            let claim = block_on(
                real.outbox
                    .claim(u32::from(n), Duration::from_millis(LEASE_MS as u64)),
            )
            .unwrap();
            let mut due: Vec<&mut Row> = model
                .rows
                .iter_mut()
                .filter(|row| row.state == State::Ready && row.due <= model.now)
                .collect();
            due.sort_by(|a, b| (a.due, &a.id).cmp(&(b.due, &b.id)));
            let mut leased = Vec::new();
            let mut exhausted = Vec::new();
            for row in due.into_iter().take(usize::from(n)) {
                // A lease still on a due row expired without a settle.
                if row.lease.is_some() {
                    row.unsettled += 1;
                }
                if row.attempts >= MAX_ATTEMPTS {
                    row.state = State::Dead;
                    row.due = model.now;
                    row.lease = None;
                    exhausted.push(row.id.clone());
                } else {
                    // A claim spends no attempt.
                    model.generations += 1;
                    row.due = model.now + LEASE_MS;
                    row.lease = Some(model.generations);
                    leased.push((row.id.clone(), model.generations));
                }
            }
            let real_ids: Vec<String> = claim.messages.iter().map(|m| m.id.clone()).collect();
            let model_ids: Vec<String> = leased.iter().map(|(id, _)| id.clone()).collect();
            prop_assert_eq!(real_ids, model_ids, "claimed rows");
            prop_assert_eq!(claim.exhausted, exhausted, "rows parked by the claim");
            for (message, (id, generation)) in claim.messages.iter().zip(leased) {
                let row = model.row(&id).unwrap();
                prop_assert_eq!(message.attempt(), row.attempts + 1, "attempt of {}", id);
                prop_assert_eq!(message.unsettled_leases(), row.unsettled, "suspect {}", id);
                real.leases.push((message.lease().clone(), generation));
            }
        }
        Op::Settle { lease, outcome } => {
            if real.leases.is_empty() {
                return Ok(());
            }
            let (handle, generation) = real.leases[usize::from(lease) % real.leases.len()].clone();
            let delivery = match outcome {
                Outcome::Delivered => Delivery::Delivered,
                Outcome::Retry => Delivery::Retry {
                    error: "503".into(),
                },
                Outcome::Unavailable => Delivery::unavailable("429", None),
                Outcome::Permanent => Delivery::Permanent {
                    error: "400".into(),
                },
                Outcome::Release => Delivery::Delivered,
            };
            let report = match outcome {
                Outcome::Release => {
                    let mut report = workers_outbox::outbox::SettleReport::default();
                    match block_on(real.outbox.release(&handle)) {
                        Ok(()) => report.released = 1,
                        Err(Error::LeaseLost { id }) => report.lease_lost.push(id),
                        Err(error) => panic!("release failed: {error}"),
                    }
                    report
                }
                _ => block_on(real.outbox.settle(&[(&handle, delivery)])).unwrap(),
            };
            let now = model.now;
            let holds = model
                .row(handle.id())
                .is_some_and(|row| row.state == State::Ready && row.lease == Some(generation));
            prop_assert_eq!(report.lease_lost.is_empty(), holds, "fencing verdict");
            if !holds {
                return Ok(());
            }
            let row = model.row(handle.id()).unwrap();
            let attempt = handle.attempt();
            match outcome {
                Outcome::Delivered => {
                    let key = row.key;
                    model.rows.retain(|row| row.id != handle.id());
                    if key.is_some() {
                        model.promote_heads();
                    }
                    prop_assert_eq!(report.completed, 1);
                }
                Outcome::Retry if attempt >= MAX_ATTEMPTS => {
                    (row.state, row.due, row.lease) = (State::Dead, now, None);
                    (row.attempts, row.unsettled) = (attempt, 0);
                    prop_assert_eq!(report.dead, 1);
                }
                Outcome::Retry => {
                    (row.due, row.lease) = (now + BACKOFF_MS, None);
                    (row.attempts, row.unsettled) = (attempt, 0);
                    prop_assert_eq!(report.retried, 1);
                }
                Outcome::Unavailable => {
                    (row.due, row.lease) = (now + BACKOFF_MS, None);
                    // No attempt spent, a deferral counted; a suspect stays one.
                    (row.attempts, row.deferrals) = (attempt - 1, row.deferrals + 1);
                    prop_assert_eq!(report.deferred, 1);
                }
                Outcome::Permanent => {
                    (row.state, row.due, row.lease) = (State::Dead, now, None);
                    (row.attempts, row.unsettled) = (attempt, 0);
                    prop_assert_eq!(report.dead, 1);
                }
                Outcome::Release => {
                    (row.due, row.lease) = (now, None);
                    row.attempts = attempt - 1;
                    prop_assert_eq!(report.released, 1);
                }
            }
        }
        Op::Advance { seconds } => {
            model.now += i64::from(seconds) * 1000;
            real.clock.advance(Duration::from_secs(u64::from(seconds)));
        }
        Op::Replay { dead } => {
            let mut dead_ids: Vec<String> = model
                .rows
                .iter()
                .filter(|row| row.state == State::Dead)
                .map(|row| row.id.clone())
                .collect();
            dead_ids.sort();
            match dead_ids.get(usize::from(dead) % dead_ids.len().max(1)) {
                Some(id) => {
                    block_on(real.outbox.replay(id)).unwrap();
                    let now = model.now;
                    let row = model.row(id).unwrap();
                    (row.state, row.due, row.attempts, row.lease) = (State::Ready, now, 0, None);
                    row.deferrals = 0;
                }
                None => {
                    let result = block_on(real.outbox.replay("none"));
                    prop_assert!(matches!(result, Err(Error::NotFound { .. })), "{result:?}");
                }
            }
        }
        Op::Purge => {
            let cutoff = Timestamp::from_unix_millis(model.now + 1).unwrap();
            let purged = block_on(real.outbox.purge_dead(cutoff)).unwrap();
            let before = model.rows.len();
            model.rows.retain(|row| row.state != State::Dead);
            model.promote_heads();
            prop_assert_eq!(purged as usize, before - model.rows.len(), "purged rows");
        }
    }
    prop_assert_eq!(
        real.snapshot(),
        model.snapshot(),
        "stored rows after {:?}",
        op
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_outbox_follows_its_model(ops in proptest::collection::vec(op(), 1..60)) {
        let mut model = Model { now: START, ..Model::default() };
        let mut real = Real::new();
        for op in &ops {
            step(&mut model, &mut real, op)?;
        }
    }
}
