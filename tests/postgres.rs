//! What only Postgres needs showing: its migrations, and the outbox under
//! real concurrency (many connections at once, which SQLite serializes).
//! Needs the test server (`bash scripts/postgres.sh start`).

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used)]

#[path = "support/postgres.rs"]
mod postgres;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use postgres::TestDatabase;
use workers_outbox::drain::deliver_fn;
use workers_outbox::subject::{erase_subject, export_subject};
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
