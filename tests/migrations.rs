//! `migrations/` (what wrangler applies to D1), run in order, builds exactly
//! the tables the library renders, so the two cannot drift. (Postgres's
//! `migrations/postgres/` is checked in `tests/postgres.rs`.)

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;

#[path = "support/moved_rollups.rs"]
mod moved_rollups;

use workers_outbox::{Database, Inbox, Outbox, SqliteDatabase, Statement};

fn db() -> Arc<dyn Database> {
    Arc::new(SqliteDatabase::open_in_memory().expect("in-memory SQLite opens"))
}

/// Runs every file of `migrations/` in order, as wrangler does.
async fn apply_migrations(db: &Arc<dyn Database>) {
    apply_migrations_where(db, |_| true).await;
}

/// Runs the files of `migrations/` whose name `wanted` accepts, in order.
async fn apply_migrations_where(db: &Arc<dyn Database>, wanted: impl Fn(&str) -> bool) {
    let mut files: Vec<_> = std::fs::read_dir("migrations")
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.is_file() && wanted(&path.to_string_lossy()))
        .collect();
    files.sort();
    for file in files {
        let sql = std::fs::read_to_string(&file).unwrap();
        let code = sql
            .lines()
            .filter(|line| !line.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n");
        // As wrangler splits: a trigger's body (BEGIN … END) is one statement.
        let mut statement = String::new();
        for piece in code.split_inclusive(';') {
            statement.push_str(piece);
            let upper = statement.trim().to_ascii_uppercase();
            if upper.starts_with("CREATE TRIGGER") && !upper.trim_end_matches(';').ends_with("END")
            {
                continue;
            }
            let text = statement.trim().trim_end_matches(';').trim().to_owned();
            statement.clear();
            if text.is_empty() {
                continue;
            }
            db.execute(&Statement::new(text, vec![]))
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        }
    }
}

/// Every column (name, type, not null, default, key position) and every
/// index (name, unique, partial, columns) of `table`.
async fn structure(db: &Arc<dyn Database>, table: &str) -> Vec<String> {
    let mut facts = Vec::new();
    let columns = db
        .query(&Statement::new(
            format!("SELECT name, type, \"notnull\", dflt_value, pk FROM pragma_table_info('{table}') ORDER BY name"),
            vec![],
        ))
        .await
        .unwrap();
    for row in columns.iter() {
        facts.push(format!(
            "column {} {} notnull={} default={:?} pk={}",
            row.get::<String>("name").unwrap(),
            row.get::<String>("type").unwrap(),
            row.get::<i64>("notnull").unwrap(),
            row.get::<Option<String>>("dflt_value").unwrap(),
            row.get::<i64>("pk").unwrap(),
        ));
    }
    let indexes = db
        .query(&Statement::new(
            format!(
                "SELECT l.name AS name, l.\"unique\" AS u, l.partial AS partial, \
                 (SELECT group_concat(name, ',') FROM pragma_index_info(l.name)) AS cols, \
                 (SELECT sql FROM sqlite_master m WHERE m.name = l.name) AS sql \
                 FROM pragma_index_list('{table}') l ORDER BY l.name"
            ),
            vec![],
        ))
        .await
        .unwrap();
    for row in indexes.iter() {
        let sql = row
            .get::<Option<String>>("sql")
            .unwrap()
            .unwrap_or_default();
        let condition = sql.split_once(" WHERE ").map(|(_, c)| c.to_owned());
        facts.push(format!(
            "index {} unique={} partial={} on ({}) where {:?}",
            row.get::<String>("name").unwrap(),
            row.get::<i64>("u").unwrap(),
            row.get::<i64>("partial").unwrap(),
            row.get::<Option<String>>("cols")
                .unwrap()
                .unwrap_or_default(),
            condition,
        ));
    }
    let options = db
        .query(&Statement::new(
            format!("SELECT strict, wr FROM pragma_table_list('{table}')"),
            vec![],
        ))
        .await
        .unwrap();
    for row in options.iter() {
        facts.push(format!(
            "strict={} without_rowid={}",
            row.get::<i64>("strict").unwrap(),
            row.get::<i64>("wr").unwrap()
        ));
    }
    facts
}

#[tokio::test]
async fn the_migrations_build_the_rendered_schema() {
    let migrated = db();
    apply_migrations(&migrated).await;
    let fresh = db();
    // The example seals both of its outboxes (with its development keys),
    // so their schema has the trigger that deletes a sealed message's key.
    let ring = || {
        workers_outbox::seal::KeyRing::builder()
            .hash_key(&[7; 32])
            .key("dev", &[9; 32])
            .build()
            .unwrap()
    };
    Outbox::builder(fresh.clone(), "outbox")
        .key_ring(ring())
        .build()
        .unwrap()
        .create_schema()
        .await
        .unwrap();
    Inbox::new(fresh.clone(), "inbox")
        .unwrap()
        .create_schema()
        .await
        .unwrap();
    // The example's second outbox, relayed into a Queue.
    Outbox::builder(fresh.clone(), "account_events")
        .key_ring(ring())
        .build()
        .unwrap()
        .create_schema()
        .await
        .unwrap();
    for table in [
        "outbox",
        "outbox_topics",
        "outbox_paused",
        "inbox",
        "account_events",
        "account_events_topics",
        "account_events_paused",
        "erased_subjects",
        "outbox_keys",
        "account_events_keys",
        "outbox_periods",
        "account_events_periods",
    ] {
        let expected = structure(&fresh, table).await;
        assert!(expected.len() > 3, "{table}: {expected:?}");
        assert_eq!(
            structure(&migrated, table).await,
            expected,
            "migrations/ build {table} differently from the library's schema"
        );
    }
    assert_eq!(
        triggers(&migrated).await,
        triggers(&fresh).await,
        "migrations/ build other triggers than the library's schema"
    );
}

/// Every trigger's name and text, by name.
async fn triggers(db: &Arc<dyn Database>) -> Vec<String> {
    let rows = db
        .query(&Statement::new(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name",
            vec![],
        ))
        .await
        .unwrap();
    let triggers: Vec<String> = rows
        .iter()
        .map(|row| {
            format!(
                "{}: {}",
                row.get::<String>("name").unwrap(),
                row.get::<String>("sql").unwrap()
            )
        })
        .collect();
    assert!(!triggers.is_empty(), "no trigger");
    triggers
}

#[tokio::test]
async fn the_rollup_periods_migration_moves_0_5s_counts_into_one_row_per_period_and_topic() {
    let db = db();
    apply_migrations_where(&db, |file| !file.contains("rollup_periods")).await;
    for (start, metric, le, count) in moved_rollups::OLD_ROWS {
        db.execute(&Statement::new(
            "INSERT INTO \"outbox_rollups\" (period_ms, period_start, topic, metric, le, count) \
             VALUES (60000, ?, 'mail', ?, ?, ?)",
            vec![start.into(), metric.into(), le.into(), count.into()],
        ))
        .await
        .unwrap();
    }
    apply_migrations_where(&db, |file| file.contains("rollup_periods")).await;
    moved_rollups::assert_moved(&Outbox::new(db.clone(), "outbox").unwrap()).await;
    let old = db
        .query(&Statement::new(
            "SELECT name FROM sqlite_master WHERE name LIKE '%_rollups'",
            vec![],
        ))
        .await
        .unwrap();
    assert!(old.is_empty(), "0.5's rollups tables are dropped");
}

#[tokio::test]
async fn every_migration_applies_cleanly_in_order() {
    let files = std::fs::read_dir("migrations")
        .unwrap()
        .filter(|entry| entry.as_ref().unwrap().path().is_file())
        .count();
    assert!(
        files >= 3,
        "expected the outbox, accounts and outbox 0.2 migrations"
    );
    apply_migrations(&db()).await;
}

#[test]
fn the_durable_examples_migration_is_the_fleets_schema() {
    let fleet = workers_outbox::fleet::Fleet::new(db(), "outbox_fleet").unwrap();
    let shipped =
        std::fs::read_to_string("examples/durable-webhooks/migrations/0001_outbox_fleet.sql")
            .unwrap();
    assert_eq!(
        shipped,
        fleet.schema_sql(),
        "examples/durable-webhooks/migrations/ must ship Fleet::schema_sql for outbox_fleet"
    );
}
