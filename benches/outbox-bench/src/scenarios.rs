//! The benchmark scenarios, runtime-agnostic: the D1 Worker and the native
//! runner call the same functions on their own adapter.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use workers_outbox::drain::{Deliver, DrainReport, StopReason, deliver_fn};
use workers_outbox::{
    Batch, ClaimedMessage, Clock, Database, Delivery, DrainLimits, Drainer, Message, Outbox,
    Result, Statement, SystemClock, Timer, Value,
};

use crate::baseline::{self, Baseline};
use crate::batch_loop::BatchLoop;
use crate::latency::{LatencyRun, Mix, MixedDownstream, Sink};

/// The fleet registry's table (the console's fleet view reads it).
pub(crate) const FLEET_TABLE: &str = "bench_fleet";

/// What the adapter has cost so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Meter {
    /// Database round trips (D1 subrequests).
    pub calls: u64,
    /// Statements those carried.
    pub statements: u64,
    /// Rows read, where the backend reports it (D1).
    pub rows_read: Option<u64>,
    /// Rows written, index entries included, where reported (D1).
    pub rows_written: Option<u64>,
}

impl Meter {
    pub(crate) fn since(self, before: Meter) -> Meter {
        let diff = |a: Option<u64>, b: Option<u64>| Some(a? - b?);
        Meter {
            calls: self.calls - before.calls,
            statements: self.statements - before.statements,
            rows_read: diff(self.rows_read, before.rows_read),
            rows_written: diff(self.rows_written, before.rows_written),
        }
    }
}

/// Reads an adapter's meter and a millisecond stopwatch.
pub trait Probe {
    /// The meter now.
    fn meter(&self) -> Meter;
    /// Milliseconds from an arbitrary origin.
    fn now_ms(&self) -> f64;
}

/// Which algorithm a scenario runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    /// This crate's outbox.
    Ours,
    /// This crate's outbox with its rollups off.
    OursNoRollups,
    /// The original algorithm.
    Baseline,
    /// This crate's drain loop before streaming (batch barrier).
    BatchLoop,
}

impl Algorithm {
    /// `"ours"` or `"baseline"`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "ours" => Some(Algorithm::Ours),
            "ours-no-rollups" => Some(Algorithm::OursNoRollups),
            "baseline" => Some(Algorithm::Baseline),
            "batch-loop" => Some(Algorithm::BatchLoop),
            _ => None,
        }
    }
}

/// Rows to seed, by what they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Due now.
    Due,
    /// Due in a day.
    Future,
    /// Dead letters (ours) / far-future rows (baseline, which has none).
    Dead,
    /// Leased until tomorrow and never settled.
    Stuck,
}

impl Kind {
    /// `"due"`, `"future"`, `"dead"` or `"stuck"`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "due" => Some(Kind::Due),
            "future" => Some(Kind::Future),
            "dead" => Some(Kind::Dead),
            "stuck" => Some(Kind::Stuck),
            _ => None,
        }
    }
}

/// One adapter's setup.
pub struct Bench {
    /// The database.
    pub db: Arc<dyn Database>,
    /// Its meter and stopwatch.
    pub probe: Arc<dyn Probe>,
    /// Times out deliveries (they never run long here).
    pub timer: Arc<dyn Timer>,
}

const DAY: Duration = Duration::from_secs(24 * 3600);
const LEASE: Duration = Duration::from_secs(300);

impl Bench {
    pub(crate) fn outbox(&self) -> Result<Outbox> {
        Outbox::new(self.db.clone(), "outbox")
    }

    /// The outbox `algorithm` drains (rollups on, unless it says off).
    fn outbox_of(&self, algorithm: Algorithm) -> Result<Outbox> {
        Outbox::builder(self.db.clone(), "outbox")
            .rollups(algorithm != Algorithm::OursNoRollups)
            .build()
    }

    /// Drops and recreates both algorithms' tables.
    pub async fn reset(&self) -> Result<()> {
        let tables = [
            "outbox",
            "outbox_topics",
            "outbox_paused",
            "outbox_periods",
            "outbox_audit",
            "outbox_alerts",
            "outbox_keys",
            FLEET_TABLE,
            baseline::TABLE,
            "accounts",
        ];
        for table in tables.into_iter().chain(crate::endpoint_costs::TABLES) {
            self.db
                .execute(&Statement::new(
                    format!("DROP TABLE IF EXISTS {table}"),
                    vec![],
                ))
                .await?;
        }
        let mut schema = self.outbox()?.schema_statements();
        schema.extend(baseline::schema());
        schema.push(Statement::new(
            "CREATE TABLE accounts (id TEXT NOT NULL PRIMARY KEY, email TEXT NOT NULL UNIQUE, created_at INTEGER NOT NULL) STRICT",
            vec![],
        ));
        self.db.batch_atomic(&schema).await.map(drop)
    }

    /// Inserts `count` rows of `kind` for `algorithm`, in statements of up
    /// to 50,000 rows each (a recursive CTE makes the rows inside SQLite).
    pub async fn seed(&self, algorithm: Algorithm, kind: Kind, count: u64) -> Result<()> {
        let now = SystemClock.now();
        let tomorrow = now.checked_add(DAY)?;
        let mut first = self.next_seed_id().await?;
        let mut left = count;
        while left > 0 {
            let chunk = left.min(50_000);
            let last = first + chunk - 1;
            let numbers =
                "WITH RECURSIVE n(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM n WHERE i < ?)";
            let statement = match algorithm {
                Algorithm::Ours | Algorithm::OursNoRollups | Algorithm::BatchLoop => {
                    let (state, due, token) = match kind {
                        Kind::Due => ("ready", now, None),
                        Kind::Future => ("ready", tomorrow, None),
                        Kind::Dead => ("dead", now, None),
                        Kind::Stuck => ("ready", tomorrow, Some("stuck")),
                    };
                    Statement::new(
                        format!(
                            "INSERT INTO outbox (state, due_at, id, topic, payload, attempts, lease_token, created_at) \
                             {numbers} SELECT ?, ?, printf('seed%012d', i), 'bench', '{{\"n\":1}}', ?, ?, ? FROM n"
                        ),
                        vec![
                            Value::from(first as i64),
                            Value::from(last as i64),
                            state.into(),
                            due.into(),
                            Value::from(i64::from(token.is_some())),
                            token.into(),
                            now.into(),
                        ],
                    )
                }
                Algorithm::Baseline => {
                    let (due, locked) = match kind {
                        Kind::Due => (now, None),
                        Kind::Future | Kind::Dead => (tomorrow, None),
                        Kind::Stuck => (now, Some(baseline::rfc3339(tomorrow))),
                    };
                    Statement::new(
                        format!(
                            "INSERT INTO {} (id, topic, payload, attempts, next_attempt_at, locked_until, created_at) \
                             {numbers} SELECT printf('seed%012d', i), 'bench', '{{\"n\":1}}', 0, ?, ?, ? FROM n",
                            baseline::TABLE
                        ),
                        vec![
                            Value::from(first as i64),
                            Value::from(last as i64),
                            baseline::rfc3339(due).into(),
                            locked.into(),
                            baseline::rfc3339(now).into(),
                        ],
                    )
                }
            };
            self.db.execute(&statement).await?;
            first = last + 1;
            left -= chunk;
        }
        Ok(())
    }

    async fn next_seed_id(&self) -> Result<u64> {
        let rows = self
            .db
            .query(&Statement::new(
                format!(
                    "SELECT (SELECT COUNT(*) FROM outbox) + (SELECT COUNT(*) FROM {}) AS n",
                    baseline::TABLE
                ),
                vec![],
            ))
            .await?;
        Ok(rows
            .first()
            .map(|row| row.get::<u64>("n"))
            .transpose()?
            .unwrap_or(0))
    }

    /// Drains due messages with a no-op deliverer until none is due, the
    /// call budget is spent or `max_messages` were delivered.
    pub async fn drain(
        &self,
        algorithm: Algorithm,
        batch: u32,
        max_calls: u32,
        max_messages: u32,
    ) -> Result<Run> {
        let before = self.probe.meter();
        let started = self.probe.now_ms();
        let delivered = match algorithm {
            Algorithm::Ours | Algorithm::OursNoRollups => {
                let limits = DrainLimits {
                    batch_size: batch,
                    max_queries: max_calls,
                    max_messages,
                    lease: LEASE,
                    deadline: Duration::from_secs(3600),
                    ..DrainLimits::scheduled()
                };
                let deliver = deliver_fn(|_: ClaimedMessage| async { Delivery::Delivered });
                let outbox = self.outbox_of(algorithm)?;
                u64::from(
                    self.drain_ours(outbox, Arc::new(deliver), limits)
                        .await?
                        .delivered,
                )
            }
            Algorithm::BatchLoop => {
                let deliver = deliver_fn(|_: ClaimedMessage| async { Delivery::Delivered });
                let run = BatchLoop {
                    outbox: self.outbox()?,
                    deliver: Arc::new(deliver),
                    timer: self.timer.clone(),
                    batch,
                    concurrency: DrainLimits::scheduled().concurrency,
                    timeout: DrainLimits::scheduled().delivery_timeout,
                    lease: LEASE,
                }
                .run(max_calls)
                .await?;
                run.delivered
            }
            Algorithm::Baseline => {
                let baseline = Baseline::new(self.db.clone());
                let mut delivered = 0u64;
                loop {
                    // A batch costs at least its claim; stop while one more fits.
                    let used = self.probe.meter().since(before).calls;
                    if used + 2 > u64::from(max_calls) || delivered >= u64::from(max_messages) {
                        break;
                    }
                    let room = u64::from(max_calls) - used - 1;
                    let limit = u64::from(batch)
                        .min(room / 2)
                        .min(u64::from(max_messages) - delivered)
                        .max(1);
                    let now = SystemClock.now();
                    let records = baseline
                        .claim_due(now, now.checked_add(LEASE)?, limit)
                        .await?;
                    if records.is_empty() {
                        break;
                    }
                    for record in &records {
                        baseline.complete(&record.id).await?;
                    }
                    delivered += records.len() as u64;
                }
                delivered
            }
        };
        Ok(Run {
            messages: delivered,
            meter: self.probe.meter().since(before),
            elapsed_ms: self.probe.now_ms() - started,
        })
    }

    /// One drain of this crate's outbox; a database error is the bench's.
    pub(crate) async fn drain_ours(
        &self,
        outbox: Outbox,
        deliver: Arc<dyn Deliver>,
        limits: DrainLimits,
    ) -> Result<DrainReport> {
        let drainer = Drainer::builder(outbox, deliver)
            .timer(self.timer.clone())
            .limits(limits)
            .build()?;
        let report = drainer.drain().await;
        if let StopReason::DatabaseError(error) = report.stopped {
            return Err(error);
        }
        Ok(report)
    }

    /// `claims` claims of `batch` rows each, timed one by one.
    pub async fn claims(&self, algorithm: Algorithm, batch: u32, claims: u32) -> Result<ClaimRun> {
        let before = self.probe.meter();
        let mut times = Vec::new();
        let mut claimed = 0u64;
        for _ in 0..claims {
            let started = self.probe.now_ms();
            claimed += match algorithm {
                Algorithm::Ours | Algorithm::OursNoRollups | Algorithm::BatchLoop => {
                    self.outbox_of(algorithm)?.claim(batch, LEASE).await?.len() as u64
                }
                Algorithm::Baseline => {
                    let now = SystemClock.now();
                    Baseline::new(self.db.clone())
                        .claim_due(now, now.checked_add(LEASE)?, u64::from(batch))
                        .await?
                        .len() as u64
                }
            };
            times.push(self.probe.now_ms() - started);
        }
        Ok(ClaimRun {
            claimed,
            meter: self.probe.meter().since(before),
            mean_ms: times.iter().sum::<f64>() / f64::from(claims.max(1)),
            times_ms: times,
        })
    }

    /// Drains `messages` due messages against the log-normal downstream
    /// (`mix`, reached through `sink`), with the streaming drain (`Ours`) or
    /// the batch loop, and compares the attempts per second with the ideal
    /// `concurrency / mean slot time`.
    pub async fn latency(
        &self,
        algorithm: Algorithm,
        messages: u64,
        concurrency: usize,
        mix: Mix,
        sink: Arc<dyn Sink>,
    ) -> Result<LatencyRun> {
        self.reset().await?;
        self.seed(Algorithm::Ours, Kind::Due, messages).await?;
        let downstream = Arc::new(MixedDownstream::new(mix, sink));
        let before = self.probe.meter();
        let started = self.probe.now_ms();
        let algo = match algorithm {
            Algorithm::BatchLoop => {
                BatchLoop {
                    outbox: self.outbox()?,
                    deliver: downstream.clone(),
                    timer: self.timer.clone(),
                    batch: 100,
                    concurrency,
                    timeout: mix.timeout,
                    lease: LEASE,
                }
                .run(u32::MAX)
                .await?;
                "batch-loop"
            }
            Algorithm::Ours | Algorithm::OursNoRollups | Algorithm::Baseline => {
                let limits = DrainLimits {
                    batch_size: 100,
                    concurrency,
                    delivery_timeout: mix.timeout,
                    settle_margin: Duration::from_secs(1),
                    lease: LEASE,
                    deadline: Duration::from_secs(3600),
                    max_queries: u32::MAX,
                    max_messages: u32::MAX,
                    // A hang is no outage: compare the loops alone.
                    breaker: None,
                    ..DrainLimits::scheduled()
                };
                self.drain_ours(self.outbox()?, downstream.clone(), limits)
                    .await?;
                "streaming"
            }
        };
        let elapsed_ms = self.probe.now_ms() - started;
        let slots = downstream.slots();
        let attempts = slots.len() as u64;
        Ok(LatencyRun {
            algo,
            concurrency,
            attempts,
            elapsed_ms,
            per_second: attempts as f64 / elapsed_ms * 1000.0,
            ideal_per_second: concurrency as f64 / mean(&slots) * 1000.0,
            calls: self.probe.meter().since(before).calls,
        })
    }

    /// The sign-up's D1 batch with and without its outbox row, and the hot
    /// path's settle, `iterations` times.
    pub async fn signup(&self, iterations: u32) -> Result<SignupRun> {
        let outbox = self.outbox()?;
        let mut alone = Vec::new();
        let mut with_outbox = Vec::new();
        let mut hot_path = Meter::default();
        let mut plain_insert = Meter::default();
        let mut example_insert = Meter::default();
        for n in 0..iterations {
            let account = |tag: &str| {
                Statement::new(
                    "INSERT INTO accounts (id, email, created_at) VALUES (?, ?, ?)",
                    vec![
                        format!("{tag}{n}").into(),
                        format!("{tag}{n}@example.com").into(),
                        SystemClock.now().into(),
                    ],
                )
            };
            let started = self.probe.now_ms();
            self.db.batch_atomic(&[account("a")]).await?;
            alone.push(self.probe.now_ms() - started);

            let email = format!("b{n}@example.com");
            let mut batch = Batch::new(self.db.clone());
            batch.push(account("b"));
            let mail = batch.enqueue_leased(
                &outbox,
                Message::json("signup-confirmation", &serde_json::json!({ "to": email }))?
                    .subject(format!("b{n}"))
                    .dedup_key(email.clone()),
                LEASE,
            )?;
            let started = self.probe.now_ms();
            let before = self.probe.meter();
            let mut committed = batch.commit().await?;
            with_outbox.push(self.probe.now_ms() - started);
            let batch_cost = self.probe.meter().since(before);

            let deduplicated =
                || workers_outbox::Error::database("a benchmark enqueue was deduplicated");
            let claimed = committed.claimed(mail)?.ok_or_else(deduplicated)?;
            let before = self.probe.meter();
            outbox.complete(claimed.lease()).await?;
            let settle = self.probe.meter().since(before);
            hot_path = add(hot_path, settle);

            // The outbox row's own writes: the same batch without it costs
            // the account's writes only.
            let before = self.probe.meter();
            self.db.batch_atomic(&[account("c")]).await?;
            let account_cost = self.probe.meter().since(before);
            example_insert = add(
                example_insert,
                Meter {
                    calls: 0,
                    statements: 1,
                    rows_read: None,
                    rows_written: batch_cost
                        .rows_written
                        .zip(account_cost.rows_written)
                        .map(|(all, account)| all - account),
                },
            );

            let mut batch = Batch::new(self.db.clone());
            let plain =
                batch.enqueue_leased(&outbox, Message::raw_json("webhook", "{\"n\":1}"), LEASE)?;
            let before = self.probe.meter();
            let mut committed = batch.commit().await?;
            plain_insert = add(plain_insert, self.probe.meter().since(before));
            if let Some(claimed) = committed.claimed(plain)? {
                outbox.complete(claimed.lease()).await?;
            }
        }
        Ok(SignupRun {
            iterations,
            account_alone_ms: mean(&alone),
            account_and_outbox_ms: mean(&with_outbox),
            hot_path_settle: hot_path,
            plain_insert,
            example_insert,
        })
    }
}

pub(crate) fn add(a: Meter, b: Meter) -> Meter {
    let sum = |x: Option<u64>, y: Option<u64>| Some(x.unwrap_or(0) + y?);
    Meter {
        calls: a.calls + b.calls,
        statements: a.statements + b.statements,
        rows_read: sum(a.rows_read, b.rows_read),
        rows_written: sum(a.rows_written, b.rows_written),
    }
}

/// The mean: timers on Workers tick in whole milliseconds, so a mean over
/// many batches says more than a median.
fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// A drain's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Messages delivered.
    pub messages: u64,
    /// What it cost.
    pub meter: Meter,
    /// How long it took, in milliseconds.
    pub elapsed_ms: f64,
}

/// Claims' figures.
#[derive(Debug, Clone, Serialize)]
pub struct ClaimRun {
    /// Rows claimed in all.
    pub claimed: u64,
    /// What the claims cost.
    pub meter: Meter,
    /// Mean time per claim, in milliseconds.
    pub mean_ms: f64,
    /// Each claim's time.
    pub times_ms: Vec<f64>,
}

/// Sign-up figures.
#[derive(Debug, Clone, Serialize)]
pub struct SignupRun {
    /// Sign-ups measured.
    pub iterations: u32,
    /// Mean batch time, account insert alone.
    pub account_alone_ms: f64,
    /// Mean batch time, account insert plus outbox row.
    pub account_and_outbox_ms: f64,
    /// What the settles after the batches cost, summed.
    pub hot_path_settle: Meter,
    /// A plain message's insert, summed.
    pub plain_insert: Meter,
    /// The example's message insert (subject and dedup key), summed.
    pub example_insert: Meter,
}
