//! Runs the adapter conformance suite against native SQLite: each case on a
//! fresh in-memory database, each reported as its own test.

use std::sync::Arc;

use libtest_mimic::{Arguments, Failed, Trial};
use workers_outbox::SqliteDatabase;
use workers_outbox::conformance::{Capabilities, cases};

fn main() {
    let arguments = Arguments::from_args();
    let trials = cases()
        .into_iter()
        .map(|case| {
            Trial::test(case.name, move || {
                let db = Arc::new(SqliteDatabase::open_in_memory().map_err(|e| e.to_string())?);
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .map_err(|e| e.to_string())?;
                runtime
                    .block_on(case.run(db, Capabilities::SQLITE))
                    .map_err(|failure| Failed::from(failure.to_string()))
            })
        })
        .collect();
    libtest_mimic::run(&arguments, trials).exit();
}
