//! Concurrent drainers on one backlog: Postgres (`FOR UPDATE SKIP LOCKED`)
//! beside SQLite (a file in WAL mode, writers serialized), 1, 2, 4 and 8
//! drainers, each with connections of its own, no-op delivery, batch 100.
//! Prints one JSON document for `benches/drainers.mjs`.
//!
//! `outbox-bench-drainers <messages> <postgres url> [drainer counts…]`

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
    use std::collections::HashSet;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use serde_json::{Value as Json, json};
    use workers_outbox::drain::{DrainReport, deliver_fn};
    use workers_outbox::testing::CountingDatabase;
    use workers_outbox::{
        ClaimedMessage, Database, Delivery, DrainLimits, Drainer, Error, Message, Outbox,
        PostgresDatabase, Result, SqliteDatabase, Statement,
    };

    /// Who delivered what: a message delivered while it was already in
    /// flight elsewhere is an overlap; any second delivery a duplicate.
    #[derive(Default)]
    struct Ledger {
        in_flight: HashSet<String>,
        seen: HashSet<String>,
        overlaps: u64,
        duplicates: u64,
    }

    #[derive(Clone, Copy)]
    enum Engine {
        Postgres,
        Sqlite,
    }

    impl Engine {
        fn name(self) -> &'static str {
            match self {
                Engine::Postgres => "postgres",
                Engine::Sqlite => "sqlite",
            }
        }
    }

    pub(crate) fn run() -> Result<()> {
        let mut args = std::env::args().skip(1);
        let messages: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
        let url = args
            .next()
            .unwrap_or_else(|| "postgres://postgres@127.0.0.1:54329/postgres".to_owned());
        let mut counts: Vec<usize> = args.filter_map(|a| a.parse().ok()).collect();
        if counts.is_empty() {
            counts = vec![1, 2, 4, 8];
        }
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Error::database(e.to_string()))?;
        // `OUTBOX_BENCH_ROLLUP_PAIRS=n`: Postgres with 4 drainers, rollups on
        // and off, a warm-up of each and `n` pairs, the order swapped every
        // pair (at the server's setting of autovacuum's naptime).
        if let Some(pairs) = std::env::var("OUTBOX_BENCH_ROLLUP_PAIRS")
            .ok()
            .and_then(|pairs| pairs.parse::<usize>().ok())
        {
            let drainers: usize = std::env::var("OUTBOX_BENCH_ROLLUP_DRAINERS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(4);
            let pairs_run = runtime.block_on(async {
                for rollups in [true, false] {
                    one_run(Engine::Postgres, &url, messages, drainers, rollups).await?;
                }
                let mut pairs_run = Vec::with_capacity(pairs);
                for pair in 0..pairs {
                    let order = if pair % 2 == 0 {
                        [true, false]
                    } else {
                        [false, true]
                    };
                    let mut runs = serde_json::Map::new();
                    for rollups in order {
                        let run =
                            one_run(Engine::Postgres, &url, messages, drainers, rollups).await?;
                        eprintln!("  postgres × {drainers}, rollups {rollups}: {run}");
                        runs.insert(if rollups { "on" } else { "off" }.to_owned(), run);
                    }
                    pairs_run.push(Json::Object(runs));
                }
                Ok::<_, Error>(pairs_run)
            })?;
            println!(
                "{}",
                json!({ "messages": messages, "drainers": drainers, "pairs": pairs_run })
            );
            return Ok(());
        }
        let mut runs = Vec::new();
        // Postgres twice: with the server's default autovacuum naptime, and
        // with the 1 s a queue-heavy server is tuned to (the outbox table's
        // own autovacuum settings are in its schema).
        let postgres = runtime.block_on(async {
            for naptime in [None, Some("1s")] {
                set_naptime(&url, naptime).await?;
                for &drainers in &counts {
                    let mut run = one_run(Engine::Postgres, &url, messages, drainers, true).await?;
                    run["naptime"] = json!(naptime.unwrap_or("60s (default)"));
                    eprintln!("  postgres × {drainers}: {run}");
                    runs.push(run);
                }
            }
            Ok::<(), Error>(())
        });
        // The server's own setting again, whatever happened.
        runtime.block_on(set_naptime(&url, None))?;
        postgres?;
        for &drainers in &counts {
            let run = runtime.block_on(one_run(Engine::Sqlite, &url, messages, drainers, true))?;
            eprintln!("  sqlite × {drainers}: {run}");
            runs.push(run);
        }
        println!("{}", json!({ "messages": messages, "runs": runs }));
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

    /// A handle of its own (its own connections) on the run's database.
    async fn connect(
        engine: Engine,
        url: &str,
        file: &std::path::Path,
    ) -> Result<Arc<dyn Database>> {
        Ok(match engine {
            Engine::Postgres => Arc::new(PostgresDatabase::connect(url, 2).await?),
            Engine::Sqlite => Arc::new(SqliteDatabase::open(file)?),
        })
    }

    async fn one_run(
        engine: Engine,
        url: &str,
        messages: u32,
        drainers: usize,
        rollups: bool,
    ) -> Result<Json> {
        let table = format!("bench_drainers_{drainers}");
        let file = std::env::temp_dir().join(format!(
            "outbox-bench-drainers-{}-{drainers}.sqlite",
            std::process::id()
        ));
        let setup = connect(engine, url, &file).await?;
        setup
            .execute(&Statement::new(
                format!("DROP TABLE IF EXISTS \"{table}\""),
                vec![],
            ))
            .await?;
        let outbox = Outbox::new(setup.clone(), &table)?;
        outbox.create_schema().await?;
        let fill = Instant::now();
        let mut statements = Vec::with_capacity(1000);
        for n in 0..messages {
            let message = Message::raw_json("bench", format!("{{\"n\":{n}}}"));
            statements.extend_from_slice(outbox.enqueue(message)?.statements());
            if statements.len() == 1000 {
                setup.batch_atomic(&statements).await?;
                statements.clear();
            }
        }
        setup.batch_atomic(&statements).await?;
        let fill_ms = fill.elapsed().as_secs_f64() * 1000.0;

        let ledger = Arc::new(Mutex::new(Ledger::default()));
        let mut handles = Vec::new();
        let mut meters = Vec::new();
        for _ in 0..drainers {
            let counting = CountingDatabase::new(connect(engine, url, &file).await?);
            meters.push(counting.clone());
            let db: Arc<dyn Database> = Arc::new(counting);
            let outbox = Outbox::builder(db, &table).rollups(rollups).build()?;
            let ledger = ledger.clone();
            let deliver = deliver_fn(move |message: ClaimedMessage| {
                let ledger = ledger.clone();
                async move {
                    {
                        let mut ledger = ledger.lock().unwrap_or_else(|e| e.into_inner());
                        if !ledger.in_flight.insert(message.id.clone()) {
                            ledger.overlaps += 1;
                        }
                        if !ledger.seen.insert(message.id.clone()) {
                            ledger.duplicates += 1;
                        }
                    }
                    tokio::task::yield_now().await;
                    ledger
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .in_flight
                        .remove(&message.id);
                    Delivery::Delivered
                }
            });
            let drainer = Drainer::builder(outbox, deliver)
                .limits(DrainLimits {
                    batch_size: 100,
                    max_queries: u32::MAX,
                    max_messages: u32::MAX,
                    deadline: Duration::from_secs(600),
                    ..DrainLimits::scheduled()
                })
                .build()?;
            handles.push(drainer);
        }
        let started = Instant::now();
        let tasks: Vec<_> = handles
            .into_iter()
            .map(|drainer| tokio::spawn(async move { drainer.drain().await }))
            .collect();
        let mut reports: Vec<DrainReport> = Vec::new();
        for task in tasks {
            reports.push(task.await.map_err(|e| Error::database(e.to_string()))?);
        }
        let wall_ms = started.elapsed().as_secs_f64() * 1000.0;
        let left = outbox.stats().await?.pending;
        let delivered: u64 = reports.iter().map(|r| u64::from(r.delivered)).sum();
        let calls: u64 = meters.iter().map(|m| m.counts().round_trips).sum();
        let statements: u64 = meters.iter().map(|m| m.counts().statements).sum();
        let (overlaps, duplicates) = {
            let ledger = ledger.lock().unwrap_or_else(|e| e.into_inner());
            (ledger.overlaps, ledger.duplicates)
        };
        setup
            .execute(&Statement::new(
                format!("DROP TABLE IF EXISTS \"{table}\""),
                vec![],
            ))
            .await?;
        drop(setup);
        if matches!(engine, Engine::Sqlite) {
            for suffix in ["", "-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
            }
        }
        if overlaps > 0 || duplicates > 0 || left > 0 || delivered != u64::from(messages) {
            return Err(Error::database(format!(
                "{} × {drainers}: {delivered} of {messages} delivered, {overlaps} overlaps, \
                     {duplicates} duplicates, {left} left",
                engine.name()
            )));
        }
        Ok(json!({
            "engine": engine.name(),
            "rollups": rollups,
            "drainers": drainers,
            "messages": messages,
            "fill_ms": fill_ms,
            "wall_ms": wall_ms,
            "delivered": delivered,
            "per_second": delivered as f64 / wall_ms * 1000.0,
            "calls": calls,
            "statements": statements,
            "calls_per_message": calls as f64 / delivered.max(1) as f64,
            "overlaps": overlaps,
            "duplicates": duplicates,
            "left": left,
            "per_drainer": reports.iter().map(|r| r.delivered).collect::<Vec<_>>(),
            "stops": reports.iter().map(|r| format!("{:?}", r.stopped)).collect::<Vec<_>>(),
        }))
    }
}
