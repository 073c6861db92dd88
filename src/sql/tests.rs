//! The exact SQL of every statement, per dialect. A statement outside
//! [`dialects`] must be the same in both, placeholders aside.

use super::claim::{ClaimSpec, claim, isolate, recovery};
use super::enqueue::{NewRow, insert};
use super::settle::{
    Retry, bury, complete_all, complete_one, promote_all_heads, promote_next, release,
    release_held, release_held_topic, retry,
};
use super::*;
use crate::database::value::Value;
use crate::database::{Dialect, Statement};
use crate::identifier::TableName;

fn at(millis: i64) -> Timestamp {
    Timestamp::from_unix_millis(millis).unwrap()
}

fn table(name: &str) -> TableName {
    TableName::new(name).unwrap()
}

fn text(value: &str) -> Value {
    Value::Text(value.into())
}

const NOW: i64 = 1_000;
const UNTIL: i64 = 61_000;

fn held() -> Fence<'static> {
    Fence {
        id: "m1",
        token: "tok",
        until: at(UNTIL),
    }
}

fn row() -> NewRow<'static> {
    NewRow {
        id: "m1",
        id_given: false,
        topic: "mail",
        payload: "{}",
        subject: Some("u1"),
        dedup_key: None,
        ordering_key: None,
        due_at: at(NOW),
        attempts: 0,
        lease_token: None,
        created_at: at(NOW),
        traceparent: Some(TRACE),
        tracestate: None,
    }
}

const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The fence's `WHERE` values, in order.
fn fence_values() -> Vec<Value> {
    vec![
        text("ready"),
        Value::Integer(UNTIL),
        text("m1"),
        text("tok"),
    ]
}

const FENCE: &str = r#""state" = ? AND "due_at" = ? AND "id" = ? AND "lease_token" = ?"#;

/// Every statement whose text does not depend on the dialect, rendered in
/// `dialect`, with the SQLite text and values it must have.
fn shared(dialect: Dialect) -> Vec<(&'static str, Statement, String, Vec<Value>)> {
    let (outbox, inbox) = (table("outbox"), table("inbox"));
    let alone = Fence {
        id: "m1",
        token: "tok2",
        until: at(NOW),
    };
    let failure = |charged| Retry {
        due: at(NOW),
        error: "boom",
        charged,
        attempt: 2,
        deferrals: 1,
        held_for: Some("mail @ api.example:443"),
    };
    let with_fence = |mut values: Vec<Value>| {
        values.extend(fence_values());
        values
    };
    // Postgres marks a row whose new due time is behind the pending claim
    // floor late (see `claim_floor`): one more column written, its due time
    // bound twice more. SQLite has no floor.
    let late_sql = |due: &str| {
        format!(
            r#"CASE WHEN pg_current_xact_id() IS NOT NULL THEN CASE WHEN {due} < (SELECT last_value FROM "outbox_claim_pending") THEN {due} END END"#
        )
    };
    let postgres = dialect == Dialect::Postgres;
    let late_of = |due: &str| {
        if postgres {
            format!(r#", "late_due" = {}"#, late_sql(due))
        } else {
            String::new()
        }
    };
    let late = late_of("?");
    let cleared = if postgres { r#", "late_due" = ?"# } else { "" };
    let promoted = late_of(r#""due_at""#);
    let late_column = if postgres { r#", "late_due""# } else { "" };
    let late_value = if postgres {
        format!(", {}", late_sql("?"))
    } else {
        String::new()
    };
    let bound_late = |mut values: Vec<Value>, due: i64| {
        if postgres {
            values.extend([Value::Integer(due), Value::Integer(due)]);
        }
        values
    };
    vec![
        (
            "recovery",
            recovery(&outbox, dialect, at(UNTIL), "tok", false).unwrap(),
            r#"SELECT "state", "id", "topic", "payload", "subject", "ordering_key", "attempts", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate", "became_due", "event_id", (SELECT "target" FROM "outbox_endpoints" WHERE "id" = "outbox"."topic") AS "endpoint_target" FROM "outbox" WHERE "state" = ? AND "due_at" = ? AND "lease_token" = ? ORDER BY "id" ASC"#.into(),
            vec![text("ready"), Value::Integer(UNTIL), text("tok")],
        ),
        (
            "isolate",
            isolate(&outbox, dialect, &held(), &alone, 3).unwrap(),
            format!(r#"UPDATE "outbox" SET "due_at" = ?, "lease_token" = ?, "attempts" = ?{late} WHERE ({FENCE}) OR ({FENCE})"#),
            [
                bound_late(vec![Value::Integer(NOW), text("tok2"), Value::Integer(3)], NOW),
                fence_values(),
                vec![text("ready"), Value::Integer(NOW), text("m1"), text("tok2")],
            ]
            .concat(),
        ),
        (
            "charged retry",
            retry(&outbox, dialect, &held(), &failure(true)).unwrap(),
            format!(r#"UPDATE "outbox" SET "due_at" = ?, "lease_token" = ?, "last_error" = ?, "held_for" = ?, "attempts" = ?, "unsettled_leases" = ?{late} WHERE {FENCE}"#),
            // Its own failure: held for no receiver.
            with_fence(bound_late(vec![Value::Integer(NOW), Value::Null, text("boom"), Value::Null, Value::Integer(2), Value::Integer(0)], NOW)),
        ),
        (
            "deferral",
            retry(&outbox, dialect, &held(), &failure(false)).unwrap(),
            format!(r#"UPDATE "outbox" SET "due_at" = ?, "lease_token" = ?, "last_error" = ?, "held_for" = ?, "attempts" = ?, "deferrals" = ?{late} WHERE {FENCE}"#),
            with_fence(bound_late(vec![Value::Integer(NOW), Value::Null, text("boom"), text("mail @ api.example:443"), Value::Integer(1), Value::Integer(2)], NOW)),
        ),
        (
            "bury",
            bury(&outbox, dialect, &held(), 2, "bad", at(NOW)).unwrap(),
            format!(r#"UPDATE "outbox" SET "state" = ?, "due_at" = ?, "lease_token" = ?, "attempts" = ?, "unsettled_leases" = ?, "last_error" = ?, "held_for" = ?{cleared} WHERE {FENCE}"#),
            with_fence(
                [
                    vec![text("dead"), Value::Integer(NOW), Value::Null, Value::Integer(2), Value::Integer(0), text("bad"), Value::Null],
                    if postgres { vec![Value::Null] } else { vec![] },
                ]
                .concat(),
            ),
        ),
        (
            "release",
            release(&outbox, dialect, &held(), 2, at(NOW), Some("mail")).unwrap(),
            format!(r#"UPDATE "outbox" SET "due_at" = ?, "lease_token" = ?, "attempts" = ?, "held_for" = ?{late} WHERE {FENCE}"#),
            with_fence(bound_late(vec![Value::Integer(NOW), Value::Null, Value::Integer(1), text("mail")], NOW)),
        ),
        (
            "release held of a resumed topic",
            release_held_topic(&outbox, dialect, "mail", at(NOW)).unwrap(),
            if postgres {
                format!(r#"UPDATE "outbox" SET "due_at" = ?, "held_for" = ?{late} WHERE "held_for" IS NOT NULL AND "topic" = ? AND "state" = ? AND "lease_token" IS NULL AND "due_at" > ?"#)
            } else {
                r#"UPDATE "outbox" SET "due_at" = ?, "held_for" = ? WHERE "state" = ? AND ("state", "due_at", "id") IN (SELECT "state", "due_at", "id" FROM "outbox" WHERE "held_for" >= ? AND "held_for" < ? AND "topic" = ? AND "lease_token" IS NULL AND "due_at" > ?)"#.to_owned()
            },
            if postgres {
                [
                    bound_late(vec![Value::Integer(NOW), Value::Null], NOW),
                    vec![text("mail"), text("ready"), Value::Integer(NOW)],
                ]
                .concat()
            } else {
                vec![Value::Integer(NOW), Value::Null, text("ready"), text("mail"), text("mail @!"), text("mail"), Value::Integer(NOW)]
            },
        ),
        (
            "release held",
            release_held(&outbox, dialect, "mail", at(NOW), 100).unwrap(),
            format!(r#"UPDATE "outbox" SET "due_at" = ?, "held_for" = ?{late} WHERE "held_for" = ? AND "state" = ? AND "lease_token" IS NULL AND "due_at" > ? AND ("due_at", "id") IN (SELECT "due_at", "id" FROM "outbox" WHERE "held_for" = ? AND "state" = ? AND "lease_token" IS NULL AND "due_at" > ? ORDER BY "due_at" ASC, "id" ASC LIMIT ?)"#),
            [
                bound_late(vec![Value::Integer(NOW), Value::Null], NOW),
                vec![text("mail"), text("ready"), Value::Integer(NOW)],
                vec![text("mail"), text("ready"), Value::Integer(NOW), Value::Integer(100)],
            ]
            .concat(),
        ),
        (
            "pause",
            pause::pause(&outbox, dialect, "hook", "gone", at(NOW)).unwrap(),
            r#"INSERT INTO "outbox_paused" ("topic", "reason", "paused_at") VALUES (?, ?, ?) ON CONFLICT ("topic") DO NOTHING"#.into(),
            vec![text("hook"), text("gone"), Value::Integer(NOW)],
        ),
        (
            "pause leased",
            pause::pause_leased(&outbox, dialect, &held(), "gone", at(NOW)).unwrap(),
            format!(r#"INSERT INTO "outbox_paused" ("topic", "reason", "paused_at") SELECT "topic", ?, ? FROM "outbox" WHERE {FENCE} ON CONFLICT ("topic") DO NOTHING"#),
            {
                let mut values = vec![text("gone"), Value::Integer(NOW)];
                values.extend(fence_values());
                values
            },
        ),
        (
            "resume",
            pause::resume(&outbox, dialect, "hook").unwrap(),
            r#"DELETE FROM "outbox_paused" WHERE "topic" = ?"#.into(),
            vec![text("hook")],
        ),
        (
            "paused",
            pause::paused(&outbox, dialect).unwrap(),
            r#"SELECT "topic", "reason", "paused_at" FROM "outbox_paused" ORDER BY "topic" ASC"#.into(),
            vec![],
        ),
        (
            "unlease if paused",
            pause::unlease_if_paused(&outbox, dialect, &held(), at(NOW)).unwrap(),
            format!(r#"UPDATE "outbox" SET "due_at" = ?, "lease_token" = ?{late} WHERE {FENCE} AND "topic" IN (SELECT "topic" FROM "outbox_paused")"#),
            with_fence(bound_late(vec![Value::Integer(NOW), Value::Null], NOW)),
        ),
        (
            "promote next",
            promote_next(&outbox, dialect, "k").unwrap(),
            format!(r#"UPDATE "outbox" SET "state" = ?{promoted} WHERE "state" = ? AND "ordering_key" = ? AND "seq" = (SELECT MIN("seq") FROM "outbox" WHERE "ordering_key" = ?)"#),
            vec![text("ready"), text("waiting"), text("k"), text("k")],
        ),
        (
            "promote all heads",
            promote_all_heads(&outbox, dialect).unwrap(),
            format!(r#"UPDATE "outbox" SET "state" = ?{promoted} WHERE "state" = ? AND "outbox"."seq" = (SELECT MIN("earlier"."seq") FROM "outbox" AS "earlier" WHERE "earlier"."ordering_key" = "outbox"."ordering_key")"#),
            vec![text("ready"), text("waiting")],
        ),
        (
            "insert",
            insert(&outbox, dialect, &row()).unwrap(),
            format!(r#"INSERT INTO "outbox" ("state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "seq", "id_given", "attempts", "lease_token", "created_at", "traceparent", "tracestate"{late_column}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?{late_value}) ON CONFLICT ("dedup_key") WHERE "dedup_key" IS NOT NULL DO NOTHING"#),
            bound_late(vec![
                text("ready"), Value::Integer(NOW), text("m1"), text("mail"), text("{}"), text("u1"),
                Value::Null, Value::Null, Value::Null, Value::Integer(0), Value::Integer(0), Value::Null,
                Value::Integer(NOW), text(TRACE), Value::Null,
            ], NOW),
        ),
        (
            "every owner's endpoints, a page",
            endpoints::select(
                &outbox,
                dialect,
                endpoints::Scope::Page { after: Some("ep_1"), limit: 2 },
            )
            .unwrap(),
            r#"SELECT "outbox_endpoints"."id", "outbox_endpoints"."owner", "outbox_endpoints"."target", "outbox_endpoints"."metadata", "outbox_endpoints"."state", "outbox_endpoints"."filter_field", "outbox_endpoints"."filter_value", "outbox_endpoints"."created_at", "outbox_endpoints"."updated_at", "outbox_paused"."reason" AS "held_reason", "outbox_paused"."paused_at" AS "held_at" FROM "outbox_endpoints" LEFT JOIN "outbox_paused" ON "outbox_paused"."topic" = "outbox_endpoints"."id" WHERE "outbox_endpoints"."id" > ? ORDER BY "outbox_endpoints"."id" ASC LIMIT ?"#.into(),
            vec![text("ep_1"), Value::Integer(2)],
        ),
        (
            "the subscriptions of a page of endpoints",
            endpoints::select_subscriptions(
                &outbox,
                dialect,
                endpoints::Scope::Page { after: None, limit: 2 },
            )
            .unwrap(),
            r#"SELECT "endpoint", "event_type" FROM "outbox_subscriptions" WHERE "endpoint" IN (SELECT "id" FROM "outbox_endpoints" ORDER BY "outbox_endpoints"."id" ASC LIMIT ?) ORDER BY "endpoint" ASC, "event_type" ASC"#.into(),
            vec![Value::Integer(2)],
        ),
        (
            "an audit page",
            super::audit::page(&outbox, dialect, Some((at(NOW), "a1")), 2).unwrap(),
            r#"SELECT "at", "id", "who", "role", "action", "selection", "result" FROM "outbox_audit" WHERE ("at", "id") < (?, ?) ORDER BY "at" DESC, "id" DESC LIMIT ?"#.into(),
            vec![Value::Integer(NOW), text("a1"), Value::Integer(2)],
        ),
        (
            "an alert told once per window",
            super::alerts::tell(
                &outbox,
                dialect,
                ("dead_letters:2:600s", at(NOW), "evt_1"),
                super::alerts::dead_since(&outbox, at(NOW), 2),
            )
            .unwrap(),
            r#"INSERT INTO "outbox_alerts" ("rule", "window_start", "told_by") SELECT CAST(? AS TEXT), CAST(? AS BIGINT), CAST(? AS TEXT) WHERE (NOT EXISTS(SELECT 1 FROM "outbox_alerts" WHERE "rule" = ? AND "window_start" >= ?)) AND (SELECT COUNT(*) FROM (SELECT 1 FROM "outbox" WHERE "state" = ? AND "due_at" >= ? LIMIT ?) AS "recent") >= ? ON CONFLICT ("rule") DO UPDATE SET "window_start" = "excluded"."window_start", "told_by" = "excluded"."told_by" WHERE "outbox_alerts"."window_start" < "excluded"."window_start""#.into(),
            vec![
                text("dead_letters:2:600s"), Value::Integer(NOW), text("evt_1"),
                text("dead_letters:2:600s"), Value::Integer(NOW), text("dead"),
                Value::Integer(NOW), Value::Integer(2), Value::Integer(2),
            ],
        ),
        (
            "inbox key",
            inbox::record(&inbox, dialect, "key", Some("u1"), at(NOW)).unwrap(),
            r#"INSERT INTO "inbox" ("key", "subject", "seen_at") VALUES (?, ?, ?)"#.into(),
            vec![text("key"), text("u1"), Value::Integer(NOW)],
        ),
        (
            "inbox seen",
            inbox::seen(&inbox, dialect, "key").unwrap(),
            r#"SELECT ? FROM "inbox" WHERE "key" = ?"#.into(),
            vec![Value::Integer(1), text("key")],
        ),
        (
            "inbox purge",
            inbox::purge(&inbox, dialect, at(NOW)).unwrap(),
            r#"DELETE FROM "inbox" WHERE "seen_at" < ?"#.into(),
            vec![Value::Integer(NOW)],
        ),
        (
            "inbox export",
            inbox::of_subject(&inbox, dialect, &["u1"]).unwrap(),
            r#"SELECT "key", "subject", "seen_at" FROM "inbox" WHERE "subject" = ? ORDER BY "seen_at" ASC"#.into(),
            vec![text("u1")],
        ),
        (
            "inbox erasure",
            inbox::erase_subject(&inbox, dialect, &["u1"]).unwrap(),
            r#"DELETE FROM "inbox" WHERE "subject" = ? RETURNING "key""#.into(),
            vec![text("u1")],
        ),
    ]
}

#[test]
fn shared_statements_in_sqlite() {
    for (name, statement, sql, values) in shared(Dialect::Sqlite) {
        assert_eq!(statement.sql(), sql, "{name}");
        assert_eq!(statement.values(), values, "{name}");
    }
}

#[test]
#[cfg(any(feature = "postgres", feature = "hyperdrive"))]
fn shared_statements_differ_in_postgres_only_by_placeholders() {
    for (name, statement, sql, values) in shared(Dialect::Postgres) {
        assert_eq!(
            statement.sql(),
            Dialect::Postgres.number_placeholders(&sql),
            "{name}"
        );
        assert_eq!(statement.values(), values, "{name}");
    }
}

fn spec() -> ClaimSpec<'static> {
    ClaimSpec {
        limit: 10,
        max_attempts: 5,
        now: at(NOW),
        until: at(UNTIL),
        token: "tok",
        sealed: false,
    }
}

/// The claim's `SET`, the same in both dialects but for `IFNULL`.
const CLAIM_SET: &str = r#"UPDATE "outbox" SET "state" = (CASE WHEN ("attempts" >= ?) THEN ? ELSE ? END), "due_at" = (CASE WHEN ("attempts" >= ?) THEN ? ELSE ? END), "lease_token" = ?, "became_due" = "due_at", "unsettled_leases" = (CASE WHEN ("lease_token" IS NOT NULL) THEN "unsettled_leases" + ? ELSE "unsettled_leases" END), "last_error" = (CASE WHEN ("attempts" >= ?) THEN (CASE WHEN ("lease_token" IS NOT NULL) THEN ? || IFNULL("last_error", ?) ELSE ? || IFNULL("last_error", ?) END) ELSE "last_error" END)"#;
const RETURNING: &str = r#"RETURNING "state", "id", "topic", "payload", "subject", "ordering_key", "attempts", "created_at", "unsettled_leases", "deferrals", "traceparent", "tracestate", "became_due", "event_id", (SELECT "target" FROM "outbox_endpoints" WHERE "id" = "outbox"."topic") AS "endpoint_target""#;

fn claim_set_values() -> Vec<Value> {
    vec![
        Value::Integer(5),
        text("dead"),
        text("ready"),
        Value::Integer(5),
        Value::Integer(NOW),
        Value::Integer(UNTIL),
        text("tok"),
        Value::Integer(1),
        Value::Integer(5),
        text(
            "attempts exhausted (5 of 5): the lease of the last attempt, delivered alone, expired \
             without a settle, so its outcome is unknown (the delivery may have crashed its \
             drainer, or succeeded and its settle was lost); last receiver error: ",
        ),
        text("none"),
        text("attempts exhausted: the retry policy allows 5; last error: "),
        text("none"),
        text("ready"),
    ]
}

#[test]
fn sqlite_claim_bounds_the_update_by_the_limit_th_due_row() {
    let statement = claim(&table("outbox"), Dialect::Sqlite, &spec()).unwrap();
    let boundary = r#"WITH "boundary" ("last_due", "last_id") AS  MATERIALIZED (SELECT "due_at", "id" FROM "outbox" WHERE "state" = ? AND "due_at" <= ? AND ((NOT EXISTS(SELECT 1 FROM "outbox_paused")) OR "outbox"."topic" NOT IN (SELECT "topic" FROM "outbox_paused")) ORDER BY "due_at" ASC, "id" ASC LIMIT ? OFFSET ?)"#;
    let bound = r#"WHERE "outbox"."state" = ? AND ((NOT EXISTS(SELECT 1 FROM "outbox_paused")) OR "outbox"."topic" NOT IN (SELECT "topic" FROM "outbox_paused")) AND ("due_at", "id") <= (IFNULL((SELECT "last_due" FROM "boundary"), ?), IFNULL((SELECT "last_id" FROM "boundary"), ?))"#;
    assert_eq!(
        statement.sql(),
        format!("{boundary} {CLAIM_SET} {bound} {RETURNING}")
    );
    // The boundary is the 10th due row: LIMIT 1 OFFSET 9.
    let mut values = vec![
        text("ready"),
        Value::Integer(NOW),
        Value::Integer(1),
        Value::Integer(9),
    ];
    values.extend(claim_set_values());
    values.extend([Value::Integer(NOW), Value::Blob(Vec::new())]);
    assert_eq!(statement.values(), values);
}

#[test]
#[cfg(any(feature = "postgres", feature = "hyperdrive"))]
fn postgres_claim_locks_the_first_due_rows_no_one_holds() {
    let statement = claim(&table("outbox"), Dialect::Postgres, &spec()).unwrap();
    let not_paused = r#"((NOT EXISTS(SELECT 1 FROM "outbox_paused")) OR "outbox"."topic" NOT IN (SELECT "topic" FROM "outbox_paused"))"#;
    let columns = r#"("claimed_due", "claimed_id", "claimed_row")"#;
    let picked = format!(
        r#"WITH "ahead" {columns} AS  MATERIALIZED (SELECT "due_at", "id", "ctid" FROM "outbox" WHERE "state" = ? AND "due_at" <= ? AND {not_paused} AND "due_at" >= ((SELECT last_value FROM "outbox_claim_floor")) AND "late_due" IS NULL ORDER BY "due_at" ASC, "id" ASC LIMIT ? FOR UPDATE SKIP LOCKED) , "behind" {columns} AS  MATERIALIZED (SELECT "due_at", "id", "ctid" FROM "outbox" WHERE "late_due" IS NOT NULL AND "late_due" <= ? AND {not_paused} ORDER BY "late_due" ASC, "id" ASC LIMIT ? FOR UPDATE SKIP LOCKED) , "picked" AS (SELECT "claimed_due", "claimed_id", "claimed_row" FROM (SELECT "claimed_due", "claimed_id", "claimed_row" FROM "ahead" UNION ALL (SELECT "claimed_due", "claimed_id", "claimed_row" FROM "behind")) AS "candidates" ORDER BY "claimed_due" ASC, "claimed_id" ASC LIMIT ?)"#
    );
    let late = r#", "late_due" = (CASE WHEN ("attempts" >= ?) THEN ? ELSE CASE WHEN pg_current_xact_id() IS NOT NULL THEN CASE WHEN ? < (SELECT last_value FROM "outbox_claim_pending") THEN ? END END END)"#;
    let joined =
        format!(r#"FROM "picked" WHERE {not_paused} AND "outbox"."ctid" = "picked"."claimed_row""#);
    let expected = format!(
        r#"{picked} {}{late} {joined} {RETURNING}, "picked"."claimed_due""#,
        CLAIM_SET.replace("IFNULL", "COALESCE")
    );
    assert_eq!(
        statement.sql(),
        Dialect::Postgres.number_placeholders(&expected)
    );
    let mut values = vec![
        text("ready"),
        Value::Integer(NOW),
        Value::Integer(10),
        Value::Integer(NOW),
        Value::Integer(10),
        Value::Integer(10),
    ];
    values.extend(claim_set_values());
    // The joined `WHERE` binds no state on Postgres; the lease's end is
    // bound for `late_due`.
    values.pop();
    values.extend([
        Value::Integer(5),
        Value::Null,
        Value::Integer(UNTIL),
        Value::Integer(UNTIL),
    ]);
    assert_eq!(statement.values(), values);
}

fn ordered_row() -> NewRow<'static> {
    NewRow {
        ordering_key: Some("k"),
        dedup_key: Some("d"),
        ..row()
    }
}

const ORDERED_INSERT: &str = r#"INSERT INTO "outbox" ("state", "due_at", "id", "topic", "payload", "subject", "dedup_key", "ordering_key", "seq", "id_given", "attempts", "lease_token", "created_at", "traceparent", "tracestate") SELECT (CASE WHEN ("key_state"."latest" IS NULL) THEN ? ELSE ? END), {due}, ?, ?, ?, ?, ?, ?, IFNULL("key_state"."latest", ?) + ?, ?, ?, ?, ?, ?, ? FROM (SELECT MAX("seq") AS "latest" FROM {latest}) AS "key_state" WHERE TRUE ON CONFLICT ("dedup_key") WHERE "dedup_key" IS NOT NULL DO NOTHING"#;

fn ordered_values() -> Vec<Value> {
    vec![
        text("ready"),
        text("waiting"),
        Value::Integer(NOW),
        text("m1"),
        text("mail"),
        text("{}"),
        text("u1"),
        text("d"),
        text("k"),
        Value::Integer(0),
        Value::Integer(1),
        Value::Integer(0),
        Value::Integer(0),
        Value::Null,
        Value::Integer(NOW),
        text(TRACE),
        Value::Null,
        text("k"),
    ]
}

#[test]
fn sqlite_ordered_insert_reads_the_keys_newest_row() {
    let statement = insert(&table("outbox"), Dialect::Sqlite, &ordered_row()).unwrap();
    assert_eq!(
        statement.sql(),
        ORDERED_INSERT
            .replace("{latest}", r#""outbox" WHERE "ordering_key" = ?"#)
            .replace("{due}", "?")
    );
    assert_eq!(statement.values(), ordered_values());
}

#[test]
#[cfg(any(feature = "postgres", feature = "hyperdrive"))]
fn postgres_ordered_insert_locks_the_keys_newest_row() {
    let statement = insert(&table("outbox"), Dialect::Postgres, &ordered_row()).unwrap();
    let latest = r#"(SELECT "seq" FROM "outbox" WHERE "ordering_key" = ? ORDER BY "seq" DESC LIMIT ? FOR UPDATE) AS "newest""#;
    let expected = ORDERED_INSERT
        .replace("{latest}", latest)
        .replace("{due}", "?")
        .replace(r#", "tracestate")"#, r#", "tracestate", "late_due")"#)
        .replace(
            ", ? FROM (SELECT MAX",
            r#", ?, (CASE WHEN ("key_state"."latest" IS NULL) THEN CASE WHEN pg_current_xact_id() IS NOT NULL THEN CASE WHEN ? < (SELECT last_value FROM "outbox_claim_pending") THEN ? END END END) FROM (SELECT MAX"#,
        )
        .replace("IFNULL", "COALESCE");
    assert_eq!(
        statement.sql(),
        Dialect::Postgres.number_placeholders(&expected)
    );
    let mut values = ordered_values();
    // The due time twice more, for `late_due`, before the key's.
    values.insert(values.len() - 1, Value::Integer(NOW));
    values.insert(values.len() - 1, Value::Integer(NOW));
    values.push(Value::Integer(1));
    assert_eq!(statement.values(), values);
}

#[test]
fn sqlite_erasure_guard_copies_the_tombstone_onto_itself() {
    let guard = dialects::of(Dialect::Sqlite)
        .erasure_guard(&table("erased_subjects"), "u1", None, at(NOW))
        .unwrap();
    assert_eq!(guard.len(), 1);
    assert_eq!(
        guard[0].sql(),
        r#"INSERT INTO "erased_subjects" ("subject", "erased_at") SELECT "subject", "erased_at" FROM "erased_subjects" WHERE "subject" = ? AND "erased_at" >= ?"#
    );
    assert_eq!(guard[0].values(), [text("u1"), Value::Integer(NOW)]);
}

#[test]
#[cfg(any(feature = "postgres", feature = "hyperdrive"))]
fn postgres_erasure_guard_takes_and_gives_back_the_key() {
    let guard = dialects::of(Dialect::Postgres)
        .erasure_guard(&table("erased_subjects"), "u1", None, at(NOW))
        .unwrap();
    let sql: Vec<&str> = guard.iter().map(Statement::sql).collect();
    assert_eq!(
        sql,
        [
            r#"DELETE FROM "erased_subjects" WHERE "subject" = $1 AND "erased_at" < $2"#,
            r#"INSERT INTO "erased_subjects" ("subject", "erased_at") VALUES ($1, $2)"#,
            r#"DELETE FROM "erased_subjects" WHERE "subject" = $1 AND "erased_at" = $2"#,
        ]
    );
    let mark = Value::Integer(tombstone_col::GUARD_MARK);
    assert_eq!(guard[0].values(), [text("u1"), Value::Integer(NOW)]);
    assert_eq!(guard[1].values(), [text("u1"), mark.clone()]);
    assert_eq!(guard[2].values(), [text("u1"), mark]);
}

fn counted() -> rollups::Counted<'static> {
    rollups::Counted {
        fence: held(),
        topic: "mail",
        outcome: rollups::metric::DELIVERED,
        lateness_ms: Some(30),
        age_ms: Some(4_000),
        duration_ms: None,
        counts_lost_leases: true,
        alone: false,
        tripped: false,
        unsettled: Some(2),
    }
}

#[test]
fn a_consoles_live_numbers_walk_at_most_the_cap_of_due_rows_and_the_oldest() {
    let statement = browse::due_now(&table("outbox"), Dialect::Sqlite, at(NOW), 50);
    assert_eq!(
        statement.sql(),
        r#"SELECT (SELECT count(*) FROM (SELECT 1 AS one FROM "outbox" WHERE state = 'ready' AND due_at <= ? ORDER BY due_at LIMIT ?) AS due_rows) AS due, (SELECT due_at FROM "outbox" WHERE state = 'ready' AND due_at <= ? ORDER BY due_at LIMIT 1) AS oldest_due_at"#
    );
    assert_eq!(
        statement.values(),
        [Value::Integer(NOW), Value::Integer(50), Value::Integer(NOW)]
    );
}

#[test]
fn a_delivered_row_alone_is_deleted_by_its_key_and_counted_by_its_changes() {
    let statement = complete_one(&table("outbox"), Dialect::Sqlite, &held()).unwrap();
    assert_eq!(
        statement.sql(),
        format!(r#"DELETE FROM "outbox" WHERE {FENCE}"#)
    );
    assert_eq!(statement.values(), fence_values());
}

#[test]
fn a_claims_listed_rows_are_deleted_and_checked_each_was_deleted() {
    let sqlite = dialects::of(Dialect::Sqlite)
        .complete_listed(&table("outbox"), "tok", at(UNTIL), &["m2", "m1", "m3"])
        .unwrap();
    let texts: Vec<&str> = sqlite.iter().map(Statement::sql).collect();
    assert_eq!(
        texts,
        [
            r#"DELETE FROM "outbox" WHERE state = 'ready' AND due_at = ? AND id >= ? AND id <= ? AND lease_token = ? AND instr(?, ' ' || id || ' ') > 0"#,
            "SELECT CASE WHEN changes() = ? THEN 0 ELSE json_extract('{}', '$' || changes() || ' workers-outbox: a listed delete was not exact') END AS exact",
        ]
    );
    assert_eq!(
        sqlite[0].values(),
        [
            Value::Integer(UNTIL),
            text("m1"),
            text("m3"),
            text("tok"),
            text(" m2 m1 m3 "),
        ]
    );
    assert_eq!(sqlite[1].values(), [Value::Integer(3)]);
    #[cfg(any(feature = "postgres", feature = "hyperdrive"))]
    {
        let postgres = dialects::of(Dialect::Postgres)
            .complete_listed(&table("outbox"), "tok", at(UNTIL), &["m2", "m1"])
            .unwrap();
        let texts: Vec<&str> = postgres.iter().map(Statement::sql).collect();
        assert_eq!(
            texts,
            [
                r#"WITH deleted AS (DELETE FROM "outbox" WHERE state = 'ready' AND due_at = $1 AND lease_token = $2 AND id = ANY(ARRAY(SELECT json_array_elements_text(CAST($3 AS TEXT)::json))) RETURNING 1) SELECT CASE WHEN COUNT(*) = $4 THEN 0 ELSE CAST(COUNT(*) || ' workers-outbox: a listed delete was not exact' AS INTEGER) END AS exact FROM deleted"#
            ]
        );
        assert_eq!(
            postgres[0].values(),
            [
                Value::Integer(UNTIL),
                text("tok"),
                text(r#"["m2","m1"]"#),
                Value::Integer(2)
            ]
        );
    }
}

#[test]
fn leases_known_settled_are_counted_without_reading_a_row() {
    let writes = rollups::RollupWrites::new(&table("outbox"), Dialect::Sqlite);
    let mut known = rollups::KnownCounts::default();
    assert!(counted_now(writes.count_known(&known, at(NOW))).is_empty());
    assert!(known.add(counted().changes_key()));
    assert!(known.add(counted().changes_key()));
    assert!(
        known.add(
            rollups::Counted {
                topic: "audit",
                lateness_ms: None,
                age_ms: None,
                counts_lost_leases: false,
                ..counted()
            }
            .changes_key()
        )
    );
    assert!(
        !known.add(
            rollups::Counted {
                unsettled: None,
                ..counted()
            }
            .changes_key()
        )
    );
    // One upsert per topic, in topic order, of the columns it adds to.
    let counts = counted_now(writes.count_known(&known, at(NOW)));
    let texts: Vec<&str> = counts.iter().map(Statement::sql).collect();
    assert_eq!(
        texts,
        [
            r#"INSERT INTO "outbox_periods" (period_ms, period_start, topic, delivered) VALUES (60000, ?, ?, ?) ON CONFLICT (period_ms, period_start, topic) DO UPDATE SET delivered = "outbox_periods".delivered + excluded.delivered"#,
            r#"INSERT INTO "outbox_periods" (period_ms, period_start, topic, delivered, lease_lost, lateness_ms_le_50, age_ms_le_5000) VALUES (60000, ?, ?, ?, ?, ?, ?) ON CONFLICT (period_ms, period_start, topic) DO UPDATE SET delivered = "outbox_periods".delivered + excluded.delivered, lease_lost = "outbox_periods".lease_lost + excluded.lease_lost, lateness_ms_le_50 = "outbox_periods".lateness_ms_le_50 + excluded.lateness_ms_le_50, age_ms_le_5000 = "outbox_periods".age_ms_le_5000 + excluded.age_ms_le_5000"#,
        ]
    );
    assert_eq!(
        counts[0].values(),
        [Value::Integer(0), text("audit"), Value::Integer(1)]
    );
    assert_eq!(
        counts[1].values(),
        [
            Value::Integer(0),
            text("mail"),
            Value::Integer(2),
            Value::Integer(4),
            Value::Integer(2),
            Value::Integer(2),
        ]
    );
    #[cfg(any(feature = "postgres", feature = "hyperdrive"))]
    {
        // Postgres: the same counts, per topic and column, added last.
        let postgres = rollups::RollupWrites::new(&table("outbox"), Dialect::Postgres);
        let last = counted_last(postgres.count_known(&known, at(NOW))).statements();
        assert_eq!(last.len(), 1);
        assert_eq!(last[0].sql(), ADD_COUNTS);
        let (delivered, lost, lateness, age) = (
            rollup_column("delivered"),
            rollup_column("lease_lost"),
            rollup_column("lateness_ms_le_50"),
            rollup_column("age_ms_le_5000"),
        );
        assert_eq!(
            last[0].values(),
            [
                text(&format!(
                    r#"[[0,"audit",{delivered},1],[0,"mail",{delivered},2],[0,"mail",{lost},4],[0,"mail",{lateness},2],[0,"mail",{age},2]]"#
                )),
                Value::Null,
                Value::Null,
                Value::Null,
            ]
        );
        assert!(
            counted_last(postgres.count_known(&rollups::KnownCounts::default(), at(NOW)))
                .statements()
                .is_empty()
        );
    }
}

/// The call that adds a transaction's counts on Postgres.
#[cfg(any(feature = "postgres", feature = "hyperdrive"))]
const ADD_COUNTS: &str = r#"SELECT "outbox_add_counts"(CAST($1 AS JSONB), CAST($2 AS BIGINT), CAST($3 AS BIGINT), CAST($4 AS TEXT)) AS added"#;

/// The statements of counts written where they stand (SQLite).
fn counted_now(counts: rollups::Counts) -> Vec<Statement> {
    match counts {
        rollups::Counts::Now(statements) => statements,
        rollups::Counts::Last(last) => panic!("added last: {last:?}"),
    }
}

/// Counts added last (Postgres).
#[cfg(any(feature = "postgres", feature = "hyperdrive"))]
fn counted_last(counts: rollups::Counts) -> rollups::CountsLast {
    match counts {
        rollups::Counts::Last(last) => last,
        rollups::Counts::Now(statements) => panic!("written where they stand: {statements:?}"),
    }
}

#[test]
fn one_statement_deletes_a_claims_delivered_rows_and_returns_each_it_deleted() {
    let sqlite = complete_all(
        &table("outbox"),
        Dialect::Sqlite,
        "tok",
        at(UNTIL),
        &["m1", "m2"],
    )
    .unwrap();
    assert_eq!(
        sqlite.sql(),
        r#"DELETE FROM "outbox" WHERE state = 'ready' AND due_at = ? AND lease_token = ? AND id IN (SELECT value FROM json_each(?)) RETURNING id"#
    );
    assert_eq!(
        sqlite.values(),
        [Value::Integer(UNTIL), text("tok"), text(r#"["m1","m2"]"#)]
    );
    #[cfg(any(feature = "postgres", feature = "hyperdrive"))]
    assert_eq!(
        complete_all(
            &table("outbox"),
            Dialect::Postgres,
            "tok",
            at(UNTIL),
            &["m1"]
        )
        .unwrap()
        .sql(),
        r#"DELETE FROM "outbox" WHERE state = 'ready' AND due_at = $1 AND lease_token = $2 AND id = ANY(ARRAY(SELECT json_array_elements_text(CAST($3 AS TEXT)::json))) RETURNING id"#
    );
}

/// The count columns of a rollup row, in the table's order.
fn rollup_columns() -> Vec<String> {
    let mut columns: Vec<String> = [
        "delivered",
        "retried",
        "deferred",
        "dead",
        "dead_at_claim",
        "handed_back",
        "lease_lost",
        "suspects_alone",
        "breaker_trips",
    ]
    .map(String::from)
    .to_vec();
    for histogram in ["lateness_ms", "age_ms", "duration_ms"] {
        for le in [
            "5", "10", "25", "50", "100", "250", "500", "1000", "2500", "5000", "10000", "30000",
            "60000", "300000", "900000", "3600000", "21600000", "86400000", "inf",
        ] {
            columns.push(format!("{histogram}_le_{le}"));
        }
    }
    columns
}

fn rollup_column(name: &str) -> usize {
    rollup_columns()
        .iter()
        .position(|column| column == name)
        .unwrap()
}

/// `INSERT INTO "outbox_periods" (…)` with every column.
fn rollups_insert() -> String {
    format!(
        r#"INSERT INTO "outbox_periods" (period_ms, period_start, topic, {})"#,
        rollup_columns().join(", ")
    )
}

/// The conflict clause of every rollup write: each count grows.
fn rollups_conflict() -> String {
    let added: Vec<String> = rollup_columns()
        .iter()
        .map(|c| format!(r#"{c} = "outbox_periods".{c} + excluded.{c}"#))
        .collect();
    format!(
        "ON CONFLICT (period_ms, period_start, topic) DO UPDATE SET {}",
        added.join(", ")
    )
}

/// Every count column summed from `(col, n)` rows.
fn rollups_pivot(col: &str, n: &str) -> String {
    (0..rollup_columns().len())
        .map(|i| format!("SUM(CASE WHEN {col} = {i} THEN {n} ELSE 0 END)"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[test]
fn a_rollup_row_has_a_column_per_counter_and_bucket_as_the_schema_makes_it() {
    let names: Vec<String> = rollups::count_columns()
        .map(|column| column.name())
        .collect();
    assert_eq!(names, rollup_columns());
    assert_eq!(names.len(), rollups::COUNT_COLUMNS);
    for (template, kind) in [
        (include_str!("../outbox/schema.sql"), "INTEGER"),
        (include_str!("../outbox/schema.postgres.sql"), "BIGINT"),
    ] {
        let table = template
            .split("CREATE TABLE IF NOT EXISTS \"{table}_periods\" (")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .unwrap();
        let declared: Vec<&str> = table
            .lines()
            .map(str::trim)
            .filter(|line| line.ends_with(&format!("{kind} NOT NULL DEFAULT 0,")))
            .map(|line| line.split_whitespace().next().unwrap())
            .collect();
        assert_eq!(declared, names, "{template:.40}");
    }
}

#[test]
fn a_deletes_count_rides_on_the_rows_it_changed_into_one_rollup_row() {
    let writes = rollups::RollupWrites::new(&table("outbox"), Dialect::Sqlite);
    assert!(writes.counts_changes());
    let key = counted().changes_key().unwrap();
    let count = writes.count_changes(&key, at(NOW)).unwrap();
    // The columns it adds to, each what one deleted row adds: 1 to
    // delivered and its buckets, its unsettled leases to lease_lost.
    assert_eq!(
        count.sql(),
        r#"INSERT INTO "outbox_periods" (period_ms, period_start, topic, delivered, lease_lost, lateness_ms_le_50, age_ms_le_5000) SELECT 60000, ?, ?, changes() * ?, changes() * ?, changes() * ?, changes() * ? WHERE changes() > 0 ON CONFLICT (period_ms, period_start, topic) DO UPDATE SET delivered = "outbox_periods".delivered + excluded.delivered, lease_lost = "outbox_periods".lease_lost + excluded.lease_lost, lateness_ms_le_50 = "outbox_periods".lateness_ms_le_50 + excluded.lateness_ms_le_50, age_ms_le_5000 = "outbox_periods".age_ms_le_5000 + excluded.age_ms_le_5000"#
    );
    assert_eq!(
        count.values(),
        [
            Value::Integer(0),
            text("mail"),
            Value::Integer(1),
            Value::Integer(2),
            Value::Integer(1),
            Value::Integer(1),
        ]
    );
    // No lost leases: nothing to lease_lost; unknown ones: counted by reading.
    let none_lost = rollups::Counted {
        unsettled: Some(0),
        ..counted()
    };
    let none_lost = writes
        .count_changes(&none_lost.changes_key().unwrap(), at(NOW))
        .unwrap();
    assert!(none_lost.sql().contains(
        "(period_ms, period_start, topic, delivered, lateness_ms_le_50, age_ms_le_5000) SELECT"
    ));
    assert!(
        rollups::Counted {
            unsettled: None,
            ..counted()
        }
        .changes_key()
        .is_none()
    );
    #[cfg(any(feature = "postgres", feature = "hyperdrive"))]
    assert!(!rollups::RollupWrites::new(&table("outbox"), Dialect::Postgres).counts_changes());
}

#[test]
fn every_outcome_and_bucket_has_its_column() {
    let writes = rollups::RollupWrites::new(&table("outbox"), Dialect::Sqlite);
    let outcomes = [
        rollups::metric::DELIVERED,
        rollups::metric::RETRIED,
        rollups::metric::DEFERRED,
        rollups::metric::DEAD,
        rollups::metric::HANDED_BACK,
    ];
    for outcome in outcomes {
        for ms in [0, 5, 6, 86_400_000, 86_400_001] {
            let lease = rollups::Counted {
                outcome,
                lateness_ms: Some(ms),
                age_ms: Some(ms),
                duration_ms: Some(ms),
                alone: true,
                tripped: true,
                ..counted()
            };
            let count = writes
                .count_changes(&lease.changes_key().unwrap(), at(NOW))
                .unwrap();
            // The outcome, 3 buckets, alone and tripped (1 each), 2 lost.
            let per: Vec<&Value> = count.values().iter().skip(2).collect();
            assert_eq!(per.len(), 7, "{outcome} {ms}");
            let sum: i64 = per
                .iter()
                .map(|value| match value {
                    Value::Integer(n) => *n,
                    other => panic!("{other:?}"),
                })
                .sum();
            assert_eq!(sum, 1 + 3 + 1 + 1 + 2, "{outcome} {ms}");
            let bucket = match ms {
                0 | 5 => "5",
                6 => "10",
                86_400_000 => "86400000",
                _ => "inf",
            };
            assert!(
                count.sql().contains(&format!(
                    "(period_ms, period_start, topic, {outcome}, lease_lost, suspects_alone, breaker_trips, lateness_ms_le_{bucket}, age_ms_le_{bucket}, duration_ms_le_{bucket}) SELECT"
                )),
                "{}",
                count.sql()
            );
        }
    }
}

#[test]
fn a_settles_count_reads_the_leased_rows_as_they_are_before_the_settle() {
    let outbox = table("outbox");
    let writes = rollups::RollupWrites::new(&outbox, Dialect::Sqlite);
    let sqlite = writes
        .count_settles(&[counted()], at(NOW))
        .unwrap()
        .unwrap();
    assert!(sqlite.last.is_none());
    assert_eq!(
        sqlite.count.sql(),
        format!(
            r#"WITH groups AS MATERIALIZED (SELECT json_extract(g.value, '$[0]') AS topic, json_extract(g.value, '$[1]') AS token, json_extract(g.value, '$[2]') AS until, json_extract(g.value, '$[3]') AS signature, json_extract(g.value, '$[4]') AS ids FROM json_each(?) AS g), packed AS MATERIALIZED (SELECT groups.topic AS topic, groups.signature AS signature, (SELECT COALESCE(SUM(1 + (MIN(MAX("outbox".unsettled_leases, 0), 65535) << 32)), 0) FROM json_each(groups.ids) AS i CROSS JOIN "outbox" WHERE "outbox".state = 'ready' AND "outbox".due_at = groups.until AND "outbox".id = i.value AND "outbox".lease_token = groups.token) AS packed FROM groups), held AS MATERIALIZED (SELECT topic, signature, packed & 4294967295 AS leases, packed >> 32 AS lost FROM packed) {insert} SELECT 60000, ?, c.topic, {pivot} FROM (SELECT held.topic AS topic, json_extract(m.value, '$[0]') AS col, CASE WHEN json_extract(m.value, '$[1]') = 1 THEN lost ELSE leases END AS n FROM held CROSS JOIN json_each(?, '$[' || held.signature || ']') AS m) AS c WHERE c.n > 0 GROUP BY c.topic ORDER BY c.topic {conflict}"#,
            insert = rollups_insert(),
            pivot = rollups_pivot("c.col", "c.n"),
            conflict = rollups_conflict(),
        )
    );
    // One group per topic, claim token, lease end and signature, with its
    // ids (a lease listed twice counts once); then the minute, then each
    // signature's columns (index, counted from the row's lost leases).
    let other_claim = rollups::Counted {
        fence: Fence {
            token: "tok2",
            ..held()
        },
        ..counted()
    };
    let other_row = rollups::Counted {
        fence: Fence { id: "m2", ..held() },
        ..counted()
    };
    let failed = rollups::Counted {
        fence: Fence { id: "m3", ..held() },
        outcome: rollups::metric::RETRIED,
        lateness_ms: None,
        age_ms: None,
        ..counted()
    };
    let (delivered, retried, lateness, age, lost) = (
        rollup_column("delivered"),
        rollup_column("retried"),
        rollup_column("lateness_ms_le_50"),
        rollup_column("age_ms_le_5000"),
        rollup_column("lease_lost"),
    );
    assert_eq!(
        writes
            .count_settles(
                &[counted(), counted(), other_claim, other_row, failed],
                at(NOW)
            )
            .unwrap()
            .unwrap()
            .count
            .values(),
        [
            text(
                r#"[["mail","tok",61000,0,["m1","m2"]],["mail","tok2",61000,0,["m1"]],["mail","tok",61000,1,["m3"]]]"#
            ),
            Value::Integer(0),
            text(&format!(
                "[[[{delivered},0],[{lateness},0],[{age},0],[{lost},1]],[[{retried},0],[{lost},1]]]"
            )),
        ]
    );
    assert!(writes.count_settles(&[], at(NOW)).unwrap().is_none());
}

#[test]
#[cfg(any(feature = "postgres", feature = "hyperdrive"))]
fn a_postgres_settles_count_locks_the_rows_it_counts() {
    let postgres = rollups::RollupWrites::new(&table("outbox"), Dialect::Postgres)
        .count_settles(&[counted()], at(NOW))
        .unwrap()
        .unwrap();
    let sql = postgres.count.sql();
    assert!(
        sql.starts_with(r#"WITH groups AS MATERIALIZED (SELECT (g.entry ->> 0) AS topic, (g.entry ->> 1) AS token, (g.entry ->> 2)::bigint AS until, (g.entry ->> 3)::bigint AS signature, (g.entry -> 4) AS ids FROM json_array_elements(CAST($1 AS TEXT)::json) AS g(entry))"#),
        "{sql}"
    );
    assert!(
        sql.contains(r#"FROM groups CROSS JOIN LATERAL json_array_elements_text(groups.ids) AS i(id) CROSS JOIN LATERAL (SELECT LEAST(GREATEST("outbox".unsettled_leases, 0), 65535) AS unsettled FROM "outbox" WHERE "outbox".state = 'ready' AND "outbox".due_at = groups.until AND "outbox".id = i.id AND "outbox".lease_token = groups.token FOR UPDATE) AS o) AS locked GROUP BY 1, 2)"#),
        "{sql}"
    );
    // It writes no rollup row: it stashes its counts, per topic and
    // column, in a setting of the transaction's, named after the table
    // (hex of "outbox") ...
    let stashed = "COALESCE(NULLIF(current_setting('workers_outbox.rollups_6f7574626f78', true), ''), '[]')::jsonb";
    assert!(!sql.contains("INSERT"), "{sql}");
    assert!(
        sql.contains(&format!("SELECT set_config('workers_outbox.rollups_6f7574626f78', ({stashed} || COALESCE((SELECT jsonb_agg(jsonb_build_array(CAST($2 AS BIGINT), topic, col, n)) FROM (SELECT c.topic AS topic, c.col AS col, SUM(c.n) AS n FROM (SELECT held.topic AS topic, (m.entry ->> 0)::bigint AS col, CASE WHEN (m.entry ->> 1)::bigint = 1 THEN lost ELSE leases END AS n FROM held CROSS JOIN LATERAL json_array_elements(CAST($3 AS TEXT)::json -> CAST(held.signature AS INTEGER)) AS m(entry)) AS c GROUP BY 1, 2 HAVING SUM(c.n) > 0) AS s), '[]'::jsonb))::text, true) AS stashed")),
        "{sql}"
    );
    // ... which the last statement of the transaction adds to the topics'
    // rollup rows, with every other count of the transaction.
    let last = postgres.last.expect("a stash to add").statements();
    assert_eq!(last.len(), 1);
    assert_eq!(last[0].sql(), ADD_COUNTS);
    assert_eq!(
        last[0].values(),
        [text("[]"), Value::Null, Value::Null, Value::Null]
    );
}

#[test]
fn a_claims_deaths_are_counted_by_its_token() {
    let statements = counted_now(
        rollups::RollupWrites::new(&table("outbox"), Dialect::Sqlite)
            .count_claim_deaths(at(NOW), "tok"),
    );
    let [statement] = statements.as_slice() else {
        panic!("{statements:?}");
    };
    assert_eq!(
        statement.sql(),
        r#"INSERT INTO "outbox_periods" (period_ms, period_start, topic, dead_at_claim) SELECT 60000, ?, COALESCE(CAST(topic AS TEXT), ''), 1 FROM "outbox" WHERE state = 'dead' AND due_at = ? AND lease_token = ? ON CONFLICT (period_ms, period_start, topic) DO UPDATE SET dead_at_claim = "outbox_periods".dead_at_claim + excluded.dead_at_claim"#
    );
    assert_eq!(
        statement.values(),
        [Value::Integer(0), Value::Integer(NOW), text("tok")]
    );
}

/// On Postgres every count of a transaction is added by its last
/// statement: a settle's known counts, its stash and its claim's deaths.
#[test]
#[cfg(any(feature = "postgres", feature = "hyperdrive"))]
fn a_postgres_transaction_adds_its_counts_in_one_last_statement() {
    let writes = rollups::RollupWrites::new(&table("outbox"), Dialect::Postgres);
    let deaths = counted_last(writes.count_claim_deaths(at(NOW), "tok"));
    let statements = deaths.statements();
    assert_eq!(statements.len(), 1);
    assert_eq!(statements[0].sql(), ADD_COUNTS);
    assert_eq!(
        statements[0].values(),
        [
            text("[]"),
            Value::Integer(0),
            Value::Integer(NOW),
            text("tok")
        ]
    );
    let mut known = rollups::KnownCounts::default();
    assert!(known.add(counted().changes_key()));
    let stashed = writes
        .count_settles(&[counted()], at(NOW))
        .unwrap()
        .unwrap()
        .last;
    let mut gathered = None;
    rollups::CountsLast::gather(&mut gathered, stashed.as_ref());
    rollups::CountsLast::gather(
        &mut gathered,
        Some(&counted_last(writes.count_known(&known, at(NOW)))),
    );
    rollups::CountsLast::gather(&mut gathered, None);
    rollups::CountsLast::gather(&mut gathered, Some(&deaths));
    let statements = gathered.clone().unwrap().statements();
    assert_eq!(statements.len(), 1);
    assert_eq!(
        statements[0].values()[1..],
        [Value::Integer(0), Value::Integer(NOW), text("tok")]
    );
    assert_eq!(
        statements[0].values()[0],
        text(&format!(
            r#"[[0,"mail",{},1],[0,"mail",{},2],[0,"mail",{},1],[0,"mail",{},1]]"#,
            rollup_column("delivered"),
            rollup_column("lease_lost"),
            rollup_column("lateness_ms_le_50"),
            rollup_column("age_ms_le_5000"),
        ))
    );
    // A second claim (which no call of the library makes) is counted by a
    // statement of its own.
    let mut twice = gathered.unwrap();
    twice.add(&deaths);
    let statements = twice.statements();
    assert_eq!(statements.len(), 2);
    assert_eq!(
        statements[1].values(),
        [
            text("[]"),
            Value::Integer(0),
            Value::Integer(NOW),
            text("tok")
        ]
    );
}

#[test]
fn retention_folds_old_minutes_once_in_each_dialect() {
    let summed: Vec<String> = rollup_columns()
        .iter()
        .map(|c| format!("SUM({c})"))
        .collect();
    let fold = format!(
        "{} SELECT 3600000, period_start - period_start % 3600000, topic, {}",
        rollups_insert(),
        summed.join(", ")
    );
    let grouped = format!("GROUP BY 2, 3 ORDER BY 2, 3 {}", rollups_conflict());
    let minutes = "period_ms = 60000 AND period_start < ?";
    let forget = r#"DELETE FROM "outbox_periods" WHERE period_ms = 3600000 AND period_start < ?"#;
    let sqlite: Vec<String> = rollups::retention(&table("outbox"), Dialect::Sqlite, at(NOW))
        .iter()
        .map(|statement| statement.sql().to_owned())
        .collect();
    assert_eq!(
        sqlite,
        [
            format!(r#"{fold} FROM "outbox_periods" WHERE {minutes} {grouped}"#),
            format!(r#"DELETE FROM "outbox_periods" WHERE {minutes}"#),
            forget.to_owned(),
        ]
    );
    let postgres: Vec<String> = rollups::retention(&table("outbox"), Dialect::Postgres, at(NOW))
        .iter()
        .map(|statement| statement.sql().to_owned())
        .collect();
    assert_eq!(
        postgres,
        [
            Dialect::Postgres.number_placeholders(&format!(
                r#"WITH folded AS (DELETE FROM "outbox_periods" WHERE {minutes} RETURNING *) {fold} FROM folded {grouped}"#
            )),
            Dialect::Postgres.number_placeholders(forget),
        ]
    );
}

#[test]
fn a_rollups_read_sums_each_column_per_period_and_topic() {
    let summed: Vec<String> = rollup_columns()
        .iter()
        .map(|c| format!("CAST(SUM({c}) AS BIGINT) AS {c}"))
        .collect();
    let statement = rollups::read(
        &table("outbox"),
        Dialect::Sqlite,
        rollups::HOUR_MS,
        at(0),
        at(7_200_000),
    );
    assert_eq!(
        statement.sql(),
        format!(
            r#"SELECT period_start - period_start % ? AS period_start, topic, {} FROM "outbox_periods" WHERE period_ms IN (?, ?) AND period_start >= ? AND period_start < ? GROUP BY 1, 2 ORDER BY 1, 2"#,
            summed.join(", ")
        )
    );
    assert_eq!(
        statement.values(),
        [
            Value::Integer(3_600_000),
            Value::Integer(3_600_000),
            Value::Integer(60_000),
            Value::Integer(0),
            Value::Integer(7_200_000),
        ]
    );
}

#[test]
fn sqlite_keeps_no_claim_floor() {
    assert!(
        super::dialects::of(Dialect::Sqlite)
            .before_claim(&table("outbox"), at(NOW))
            .unwrap()
            .is_empty()
    );
    assert!(
        super::dialects::of(Dialect::Sqlite)
            .resume_topic(&table("outbox"), "hook")
            .is_empty()
    );
}

#[test]
#[cfg(any(feature = "postgres", feature = "hyperdrive"))]
fn postgres_moves_the_claim_floor_in_two_steps_under_a_tried_lock() {
    let steps = super::dialects::of(Dialect::Postgres)
        .before_claim(&table("outbox"), at(NOW))
        .unwrap();
    let lock =
        "pg_try_advisory_xact_lock(hashtext('workers-outbox claim floor'), hashtext('outbox'))";
    let first_due = r#"SELECT "due_at" FROM "outbox" WHERE "state" = ('ready') AND "due_at" >= ((SELECT last_value FROM "outbox_claim_floor")) AND "late_due" IS NULL AND ((NOT EXISTS(SELECT 1 FROM "outbox_paused")) OR "outbox"."topic" NOT IN (SELECT "topic" FROM "outbox_paused")) ORDER BY "due_at" ASC LIMIT 1"#;
    assert_eq!(steps.len(), 3);
    assert_eq!(
        steps[0].sql(),
        "SELECT set_config('jit', 'off', true), set_config('enable_bitmapscan', 'off', true)"
    );
    let steps = &steps[1..];
    assert_eq!(
        steps[0].sql(),
        format!(
            r#"SELECT setval('"outbox_claim_floor"', LEAST(v.pending, v.first_due)), setval('"outbox_claim_pending"', GREATEST(LEAST(v.pending, v.first_due), LEAST($1, v.first_due))), setval('"outbox_claim_fence"', -1) FROM (SELECT (SELECT last_value FROM "outbox_claim_pending") AS pending, ({first_due}) AS first_due WHERE CASE WHEN {lock} THEN (SELECT last_value FROM "outbox_claim_fence") >= 0 AND pg_snapshot_xmin(pg_current_snapshot())::text::bigint > (SELECT last_value FROM "outbox_claim_fence") ELSE FALSE END OFFSET 0) AS v"#
        )
    );
    assert_eq!(steps[0].values(), [Value::Integer(NOW - 250)]);
    assert_eq!(
        steps[1].sql(),
        format!(
            r#"SELECT CASE WHEN {lock} THEN CASE WHEN (SELECT last_value FROM "outbox_claim_fence") = -1 THEN setval('"outbox_claim_fence"', pg_current_xact_id()::text::bigint) END END"#
        )
    );
    assert!(steps[1].values().is_empty());
    let resume = super::dialects::of(Dialect::Postgres).resume_topic(&table("outbox"), "hook");
    assert_eq!(resume.len(), 2);
    assert_eq!(resume[0].sql(), "SELECT pg_current_xact_id()::text AS xid");
    assert_eq!(
        resume[1].sql(),
        r#"UPDATE "outbox" SET late_due = due_at WHERE state = 'ready' AND topic = $1 AND late_due IS NULL AND due_at < (SELECT last_value FROM "outbox_claim_pending")"#
    );
    assert_eq!(resume[1].values(), [text("hook")]);
}

#[test]
fn a_streak_remembers_its_start_and_tells_its_operator_once() {
    let failure = streaks::Failure {
        topic: "mail",
        failing_id: "m1",
        several: true,
        at: at(NOW),
        forget_before: at(NOW - 1000),
    };
    let event = events::EventRow {
        id: "evt_1",
        owner: "ops",
        event_type: "outbox.receiver.failing",
        payload: "{\"type\":1",
        filtered: "{\"type\":1",
        subject: None,
        ordering_key: None,
        at: at(NOW),
    };
    let outbox = table("outbox");
    let sqlite = Dialect::Sqlite;
    assert_eq!(
        streaks::failed(&outbox, sqlite, &failure).unwrap().sql(),
        r#"INSERT INTO "outbox_topics" ("topic", "failing_id", "several", "failed_at", "since", "told") VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT ("topic") DO UPDATE SET "several" = (CASE WHEN ("outbox_topics"."failed_at" < ?) THEN ? WHEN ("outbox_topics"."failing_id" <> ?) THEN ? WHEN (? = ?) THEN ? ELSE "outbox_topics"."several" END), "since" = (CASE WHEN ("outbox_topics"."failed_at" < ? AND "outbox_topics"."told" = ?) THEN ? ELSE IFNULL("outbox_topics"."since", "outbox_topics"."failed_at") END), "failing_id" = ?, "failed_at" = ?"#
    );
    let keep = streaks::keep_if_failing(
        &outbox,
        sqlite,
        ("mail", "ops"),
        &event,
        "{\"type\":1",
        at(NOW),
    )
    .unwrap();
    assert_eq!(
        keep.sql(),
        r#"INSERT INTO "outbox_events" ("id", "owner", "event_type", "payload", "subject", "created_at") SELECT CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), (((CAST(? AS TEXT) || CAST(? AS TEXT)) || CAST(((CAST(? AS BIGINT) - IFNULL("since", "failed_at")) / CAST(? AS BIGINT)) AS TEXT)) || (CAST(? AS TEXT) || CAST(IFNULL("since", "failed_at") AS TEXT))) || CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS BIGINT) FROM "outbox_topics" WHERE "topic" = ? AND "several" = ? AND "told" = ? AND IFNULL("since", "failed_at") <= ? AND "topic" NOT IN (SELECT "id" FROM "outbox_endpoints" WHERE "owner" = ?)"#
    );
    assert_eq!(
        streaks::mark_told(&outbox, sqlite, "mail", "evt_1")
            .unwrap()
            .sql(),
        r#"UPDATE "outbox_topics" SET "told" = ? WHERE "topic" = ? AND EXISTS(SELECT "id" FROM "outbox_events" WHERE "id" = ?)"#
    );
    assert_eq!(
        streaks::keep_if_told(&outbox, sqlite, "mail", &event)
            .unwrap()
            .sql(),
        r#"INSERT INTO "outbox_events" ("id", "owner", "event_type", "payload", "subject", "created_at") SELECT CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS BIGINT) FROM "outbox_topics" WHERE "topic" = ? AND "told" = ?"#
    );
    #[cfg(any(feature = "postgres", feature = "hyperdrive"))]
    assert!(
        streaks::keep_if_failing(
            &outbox,
            Dialect::Postgres,
            ("mail", "ops"),
            &event,
            "{",
            at(NOW)
        )
        .unwrap()
        .sql()
        .contains(r#"COALESCE("since", "failed_at") <= $15 AND "topic" NOT IN"#)
    );
}

#[test]
fn a_claims_deaths_are_told_as_events_of_its_token_and_fanned_out() {
    let deaths = events::ClaimDeaths {
        token: "tok",
        at: at(NOW),
        operator: "ops",
    };
    let keep = events::keep_claim_deaths(&table("outbox"), Dialect::Sqlite, &deaths).unwrap();
    assert_eq!(
        keep.sql(),
        r#"INSERT INTO "outbox_events" ("id", "owner", "event_type", "payload", "subject", "created_at") SELECT CAST(? AS TEXT) || (CAST(ROW_NUMBER() OVER (ORDER BY id) AS TEXT)), CAST(? AS TEXT), CAST(? AS TEXT), (((((CAST(? AS TEXT) || (json_quote("id"))) || CAST(? AS TEXT)) || (json_quote("topic"))) || CAST(? AS TEXT)) || (json_quote("last_error"))) || CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS BIGINT) FROM "outbox" WHERE "state" = ('dead') AND "due_at" = ? AND "lease_token" = ? AND "topic" NOT IN (SELECT "id" FROM "outbox_endpoints" WHERE "owner" = ?)"#
    );
    assert_eq!(keep.values()[0], text("evt_outbox_tok_"));
    let fan_out = events::fan_out_claim_deaths(&table("outbox"), Dialect::Sqlite, &deaths).unwrap();
    // The events the claim kept drive the fan-out: none kept, no endpoint is read.
    assert!(fan_out.sql().contains(
        r#" FROM (SELECT "id", "payload" FROM "outbox_events" WHERE "owner" = ? AND "created_at" = ? AND "id" LIKE ?) AS "kept" CROSS JOIN "outbox_endpoints" WHERE "outbox_endpoints"."owner" = ? "#
    ));
    assert_eq!(fan_out.values()[12], text("evt_outbox_tok_%"));
    #[cfg(any(feature = "postgres", feature = "hyperdrive"))]
    assert!(
        events::keep_claim_deaths(&table("outbox"), Dialect::Postgres, &deaths)
            .unwrap()
            .sql()
            .contains(r#"(CAST(to_json(CAST("last_error" AS TEXT)) AS TEXT))"#)
    );
}

#[test]
fn a_settle_calls_attempts_are_logged_by_one_statement_fenced_by_their_leases() {
    let log = attempts::log(&table("outbox"), Dialect::Sqlite, "[]").unwrap();
    assert_eq!(
        log.sql(),
        r#"INSERT INTO "outbox_attempts" (message_id, slot, topic, event_id, subject, attempt, at, status, duration_ms, outcome, error, headers, body) SELECT o.id, json_extract(g.value, '$[3]'), o.topic, o.event_id, o.subject, json_extract(g.value, '$[4]'), json_extract(g.value, '$[5]'), json_extract(g.value, '$[6]'), json_extract(g.value, '$[7]'), json_extract(g.value, '$[8]'), json_extract(g.value, '$[9]'), json_extract(g.value, '$[10]'), json_extract(g.value, '$[11]') FROM json_each(?) AS g CROSS JOIN "outbox" AS o WHERE o.state = 'ready' AND o.due_at = json_extract(g.value, '$[1]') AND o.id = json_extract(g.value, '$[0]') AND o.lease_token = json_extract(g.value, '$[2]') ON CONFLICT (message_id, slot) DO UPDATE SET topic = excluded.topic, event_id = excluded.event_id, subject = excluded.subject, attempt = excluded.attempt, at = excluded.at, status = excluded.status, duration_ms = excluded.duration_ms, outcome = excluded.outcome, error = excluded.error, headers = excluded.headers, body = excluded.body"#
    );
    assert_eq!(log.values(), [text("[]")]);
    #[cfg(any(feature = "postgres", feature = "hyperdrive"))]
    assert!(
        attempts::log(&table("outbox"), Dialect::Postgres, "[]")
            .unwrap()
            .sql()
            .contains("FROM json_array_elements(CAST($1 AS TEXT)::json) AS g(entry) CROSS JOIN \"outbox\" AS o WHERE o.state = 'ready' AND o.due_at = (g.entry ->> 1)::bigint")
    );
    let fence = Fence {
        id: "m1",
        token: "tok",
        until: at(NOW),
    };
    let row = attempts::LoggedRow {
        slot: 2,
        attempt: 3,
        at: at(NOW),
        status: None,
        duration_ms: 12,
        outcome: "retry",
        error: Some("timed out"),
        headers: "{}",
        body: "",
    };
    assert_eq!(
        attempts::entry(&fence, &row).to_string(),
        r#"["m1",1000,"tok",2,3,1000,null,12,"retry","timed out","{}",""]"#
    );
}

#[test]
fn sealed_payloads_keys_are_written_returned_forgotten_and_rewrapped_by_pinned_statements() {
    use crate::seal::WrappedKey;
    let outbox = table("outbox");
    let key = WrappedKey {
        id: "m1".into(),
        subject: "h1:x".into(),
        ring_key: "k1".into(),
        wrapped: "AAAA".into(),
    };
    let newer = WrappedKey {
        ring_key: "k2".into(),
        wrapped: "BBBB".into(),
        ..key.clone()
    };
    for (dialect, mark) in [(Dialect::Sqlite, "?"), (Dialect::Postgres, "$1")] {
        let insert = keys::insert(&outbox, dialect, &key, at(NOW)).unwrap();
        let sql = insert
            .sql()
            .replace("$2", "?")
            .replace("$3", "?")
            .replace("$4", "?")
            .replace("$5", "?");
        assert_eq!(
            sql,
            format!(
                r#"INSERT INTO "outbox_keys" ("id", "subject", "ring_key", "wrapped", "created_at") VALUES ({mark}, ?, ?, ?, ?) ON CONFLICT ("subject", "id") DO NOTHING"#
            ),
        );
        assert_eq!(
            insert.values(),
            [
                text("m1"),
                text("h1:x"),
                text("k1"),
                text("AAAA"),
                Value::Integer(NOW)
            ]
        );
        assert_eq!(
            keys::forget_subject(&outbox, dialect, "h1:x")
                .unwrap()
                .sql(),
            format!(r#"DELETE FROM "outbox_keys" WHERE "subject" = {mark}"#)
        );
        let rewrap = keys::rewrap(&outbox, dialect, "h1:x", &key, &newer).unwrap();
        assert_eq!(
            rewrap.values(),
            [
                text("k2"),
                text("BBBB"),
                text("h1:x"),
                text("m1"),
                text("AAAA")
            ]
        );
    }
    assert_eq!(
        keys::rewrap(&outbox, Dialect::Sqlite, "h1:x", &key, &newer)
            .unwrap()
            .sql(),
        r#"UPDATE "outbox_keys" SET "ring_key" = ?, "wrapped" = ? WHERE "subject" = ? AND "id" = ? AND "wrapped" = ?"#
    );
    assert_eq!(
        keys::of_ids(&outbox, Dialect::Sqlite, &["h1:x"], &["m1", "evt_2"])
            .unwrap()
            .sql(),
        r#"SELECT "subject", "id", "ring_key", "wrapped" FROM "outbox_keys" WHERE "subject" IN (SELECT value FROM json_each(?)) AND "id" IN (SELECT value FROM json_each(?))"#
    );
    assert_eq!(
        keys::page(&outbox, Dialect::Postgres, ("h1:x", "m0"), 100)
            .unwrap()
            .sql(),
        r#"SELECT "subject", "id", "ring_key", "wrapped" FROM "outbox_keys" WHERE ("subject", "id") > ($1, $2) ORDER BY "subject", "id" LIMIT $3"#
    );
    assert_eq!(
        keys::messages_page(&outbox, Dialect::Postgres, ("dead", 5, "m1"), 10)
            .unwrap()
            .sql(),
        r#"SELECT "state", "due_at", "id", "payload" FROM "outbox" WHERE ("state", "due_at", "id") > ($1, $2, $3) ORDER BY "state", "due_at", "id" LIMIT $4"#
    );
    assert_eq!(
        keys::reseal_message(&outbox, Dialect::Sqlite, ("dead", 5, "m1"), "old", "new")
            .unwrap()
            .sql(),
        r#"UPDATE "outbox" SET "payload" = ? WHERE "state" = ? AND "due_at" = ? AND "id" = ? AND "payload" = ?"#
    );
    assert_eq!(
        keys::events_page(&outbox, Dialect::Sqlite, "", 10)
            .unwrap()
            .sql(),
        r#"SELECT "id", "payload" FROM "outbox_events" WHERE "id" > ? ORDER BY "id" ASC LIMIT ?"#
    );
    assert_eq!(
        keys::reseal_event(&outbox, Dialect::Sqlite, "evt_1", "old", "new")
            .unwrap()
            .sql(),
        r#"UPDATE "outbox_events" SET "payload" = ? WHERE "id" = ? AND "payload" = ?"#
    );
}

#[test]
fn a_sealed_outboxs_claim_returns_each_rows_data_key_and_a_hold_keeps_its_error() {
    let outbox = table("outbox");
    let sealed = ClaimSpec {
        sealed: true,
        ..spec()
    };
    let sql = claim(&outbox, Dialect::Sqlite, &sealed)
        .unwrap()
        .sql()
        .to_owned();
    assert!(
        sql.ends_with(r#"(SELECT "ring_key" || ':' || "wrapped" FROM "outbox_keys" WHERE "outbox_keys"."subject" = "outbox"."subject" AND "outbox_keys"."id" = substr("outbox"."payload", 12, 26)) AS "sealed_key""#),
        "{sql}"
    );
    assert!(
        !claim(&outbox, Dialect::Sqlite, &spec())
            .unwrap()
            .sql()
            .contains("outbox_keys")
    );
    assert!(
        recovery(&outbox, Dialect::Postgres, at(UNTIL), "tok", true)
            .unwrap()
            .sql()
            .contains(r#"AS "sealed_key" FROM "outbox""#)
    );
    let hold = settle::hold(&outbox, Dialect::Sqlite, &held(), 2, at(NOW), "no key").unwrap();
    assert_eq!(
        hold.sql(),
        r#"UPDATE "outbox" SET "due_at" = ?, "lease_token" = ?, "attempts" = ?, "last_error" = ? WHERE "state" = ? AND "due_at" = ? AND "id" = ? AND "lease_token" = ?"#
    );
    assert_eq!(
        hold.values(),
        [
            Value::Integer(NOW),
            Value::Null,
            Value::Integer(1),
            text("no key"),
            text("ready"),
            Value::Integer(UNTIL),
            text("m1"),
            text("tok")
        ]
    );
}

#[test]
fn a_recovery_of_sealed_events_sends_the_events_the_caller_let_through() {
    let outbox = table("outbox");
    for dialect in [Dialect::Sqlite, Dialect::Postgres] {
        let statement = events::recover(
            &outbox,
            dialect,
            ("acme", "ep_1"),
            at(NOW),
            (at(NOW), 100),
            events::Filtered::Only(&["evt_1", "evt_2"]),
        )
        .unwrap();
        let sql = statement.sql();
        let listed = match dialect {
            Dialect::Sqlite => r#""outbox_events"."id" IN (SELECT value FROM json_each(?))"#,
            Dialect::Postgres => {
                r#""outbox_events"."id" = ANY(ARRAY(SELECT json_array_elements_text(CAST($"#
            }
        };
        assert!(sql.contains(listed), "{sql}");
        assert!(
            !sql.contains("json_extract") && !sql.contains("#>>"),
            "{sql}"
        );
        assert!(statement.values().contains(&text(r#"["evt_1","evt_2"]"#)));
    }
}
