//! The benchmark scenarios on native SQLite (a file, WAL mode): prints one
//! JSON document for `benches/run.mjs` to merge with the D1 figures.
//!
//! `outbox-bench-native [messages] [largest table] [rollup messages] [rollup
//! pairs]` (defaults 10000, 1000000, 50000, 7).

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
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use outbox_bench::latency::{Mix, Sink};
    use outbox_bench::scenarios::{Algorithm, Bench, Kind, Meter, Probe};
    use serde_json::{Value as Json, json};
    use workers_outbox::future::BoxFuture;
    use workers_outbox::testing::CountingDatabase;
    use workers_outbox::{Database, Result, SqliteDatabase, TokioTimer};

    struct SqliteProbe {
        counting: CountingDatabase<Arc<dyn Database>>,
        origin: Instant,
    }

    impl Probe for SqliteProbe {
        fn meter(&self) -> Meter {
            let counts = self.counting.counts();
            Meter {
                calls: counts.round_trips,
                statements: counts.statements,
                rows_read: None,
                rows_written: None,
            }
        }

        fn now_ms(&self) -> f64 {
            self.origin.elapsed().as_secs_f64() * 1000.0
        }
    }

    pub(crate) fn run() -> Result<()> {
        let mut args = std::env::args().skip(1);
        let messages: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10_000);
        let largest: u64 = args
            .next()
            .and_then(|a| a.parse().ok())
            .unwrap_or(1_000_000);
        let rollups = RollupRuns {
            messages: args.next().and_then(|a| a.parse().ok()).unwrap_or(50_000),
            pairs: args.next().and_then(|a| a.parse().ok()).unwrap_or(7),
        };
        let drain_repetitions: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
        let path = std::env::temp_dir().join(format!("outbox-bench-{}.sqlite", std::process::id()));
        let sqlite: Arc<dyn Database> = Arc::new(SqliteDatabase::open(&path)?);
        let counting = CountingDatabase::new(sqlite);
        let bench = Bench {
            db: Arc::new(counting.clone()),
            probe: Arc::new(SqliteProbe {
                counting,
                origin: Instant::now(),
            }),
            timer: Arc::new(TokioTimer),
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| workers_outbox::Error::database(e.to_string()))?;
        let result = runtime.block_on(scenarios(
            &bench,
            messages,
            largest,
            rollups,
            drain_repetitions,
        ));
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
        println!("{}", result?);
        Ok(())
    }

    /// How rollups on and off are compared: drains of `messages`, `pairs`
    /// runs of each.
    #[derive(Debug, Clone, Copy)]
    struct RollupRuns {
        messages: u64,
        pairs: u32,
    }

    /// Rollups on and off, side by side: a warm-up run of each (not
    /// recorded), then `pairs` runs each, the order swapped every
    /// repetition so that a drift over the runs favours neither.
    async fn rollups_on_and_off(bench: &Bench, runs: RollupRuns) -> Result<Vec<Json>> {
        let RollupRuns { messages, pairs } = runs;
        for algorithm in [Algorithm::Ours, Algorithm::OursNoRollups] {
            bench.reset().await?;
            bench.seed(algorithm, Kind::Due, messages).await?;
            bench.drain(algorithm, 100, u32::MAX, u32::MAX).await?;
        }
        let mut rollups = Vec::new();
        for repetition in 0..pairs {
            let mut order = [Algorithm::Ours, Algorithm::OursNoRollups];
            if repetition % 2 == 1 {
                order.reverse();
            }
            for algorithm in order {
                bench.reset().await?;
                bench.seed(algorithm, Kind::Due, messages).await?;
                let run = bench.drain(algorithm, 100, u32::MAX, u32::MAX).await?;
                eprintln!(
                    "sqlite drain {} (run {repetition}): {} msgs in {:.0} ms",
                    name(algorithm),
                    run.messages,
                    run.elapsed_ms
                );
                rollups.push(json!({ "algo": name(algorithm), "run": run }));
            }
        }
        Ok(rollups)
    }

    /// Sealed and clear sign-up mails side by side, with subjects and
    /// without: a warm-up run of each, then `pairs` runs of each, the order
    /// swapped every repetition.
    async fn sealed_and_clear(bench: &Bench, messages: u32, pairs: u32) -> Result<Vec<Json>> {
        let mut runs = Vec::new();
        for subjects in [true, false] {
            for sealed in [true, false] {
                bench.sealing(sealed, subjects, messages).await?;
            }
            for repetition in 0..pairs {
                let mut order = [true, false];
                if repetition % 2 == 1 {
                    order.reverse();
                }
                for sealed in order {
                    let run = bench.sealing(sealed, subjects, messages).await?;
                    eprintln!(
                        "sqlite sealing {sealed}, subjects {subjects} (run {repetition}): immediate {:.0} ms, enqueue {:.0} ms, drain {:.0} ms",
                        run.immediate.ms, run.enqueue.ms, run.drain.ms
                    );
                    runs.push(json!({ "repetition": repetition, "run": run }));
                }
            }
        }
        Ok(runs)
    }

    async fn scenarios(
        bench: &Bench,
        messages: u64,
        largest: u64,
        rollup_runs: RollupRuns,
        drain_repetitions: u32,
    ) -> Result<Json> {
        // `OUTBOX_BENCH_ONLY=rollups`: only rollups on and off, to iterate on them.
        if std::env::var("OUTBOX_BENCH_ONLY").is_ok_and(|only| only == "rollups") {
            return Ok(json!({ "rollups": rollups_on_and_off(bench, rollup_runs).await? }));
        }
        let sealing_messages = u32::try_from(messages).unwrap_or(u32::MAX);
        // `OUTBOX_BENCH_ONLY=sealing`: only sealed against clear.
        if std::env::var("OUTBOX_BENCH_ONLY").is_ok_and(|only| only == "sealing") {
            let runs = sealed_and_clear(bench, sealing_messages, rollup_runs.pairs).await?;
            return Ok(json!({ "sealing": runs }));
        }
        // Every pair `drain_repetitions` times, the order swapped every
        // repetition, so that a ratio's spread can be told from noise.
        let mut drains = Vec::new();
        for repetition in 0..drain_repetitions {
            let mut order = [Algorithm::Ours, Algorithm::Baseline];
            if repetition % 2 == 1 {
                order.reverse();
            }
            for algorithm in order {
                for batch in [1u32, 10, 50, 100] {
                    bench.reset().await?;
                    bench.seed(algorithm, Kind::Due, messages).await?;
                    let run = bench.drain(algorithm, batch, u32::MAX, u32::MAX).await?;
                    eprintln!(
                        "sqlite drain {} batch {batch} (run {repetition}): {} msgs in {:.0} ms",
                        name(algorithm),
                        run.messages,
                        run.elapsed_ms
                    );
                    drains.push(json!({
                        "algo": name(algorithm),
                        "batch": batch,
                        "repetition": repetition,
                        "run": run,
                    }));
                }
            }
        }
        let mut claims = Vec::new();
        let mut rows = 1_000;
        while rows <= largest {
            for algorithm in [Algorithm::Ours, Algorithm::Baseline] {
                bench.reset().await?;
                bench.seed(algorithm, Kind::Due, 500).await?;
                bench
                    .seed(algorithm, Kind::Future, (rows - 500) / 2)
                    .await?;
                bench
                    .seed(algorithm, Kind::Dead, rows - 500 - (rows - 500) / 2)
                    .await?;
                let run = bench.claims(algorithm, 100, 5).await?;
                eprintln!(
                    "sqlite claim {} with {rows} rows: {:.2} ms",
                    name(algorithm),
                    run.mean_ms
                );
                claims.push(json!({ "algo": name(algorithm), "rows": rows, "run": run }));
            }
            rows *= 10;
        }
        let mut loops = Vec::new();
        for algorithm in [Algorithm::Ours, Algorithm::BatchLoop] {
            bench.reset().await?;
            bench.seed(algorithm, Kind::Due, messages).await?;
            let run = bench.drain(algorithm, 100, u32::MAX, u32::MAX).await?;
            eprintln!(
                "sqlite no-op drain {}: {} calls",
                name(algorithm),
                run.meter.calls
            );
            loops.push(json!({ "algo": name(algorithm), "run": run }));
        }
        let rollups = rollups_on_and_off(bench, rollup_runs).await?;
        let sealing = sealed_and_clear(bench, sealing_messages, rollup_runs.pairs).await?;
        let mix = Mix {
            scale: 0.1,
            timeout: Duration::from_secs(1),
        };
        let mut latency = Vec::new();
        for algorithm in [Algorithm::Ours, Algorithm::BatchLoop] {
            let run = bench
                .latency(algorithm, 1_500, 6, mix, Arc::new(Sleep))
                .await?;
            eprintln!(
                "sqlite latency mix {}: {:.1}/s of an ideal {:.1}/s",
                run.algo, run.per_second, run.ideal_per_second
            );
            latency.push(run);
        }
        Ok(json!({
            "drain": drains,
            "claim": claims,
            "loop": loops,
            "latency": latency,
            "rollups": rollups,
            "sealing": sealing,
        }))
    }

    fn name(algorithm: Algorithm) -> &'static str {
        match algorithm {
            Algorithm::Ours => "ours",
            Algorithm::OursNoRollups => "ours-no-rollups",
            Algorithm::Baseline => "baseline",
            Algorithm::BatchLoop => "batch-loop",
        }
    }

    /// The native sink: a tokio sleep.
    struct Sleep;

    impl Sink for Sleep {
        fn visit(&self, ms: f64) -> BoxFuture<'static, ()> {
            Box::pin(tokio::time::sleep(Duration::from_secs_f64(ms / 1000.0)))
        }
    }
}
