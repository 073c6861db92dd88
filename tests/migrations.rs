//! `migrations/` (what wrangler applies to D1) holds exactly the DDL the
//! library renders for the example's tables, so the two cannot drift.

use std::sync::Arc;

use workers_outbox::{Database, Inbox, Outbox, SqliteDatabase};

fn db() -> Arc<dyn Database> {
    Arc::new(SqliteDatabase::open_in_memory().expect("in-memory SQLite opens"))
}

#[test]
fn the_outbox_migration_is_the_rendered_schema() {
    let db = db();
    let outbox = Outbox::new(db.clone(), "outbox").unwrap();
    let inbox = Inbox::new(db, "inbox").unwrap();
    let expected = format!("{}\n{}", outbox.schema_sql(), inbox.schema_sql());
    let shipped = std::fs::read_to_string("migrations/0001_workers_outbox.sql").unwrap();
    assert_eq!(
        shipped, expected,
        "migrations/0001_workers_outbox.sql differs from Outbox::schema_sql() + Inbox::schema_sql()"
    );
}

#[tokio::test]
async fn every_migration_applies_cleanly_in_order() {
    let db = db();
    let mut files: Vec<_> = std::fs::read_dir("migrations")
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    files.sort();
    assert!(
        files.len() >= 2,
        "expected the outbox and accounts migrations"
    );
    for file in files {
        let sql = std::fs::read_to_string(&file).unwrap();
        for statement in sql
            .lines()
            .filter(|line| !line.trim_start().starts_with("--"))
            .collect::<Vec<_>>()
            .join("\n")
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
        {
            db.execute(&workers_outbox::Statement::new(statement, vec![]))
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        }
    }
}
