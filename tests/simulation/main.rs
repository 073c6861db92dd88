//! Deterministic fault simulation of the outbox on SQLite.
//!
//! A producer enqueues messages (some ordered, some delayed, some with dedup
//! keys); several drainers deliver them to a receiver that applies each
//! message's effect through an inbox. Faults are injected throughout:
//! drainers die after claiming or after delivering, deliveries fail
//! retryably or permanently or run past their lease, database calls fail
//! before or after committing, and the clock jumps. Everything runs on one
//! thread from one seed, so a failing seed replays exactly.
//!
//! `cargo test --test simulation` runs small seeded worlds, on SQLite and
//! on Postgres (the test server: `bash scripts/postgres.sh start`). The
//! large one: `cargo test --release --test simulation -- --ignored --nocapture`
//! (`SIM_MESSAGES`, `SIM_DRAINERS`, `SIM_SEED` override 10000, 8, 1;
//! `SIM_DATABASE=postgres` runs it on Postgres).

mod audit;
mod faults;
mod ledger;
#[path = "../support/postgres.rs"]
mod postgres;
mod random;

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_executor::LocalPool;
use futures_util::task::LocalSpawnExt;
use workers_outbox::conformance::yield_now;
use workers_outbox::drain::Deliver;
use workers_outbox::future::BoxFuture;
use workers_outbox::testing::{ManualClock, UnlessCrashed};
use workers_outbox::{
    ClaimedMessage, Clock, Database, Delivery, Dialect, DrainLimits, Drainer, Error,
    ExponentialBackoff, FastRandom, Inbox, Message, Outbox, RetryPolicy, SqliteDatabase, Statement,
    Timer, Timestamp, Value,
};

use crate::faults::faulty;
use crate::ledger::{Figures, Ledger};
use crate::random::SimRandom;

const MAX_ATTEMPTS: u32 = 8;
const LEASE: Duration = Duration::from_secs(20);
const CRON: Duration = Duration::from_secs(10);
const KEYS: u64 = 5;

/// Chances of each fault.
struct Rates {
    db_error: f64,
    crash_after_claim: f64,
    crash_after_delivery: f64,
    retryable: f64,
    permanent: f64,
    overrun: f64,
    clock_jump: f64,
}

/// Downstream weather, by simulated time since the start: a receiver that
/// is down for two hours (plain retryable failures), storms of 429 with
/// `Retry-After: 0` or `1`, and bursts where every delivery hangs until the
/// timeout (more hung deliveries than any drainer's concurrency).
const HANG_BURSTS: [(u64, u64); 2] = [(150, 180), (9_700, 9_730)];
const STORMS: [(u64, u64); 2] = [(200, 800), (9_000, 9_600)];
const OUTAGE: (u64, u64) = (1_000, 1_000 + 2 * 3_600);
/// The world runs at least until the weather has passed.
const WEATHER_ENDS: u64 = 9_730;
/// The message whose delivery kills its drainer, every time.
const POISON: &str = "m000042";

fn within(windows: &[(u64, u64)], second: u64) -> bool {
    windows
        .iter()
        .any(|(from, to)| (*from..*to).contains(&second))
}

const RATES: Rates = Rates {
    db_error: 0.05,
    crash_after_claim: 0.01,
    crash_after_delivery: 0.01,
    retryable: 0.30,
    permanent: 0.01,
    overrun: 0.01,
    clock_jump: 0.002,
};

struct World {
    start: Timestamp,
    raw: Arc<dyn Database>,
    outbox: Outbox,
    inbox: Inbox,
    clock: ManualClock,
    random: SimRandom,
    ledger: Arc<Mutex<Ledger>>,
}

impl World {
    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The receiver: applies each message's effect once, through the inbox,
/// and fails, crashes or overruns as the dice say.
struct Receiver {
    world: Arc<World>,
    crash: Arc<AtomicBool>,
}

impl Deliver for Receiver {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin(self.receive(message))
    }
}

impl Receiver {
    async fn receive(&self, message: &ClaimedMessage) -> Delivery {
        let w = &self.world;
        self.check_start(message).await;
        let second = w.clock.now().duration_since(w.start).as_secs();
        if message.id == POISON {
            w.ledger().faults.poison_crashes += 1;
            self.crash.store(true, Ordering::SeqCst);
            return std::future::pending().await;
        }
        if within(&[OUTAGE], second) {
            w.ledger().faults.outage_failures += 1;
            return Delivery::retry("injected: outage, 503");
        }
        if within(&STORMS, second) {
            w.ledger().faults.throttled += 1;
            let wait = Duration::from_secs(w.random.below(2));
            return Delivery::unavailable("injected: 429", Some(wait));
        }
        if within(&HANG_BURSTS, second) {
            w.ledger().faults.hangs += 1;
            return std::future::pending().await;
        }
        if w.random.chance(RATES.crash_after_claim) {
            w.ledger().faults.crashes_after_claim += 1;
            self.crash.store(true, Ordering::SeqCst);
            return std::future::pending().await;
        }
        if w.random.chance(RATES.overrun) {
            w.ledger().faults.overruns += 1;
            w.clock.advance(LEASE + Duration::from_secs(1));
            for _ in 0..3 {
                yield_now().await;
            }
        }
        if w.random.chance(RATES.permanent) {
            let mut ledger = w.ledger();
            ledger.faults.permanent_failures += 1;
            ledger.permanent.insert(message.id.clone());
            return Delivery::Permanent {
                error: "injected: 400".into(),
            };
        }
        if w.random.chance(RATES.retryable) {
            w.ledger().faults.retryable_failures += 1;
            return Delivery::Retry {
                error: "injected: 503".into(),
            };
        }
        let effect = Statement::new(
            "INSERT INTO effects (message_id) VALUES (?)",
            vec![Value::Text(message.id.clone())],
        );
        if let Err(error) = w.inbox.process_once(&message.id, None, &[effect]).await {
            return Delivery::Retry {
                error: error.to_string(),
            };
        }
        if w.random.chance(RATES.crash_after_delivery) {
            w.ledger().faults.crashes_after_delivery += 1;
            self.crash.store(true, Ordering::SeqCst);
        }
        Delivery::Delivered
    }

    /// At the start of a delivery: the row's live lease is ours, its
    /// attempts are within the maximum, and no earlier row of its key is
    /// left.
    async fn check_start(&self, message: &ClaimedMessage) {
        let w = &self.world;
        let rows = w
            .raw
            .query(&Statement::new(
                "SELECT due_at, lease_token, ordering_key, seq FROM outbox WHERE id = ? AND state = 'ready'",
                vec![Value::Text(message.id.clone())],
            ))
            .await
            .expect("the raw database answers");
        let row = rows.first();
        let ours = row.is_some_and(|row| {
            row.get::<i64>("due_at").ok() == Some(message.lease().until().as_unix_millis())
                && row
                    .get::<Option<String>>("lease_token")
                    .ok()
                    .flatten()
                    .is_some()
        });
        let earlier = match row.map(|row| {
            (
                row.get::<Option<String>>("ordering_key"),
                row.get::<Option<i64>>("seq"),
            )
        }) {
            Some((Ok(Some(key)), Ok(Some(seq)))) => w
                .raw
                .query(&Statement::new(
                    "SELECT COUNT(*) AS n FROM outbox WHERE ordering_key = ? AND seq < ?",
                    vec![Value::Text(key), Value::Integer(seq)],
                ))
                .await
                .expect("the raw database answers")
                .first()
                .and_then(|row| row.get::<i64>("n").ok())
                .unwrap_or(0),
            _ => 0,
        };
        let already_applied = !w
            .raw
            .query(&Statement::new(
                "SELECT 1 FROM effects WHERE message_id = ?",
                vec![Value::Text(message.id.clone())],
            ))
            .await
            .expect("the raw database answers")
            .is_empty();
        let mut ledger = w.ledger();
        ledger.deliveries_started += 1;
        if already_applied {
            ledger.deliveries_after_effect += 1;
        }
        *ledger.started_ids.entry(message.id.clone()).or_default() += 1;
        if !ours {
            ledger.concurrent_double_deliveries += 1;
        }
        if message.attempt() > MAX_ATTEMPTS {
            ledger.attempts_over_max += 1;
        }
        if earlier > 0 {
            ledger.order_violations += 1;
        }
    }
}

async fn produce(world: Arc<World>, messages: usize, done: Rc<Cell<bool>>) {
    let w = &world;
    let mut produced = 0;
    let mut dedup_keys: Vec<String> = Vec::new();
    // Two thirds first, the rest in one burst as the outage begins: the
    // outage meets a backlog (several messages failing in turn, which spend
    // nothing), not a lone message, whose failures are its own by the
    // breaker's rule.
    let first_wave = messages * 2 / 3;
    while produced < messages {
        for _ in 0..=w.random.below(5) {
            if produced == first_wave {
                let outage = w.start.checked_add(Duration::from_secs(OUTAGE.0));
                let outage = outage.expect("in range");
                w.clock.sleep(outage.duration_since(w.clock.now())).await;
            }
            let n = produced;
            let id = format!("m{n:06}");
            let mut message = Message::raw_json("event", format!("{{\"n\":{n}}}")).id(id.clone());
            if w.random.chance(0.2) {
                message = message.ordering_key(format!("key-{}", w.random.below(KEYS)));
            } else if w.random.chance(0.2) {
                let later = w
                    .clock
                    .now()
                    .checked_add(Duration::from_millis(w.random.below(30_000)))
                    .expect("in range");
                message = message.not_before(later);
            }
            if w.random.chance(0.1) {
                let dedup = if !dedup_keys.is_empty() && w.random.chance(0.3) {
                    dedup_keys[w.random.below(dedup_keys.len() as u64) as usize].clone()
                } else {
                    format!("d{n}")
                };
                dedup_keys.push(dedup.clone());
                message = message.dedup_key(dedup);
            }
            enqueue(w, message).await;
            // Whether the row exists decides whether it is a message: an
            // enqueue whose reply was lost may have committed.
            let present = !w
                .raw
                .query(&Statement::new(
                    "SELECT 1 FROM outbox WHERE id = ?",
                    vec![Value::Text(id.clone())],
                ))
                .await
                .expect("the raw database answers")
                .is_empty();
            let mut ledger = w.ledger();
            if present {
                ledger.sent.insert(id);
            } else {
                ledger.deduplicated += 1;
            }
            produced += 1;
            if produced == messages {
                break;
            }
        }
        if produced <= first_wave {
            w.clock
                .sleep(Duration::from_millis(w.random.below(2_000) + 1))
                .await;
        }
    }
    done.set(true);
}

/// Enqueues, retrying on injected errors; a conflict on the id means an
/// earlier try committed.
async fn enqueue(w: &World, message: Message) {
    for _ in 0..50 {
        match w.outbox.enqueue_alone(message.clone()).await {
            Ok(_) | Err(Error::Conflict { .. }) => return,
            Err(error) if error.is_retryable() => continue,
            Err(error) => panic!("enqueue failed: {error}"),
        }
    }
    panic!("enqueue kept failing");
}

async fn drain_forever(world: Arc<World>, limits: DrainLimits, stop: Rc<Cell<bool>>) {
    while !stop.get() {
        let crash = Arc::new(AtomicBool::new(false));
        let receiver = Receiver {
            world: world.clone(),
            crash: crash.clone(),
        };
        let drainer = Drainer::builder(world.outbox.clone(), receiver)
            .timer(Arc::new(world.clock.clone()))
            .limits(limits)
            .build()
            .expect("valid limits");
        let run = drainer.drain();
        UnlessCrashed::new(run, crash).await;
        world.clock.sleep(CRON).await;
    }
}

/// Every row's spent attempts, by id.
async fn attempts_by_id(raw: &Arc<dyn Database>) -> std::collections::BTreeMap<String, i64> {
    raw.query(&Statement::new("SELECT id, attempts FROM outbox", vec![]))
        .await
        .expect("the raw database answers")
        .iter()
        .map(|row| {
            (
                row.get("id").expect("id"),
                row.get("attempts").expect("attempts"),
            )
        })
        .collect()
}

async fn count(raw: &Arc<dyn Database>, sql: &str) -> i64 {
    raw.query(&Statement::new(sql, vec![]))
        .await
        .expect("the raw database answers")
        .first()
        .and_then(|row| row.get::<i64>("n").ok())
        .unwrap_or(0)
}

/// Notes dead rows; when only rows held back by a dead row of their
/// ordering key are left, purges the dead rows as an operator would, so
/// the rows behind them drain.
async fn tend_dead(world: &World) {
    let dead = world
        .raw
        .query(&Statement::new(
            "SELECT id, attempts, unsettled_leases FROM outbox WHERE state = 'dead'",
            vec![],
        ))
        .await
        .expect("the raw database answers");
    {
        let mut ledger = world.ledger();
        for row in dead.iter() {
            let id: String = row.get("id").expect("id");
            if row.get::<i64>("unsettled_leases").expect("unsettled") > 0 {
                ledger.died_unsettled.insert(id.clone());
            }
            ledger
                .dead
                .insert(id, row.get("attempts").expect("attempts"));
        }
    }
    let waiting = count(
        &world.raw,
        "SELECT COUNT(*) AS n FROM outbox WHERE state = 'waiting'",
    )
    .await;
    let ready = count(
        &world.raw,
        "SELECT COUNT(*) AS n FROM outbox WHERE state = 'ready'",
    )
    .await;
    if waiting > 0 && ready == 0 {
        let operator = Outbox::builder(world.raw.clone(), "outbox")
            .clock(Arc::new(world.clock.clone()))
            .build()
            .expect("outbox");
        let after_every_death = world
            .clock
            .now()
            .checked_add(Duration::from_millis(1))
            .expect("in range");
        operator.purge_dead(after_every_death).await.expect("purge");
    }
}

/// Where the world's outbox lives.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Engine {
    Sqlite,
    Postgres,
}

/// A Postgres database that answers each call before returning, as the
/// SQLite adapter does: the world stays one thread stepping one clock, and
/// a seed replays the same calls in the same order. The world's own SQL is
/// written with `?` placeholders; they are numbered here.
struct AnsweredAtOnce {
    inner: workers_outbox::PostgresDatabase,
    runtime: tokio::runtime::Handle,
}

impl AnsweredAtOnce {
    fn numbered(statement: &Statement) -> Statement {
        Statement::new(
            Dialect::Postgres.number_placeholders(statement.sql()),
            statement.values().to_vec(),
        )
    }
}

impl Database for AnsweredAtOnce {
    fn dialect(&self) -> Dialect {
        Dialect::Postgres
    }

    fn run<'a>(
        &'a self,
        statement: &'a Statement,
    ) -> BoxFuture<'a, workers_outbox::Result<workers_outbox::database::Outcome>> {
        let answer = self
            .runtime
            .block_on(self.inner.run(&Self::numbered(statement)));
        Box::pin(std::future::ready(answer))
    }

    /// Through the `batch_atomic` override below, which must stay (the
    /// provided one would call this again).
    fn run_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, workers_outbox::Result<Vec<workers_outbox::database::Outcome>>> {
        self.batch_atomic(statements)
    }

    fn execute<'a>(
        &'a self,
        statement: &'a Statement,
    ) -> BoxFuture<'a, workers_outbox::Result<u64>> {
        let answer = self
            .runtime
            .block_on(self.inner.execute(&Self::numbered(statement)));
        Box::pin(std::future::ready(answer))
    }

    fn query<'a>(
        &'a self,
        statement: &'a Statement,
    ) -> BoxFuture<'a, workers_outbox::Result<workers_outbox::database::Rows>> {
        let answer = self
            .runtime
            .block_on(self.inner.query(&Self::numbered(statement)));
        Box::pin(std::future::ready(answer))
    }

    fn batch_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, workers_outbox::Result<Vec<workers_outbox::database::Outcome>>> {
        let numbered: Vec<Statement> = statements.iter().map(Self::numbered).collect();
        let answer = self.runtime.block_on(self.inner.batch_atomic(&numbered));
        Box::pin(std::future::ready(answer))
    }
}

fn simulate(seed: u64, messages: usize, drainers: usize) -> Figures {
    simulate_on(Engine::Sqlite, seed, messages, drainers)
}

fn simulate_on(engine: Engine, seed: u64, messages: usize, drainers: usize) -> Figures {
    match engine {
        Engine::Sqlite => {
            let raw: Arc<dyn Database> =
                Arc::new(SqliteDatabase::open_in_memory().expect("SQLite opens"));
            simulate_with(raw, seed, messages, drainers)
        }
        Engine::Postgres => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a tokio runtime");
            let database = runtime.block_on(postgres::TestDatabase::create("simulation"));
            let raw: Arc<dyn Database> = Arc::new(AnsweredAtOnce {
                inner: runtime.block_on(database.connect(1)),
                runtime: runtime.handle().clone(),
            });
            let figures = simulate_with(raw, seed, messages, drainers);
            runtime.block_on(database.drop_now());
            figures
        }
    }
}

fn simulate_with(raw: Arc<dyn Database>, seed: u64, messages: usize, drainers: usize) -> Figures {
    let random = SimRandom::seeded(seed);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let faulty_db = faulty(raw.clone(), random.clone(), RATES.db_error, ledger.clone());
    let faulty: Arc<dyn Database> = Arc::new(faulty_db.clone());
    let start = Timestamp::from_unix_millis(1_700_000_000_000).expect("in range");
    let clock = ManualClock::new(start);
    let retry = RetryPolicy::new(
        MAX_ATTEMPTS,
        ExponentialBackoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(30),
        },
    )
    .expect("valid policy");
    let outbox = Outbox::builder(faulty.clone(), "outbox")
        .clock(Arc::new(clock.clone()))
        .random(Arc::new(FastRandom::seeded(seed)))
        .retry_policy(retry)
        .build()
        .expect("outbox");
    let inbox = Inbox::new(faulty, "inbox")
        .expect("inbox")
        .with_clock(Arc::new(clock.clone()));
    let world = Arc::new(World {
        start,
        raw: raw.clone(),
        outbox,
        inbox,
        clock: clock.clone(),
        random: random.clone(),
        ledger: ledger.clone(),
    });

    let mut pool = LocalPool::new();
    pool.run_until(async {
        let mut schema = world.outbox.schema_statements();
        schema.extend(world.inbox.schema_statements());
        schema.push(Statement::new(
            "CREATE TABLE effects (message_id TEXT NOT NULL)",
            vec![],
        ));
        schema.extend(audit::schema(raw.dialect()));
        raw.batch_atomic(&schema).await.expect("schema");
    });

    let produced = Rc::new(Cell::new(false));
    let stop = Rc::new(Cell::new(false));
    let spawner = pool.spawner();
    spawner
        .spawn_local(produce(world.clone(), messages, produced.clone()))
        .expect("spawn");
    let limits = DrainLimits {
        batch_size: 10,
        concurrency: 3,
        delivery_timeout: Duration::from_secs(5),
        lease: LEASE,
        settle_margin: Duration::from_secs(5),
        deadline: Duration::from_secs(60),
        max_queries: 100,
        max_messages: 1_000,
        ..DrainLimits::scheduled()
    };
    for _ in 0..drainers {
        spawner
            .spawn_local(drain_forever(world.clone(), limits, stop.clone()))
            .expect("spawn");
    }

    let mut steps = 0u64;
    let mut attempts_at_outage_start = None;
    let mut outage_attempts = None;
    loop {
        // Outage figures are read before the drains of this second run.
        let second = clock.now().duration_since(start).as_secs();
        // From a minute in (drains begun before the outage have settled) to
        // its end.
        if attempts_at_outage_start.is_none() && second >= OUTAGE.0 + 60 {
            attempts_at_outage_start = Some(pool.run_until(attempts_by_id(&raw)));
        }
        if outage_attempts.is_none() && second >= OUTAGE.1 {
            let before = attempts_at_outage_start.clone().unwrap_or_default();
            let after = pool.run_until(attempts_by_id(&raw));
            outage_attempts = Some(
                after
                    .iter()
                    .filter(|(id, _)| id.as_str() != POISON)
                    .map(|(id, attempts)| (attempts - before.get(id).copied().unwrap_or(0)).max(0))
                    .sum::<i64>(),
            );
        }
        pool.run_until_stalled();
        steps += 1;
        let second = clock.now().duration_since(start).as_secs();
        if produced.get() && second >= WEATHER_ENDS && steps.is_multiple_of(10) {
            let open = pool.run_until(async {
                tend_dead(&world).await;
                count(
                    &raw,
                    "SELECT COUNT(*) AS n FROM outbox WHERE state <> 'dead'",
                )
                .await
            });
            if open == 0 {
                break;
            }
        }
        assert!(steps < 2_000_000, "seed {seed}: the world did not quiesce");
        if random.chance(RATES.clock_jump) {
            ledger
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .faults
                .clock_jumps += 1;
            clock.advance(Duration::from_secs(300));
        } else {
            clock.advance(Duration::from_secs(1));
        }
    }
    stop.set(true);
    clock.advance(CRON);
    pool.run_until_stalled();

    let simulated_seconds = clock.now().duration_since(start).as_secs();
    pool.run_until(async {
        tend_dead(&world).await;
        let effects = raw
            .query(&Statement::new(
                "SELECT message_id, COUNT(*) AS n FROM effects GROUP BY message_id",
                vec![],
            ))
            .await
            .expect("effects");
        let mut applied = std::collections::BTreeMap::new();
        for row in effects.iter() {
            applied.insert(
                row.get::<String>("message_id").expect("id"),
                row.get::<i64>("n").expect("n"),
            );
        }
        let rows_left_not_dead = usize::try_from(
            count(
                &raw,
                "SELECT COUNT(*) AS n FROM outbox WHERE state <> 'dead'",
            )
            .await,
        )
        .unwrap_or(usize::MAX);
        let (rollup_differences, audited_changes) = audit::differences(&raw, &clock, start).await;
        let mut ledger = ledger.lock().unwrap_or_else(PoisonError::into_inner);
        let struck = faulty_db.struck();
        ledger.faults.db_errors_before = struck.before;
        ledger.faults.db_errors_after_commit = struck.after_commit;
        let mut lost = 0;
        let mut delivered = 0;
        let mut dead = 0;
        let mut innocent_dead = 0;
        let mut innocent_dead_unsettled = 0;
        for id in &ledger.sent {
            if ledger.dead.contains_key(id) && !ledger.permanent.contains(id) && id != POISON {
                innocent_dead += 1;
                if ledger.died_unsettled.contains(id) {
                    innocent_dead_unsettled += 1;
                }
            }
            let effect = applied.get(id).copied().unwrap_or(0);
            if effect > 0 {
                delivered += 1;
            }
            match ledger.dead.get(id) {
                Some(attempts) => {
                    dead += 1;
                    // Dead exactly when it failed permanently or used every attempt.
                    if !ledger.permanent.contains(id) && *attempts < MAX_ATTEMPTS {
                        lost += 1;
                    }
                }
                None if effect == 0 => lost += 1,
                None => {}
            }
        }
        Figures {
            seed,
            messages: ledger.sent.len(),
            drainers,
            faults: ledger.faults.clone(),
            delivered,
            dead,
            lost,
            concurrent_double_deliveries: ledger.concurrent_double_deliveries,
            stale_settles_applied: ledger.stale_settles_applied,
            attempts_over_max: ledger.attempts_over_max,
            order_violations: ledger.order_violations,
            effects_applied_twice: applied.values().filter(|n| **n > 1).count(),
            rows_left_not_dead,
            redeliveries: ledger.deliveries_started - ledger.started_ids.len() as u64,
            innocent_dead,
            innocent_dead_unsettled,
            deliveries_after_effect: ledger.deliveries_after_effect,
            innocent_deliveries: ledger.deliveries_started
                - ledger.started_ids.get(POISON).copied().unwrap_or(0),
            innocent_messages: ledger.sent.len() - usize::from(ledger.sent.contains(POISON)),
            most_deliveries_of_one_innocent: ledger
                .started_ids
                .iter()
                .filter(|(id, _)| id.as_str() != POISON)
                .map(|(_, n)| *n)
                .max()
                .unwrap_or(0),
            poison_dead_after: ledger.dead.get(POISON).copied(),
            outage_attempts: outage_attempts.unwrap_or(0),
            rollup_differences,
            audited_changes,
            simulated_seconds,
        }
    })
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn a_small_seeded_world_keeps_every_promise() {
    for seed in [1, 2, 3] {
        let figures = simulate(seed, 300, 4);
        println!("{figures}\n");
        assert!(figures.kept(), "seed {seed} broke a promise:\n{figures}");
        let f = &figures.faults;
        assert!(
            f.db_errors_before > 0 && f.retryable_failures > 0,
            "seed {seed} injected too few faults to mean anything:\n{figures}"
        );
    }
}

/// The same seed on Postgres is the same world as on SQLite, call for
/// call: every figure matches.
#[test]
fn a_small_seeded_world_on_postgres_is_the_same_world() {
    let postgres = simulate_on(Engine::Postgres, 2, 300, 4);
    println!("{postgres}\n");
    assert!(postgres.kept(), "Postgres broke a promise:\n{postgres}");
    assert_eq!(
        postgres.to_string(),
        simulate_on(Engine::Sqlite, 2, 300, 4).to_string()
    );
}

#[test]
fn the_same_seed_replays_the_same_world() {
    let first = simulate(7, 120, 3).to_string();
    let second = simulate(7, 120, 3).to_string();
    assert_eq!(first, second);
}

#[test]
#[ignore = "the large world: run with --release --ignored --nocapture"]
fn a_large_world_keeps_every_promise() {
    let seed = env("SIM_SEED", 1);
    let messages = usize::try_from(env("SIM_MESSAGES", 10_000)).unwrap_or(10_000);
    let drainers = usize::try_from(env("SIM_DRAINERS", 8)).unwrap_or(8);
    let engine = match std::env::var("SIM_DATABASE").as_deref() {
        Ok("postgres") => Engine::Postgres,
        Ok("sqlite") | Err(_) => Engine::Sqlite,
        Ok(other) => panic!("SIM_DATABASE={other}: expected sqlite or postgres"),
    };
    println!("on {engine:?}");
    let started = std::time::Instant::now();
    let figures = simulate_on(engine, seed, messages, drainers);
    println!("{figures}");
    // One line for `npm run bench` (benches/simulation.mjs) to read.
    println!(
        "SIM_FIGURES_JSON {}",
        serde_json::json!({
            "engine": format!("{engine:?}"),
            "wall_s": started.elapsed().as_secs_f64(),
            "kept": figures.kept(),
            "figures": figures,
        })
    );
    assert!(figures.kept(), "broke a promise:\n{figures}");
}
