//! The Postgres claim under the conditions that slow `SKIP LOCKED` queues:
//! autovacuum at the server's defaults, a snapshot held open, a long soak.
//! Uses only the public API, so `scripts/bench.sh` builds this same file
//! against the previous release's schema too, for figures side by side.
//! Prints one JSON document for `benches/postgres_claim.mjs`.
//!
//! ```text
//! outbox-bench-postgres-claim naptime  <url> <messages> <drainers> <repetitions>
//! outbox-bench-postgres-claim snapshot <url> <messages> <drainers> <rate/s> <most s> <hold from s> <hold for s>
//! outbox-bench-postgres-claim soak     <url> <messages> <drainers> <rate/s> <most s>
//! ```
//!
//! A steady run (`snapshot`, `soak`) stops after `most` seconds even with
//! messages left: the schema before the floor can take far longer.
//!
//! ```text
//! ```

// Printing the results is this program's job.
#![allow(clippy::print_stdout)]

#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    match native::run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("benchmark failed: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use serde_json::{Value as Json, json};
    use workers_outbox::database::{Outcome, Rows};
    use workers_outbox::drain::deliver_fn;
    use workers_outbox::future::BoxFuture;
    use workers_outbox::{
        ClaimedMessage, Database, Delivery, Dialect, DrainLimits, Drainer, Error, Message, Outbox,
        PostgresDatabase, Result, Statement,
    };

    fn arg<T: std::str::FromStr>(args: &[String], index: usize, name: &str) -> Result<T> {
        args.get(index)
            .and_then(|a| a.parse().ok())
            .ok_or_else(|| Error::database(format!("argument {index} ({name}) is missing or bad")))
    }

    pub(crate) fn run() -> Result<()> {
        let args: Vec<String> = std::env::args().skip(1).collect();
        let mode = args.first().cloned().unwrap_or_default();
        let url: String = arg(&args, 1, "url")?;
        let messages: u64 = arg(&args, 2, "messages")?;
        let drainers: usize = arg(&args, 3, "drainers")?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Error::database(e.to_string()))?;
        let result = runtime.block_on(async {
            match mode.as_str() {
                "naptime" => naptime(&url, messages, drainers, arg(&args, 4, "repetitions")?).await,
                "snapshot" | "soak" => {
                    let load = Load {
                        messages,
                        drainers,
                        rate: arg(&args, 4, "rate")?,
                        most: Duration::from_secs(arg(&args, 5, "most")?),
                    };
                    let hold = if mode == "snapshot" {
                        Some((
                            Duration::from_secs(arg(&args, 6, "hold from")?),
                            Duration::from_secs(arg(&args, 7, "hold for")?),
                        ))
                    } else {
                        None
                    };
                    steady(&url, load, hold).await
                }
                other => Err(Error::database(format!("unknown mode {other:?}"))),
            }
        });
        // The server's own naptime again, whatever happened.
        runtime.block_on(set_naptime(&url, None))?;
        println!("{}", result?);
        Ok(())
    }

    /// Sets the server's `autovacuum_naptime` (`None`: its default).
    async fn set_naptime(url: &str, naptime: Option<&str>) -> Result<()> {
        let server = PostgresDatabase::connect(url, 1).await?;
        let set = match naptime {
            Some(naptime) => format!("ALTER SYSTEM SET autovacuum_naptime = '{naptime}'"),
            None => "ALTER SYSTEM RESET autovacuum_naptime".to_owned(),
        };
        server.execute(&Statement::new(set, vec![])).await?;
        server
            .query(&Statement::new("SELECT pg_reload_conf()", vec![]))
            .await?;
        Ok(())
    }

    /// A fresh outbox table `table` on its own connections.
    async fn fresh_outbox(url: &str, table: &str, connections: usize) -> Result<Outbox> {
        let db: Arc<dyn Database> = Arc::new(PostgresDatabase::connect(url, connections).await?);
        db.execute(&Statement::new(
            format!("DROP TABLE IF EXISTS \"{table}\", \"{table}_topics\", \"{table}_paused\", \"{table}_periods\""),
            vec![],
        ))
        .await?;
        let outbox = Outbox::new(db, table)?;
        outbox.create_schema().await?;
        Ok(outbox)
    }

    async fn drop_outbox(outbox: &Outbox) -> Result<()> {
        let table = outbox.table();
        outbox
            .database()
            .execute(&Statement::new(
                format!("DROP TABLE IF EXISTS \"{table}\", \"{table}_topics\", \"{table}_paused\", \"{table}_periods\""),
                vec![],
            ))
            .await?;
        Ok(())
    }

    async fn enqueue_many(outbox: &Outbox, from: u64, count: u64) -> Result<()> {
        let mut statements = Vec::with_capacity(1000);
        for n in from..from + count {
            let message = Message::raw_json("bench", format!("{{\"n\":{n}}}"));
            statements.extend_from_slice(outbox.enqueue(message)?.statements());
            if statements.len() >= 1000 {
                outbox.database().batch_atomic(&statements).await?;
                statements.clear();
            }
        }
        outbox.database().batch_atomic(&statements).await?;
        Ok(())
    }

    /// A drainer of no-op deliveries counted in `delivered`, whose `drain()`
    /// returns after `deadline` at most.
    fn drainer(outbox: Outbox, delivered: Arc<AtomicU64>, deadline: Duration) -> Result<Drainer> {
        let deliver = deliver_fn(move |_message: ClaimedMessage| {
            let delivered = delivered.clone();
            async move {
                delivered.fetch_add(1, Ordering::Relaxed);
                Delivery::Delivered
            }
        });
        Drainer::builder(outbox, deliver)
            .limits(DrainLimits {
                batch_size: 100,
                max_queries: u32::MAX,
                max_messages: u32::MAX,
                deadline,
                ..DrainLimits::scheduled()
            })
            .build()
    }

    /// A backlog of `messages` drained by `drainers` at once, at the
    /// server's default naptime and at 1 s, `repetitions` times each, the
    /// order swapped every repetition.
    async fn naptime(
        url: &str,
        messages: u64,
        drainers: usize,
        repetitions: usize,
    ) -> Result<Json> {
        let mut runs = Vec::new();
        for repetition in 0..repetitions {
            let order: [Option<&str>; 2] = if repetition % 2 == 0 {
                [None, Some("1s")]
            } else {
                [Some("1s"), None]
            };
            for naptime in order {
                set_naptime(url, naptime).await?;
                let table = "bench_claim_naptime";
                let setup = fresh_outbox(url, table, 2).await?;
                enqueue_many(&setup, 0, messages).await?;
                let delivered = Arc::new(AtomicU64::new(0));
                let mut tasks = Vec::new();
                for _ in 0..drainers {
                    let db: Arc<dyn Database> = Arc::new(PostgresDatabase::connect(url, 2).await?);
                    let drainer = drainer(
                        Outbox::new(db, table)?,
                        delivered.clone(),
                        Duration::from_secs(3600),
                    )?;
                    tasks.push(drainer);
                }
                let started = Instant::now();
                let handles: Vec<_> = tasks
                    .into_iter()
                    .map(|drainer| tokio::spawn(async move { drainer.drain().await }))
                    .collect();
                for handle in handles {
                    handle.await.map_err(|e| Error::database(e.to_string()))?;
                }
                let wall = started.elapsed().as_secs_f64();
                let left = setup.stats().await?.pending;
                let done = delivered.load(Ordering::Relaxed);
                drop_outbox(&setup).await?;
                if left > 0 || done != messages {
                    return Err(Error::database(format!(
                        "{done} of {messages} delivered, {left} left"
                    )));
                }
                let run = json!({
                    "naptime": naptime.unwrap_or("60s (default)"),
                    "repetition": repetition,
                    "per_second": done as f64 / wall,
                    "wall_ms": wall * 1000.0,
                });
                eprintln!("  naptime run: {run}");
                runs.push(run);
            }
        }
        set_naptime(url, None).await?;
        Ok(json!({ "messages": messages, "drainers": drainers, "runs": runs }))
    }

    #[derive(Clone, Copy)]
    struct Load {
        messages: u64,
        drainers: usize,
        rate: u64,
        most: Duration,
    }

    /// Times each call that carries a claim (with the settles riding along).
    /// A wrapper of its own, not `testing::FaultyDatabase` with an `Around`:
    /// `scripts/bench.sh` builds this file against the library before the
    /// claim floor too, which has neither.
    struct Timed {
        inner: Arc<dyn Database>,
        calls: Arc<Mutex<Vec<(f64, f64)>>>,
        started: Instant,
    }

    impl Timed {
        fn is_claim(statements: &[Statement]) -> bool {
            statements.iter().any(|s| s.sql().contains("SKIP LOCKED"))
        }
    }

    impl Database for Timed {
        fn dialect(&self) -> Dialect {
            self.inner.dialect()
        }

        fn run<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Outcome>> {
            self.inner.run(statement)
        }

        fn run_atomic<'a>(
            &'a self,
            statements: &'a [Statement],
        ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
            self.batch_atomic(statements)
        }

        fn query<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Rows>> {
            self.inner.query(statement)
        }

        fn execute<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<u64>> {
            self.inner.execute(statement)
        }

        fn batch_atomic<'a>(
            &'a self,
            statements: &'a [Statement],
        ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
            Box::pin(async move {
                let at = self.started.elapsed().as_secs_f64();
                let began = Instant::now();
                let result = self.inner.batch_atomic(statements).await;
                if Self::is_claim(statements) {
                    let ms = began.elapsed().as_secs_f64() * 1000.0;
                    self.calls
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((at, ms));
                }
                result
            })
        }
    }

    fn percentile(sorted: &[f64], p: f64) -> f64 {
        if sorted.is_empty() {
            return 0.0;
        }
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }

    /// `messages` enqueued at `rate` per second (a batch every 10 ms) while
    /// `drainers` drain them, at the server's default settings; with
    /// `hold`, a repeatable-read transaction holds its snapshot from
    /// `hold.0` for `hold.1`. Reports deliveries and backlog per second,
    /// claim-call latency per tenth of the run, and the table's size.
    async fn steady(url: &str, load: Load, hold: Option<(Duration, Duration)>) -> Result<Json> {
        set_naptime(url, None).await?;
        let table = "bench_claim_steady";
        let setup = fresh_outbox(url, table, 4).await?;
        let enqueued = Arc::new(AtomicU64::new(0));
        let delivered = Arc::new(AtomicU64::new(0));
        let producing = Arc::new(AtomicBool::new(true));
        let stop = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(Mutex::new(Vec::new()));
        let started = Instant::now();
        let producer = {
            let (outbox, enqueued, producing, stop) = (
                setup.clone(),
                enqueued.clone(),
                producing.clone(),
                stop.clone(),
            );
            tokio::spawn(async move {
                let per_tick = (load.rate / 100).max(1);
                let mut tick = tokio::time::interval(Duration::from_millis(10));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                let mut sent = 0;
                while sent < load.messages && !stop.load(Ordering::Relaxed) {
                    tick.tick().await;
                    let count = per_tick.min(load.messages - sent);
                    enqueue_many(&outbox, sent, count).await?;
                    sent += count;
                    enqueued.store(sent, Ordering::Relaxed);
                }
                producing.store(false, Ordering::Relaxed);
                Ok::<(), Error>(())
            })
        };
        let mut handles = Vec::new();
        for _ in 0..load.drainers {
            let inner: Arc<dyn Database> = Arc::new(PostgresDatabase::connect(url, 2).await?);
            let db: Arc<dyn Database> = Arc::new(Timed {
                inner,
                calls: calls.clone(),
                started,
            });
            let drainer = drainer(
                Outbox::new(db, table)?,
                delivered.clone(),
                Duration::from_secs(30),
            )?;
            let (delivered, producing, stop) = (delivered.clone(), producing.clone(), stop.clone());
            let total = load.messages;
            handles.push(tokio::spawn(async move {
                while delivered.load(Ordering::Relaxed) < total && !stop.load(Ordering::Relaxed) {
                    let report = drainer.drain().await;
                    if report.delivered == 0 {
                        if !producing.load(Ordering::Relaxed)
                            && delivered.load(Ordering::Relaxed) >= total
                        {
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }));
        }
        let holder = match hold {
            Some((from, length)) => {
                let client = PostgresDatabase::connect(url, 1).await?;
                Some(tokio::spawn(async move {
                    tokio::time::sleep(from).await;
                    let connection = client
                        .pool()
                        .get()
                        .await
                        .map_err(|e| Error::database(e.to_string()))?;
                    connection
                        .batch_execute(&format!(
                            "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM \"{table}\""
                        ))
                        .await
                        .map_err(|e| Error::database(e.to_string()))?;
                    tokio::time::sleep(length).await;
                    connection
                        .batch_execute("COMMIT")
                        .await
                        .map_err(|e| Error::database(e.to_string()))?;
                    Ok::<(), Error>(())
                }))
            }
            None => None,
        };
        // One sample a second until everything is delivered.
        let mut series = Vec::new();
        let mut last = 0;
        let mut idle = 0;
        while delivered.load(Ordering::Relaxed) < load.messages && started.elapsed() < load.most {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = delivered.load(Ordering::Relaxed);
            idle = if now == last { idle + 1 } else { 0 };
            if idle >= 30 {
                return Err(Error::database(format!(
                    "nothing delivered for 30 s: {now} of {} delivered, {} enqueued",
                    load.messages,
                    enqueued.load(Ordering::Relaxed)
                )));
            }
            series.push(json!({
                "t": series.len() + 1,
                "delivered": now - last,
                "backlog": enqueued.load(Ordering::Relaxed).saturating_sub(now),
            }));
            last = now;
        }
        let wall = started.elapsed().as_secs_f64();
        let finished = delivered.load(Ordering::Relaxed) >= load.messages;
        stop.store(true, Ordering::Relaxed);
        for handle in handles {
            handle.await.map_err(|e| Error::database(e.to_string()))?;
        }
        producer
            .await
            .map_err(|e| Error::database(e.to_string()))??;
        if let Some(holder) = holder {
            holder.await.map_err(|e| Error::database(e.to_string()))??;
        }
        let sizes = setup
            .database()
            .query(&Statement::new(
                format!(
                    "SELECT pg_relation_size('\"{table}\"') AS heap, \
                     pg_indexes_size('\"{table}\"') AS indexes, \
                     pg_total_relation_size('\"{table}\"') AS total, \
                     (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = '{table}') AS dead, \
                     (SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = '{table}') AS vacuums"
                ),
                vec![],
            ))
            .await?;
        let size = sizes
            .iter()
            .next()
            .ok_or_else(|| Error::database("no size row"))?;
        let mut calls = calls.lock().unwrap_or_else(|e| e.into_inner()).clone();
        calls.sort_by(|a, b| a.0.total_cmp(&b.0));
        let tenths: Vec<Json> = (0..10)
            .map(|tenth| {
                let from = wall * tenth as f64 / 10.0;
                let to = wall * (tenth + 1) as f64 / 10.0;
                let mut ms: Vec<f64> = calls
                    .iter()
                    .filter(|(at, _)| *at >= from && *at < to)
                    .map(|(_, ms)| *ms)
                    .collect();
                ms.sort_by(f64::total_cmp);
                json!({
                    "tenth": tenth + 1,
                    "calls": ms.len(),
                    "p50_ms": percentile(&ms, 50.0),
                    "p99_ms": percentile(&ms, 99.0),
                })
            })
            .collect();
        let done = delivered.load(Ordering::Relaxed);
        drop_outbox(&setup).await?;
        Ok(json!({
            "messages": load.messages,
            "delivered": done,
            "finished": finished,
            "enqueued": enqueued.load(Ordering::Relaxed),
            "drainers": load.drainers,
            "rate": load.rate,
            "hold_from_s": hold.map(|(from, _)| from.as_secs()),
            "hold_for_s": hold.map(|(_, length)| length.as_secs()),
            "wall_ms": wall * 1000.0,
            "series": series,
            "tenths": tenths,
            "heap_bytes": size.get::<i64>("heap")?,
            "index_bytes": size.get::<i64>("indexes")?,
            "total_bytes": size.get::<i64>("total")?,
            "dead_tuples": size.get::<Option<i64>>("dead")?,
            "autovacuums": size.get::<Option<i64>>("vacuums")?,
        }))
    }
}
