//! What only Postgres needs showing: its migrations, and the outbox under
//! real concurrency (many connections at once, which SQLite serializes).
//! Needs the test server (`bash scripts/postgres.sh start`).

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used)]

#[path = "support/moved_rollups.rs"]
mod moved_rollups;
#[path = "support/postgres.rs"]
mod postgres;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use postgres::TestDatabase;
use workers_outbox::drain::deliver_fn;
use workers_outbox::subject::{erase_subject, export_subject};
use workers_outbox::testing::{Around, FaultyDatabase};
use workers_outbox::{
    Batch, Database, Delivery, DrainLimits, Drainer, Error, Inbox, Message, Outbox,
    PostgresDatabase, RetryAdvice, Statement,
};

const LEASE: Duration = Duration::from_secs(30);

/// Every column, constraint and index of `table`, in words that compare.
async fn structure(db: &PostgresDatabase, table: &str) -> Vec<String> {
    let mut facts = Vec::new();
    for sql in [
        "SELECT column_name || ' ' || data_type || ' nullable=' || is_nullable \
         || ' default=' || coalesce(column_default, '-') || ' collation=' \
         || coalesce(collation_name, '-') AS fact \
         FROM information_schema.columns WHERE table_name = $1 ORDER BY column_name",
        "SELECT 'constraint ' || conname || ' ' || pg_get_constraintdef(c.oid) AS fact \
         FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid \
         WHERE t.relname = $1 ORDER BY conname",
        "SELECT 'index ' || indexdef AS fact FROM pg_indexes WHERE tablename = $1 ORDER BY indexname",
        "SELECT 'sequence ' || sequencename || ' ' || data_type || ' min=' || min_value \
         || ' start=' || start_value AS fact FROM pg_sequences \
         WHERE sequencename LIKE $1 || '\\_claim\\_%' ORDER BY sequencename",
        "SELECT 'option ' || option AS fact FROM pg_class c, unnest(c.reloptions) AS option \
         WHERE c.relname = $1 AND c.relkind = 'r' ORDER BY option",
        "SELECT 'owned ' || s.relname || ' by ' || a.attname AS fact FROM pg_depend d \
         JOIN pg_class s ON s.oid = d.objid JOIN pg_class t ON t.oid = d.refobjid \
         JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = d.refobjsubid \
         WHERE s.relkind = 'S' AND d.deptype = 'a' AND t.relname = $1 ORDER BY s.relname",
        "SELECT 'trigger ' || pg_get_triggerdef(g.oid) AS fact FROM pg_trigger g \
         JOIN pg_class t ON t.oid = g.tgrelid WHERE t.relname = $1 AND NOT g.tgisinternal \
         ORDER BY g.tgname",
        "SELECT 'function ' || pg_get_functiondef(p.oid) AS fact FROM pg_proc p \
         WHERE p.proname LIKE $1 || '\\_%' ORDER BY p.proname",
    ] {
        let rows = db
            .query(&Statement::new(sql, vec![table.into()]))
            .await
            .unwrap();
        facts.extend(rows.iter().map(|row| row.get::<String>("fact").unwrap()));
    }
    facts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_migrations_build_the_rendered_schema() {
    let migrated_database = TestDatabase::create("migrated").await;
    let migrated = migrated_database.connect(1).await;
    assert!(
        apply_migrations(&migrated, |_| true).await > 0,
        "migrations/postgres/ is empty"
    );
    let fresh_database = TestDatabase::create("rendered").await;
    let fresh: Arc<dyn Database> = Arc::new(fresh_database.connect(1).await);
    Outbox::new(fresh.clone(), "outbox")
        .unwrap()
        .create_schema()
        .await
        .unwrap();
    Inbox::new(fresh.clone(), "inbox")
        .unwrap()
        .create_schema()
        .await
        .unwrap();
    let fresh_handle = fresh_database.connect(1).await;
    for table in [
        "outbox",
        "outbox_topics",
        "outbox_paused",
        "inbox",
        "erased_subjects",
        "outbox_keys",
        "outbox_periods",
    ] {
        let expected = structure(&fresh_handle, table).await;
        assert!(expected.len() > 3, "{table}: {expected:?}");
        assert_eq!(
            structure(&migrated, table).await,
            expected,
            "migrations/postgres/ builds {table} differently from the library's schema"
        );
    }
    drop((migrated, fresh, fresh_handle));
    migrated_database.drop_now().await;
    fresh_database.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rollup_periods_migration_moves_0_5s_counts_into_one_row_per_period_and_topic() {
    let database = TestDatabase::create("periods").await;
    let handle = database.connect(1).await;
    apply_migrations(&handle, |file| !file.contains("rollup_periods")).await;
    for (start, metric, le, count) in moved_rollups::OLD_ROWS {
        handle
            .execute(&Statement::new(
                "INSERT INTO \"outbox_rollups\" (period_ms, period_start, topic, metric, le, count) \
                 VALUES (60000, $1, 'mail', $2, $3, $4)",
                vec![start.into(), metric.into(), le.into(), count.into()],
            ))
            .await
            .unwrap();
    }
    assert_eq!(
        apply_migrations(&handle, |file| file.contains("rollup_periods")).await,
        1
    );
    let db: Arc<dyn Database> = Arc::new(database.connect(1).await);
    let outbox = Outbox::new(db, "outbox").unwrap();
    moved_rollups::assert_moved(&outbox).await;
    drop((handle, outbox));
    database.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_schema_upgrades_an_outbox_an_earlier_release_created() {
    let database = TestDatabase::create("upgraded").await;
    let handle = database.connect(1).await;
    // The migrations before trace context: the 0.4 and early 0.5 tables.
    apply_migrations(&handle, |file| !file.contains("trace_context")).await;
    let db: Arc<dyn Database> = Arc::new(database.connect(1).await);
    let outbox = Outbox::new(db, "outbox").unwrap();
    outbox.create_schema().await.unwrap();
    let trace = workers_outbox::trace::TraceContext::parse(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        None,
    )
    .unwrap();
    outbox
        .enqueue_alone(workers_outbox::Message::raw_json("mail", "{}").trace(trace.clone()))
        .await
        .unwrap();
    let claimed = outbox.claim(1, Duration::from_secs(30)).await.unwrap();
    assert_eq!(claimed.messages[0].trace, Some(trace));
    drop((handle, outbox));
    database.drop_now().await;
}

/// The function that adds a transaction's counts adds each count to the
/// column of its index, in the table's column order, reads and clears
/// what the transaction stashed, counts the claim's dead rows, and refuses
/// an index that names no column.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_add_counts_function_adds_each_index_to_its_column_counts_claim_deaths_and_refuses_unknown_columns()
 {
    let database = TestDatabase::create("add_counts").await;
    let db = database.connect(1).await;
    let outbox = Outbox::new(Arc::new(database.connect(1).await), "outbox").unwrap();
    outbox.create_schema().await.unwrap();
    let columns: Vec<String> = db
        .query(&Statement::new(
            "SELECT column_name FROM information_schema.columns \
             WHERE table_name = 'outbox_periods' ORDER BY ordinal_position OFFSET 3",
            vec![],
        ))
        .await
        .unwrap()
        .iter()
        .map(|row| row.get::<String>("column_name").unwrap())
        .collect();
    assert_eq!(columns.len(), 66);
    // Column k (from 0) counted k + 1 times: half bound, half stashed.
    let entry = |k: usize| format!(r#"[60000,"t",{k},{}]"#, k + 1);
    let bound: Vec<String> = (0..33).map(entry).collect();
    let stashed: Vec<String> = (33..66).map(entry).collect();
    let stash = "workers_outbox.rollups_6f7574626f78";
    let add = |counted: String| {
        Statement::new(
            "SELECT \"outbox_add_counts\"(CAST($1 AS JSONB), NULL, NULL, NULL) AS added",
            vec![counted.into()],
        )
    };
    let outcomes = db
        .run_atomic(&[
            Statement::new(
                "SELECT set_config($1, $2, true) AS stashed",
                vec![stash.into(), format!("[{}]", stashed.join(",")).into()],
            ),
            add(format!("[{}]", bound.join(","))),
            Statement::new(
                "SELECT current_setting($1, true) AS left_over",
                vec![stash.into()],
            ),
            add("[]".to_owned()),
        ])
        .await
        .unwrap();
    let added = |n: usize| {
        outcomes[n]
            .rows
            .iter()
            .next()
            .unwrap()
            .get::<i64>("added")
            .unwrap()
    };
    assert_eq!((added(1), added(3)), (1, 0), "one row, then nothing");
    let left_over: String = outcomes[2]
        .rows
        .iter()
        .next()
        .unwrap()
        .get("left_over")
        .unwrap();
    assert_eq!(left_over, "");
    // Added again: a row already there grows by each count.
    db.run_atomic(&[add(format!("[{}]", bound.join(",")))])
        .await
        .unwrap();
    let row = db
        .query(&Statement::new(
            format!(
                "SELECT period_ms, period_start, topic, {} FROM \"outbox_periods\"",
                columns.join(", ")
            ),
            vec![],
        ))
        .await
        .unwrap();
    assert_eq!(row.len(), 1);
    let row = row.iter().next().unwrap();
    assert_eq!(row.get::<i64>("period_ms").unwrap(), 60_000);
    assert_eq!(row.get::<i64>("period_start").unwrap(), 60_000);
    assert_eq!(row.get::<String>("topic").unwrap(), "t");
    for (k, column) in columns.iter().enumerate() {
        let times = if k < 33 { 2 } else { 1 };
        assert_eq!(
            row.get::<i64>(column).unwrap(),
            times * (k as i64 + 1),
            "{column}"
        );
    }
    // A claim's dead rows: counted in `dead_at_claim`, by the claim's
    // token and time.
    let sql = |text: &str| Statement::new(text, vec![]);
    db.execute(&sql(
        "INSERT INTO \"outbox\" (state, due_at, id, topic, payload, created_at, lease_token) \
         VALUES ('dead', 5000, 'd1', 't', '{}', 1, 'tok'), ('dead', 5000, 'd2', 't', '{}', 1, 'other')",
    ))
    .await
    .unwrap();
    db.run_atomic(&[sql(
        "SELECT \"outbox_add_counts\"('[]', 60000, 5000, 'tok') AS added",
    )])
    .await
    .unwrap();
    let counted = db
        .query(&sql(
            "SELECT dead, dead_at_claim FROM \"outbox_periods\" WHERE topic = 't'",
        ))
        .await
        .unwrap();
    let counted = counted.iter().next().unwrap();
    assert_eq!(
        (
            counted.get::<i64>("dead").unwrap(),
            counted.get::<i64>("dead_at_claim").unwrap()
        ),
        (8, 11),
        "dead as before (column 3, twice 4); dead_at_claim (column 4, twice 5) and the one dead row of the claim"
    );
    // A count that names no column fails its transaction: nothing lost
    // silently, nothing written.
    let refused = db
        .run_atomic(&[add(r#"[[60000,"t",0,1],[60000,"t",66,1]]"#.to_owned())])
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("names no column"), "{refused}");
    let delivered = db
        .query(&sql(
            "SELECT delivered FROM \"outbox_periods\" WHERE topic = 't'",
        ))
        .await
        .unwrap();
    assert_eq!(
        delivered
            .iter()
            .next()
            .unwrap()
            .get::<i64>("delivered")
            .unwrap(),
        2
    );
    drop((db, outbox));
    database.drop_now().await;
}

/// Runs the files of `migrations/postgres/` that `wanted` names, in order,
/// as a migration tool would; how many ran.
async fn apply_migrations(db: &PostgresDatabase, wanted: impl Fn(&str) -> bool) -> usize {
    let mut files: Vec<_> = std::fs::read_dir("migrations/postgres")
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| wanted(&path.to_string_lossy()))
        .collect();
    files.sort();
    for file in &files {
        let sql = std::fs::read_to_string(file).unwrap();
        db.pool()
            .get()
            .await
            .unwrap()
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    }
    files.len()
}

async fn outbox_on(database: &TestDatabase, connections: usize) -> Outbox {
    let db: Arc<dyn Database> = Arc::new(database.connect(connections).await);
    let outbox = Outbox::new(db, "outbox").unwrap();
    outbox.create_schema().await.unwrap();
    outbox
}

/// Enqueues `message`, sending it again while Postgres reports a race that
/// a retry resolves (`RetryAdvice::Now`).
async fn enqueue_retrying(outbox: &Outbox, message: Message) -> (String, u32) {
    let mut races = 0;
    loop {
        match outbox.enqueue_alone(message.clone()).await {
            Ok(enqueued) => {
                assert!(enqueued.written);
                return (enqueued.id, races);
            }
            Err(error @ Error::Unavailable { .. }) => {
                assert_eq!(error.retry_advice(), RetryAdvice::Now, "{error}");
                races += 1;
            }
            Err(other) => panic!("enqueue failed: {other}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_enqueues_under_one_ordering_key_keep_one_order() {
    let database = TestDatabase::create("ordered").await;
    let outbox = outbox_on(&database, 8).await;
    let writers: Vec<_> = (0..8)
        .map(|writer| {
            let outbox = outbox.clone();
            tokio::spawn(async move {
                let mut ids = Vec::new();
                let mut races = 0;
                for n in 0..25 {
                    let message = Message::raw_json("m", format!("{{\"w\":{writer},\"n\":{n}}}"))
                        .ordering_key("account-1");
                    let (id, raced) = enqueue_retrying(&outbox, message).await;
                    ids.push(id);
                    races += raced;
                }
                (ids, races)
            })
        })
        .collect();
    let mut written = Vec::new();
    let mut races = 0;
    for writer in writers {
        let (ids, raced) = writer.await.unwrap();
        // Each writer's own messages keep the order it enqueued them in.
        written.push(ids);
        races += raced;
    }
    // Delivered one at a time, each only after the one before it.
    let mut delivered = Vec::new();
    loop {
        let claim = outbox.claim(100, LEASE).await.unwrap();
        assert!(
            claim.messages.len() <= 1,
            "two messages of one key leased at once"
        );
        let Some(message) = claim.messages.first() else {
            break;
        };
        delivered.push(message.id.clone());
        outbox.complete(message.lease()).await.unwrap();
    }
    assert_eq!(delivered.len(), 200, "{races} races");
    for ids in written {
        let positions: Vec<usize> = ids
            .iter()
            .map(|id| delivered.iter().position(|d| d == id).unwrap())
            .collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    }
    database.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_racing_its_keys_completion_is_never_stranded() {
    let database = TestDatabase::create("stranded").await;
    let outbox = outbox_on(&database, 4).await;
    for round in 0..150 {
        let key = format!("key-{round}");
        let keyed = || Message::raw_json("m", "{}").ordering_key(key.clone());
        enqueue_retrying(&outbox, keyed()).await;
        let claim = outbox.claim(1, LEASE).await.unwrap();
        let head = claim.messages[0].lease().clone();
        let (completed, (next, _)) =
            tokio::join!(outbox.complete(&head), enqueue_retrying(&outbox, keyed()));
        completed.unwrap();
        // Whichever committed first, the next message is deliverable now.
        let claim = outbox.claim(10, LEASE).await.unwrap();
        assert_eq!(
            claim
                .messages
                .iter()
                .map(|m| m.id.clone())
                .collect::<Vec<_>>(),
            vec![next.clone()],
            "round {round}: the next message of the key was left waiting"
        );
        outbox.complete(claim.messages[0].lease()).await.unwrap();
    }
    database.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_drainers_share_the_work_and_never_overlap() {
    let database = TestDatabase::create("drainers").await;
    let outbox = outbox_on(&database, 8).await;
    let db = outbox.database().clone();
    let statements: Vec<Statement> = (0..3000)
        .flat_map(|n| {
            outbox
                .enqueue(Message::raw_json("m", format!("{{\"n\":{n}}}")))
                .unwrap()
                .statements()
                .to_vec()
        })
        .collect();
    for chunk in statements.chunks(500) {
        db.batch_atomic(chunk).await.unwrap();
    }
    #[derive(Default)]
    struct Ledger {
        in_flight: HashSet<String>,
        overlaps: u32,
        deliveries: BTreeMap<String, u32>,
    }
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let drainers: Vec<_> = (0..4)
        .map(|_| {
            let ledger = ledger.clone();
            let deliver = deliver_fn(move |message: workers_outbox::ClaimedMessage| {
                let ledger = ledger.clone();
                async move {
                    {
                        let mut ledger = ledger.lock().unwrap();
                        if !ledger.in_flight.insert(message.id.clone()) {
                            ledger.overlaps += 1;
                        }
                        *ledger.deliveries.entry(message.id.clone()).or_default() += 1;
                    }
                    tokio::time::sleep(Duration::from_micros(200)).await;
                    ledger.lock().unwrap().in_flight.remove(&message.id);
                    Delivery::Delivered
                }
            });
            let drainer = Drainer::builder(outbox.clone(), deliver)
                .limits(DrainLimits {
                    batch_size: 50,
                    max_queries: u32::MAX,
                    max_messages: u32::MAX,
                    deadline: Duration::from_secs(120),
                    ..DrainLimits::scheduled()
                })
                .build()
                .unwrap();
            tokio::spawn(async move { drainer.drain().await })
        })
        .collect();
    let mut per_drainer = Vec::new();
    for drainer in drainers {
        let report = drainer.await.unwrap();
        assert_eq!(report.lease_lost, 0, "{report}");
        per_drainer.push(report.delivered);
    }
    {
        let ledger = ledger.lock().unwrap();
        assert_eq!(ledger.overlaps, 0);
        assert_eq!(ledger.deliveries.len(), 3000);
        assert!(ledger.deliveries.values().all(|n| *n == 1));
    }
    assert_eq!(per_drainer.iter().sum::<u32>(), 3000);
    assert!(
        per_drainer.iter().filter(|n| **n > 0).count() >= 2,
        "one drainer did all the work: {per_drainer:?}"
    );
    assert_eq!(outbox.stats().await.unwrap().pending, 0);
    database.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_unavailable_not_a_panic() {
    let error = PostgresDatabase::connect("postgres://postgres@127.0.0.1:1/postgres", 1)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Unavailable { .. }), "{error:?}");
    let error = PostgresDatabase::connect("not a url ===", 1)
        .await
        .unwrap_err();
    assert!(matches!(error, Error::InvalidInput { .. }), "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_erasure_racing_a_completion_of_its_key_strands_nothing() {
    let database = TestDatabase::create("erasure_race").await;
    let outbox = outbox_on(&database, 4).await;
    for round in 0..60 {
        // A drainer of its own each round, as a cron invocation makes one:
        // a drainer sweeps at most once a minute.
        let drainer = Drainer::builder(
            outbox.clone(),
            deliver_fn(|_: workers_outbox::ClaimedMessage| async { Delivery::Delivered }),
        )
        .build()
        .unwrap();
        let key = format!("key-{round}");
        let erased = format!("subject-{round}");
        let keyed = |subject: &str| {
            Message::raw_json("m", "{}")
                .ordering_key(key.clone())
                .subject(subject)
        };
        enqueue_retrying(&outbox, keyed("kept")).await;
        enqueue_retrying(&outbox, keyed(&erased)).await;
        let (last, _) = enqueue_retrying(&outbox, keyed("kept")).await;
        let head = outbox.claim(1, LEASE).await.unwrap().messages[0]
            .lease()
            .clone();
        // The head's completion and the erasure of the message behind it,
        // at once: each may miss the other's delete.
        let (completed, erasure) =
            tokio::join!(outbox.complete(&head), outbox.erase_subject(&erased));
        completed.unwrap();
        erasure.unwrap();
        // The next drain delivers the key's last message, stranded or not.
        let report = drainer.drain().await;
        assert_eq!(report.delivered, 1, "round {round}: {report}");
        assert!(
            outbox.export_subject("kept").await.unwrap().is_empty(),
            "round {round}: {last} is still stored"
        );
    }
    database.drop_now().await;
}

/// Under read committed an enqueue's snapshot does not see an erasure
/// committing meanwhile, nor the erasure's the enqueue's row: the guard and
/// the tombstone meet on the tombstone's key, so whichever commits second
/// either fails (the enqueue) or deletes the other's row (the erasure).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_racing_an_erasure_of_its_subject_leaves_nothing() {
    let database = TestDatabase::create("tombstone_race").await;
    let outbox = outbox_on(&database, 4).await;
    let inbox = Inbox::new(outbox.database().clone(), "inbox").unwrap();
    inbox.create_schema().await.unwrap();
    let (mut refused, mut erased_after) = (0, 0);
    for round in 0..200 {
        let subject = format!("subject-{round}");
        let message = Message::raw_json("m", "{}").subject(subject.clone());
        let key = format!("key-{round}");
        let (enqueued, erasure, keyed) = tokio::join!(
            outbox.enqueue_alone(message),
            erase_subject(&outbox, &inbox, &subject),
            inbox.process_once(&key, Some(&subject), &[]),
        );
        let erasure = erasure.unwrap();
        match enqueued {
            Ok(_) => erased_after += 1,
            Err(Error::SubjectErased { .. }) => refused += 1,
            Err(other) => panic!("round {round}: {other}"),
        }
        match keyed {
            Ok(_) | Err(Error::SubjectErased { .. }) => {}
            Err(other) => panic!("round {round}: {other}"),
        }
        let left = export_subject(&outbox, &inbox, &subject).await.unwrap();
        assert!(
            left.outbox.is_empty() && left.inbox.is_empty(),
            "round {round}: erased {erasure:?}, left {left:?}"
        );
    }
    assert!(refused + erased_after == 200, "{refused} + {erased_after}");
    database.drop_now().await;
}

/// A guard holds its subject's key until its transaction ends: batches
/// writing the same subjects in opposite orders take them in one order (a
/// batch sorts its guards), so they wait for each other instead of
/// deadlocking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_guarding_the_same_subjects_in_opposite_orders_never_deadlock() {
    let database = TestDatabase::create("guard_order").await;
    let outbox = outbox_on(&database, 4).await;
    let db = outbox.database().clone();
    let batch_of = |first: &str, second: &str| {
        let mut batch = Batch::new(db.clone());
        for subject in [first, second] {
            let message = Message::raw_json("m", "{}").subject(subject);
            drop(batch.enqueue(&outbox, message).unwrap());
        }
        batch
    };
    for round in 0..100 {
        let (a, b) = (format!("a-{round}"), format!("b-{round}"));
        let (one, other) = tokio::join!(batch_of(&a, &b).commit(), batch_of(&b, &a).commit());
        assert!(
            one.is_ok() && other.is_ok(),
            "round {round}: {:?} / {:?}",
            one.err(),
            other.err()
        );
    }
    assert_eq!(outbox.stats().await.unwrap().pending, 400);
    database.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_error_keeps_the_servers_error_as_its_source() {
    let database = TestDatabase::create("error_source").await;
    let db = database.connect(1).await;
    let error = db
        .execute(&Statement::new("SELEKT 1", vec![]))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Database { .. }), "{error:?}");
    let source = std::error::Error::source(&error).expect("the server's error as the source");
    let postgres = source
        .downcast_ref::<tokio_postgres::Error>()
        .expect("a tokio_postgres::Error");
    assert_eq!(
        postgres.code(),
        Some(&tokio_postgres::error::SqlState::SYNTAX_ERROR)
    );
    drop(db);
    database.drop_now().await;
}

/// A batch is one transaction: one whose statement fails, on the server or
/// before it is sent (a NUL in a text), commits none of them, and its
/// connection is handed back out of any transaction, so the next batch on
/// it commits on its own; a failure at the `COMMIT` itself (a deferred
/// constraint) is the batch's error; and a long batch runs whole in one
/// transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_applies_all_or_nothing_and_frees_its_connection() {
    let database = TestDatabase::create("batch_atomic").await;
    let db = database.connect(1).await;
    let sql = |text: &str| Statement::new(text, vec![]);
    db.execute(&sql(
        "CREATE TABLE t (id BIGINT PRIMARY KEY, other BIGINT UNIQUE DEFERRABLE INITIALLY DEFERRED)",
    ))
    .await
    .unwrap();
    let count = || async {
        db.query(&sql("SELECT COUNT(*) AS n FROM t"))
            .await
            .unwrap()
            .iter()
            .next()
            .unwrap()
            .get::<i64>("n")
            .unwrap()
    };
    let failed = db
        .batch_atomic(&[
            sql("INSERT INTO t (id, other) VALUES (1, 1)"),
            sql("SELEKT 1"),
            sql("INSERT INTO t (id, other) VALUES (2, 2)"),
        ])
        .await
        .unwrap_err();
    assert!(matches!(failed, Error::Database { .. }), "{failed:?}");
    assert_eq!(count().await, 0);
    let unsendable = db
        .batch_atomic(&[
            sql("INSERT INTO t (id, other) VALUES (1, 1)"),
            Statement::new(
                "INSERT INTO t (id, other) VALUES (CAST(length($1) AS BIGINT), 2)",
                vec!["a\0b".into()],
            ),
        ])
        .await
        .unwrap_err();
    assert_eq!(count().await, 0, "a batch committed without {unsendable}");
    let long: Vec<Statement> = (0..200)
        .map(|_| sql("SELECT CAST(txid_current() AS BIGINT) AS xid"))
        .collect();
    let xids: std::collections::BTreeSet<i64> = db
        .batch_atomic(&long)
        .await
        .unwrap()
        .iter()
        .map(|outcome| {
            outcome
                .rows
                .iter()
                .next()
                .unwrap()
                .get::<i64>("xid")
                .unwrap()
        })
        .collect();
    assert_eq!(xids.len(), 1, "{xids:?}");
    let at_commit = db
        .batch_atomic(&[
            sql("INSERT INTO t (id, other) VALUES (3, 7)"),
            sql("INSERT INTO t (id, other) VALUES (4, 7)"),
        ])
        .await
        .unwrap_err();
    assert!(matches!(at_commit, Error::Conflict { .. }), "{at_commit:?}");
    assert_eq!(count().await, 0, "a failed COMMIT applied: {at_commit}");
    let outcomes = db
        .batch_atomic(&[
            sql("INSERT INTO t (id, other) VALUES (5, 5)"),
            sql("SELECT current_setting('transaction_isolation') AS isolation"),
        ])
        .await
        .unwrap();
    assert_eq!(
        outcomes[1]
            .rows
            .iter()
            .next()
            .unwrap()
            .get::<String>("isolation")
            .unwrap(),
        "read committed"
    );
    // Outside any transaction now: a statement alone commits at once,
    // seen by another connection.
    db.execute(&sql("INSERT INTO t (id, other) VALUES (6, 6)"))
        .await
        .unwrap();
    let other = database.connect(1).await;
    let seen = other
        .query(&sql("SELECT COUNT(*) AS n FROM t"))
        .await
        .unwrap();
    assert_eq!(seen.iter().next().unwrap().get::<i64>("n").unwrap(), 2);
    drop((db, other));
    database.drop_now().await;
}

/// Postgres leaves a unique violation's detail out when the role may not
/// read the key (and translates it under another locale): the conflict is
/// then named from the catalog, as `table.column` all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_is_named_even_when_the_server_does_not_say_which_key() {
    let database = TestDatabase::create("unnamed").await;
    let owner = database.connect(1).await;
    let role = format!("writer_only_{}", std::process::id());
    for sql in [
        "CREATE TABLE payments (payment TEXT PRIMARY KEY, amount BIGINT)".to_owned(),
        format!("DROP ROLE IF EXISTS {role}"),
        format!("CREATE ROLE {role} LOGIN"),
        format!("GRANT INSERT ON payments TO {role}"),
    ] {
        owner.execute(&Statement::new(sql, vec![])).await.unwrap();
    }
    let insert = Statement::new(
        "INSERT INTO payments (payment, amount) VALUES ($1, $2)",
        vec!["p-1".into(), 5i64.into()],
    );
    owner.execute(&insert).await.unwrap();
    let writer = PostgresDatabase::connect(&format!("{} user={role}", database.url()), 1)
        .await
        .unwrap();
    let error = writer.execute(&insert).await.unwrap_err();
    assert_eq!(
        error,
        Error::Conflict {
            constraint: "payments.payment".into()
        }
    );
    let error = writer
        .batch_atomic(std::slice::from_ref(&insert))
        .await
        .unwrap_err();
    assert_eq!(
        error,
        Error::Conflict {
            constraint: "payments.payment".into()
        }
    );
    drop((owner, writer));
    database.drop_now().await;
    let server = PostgresDatabase::connect(&postgres::server_url(), 1)
        .await
        .unwrap();
    server
        .execute(&Statement::new(format!("DROP ROLE {role}"), vec![]))
        .await
        .unwrap();
}

/// The claim floor's three sequences of `table`: floor, pending, fence.
async fn claim_floor(db: &Arc<dyn Database>, table: &str) -> (i64, i64, i64) {
    let rows = db
        .query(&Statement::new(
            format!(
                "SELECT (SELECT last_value FROM \"{table}_claim_floor\") AS floor, \
                 (SELECT last_value FROM \"{table}_claim_pending\") AS pending, \
                 (SELECT last_value FROM \"{table}_claim_fence\") AS fence"
            ),
            vec![],
        ))
        .await
        .unwrap();
    let row = rows.iter().next().unwrap();
    (
        row.get("floor").unwrap(),
        row.get("pending").unwrap(),
        row.get("fence").unwrap(),
    )
}

/// The floor once claims (finding nothing) have moved it past `past`. A
/// claim moves it once no transaction older than its fence is running
/// anywhere on the server: other tests' too, so it may take a few.
async fn floor_passes(outbox: &Outbox, past: i64) -> i64 {
    let db = outbox.database().clone();
    for _ in 0..1000 {
        let (floor, _, _) = claim_floor(&db, outbox.table().as_str()).await;
        if floor > past {
            return floor;
        }
        let claim = outbox.claim(10, LEASE).await.unwrap();
        assert!(claim.is_empty(), "{claim:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the floor did not pass {past} within 20 s");
}

fn unix_millis_now() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// A read-only transaction on its own connection that holds its snapshot
/// (and so the server's vacuum horizon) until it is dropped.
async fn hold_snapshot(database: &TestDatabase) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(database.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM outbox")
        .await
        .unwrap();
    client
}

fn drainer_of(outbox: &Outbox, delivered: Arc<Mutex<Vec<String>>>) -> Drainer {
    let deliver = deliver_fn(move |message: workers_outbox::ClaimedMessage| {
        let delivered = delivered.clone();
        async move {
            delivered.lock().unwrap().push(message.id.clone());
            Delivery::Delivered
        }
    });
    Drainer::builder(outbox.clone(), deliver)
        .limits(DrainLimits {
            batch_size: 50,
            max_queries: u32::MAX,
            max_messages: u32::MAX,
            deadline: Duration::from_secs(60),
            ..DrainLimits::scheduled()
        })
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_claim_floor_moves_past_delivered_rows_while_a_snapshot_is_held() {
    let database = TestDatabase::create("floor_snapshot").await;
    let outbox = outbox_on(&database, 2).await;
    let db = outbox.database().clone();
    for n in 0..300 {
        outbox
            .enqueue_alone(Message::raw_json("m", format!("{{\"n\":{n}}}")))
            .await
            .unwrap();
    }
    let enqueued_by = unix_millis_now();
    let held = hold_snapshot(&database).await;
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let report = drainer_of(&outbox, delivered.clone()).drain().await;
    assert_eq!(report.delivered, 300, "{report}");
    assert_eq!(outbox.stats().await.unwrap().pending, 0);
    // The floor passes the rows delivered: later claims start beyond their
    // dead index entries, which the held snapshot keeps from vacuum.
    let floor = floor_passes(&outbox, enqueued_by).await;
    let (_, pending, _) = claim_floor(&db, "outbox").await;
    assert!(pending >= floor);
    // A message due long before the floor is marked late, and claimed.
    let late = outbox
        .enqueue_alone(
            Message::raw_json("m", "{}")
                .not_before(workers_outbox::Timestamp::from_unix_millis(1_000).unwrap()),
        )
        .await
        .unwrap();
    let claim = outbox.claim(10, LEASE).await.unwrap();
    assert_eq!(
        claim
            .messages
            .iter()
            .map(|m| m.id.as_str())
            .collect::<Vec<_>>(),
        [late.id.as_str()]
    );
    assert!(claim.messages[0].lease().until().as_unix_millis() > floor);
    drop(held);
    database.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resumed_topic_is_claimed_though_the_floor_passed_its_rows() {
    let database = TestDatabase::create("floor_resume").await;
    let outbox = outbox_on(&database, 2).await;
    let db = outbox.database().clone();
    outbox.pause_topic("held", "operator").await.unwrap();
    let mut held_ids = Vec::new();
    for n in 0..20 {
        held_ids.push(
            outbox
                .enqueue_alone(Message::raw_json("held", format!("{{\"n\":{n}}}")))
                .await
                .unwrap()
                .id,
        );
    }
    for n in 0..200 {
        outbox
            .enqueue_alone(Message::raw_json("open", format!("{{\"n\":{n}}}")))
            .await
            .unwrap();
    }
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let report = drainer_of(&outbox, delivered.clone()).drain().await;
    assert_eq!(report.delivered, 200, "{report}");
    let newest_held: i64 = db
        .query(&Statement::new(
            "SELECT max(due_at) AS d FROM outbox WHERE topic = 'held'",
            vec![],
        ))
        .await
        .unwrap()
        .iter()
        .next()
        .unwrap()
        .get("d")
        .unwrap();
    // A paused topic does not hold the floor back.
    floor_passes(&outbox, newest_held).await;
    assert!(outbox.resume_topic("held").await.unwrap());
    let report = drainer_of(&outbox, delivered.clone()).drain().await;
    assert_eq!(report.delivered, 20, "{report}");
    let delivered = delivered.lock().unwrap().clone();
    assert!(held_ids.iter().all(|id| delivered.contains(id)));
    database.drop_now().await;
}

/// Writers of every kind race the drainers' floor (enqueues due in the
/// past, retries, ordering keys, a held snapshot): no message is left
/// behind the floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_racing_the_claim_floor_leave_no_message_behind() {
    const PER_WRITER: usize = 1000;
    const WRITERS: usize = 4;
    let database = TestDatabase::create("floor_race").await;
    let db: Arc<dyn Database> = Arc::new(database.connect(12).await);
    let outbox = Outbox::builder(db.clone(), "outbox")
        .retry_policy(
            workers_outbox::RetryPolicy::new(
                5,
                workers_outbox::ScheduledBackoff::new(vec![Duration::from_millis(1)]).unwrap(),
            )
            .unwrap(),
        )
        .build()
        .unwrap();
    outbox.create_schema().await.unwrap();
    let held = hold_snapshot(&database).await;
    let writers: Vec<_> = (0..WRITERS)
        .map(|writer| {
            let outbox = outbox.clone();
            tokio::spawn(async move {
                let mut batch = Vec::new();
                for n in 0..PER_WRITER {
                    let now = unix_millis_now();
                    let mut message =
                        Message::raw_json("m", format!("{{\"w\":{writer},\"n\":{n}}}"))
                            // Due up to two seconds ago: behind any floor a
                            // drain has set meanwhile.
                            .not_before(
                                workers_outbox::Timestamp::from_unix_millis(
                                    now - (n as i64 % 7) * 300,
                                )
                                .unwrap(),
                            );
                    if n % 5 == 0 {
                        message = message.ordering_key(format!("key-{writer}-{}", n % 3));
                    }
                    if writer % 2 == 0 {
                        outbox.enqueue_alone(message).await.unwrap();
                    } else {
                        // Long transactions too: 200 messages each, so that
                        // the floor moves while they are open.
                        batch.extend_from_slice(outbox.enqueue(message).unwrap().statements());
                        if n % 200 == 199 {
                            outbox.database().batch_atomic(&batch).await.unwrap();
                            batch.clear();
                        }
                    }
                    if n % 50 == 0 {
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                }
            })
        })
        .collect();
    let delivered: Arc<Mutex<BTreeMap<String, u32>>> = Arc::default();
    let attempts = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let drainers: Vec<_> = (0..3)
        .map(|_| {
            let (outbox, delivered, attempts) =
                (outbox.clone(), delivered.clone(), attempts.clone());
            tokio::spawn(async move {
                let progress = delivered.clone();
                let deliver = deliver_fn(move |message: workers_outbox::ClaimedMessage| {
                    let (delivered, attempts) = (delivered.clone(), attempts.clone());
                    async move {
                        // Every seventh delivery fails once: a retry, due again
                        // in a millisecond.
                        if attempts.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 7 == 3
                            && message.attempt() == 1
                        {
                            return Delivery::Retry {
                                error: "once".into(),
                            };
                        }
                        *delivered
                            .lock()
                            .unwrap()
                            .entry(message.id.clone())
                            .or_default() += 1;
                        Delivery::Delivered
                    }
                });
                let drainer = Drainer::builder(outbox, deliver)
                    .limits(DrainLimits {
                        batch_size: 20,
                        max_queries: u32::MAX,
                        max_messages: u32::MAX,
                        deadline: Duration::from_secs(60),
                        ..DrainLimits::scheduled()
                    })
                    .build()
                    .unwrap();
                let started = std::time::Instant::now();
                while progress.lock().unwrap().len() < WRITERS * PER_WRITER
                    && started.elapsed() < Duration::from_secs(120)
                {
                    if drainer.drain().await.delivered == 0 {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.await.unwrap();
    }
    for drainer in drainers {
        drainer.await.unwrap();
    }
    drop(held);
    let delivered = delivered.lock().unwrap().clone();
    let stats = outbox.stats().await.unwrap();
    let left: Vec<String> = db
        .query(&Statement::new(
            "SELECT id || ' xmin ' || xmin::text || ' ' || state || ' due ' || due_at || ' key ' || coalesce(ordering_key, '-') \
             || ' seq ' || coalesce(seq, 0) || ' attempts ' || attempts || ' token ' \
             || coalesce(lease_token, '-') AS row FROM outbox ORDER BY due_at",
            vec![],
        ))
        .await
        .unwrap()
        .iter()
        .map(|row| row.get("row").unwrap())
        .collect();
    assert_eq!(
        delivered.len(),
        WRITERS * PER_WRITER,
        "left undelivered: {stats:?} {left:#?}, floor {:?}",
        claim_floor(&db, "outbox").await
    );
    assert_eq!(stats.pending, 0);
    database.drop_now().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outbox_of_the_previous_release_upgrades_to_the_claim_floor() {
    let database = TestDatabase::create("floor_upgrade").await;
    let handle = database.connect(1).await;
    // The previous release's tables, with rows as it wrote them: due long
    // ago, one leased with its lease expired, one waiting behind its key.
    apply_migrations(&handle, |file| !file.contains("claim_floor")).await;
    for (state, due, id, token, key, seq) in [
        ("ready", 1_000i64, "a", None, None, None),
        ("ready", 2_000, "b", Some("expired"), None, None),
        ("ready", 3_000, "c", None, Some("k"), Some(1i64)),
        ("waiting", 3_000, "d", None, Some("k"), Some(2)),
    ] {
        handle
            .execute(&Statement::new(
                "INSERT INTO outbox (state, due_at, id, topic, payload, created_at, lease_token, \
                 ordering_key, seq) VALUES ($1, $2, $3, 'm', '{}', 0, $4, $5, $6)",
                vec![
                    state.into(),
                    due.into(),
                    id.into(),
                    token.into(),
                    key.into(),
                    seq.into(),
                ],
            ))
            .await
            .unwrap();
    }
    apply_migrations(&handle, |file| file.contains("claim_floor")).await;
    let db: Arc<dyn Database> = Arc::new(database.connect(1).await);
    let outbox = Outbox::new(db.clone(), "outbox").unwrap();
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let mut reports = Vec::new();
    for _ in 0..3 {
        reports.push(drainer_of(&outbox, delivered.clone()).drain().await);
    }
    let mut delivered = delivered.lock().unwrap().clone();
    delivered.sort();
    assert_eq!(delivered, ["a", "b", "c", "d"], "{reports:?}");
    assert_eq!(outbox.stats().await.unwrap().pending, 0);
    drop((handle, outbox, db));
    database.drop_now().await;
}

/// Reads, at the end of every call and in its transaction, the planner
/// settings the call ran under, beside its SQL.
struct PlannerProbe {
    seen: Arc<Mutex<Vec<(String, String, String)>>>,
}

impl Around for PlannerProbe {
    fn around<'a>(
        &'a self,
        inner: &'a dyn Database,
        statements: &'a [Statement],
        _call: workers_outbox::future::BoxFuture<
            'a,
            workers_outbox::Result<Vec<workers_outbox::database::Outcome>>,
        >,
    ) -> workers_outbox::future::BoxFuture<
        'a,
        workers_outbox::Result<Vec<workers_outbox::database::Outcome>>,
    > {
        Box::pin(async move {
            let probe = Statement::new(
                "SELECT current_setting('jit') AS jit, \
                 current_setting('enable_bitmapscan') AS bitmap",
                vec![],
            );
            // The call runs with the probe after it, in one transaction.
            let mut outcomes = inner.run_atomic(&[statements, &[probe]].concat()).await?;
            let settings = outcomes.pop().unwrap();
            let row = settings.rows.iter().next().unwrap();
            let sql: Vec<&str> = statements.iter().map(|s| s.sql()).collect();
            self.seen.lock().unwrap().push((
                sql.join(";\n"),
                row.get("jit").unwrap(),
                row.get("bitmap").unwrap(),
            ));
            Ok(outcomes)
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_and_rollup_counts_run_without_jit_whatever_the_server_says() {
    let database = TestDatabase::create("planner_settings").await;
    // The server's own settings: JIT for every plan, on every new connection.
    let server = database.connect(1).await;
    for setting in ["jit = on", "jit_above_cost = 0"] {
        let alter = format!("ALTER DATABASE \"{}\" SET {setting}", database.name());
        server
            .execute(&Statement::new(alter, vec![]))
            .await
            .unwrap();
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let probe =
        FaultyDatabase::new(database.connect(1).await).around(PlannerProbe { seen: seen.clone() });
    let db: Arc<dyn Database> = Arc::new(probe.clone());
    let outbox = Outbox::new(db, "outbox").unwrap();
    outbox.create_schema().await.unwrap();
    for n in 0..120 {
        outbox
            .enqueue_alone(Message::raw_json("m", format!("{{\"n\":{n}}}")))
            .await
            .unwrap();
    }
    let delivered = Arc::new(Mutex::new(Vec::new()));
    let report = drainer_of(&outbox, delivered).drain().await;
    assert_eq!(report.delivered, 120, "{report}");
    // A settle of its own, through the public API.
    outbox
        .enqueue_alone(Message::raw_json("m", "{}"))
        .await
        .unwrap();
    let claim = outbox.claim(10, LEASE).await.unwrap();
    outbox
        .settle(&[(claim.messages[0].lease(), Delivery::Delivered)])
        .await
        .unwrap();
    let seen = seen.lock().unwrap().clone();
    let busy: Vec<_> = seen
        .iter()
        .filter(|(sql, _, _)| {
            sql.contains("SKIP LOCKED") || sql.contains("SELECT \"outbox_add_counts\"(")
        })
        .collect();
    assert!(
        busy.iter().any(|(sql, _, _)| !sql.contains("SKIP LOCKED")),
        "no settle was sent on its own"
    );
    for (sql, jit, bitmap) in &busy {
        assert_eq!((jit.as_str(), bitmap.as_str()), ("off", "off"), "{sql}");
    }
    // The settings are the transaction's alone: the one connection the drain and
    // the settle used keeps the server's after them.
    let after = probe
        .inner()
        .query(&Statement::new(
            "SELECT current_setting('jit') AS jit",
            vec![],
        ))
        .await
        .unwrap();
    assert_eq!(
        after.iter().next().unwrap().get::<String>("jit").unwrap(),
        "on"
    );
    database.drop_now().await;
}
