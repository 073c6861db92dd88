//! The exact SQL of the operators' reads and writes (counts, pages, dead
//! letters, a subject's export and erasure, tombstones), per dialect,
//! pinned in `src/sql/pinned/<dialect>.sql`: a change of any statement's
//! text shows in review as a change of that file. After a deliberate
//! change, `PIN_SQL=write cargo test --lib pinned` writes the files anew.

use super::browse::{self, DeadWalk, Page, Walked};
use super::{dead_letters, endpoints, stats, tombstones};
use crate::database::{Dialect, Statement};
use crate::identifier::TableName;
use crate::time::Timestamp;

/// Every pinned statement of `dialect`, named.
fn pinned(dialect: Dialect) -> Vec<(&'static str, Statement)> {
    let table = TableName::new("outbox").unwrap();
    let tombstones_table = TableName::new("erased_subjects").unwrap();
    let t = &table;
    let forms = ["ada", "h:1f"];
    let page = |walked| Page {
        walked,
        after: None,
        limit: 50,
        scan: 1_000,
        topic: None,
        subject_forms: None,
        id_prefix: None,
    };
    let filtered = Page {
        after: Some((2_000, "m1")),
        topic: Some("mail"),
        subject_forms: Some(&forms),
        id_prefix: Some("01J"),
        ..page(Walked::Due)
    };
    let walk = DeadWalk {
        died_from: Some(500),
        died_by: Some(1_000),
        ..DeadWalk::default()
    };
    let of_topic = DeadWalk {
        topic: Some("mail"),
        subject_forms: Some(&forms),
        ..walk
    };
    let now = Timestamp::from_unix_millis(1_000).unwrap();
    let mut statements = vec![
        ("stats", stats::stats(t, dialect, 1_000).unwrap()),
        ("backlog", stats::backlog(t, dialect, 1_000, 100).unwrap()),
        ("overview", browse::overview(t, dialect, now, 200)),
        ("due now", browse::due_now(t, dialect, now, 50)),
        (
            "message at",
            browse::message_at(t, dialect, 2_000, "m1").unwrap(),
        ),
        ("heads", browse::heads(t, dialect, &["k1", "k2"]).remove(0)),
        (
            "reschedule now",
            browse::reschedule_now(t, dialect, 1_000, 2_000, "m1").unwrap(),
        ),
        (
            "dead keys",
            browse::dead_keys(t, dialect, &["m1".into(), "m2".into()]).unwrap(),
        ),
        ("purge one", browse::purge_one(t, dialect, "m1").unwrap()),
        (
            "dead scan",
            browse::dead_scan(t, dialect, &walk, 1_000).unwrap(),
        ),
        (
            "dead scan of a topic and subject",
            browse::dead_scan(t, dialect, &of_topic, 1_000).unwrap(),
        ),
        (
            "dead walk count",
            browse::dead_walk_count(t, dialect, &walk, 1_000).unwrap(),
        ),
        (
            "list dead",
            dead_letters::list_dead(t, dialect, 50, None).unwrap(),
        ),
        (
            "list dead after",
            dead_letters::list_dead(t, dialect, 50, Some((2_000, "m1"))).unwrap(),
        ),
        (
            "every message",
            dead_letters::every_message(t, dialect).unwrap(),
        ),
        (
            "purge dead",
            dead_letters::purge_dead(t, dialect, 1_000).unwrap(),
        ),
        (
            "replay one",
            dead_letters::replay(t, dialect, 1_000, Some("m1")).unwrap(),
        ),
        (
            "replay all",
            dead_letters::replay(t, dialect, 1_000, None).unwrap(),
        ),
        (
            "export subject",
            dead_letters::export_subject(t, dialect, &forms).unwrap(),
        ),
        (
            "hold erased successors",
            dead_letters::hold_erased_successors(t, dialect, &forms, 1_000).unwrap(),
        ),
        (
            "erase subject",
            dead_letters::erase_subject(t, dialect, &forms).unwrap(),
        ),
        (
            "erase events",
            endpoints::erase_events(t, dialect, &forms).unwrap(),
        ),
        (
            "tombstone",
            tombstones::tombstone(&tombstones_table, dialect, "h:1f", 1_000).unwrap(),
        ),
        (
            "forget tombstones",
            tombstones::forget(&tombstones_table, dialect, 1_000).unwrap(),
        ),
        (
            "read tombstone",
            tombstones::read(&tombstones_table, dialect, &forms).unwrap(),
        ),
        (
            "erased since",
            tombstones::erased_since(
                &tombstones_table,
                dialect,
                vec!["ada".into(), "h:1f".into()],
                1_000,
            )
            .unwrap(),
        ),
    ];
    for walked in [
        Walked::Due,
        Walked::Scheduled,
        Walked::Leased,
        Walked::Waiting,
        Walked::Dead,
    ] {
        let name = match walked {
            Walked::Due => "page of due",
            Walked::Scheduled => "page of scheduled (and where its walk ended)",
            Walked::Leased => "page of leased (and where its walk ended)",
            Walked::Waiting => "page of waiting",
            Walked::Dead => "page of dead",
        };
        for statement in browse::page(t, dialect, &page(walked), 1_000).unwrap() {
            statements.push((name, statement));
        }
    }
    for statement in browse::page(t, dialect, &filtered, 1_000).unwrap() {
        statements.push(("filtered page (and where its walk ended)", statement));
    }
    if dialect == Dialect::Sqlite {
        statements.push(("next due", stats::next_due(t).unwrap()));
    }
    statements
}

/// The pinned file's text: each statement under its name, with what it binds.
fn listing(statements: &[(&str, Statement)]) -> String {
    statements
        .iter()
        .map(|(name, statement)| {
            format!(
                "-- {name}\n{};\n-- binds {:?}\n",
                statement.sql(),
                statement.values()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn check(dialect: Dialect, file: &str) {
    let path = format!("{}/src/sql/pinned/{file}", env!("CARGO_MANIFEST_DIR"));
    let rendered = listing(&pinned(dialect));
    if std::env::var("PIN_SQL").as_deref() == Ok("write") {
        std::fs::write(&path, &rendered).unwrap();
    }
    let pinned = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        pinned == rendered,
        "{path} differs from what the statements render: review the change, \
         then write it with PIN_SQL=write cargo test --lib pinned\n\n{rendered}"
    );
}

#[test]
fn the_operators_sqlite_statements_are_as_pinned() {
    check(Dialect::Sqlite, "sqlite.sql");
}

#[test]
#[cfg(any(feature = "postgres", feature = "hyperdrive"))]
fn the_operators_postgres_statements_are_as_pinned() {
    check(Dialect::Postgres, "postgres.sql");
}
