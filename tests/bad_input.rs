//! The bad-input catalogue: one test per kind of bad input, each expecting
//! one specific typed error and a database left exactly as it was.
//! (The HTTP side is in `tests/e2e/bad_input.test.mjs`; D1's error messages
//! are classified in `src/database/d1/classify.rs`.)

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use workers_outbox::database::Rows;
use workers_outbox::drain::{CircuitBreaker, deliver_fn};
use workers_outbox::testing::ManualClock;
use workers_outbox::{
    ClaimedMessage, Database, Delivery, DrainLimits, Drainer, Error, ExponentialBackoff, Inbox,
    Message, Outbox, RetryPolicy, SqliteDatabase, Statement, Timestamp, TokioTimer, Value,
};

const LEASE: Duration = Duration::from_secs(30);

struct Setup {
    db: Arc<dyn Database>,
    outbox: Outbox,
    clock: ManualClock,
}

async fn setup() -> Setup {
    let db: Arc<dyn Database> = Arc::new(SqliteDatabase::open_in_memory().unwrap());
    let clock = ManualClock::new(Timestamp::from_unix_millis(1_700_000_000_000).unwrap());
    let outbox = Outbox::builder(db.clone(), "outbox")
        .clock(Arc::new(clock.clone()))
        .build()
        .unwrap();
    outbox.create_schema().await.unwrap();
    // Something to keep unchanged.
    outbox
        .enqueue_alone(Message::raw_json("mail", "{}"))
        .await
        .unwrap();
    Setup { db, outbox, clock }
}

async fn snapshot(db: &Arc<dyn Database>, table: &str) -> Rows {
    db.query(&Statement::new(
        format!("SELECT * FROM \"{table}\" ORDER BY 1, 2, 3"),
        vec![],
    ))
    .await
    .unwrap()
}

/// Asserts `result` is `InvalidInput` about `expected`.
fn assert_invalid<T: std::fmt::Debug>(result: Result<T, Error>, expected: &str) {
    match result {
        Err(Error::InvalidInput { what, .. }) => assert_eq!(what, expected),
        other => panic!("expected invalid {expected}, got {other:?}"),
    }
}

async fn assert_unchanged_after<T: std::fmt::Debug>(
    setup: &Setup,
    expected: &str,
    bad: impl AsyncFnOnce(&Setup) -> Result<T, Error>,
) {
    let before = snapshot(&setup.db, "outbox").await;
    assert_invalid(bad(setup).await, expected);
    assert_eq!(snapshot(&setup.db, "outbox").await, before);
}

#[tokio::test]
async fn a_table_name_carrying_sql_is_refused() {
    let s = setup().await;
    assert_invalid(Outbox::new(s.db.clone(), "x; DROP TABLE y"), "table name");
    assert_invalid(Inbox::new(s.db.clone(), "x; DROP TABLE y"), "table name");
    assert_eq!(snapshot(&s.db, "outbox").await.len(), 1);
}

#[tokio::test]
async fn an_empty_table_name_is_refused() {
    let s = setup().await;
    assert_invalid(Outbox::new(s.db, ""), "table name");
}

#[tokio::test]
async fn a_two_hundred_character_table_name_is_refused() {
    let s = setup().await;
    assert_invalid(Outbox::new(s.db, &"t".repeat(200)), "table name");
}

#[tokio::test]
async fn an_empty_topic_is_refused() {
    let s = setup().await;
    assert_unchanged_after(&s, "topic", async |s| {
        s.outbox.enqueue_alone(Message::raw_json("", "{}")).await
    })
    .await;
}

#[tokio::test]
async fn a_payload_over_the_maximum_is_refused() {
    let s = setup().await;
    // 64 KiB is the default maximum; D1 caps a statement at 100 KB.
    let payload = format!("\"{}\"", "x".repeat(64 * 1024));
    assert_unchanged_after(&s, "payload", async |s| {
        s.outbox
            .enqueue_alone(Message::raw_json("mail", payload))
            .await
    })
    .await;
}

#[tokio::test]
async fn a_payload_that_is_not_json_is_refused() {
    let s = setup().await;
    assert_unchanged_after(&s, "payload", async |s| {
        s.outbox
            .enqueue_alone(Message::raw_json("mail", "{oops"))
            .await
    })
    .await;
}

#[tokio::test]
async fn a_duplicate_message_id_is_a_conflict_and_rolls_back_its_batch() {
    let s = setup().await;
    s.outbox
        .enqueue_alone(Message::raw_json("mail", "{}").id("order-7"))
        .await
        .unwrap();
    s.db.execute(&Statement::new("CREATE TABLE audit (note TEXT)", vec![]))
        .await
        .unwrap();
    let before = snapshot(&s.db, "outbox").await;
    let again = s
        .outbox
        .enqueue(Message::raw_json("mail", "{}").id("order-7"))
        .unwrap();
    let note = Statement::new("INSERT INTO audit (note) VALUES ('x')", vec![]);
    let result =
        s.db.batch_atomic(&[&[note], again.statements()].concat())
            .await;
    assert_eq!(
        result,
        Err(Error::Conflict {
            constraint: "outbox.id".into()
        })
    );
    assert_eq!(snapshot(&s.db, "outbox").await, before);
    let audit =
        s.db.query(&Statement::new("SELECT * FROM audit", vec![]))
            .await
            .unwrap();
    assert!(audit.is_empty(), "the batch was half written");
}

/// An outbox table without `STRICT` or `NOT NULL`, as an old migration or a
/// hand edit might leave it, holding one bad row.
async fn loose_table_with(column: &str, value: Value) -> (Arc<dyn Database>, Outbox) {
    let db: Arc<dyn Database> = Arc::new(SqliteDatabase::open_in_memory().unwrap());
    db.execute(&Statement::new(
        "CREATE TABLE loose (state TEXT, due_at INTEGER, id TEXT, topic, payload, subject, \
         dedup_key, ordering_key, seq, id_given INTEGER DEFAULT 0, attempts DEFAULT 0, lease_token, \
         last_error, created_at, unsettled_leases DEFAULT 0, deferrals DEFAULT 0, PRIMARY KEY (state, due_at, id)) WITHOUT ROWID",
        vec![],
    ))
    .await
    .unwrap();
    let mut row = vec![
        ("topic", Value::from("mail")),
        ("payload", Value::from("{}")),
        ("created_at", Value::from(5i64)),
    ];
    for (name, stored) in &mut row {
        if *name == column {
            *stored = value.clone();
        }
    }
    db.execute(&Statement::new(
        "INSERT INTO loose (state, due_at, id, topic, payload, created_at) VALUES ('dead', 5, 'row-1', ?, ?, ?)",
        row.into_iter().map(|(_, stored)| stored).collect(),
    ))
    .await
    .unwrap();
    let outbox = Outbox::new(db.clone(), "loose").unwrap();
    (db, outbox)
}

async fn assert_malformed(column: &str, value: Value) {
    let (db, outbox) = loose_table_with(column, value).await;
    let before = snapshot(&db, "loose").await;
    match outbox.list_dead(10, None).await {
        Err(Error::MalformedRow {
            table,
            row,
            column: named,
            ..
        }) => {
            assert_eq!(table.as_deref(), Some("loose"));
            assert_eq!(row.as_deref(), Some("row-1"));
            assert_eq!(named, column);
        }
        other => panic!("expected a malformed {column}, got {other:?}"),
    }
    assert_eq!(snapshot(&db, "loose").await, before);
}

#[tokio::test]
async fn a_null_in_a_stored_row_is_named() {
    assert_malformed("topic", Value::Null).await;
}

#[tokio::test]
async fn a_wrongly_typed_stored_column_is_named() {
    assert_malformed("payload", Value::Integer(42)).await;
}

#[tokio::test]
async fn a_stored_time_out_of_range_is_named() {
    assert_malformed("created_at", Value::Integer(-5)).await;
}

#[tokio::test]
async fn times_out_of_range_are_refused() {
    assert_invalid(Timestamp::from_unix_millis(-1), "timestamp");
    assert_invalid(
        Timestamp::from_unix_millis(Timestamp::MAX.as_unix_millis() + 1),
        "timestamp",
    );
    let s = setup().await;
    s.clock.set(Timestamp::MAX);
    assert_unchanged_after(&s, "timestamp", async |s| s.outbox.claim(10, LEASE).await).await;
}

#[tokio::test]
async fn a_batch_size_of_zero_is_refused() {
    let s = setup().await;
    assert_unchanged_after(&s, "batch size", async |s| s.outbox.claim(0, LEASE).await).await;
}

#[tokio::test]
async fn a_batch_size_over_the_maximum_is_refused() {
    let s = setup().await;
    assert_unchanged_after(&s, "batch size", async |s| {
        s.outbox.claim(Outbox::MAX_CLAIM + 1, LEASE).await
    })
    .await;
}

#[tokio::test]
async fn a_lease_of_zero_length_is_refused() {
    let s = setup().await;
    assert_unchanged_after(&s, "lease", async |s| {
        s.outbox.claim(10, Duration::ZERO).await
    })
    .await;
    let mut batch = workers_outbox::Batch::new(s.db.clone());
    assert_invalid(
        batch.enqueue_leased(&s.outbox, Message::raw_json("mail", "{}"), Duration::ZERO),
        "lease",
    );
}

#[tokio::test]
async fn drain_limits_that_contradict_each_other_are_refused() {
    let s = setup().await;
    let deliver = Arc::new(deliver_fn(|_: ClaimedMessage| async {
        Delivery::Delivered
    }));
    let drainer = |limits| {
        Drainer::builder(s.outbox.clone(), deliver.clone())
            .timer(Arc::new(TokioTimer))
            .limits(limits)
            .build()
    };
    let base = DrainLimits::scheduled();
    let lease_too_short = DrainLimits {
        lease: (base.delivery_timeout + base.settle_margin) * 2 - Duration::from_millis(1),
        ..base
    };
    assert_invalid(drainer(lease_too_short), "lease");
    assert_invalid(
        drainer(DrainLimits {
            batch_size: 0,
            ..base
        }),
        "batch size",
    );
    assert_invalid(
        drainer(DrainLimits {
            concurrency: 0,
            ..base
        }),
        "concurrency",
    );
    assert_invalid(
        drainer(DrainLimits {
            max_queries: 1,
            ..base
        }),
        "query budget",
    );
    assert_invalid(
        RetryPolicy::new(0, ExponentialBackoff::default()),
        "max attempts",
    );
}

/// Limits that would make every drain a no-op, or let a settle land after
/// its lease, are refused up front.
#[tokio::test]
async fn drain_limits_that_would_make_a_drain_a_no_op_are_refused() {
    let base = DrainLimits::scheduled();
    let cases = [
        (
            DrainLimits {
                deadline: base.delivery_timeout + base.settle_margin + base.flush_interval
                    - Duration::from_millis(1),
                ..base
            },
            "deadline",
        ),
        (
            DrainLimits {
                settle_margin: Duration::ZERO,
                ..base
            },
            "settle margin",
        ),
        (
            DrainLimits {
                max_messages: 0,
                ..base
            },
            "message cap",
        ),
        (
            DrainLimits {
                flush_interval: Duration::ZERO,
                ..base
            },
            "flush interval",
        ),
        (
            DrainLimits {
                breaker: Some(CircuitBreaker {
                    failures: 0,
                    ..CircuitBreaker::default()
                }),
                ..base
            },
            "circuit breaker",
        ),
        (
            // It would trip on any one message's own failure.
            DrainLimits {
                breaker: Some(CircuitBreaker {
                    failures: 1,
                    ..CircuitBreaker::default()
                }),
                ..base
            },
            "circuit breaker",
        ),
        (
            DrainLimits {
                breaker: Some(CircuitBreaker {
                    cooldown: Duration::ZERO,
                    ..CircuitBreaker::default()
                }),
                ..base
            },
            "circuit breaker",
        ),
    ];
    for (limits, what) in cases {
        assert_invalid(limits.validate(), what);
    }
    assert_invalid(
        RetryPolicy::default().with_defer_limit(Duration::ZERO),
        "defer limit",
    );
    for preset in [
        DrainLimits::scheduled(),
        DrainLimits::scheduled_free_plan(),
        DrainLimits::after_response(),
    ] {
        preset.validate().unwrap();
    }
}

#[tokio::test]
async fn replaying_an_unknown_id_is_not_found() {
    let s = setup().await;
    let before = snapshot(&s.db, "outbox").await;
    assert_eq!(
        s.outbox.replay("no-such-id").await,
        Err(Error::NotFound {
            what: "dead message",
            id: "no-such-id".into()
        })
    );
    assert_eq!(snapshot(&s.db, "outbox").await, before);
}

#[tokio::test]
async fn sql_in_a_topic_or_subject_is_bound_and_stored_verbatim() {
    let s = setup().await;
    let hostile = "x'); DROP TABLE outbox; --";
    let enqueue = s
        .outbox
        .enqueue(Message::raw_json(hostile, "{}").subject(hostile))
        .unwrap();
    assert!(
        enqueue
            .statements()
            .iter()
            .all(|statement| !statement.sql().contains("DROP")),
        "a value reached the SQL text"
    );
    s.db.batch_atomic(enqueue.statements()).await.unwrap();
    let stored = s.outbox.export_subject(hostile).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].topic, hostile);
}

#[tokio::test]
async fn inbox_keys_empty_or_too_long_are_refused() {
    let s = setup().await;
    let inbox = Inbox::new(s.db.clone(), "inbox").unwrap();
    inbox.create_schema().await.unwrap();
    assert_invalid(inbox.process_once("", None, &[]).await, "inbox key");
    assert_invalid(
        inbox.process_once(&"k".repeat(257), None, &[]).await,
        "inbox key",
    );
    assert!(snapshot(&s.db, "inbox").await.is_empty());
}

#[tokio::test]
async fn values_no_database_stores_exactly_are_refused() {
    let s = setup().await;
    let insert = |value: Value| Statement::new("INSERT INTO t (v) VALUES (?)", vec![value]);
    s.db.execute(&Statement::new("CREATE TABLE t (v)", vec![]))
        .await
        .unwrap();
    assert_invalid(s.db.execute(&insert(Value::Real(f64::NAN))).await, "value");
    assert_invalid(
        s.db.execute(&insert(Value::Real(f64::INFINITY))).await,
        "value",
    );
    let mut select = sea_query::Query::select();
    select.expr(sea_query::Expr::val(u64::MAX));
    assert_invalid(workers_outbox::Dialect::Sqlite.render(&select), "value");
    assert!(snapshot_t(&s.db).await.is_empty());
}

async fn snapshot_t(db: &Arc<dyn Database>) -> Rows {
    db.query(&Statement::new("SELECT * FROM t", vec![]))
        .await
        .unwrap()
}

#[tokio::test]
async fn a_database_error_keeps_the_adapters_error_as_its_source() {
    let s = setup().await;
    let error =
        s.db.execute(&Statement::new("SELEKT 1", vec![]))
            .await
            .unwrap_err();
    assert!(matches!(error, Error::Database { .. }), "{error:?}");
    let source = std::error::Error::source(&error).expect("the adapter's error as the source");
    assert!(
        source.downcast_ref::<rusqlite::Error>().is_some(),
        "{source:?}"
    );
    // Equal errors stay equal whatever their causes.
    assert_eq!(error.clone(), error);
}
