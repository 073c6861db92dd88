//! Runs the adapter conformance suite against a real Postgres server (see
//! `scripts/postgres.sh`): every case in one fresh database, each reported
//! as its own test.

#[path = "support/postgres.rs"]
mod postgres;

use std::sync::Arc;

use libtest_mimic::{Arguments, Failed, Trial};
use workers_outbox::conformance::{Capabilities, cases};

fn main() {
    let arguments = Arguments::from_args();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let database = runtime.block_on(postgres::TestDatabase::create("conformance"));
    let db = Arc::new(runtime.block_on(database.connect(8)));
    let handle = runtime.handle().clone();
    let trials = cases()
        .into_iter()
        .map(|case| {
            let db = db.clone();
            let handle = handle.clone();
            Trial::test(case.name, move || {
                // Cases are not `Send` (they also run in workerd): each runs
                // on a thread of its own, its database calls on the runtime.
                let local = tokio::task::LocalSet::new();
                handle
                    .block_on(local.run_until(case.run(db, Capabilities::POSTGRES)))
                    .map_err(|failure| Failed::from(failure.to_string()))
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&arguments, trials);
    drop(db);
    runtime.block_on(database.drop_now());
    conclusion.exit();
}
