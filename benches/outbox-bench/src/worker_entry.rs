//! The benchmark Worker: one route per scenario, each run on the D1 binding
//! `DB`, answering JSON.

// The D1 handle is shared through `Arc` to fit the crate's one `Send` story;
// nothing crosses threads on wasm32.
#![allow(clippy::arc_with_non_send_sync)]

use std::sync::Arc;
use std::time::Duration;

use worker::{Context, Env, Request, Response, Result, event};
use workers_outbox::{D1Database, WorkersTimer};

use crate::latency::Mix;
use crate::scenarios::{Algorithm, Bench, Kind, Meter, Probe};
use crate::wakeups;
use crate::worker_glue::{DelayingSink, answer};

struct D1Probe(Arc<D1Database>);

impl Probe for D1Probe {
    fn meter(&self) -> Meter {
        let usage = self.0.usage();
        Meter {
            calls: usage.calls,
            statements: usage.statements,
            rows_read: Some(usage.rows_read),
            rows_written: Some(usage.rows_written),
        }
    }

    fn now_ms(&self) -> f64 {
        js_sys::Date::now()
    }
}

#[event(fetch)]
async fn fetch(request: Request, env: Env, _ctx: Context) -> Result<Response> {
    let d1 = Arc::new(D1Database::new(env.d1("DB")?));
    let bench = Bench {
        db: d1.clone(),
        probe: Arc::new(D1Probe(d1)),
        timer: Arc::new(WorkersTimer),
    };
    let url = request.url()?;
    let param = |name: &str| {
        url.query_pairs()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
            .unwrap_or_default()
    };
    let number = |name: &str| param(name).parse::<u32>().unwrap_or(0);
    let algorithm = Algorithm::parse(&param("algo")).unwrap_or(Algorithm::Ours);
    if let Some(rest) = url.path().strip_prefix("/wake/") {
        let name = rest.split('/').next().unwrap_or_default();
        let stub = env.durable_object("WAKE")?.id_from_name(name)?.get_stub()?;
        return stub.fetch_with_str(url.as_str()).await;
    }
    if let Some(route) = url.path().strip_prefix("/cron/") {
        return cron(route, &url, d1_outbox(&bench)).await;
    }
    match url.path() {
        "/reset" => answer(bench.reset().await.map(|()| "reset")),
        "/seed" => match Kind::parse(&param("kind")) {
            Some(kind) => answer(
                bench
                    .seed(algorithm, kind, u64::from(number("count")))
                    .await
                    .map(|()| "seeded"),
            ),
            None => Response::error("kind must be due, future, dead or stuck", 400),
        },
        "/drain" => answer(
            bench
                .drain(
                    algorithm,
                    number("batch"),
                    number("max_calls"),
                    number("max_messages"),
                )
                .await,
        ),
        "/claims" => answer(
            bench
                .claims(algorithm, number("batch"), number("claims"))
                .await,
        ),
        "/signup" => answer(bench.signup(number("iterations")).await),
        "/cost" => answer(
            bench
                .cost(param("rollups") == "true", number("messages"))
                .await,
        ),
        "/cost_original" => answer(bench.original_cost(number("messages")).await),
        "/sealing" => answer(
            bench
                .sealing(
                    param("sealed") == "true",
                    param("subjects") == "true",
                    number("messages"),
                )
                .await,
        ),
        "/fan_out" => answer(
            bench
                .fan_out(number("endpoints"), number("iterations"))
                .await,
        ),
        "/failing_drain" => answer(
            bench
                .failing_drain(param("logged") == "true", number("messages"))
                .await,
        ),
        "/console" => answer(bench.console_reads().await),
        "/alert_sweeps" => answer(bench.alert_sweeps().await),
        "/latency" => {
            let mix = Mix {
                scale: param("scale").parse().unwrap_or(0.1),
                timeout: Duration::from_millis(u64::from(number("timeout_ms").max(1))),
            };
            let concurrency = usize::try_from(number("concurrency").max(1)).unwrap_or(6);
            answer(
                bench
                    .latency(
                        algorithm,
                        u64::from(number("count")),
                        concurrency,
                        mix,
                        Arc::new(DelayingSink),
                    )
                    .await,
            )
        }
        _ => Response::error("no such scenario", 404),
    }
}

/// The D1 outbox of the wake-up comparison.
fn d1_outbox(
    bench: &Bench,
) -> (
    Arc<dyn workers_outbox::Database>,
    workers_outbox::Result<workers_outbox::Outbox>,
) {
    let db = bench.db.clone();
    let outbox = workers_outbox::Outbox::new(db.clone(), "cron_outbox");
    (db, outbox)
}

/// The D1 side of the wake-up comparison (see `wakeups.rs`).
async fn cron(
    route: &str,
    url: &worker::Url,
    (db, outbox): (
        Arc<dyn workers_outbox::Database>,
        workers_outbox::Result<workers_outbox::Outbox>,
    ),
) -> Result<Response> {
    use workers_outbox::{DrainLimits, Drainer, Statement};
    let outbox = match outbox {
        Ok(outbox) => outbox,
        Err(error) => return answer::<()>(Err(error)),
    };
    match route {
        "reset" => {
            let result = async {
                for table in ["cron_outbox", "deliveries"] {
                    db.execute(&Statement::new(
                        format!("DROP TABLE IF EXISTS {table}"),
                        Vec::new(),
                    ))
                    .await?;
                }
                wakeups::create_tables(&*db, &outbox).await
            }
            .await;
            answer(result.map(|()| "reset"))
        }
        "seed" => answer(
            wakeups::Seed::from_url(url)
                .enqueue(&db, &outbox)
                .await
                .map(|()| "seeded"),
        ),
        "drain" => {
            let recorder = wakeups::Recorder {
                db: db.clone(),
                sink: Arc::new(DelayingSink),
            };
            let drainer = Drainer::builder(outbox, recorder)
                .limits(DrainLimits::scheduled())
                .build();
            match drainer {
                Ok(drainer) => Response::from_json(&drainer.drain().await),
                Err(error) => answer::<()>(Err(error)),
            }
        }
        "counts" => answer(wakeups::delivery_counts(&*db).await),
        _ => answer(wakeups::deliveries(&*db).await),
    }
}
