//! Rows the outbox did not write as it writes them, and times out of range.

use std::time::Duration;

use super::{CaseResult, Failure, Harness, LEASE, enqueue, ensure, ensure_eq};
use crate::database::value::Value;
use crate::error::Error;
use crate::outbox::{Delivery, Message, Outbox};
use crate::time::Timestamp;

/// An outbox table as a careless hand or an old migration might have made
/// it: no `STRICT` (an untyped payload where types are dynamic), a nullable
/// topic.
async fn loose_outbox(h: &Harness) -> Result<Outbox, Failure> {
    let table = h.table("loose");
    let payload = if h.capabilities().dynamic_typing {
        "payload"
    } else {
        "payload TEXT"
    };
    h.sql(
        &format!(
            "CREATE TABLE \"{table}\" (state TEXT NOT NULL, due_at INTEGER NOT NULL, id TEXT NOT NULL, \
             topic TEXT, {payload}, subject TEXT, dedup_key TEXT, ordering_key TEXT, seq INTEGER, \
             id_given INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0, lease_token TEXT, \
             last_error TEXT, created_at INTEGER NOT NULL, \
             unsettled_leases INTEGER NOT NULL DEFAULT 0, deferrals INTEGER NOT NULL DEFAULT 0, \
             traceparent TEXT, tracestate TEXT, became_due INTEGER, held_for TEXT, event_id TEXT, \
             PRIMARY KEY (state, due_at, id)) WITHOUT ROWID"
        ),
        vec![],
    )
    .await?;
    h.sql(
        &format!("CREATE UNIQUE INDEX \"{table}_dedup\" ON \"{table}\" (dedup_key) WHERE dedup_key IS NOT NULL"),
        vec![],
    )
    .await?;
    h.sql(
        &format!(
            "CREATE TABLE \"{table}_paused\" (topic TEXT NOT NULL PRIMARY KEY, reason TEXT NOT NULL, \
             paused_at INTEGER NOT NULL)"
        ),
        vec![],
    )
    .await?;
    let outbox = h.outbox_builder(h.db(), &table).build()?;
    // Postgres's claim floor, and the rollups and endpoints tables, as its
    // schema makes them.
    for statement in outbox.schema_statements() {
        let sql = statement.sql();
        if sql.contains("claim_")
            || sql.contains("late_due")
            || (sql.starts_with("CREATE")
                && ["_periods", "_endpoints", "_subscriptions", "_events"]
                    .iter()
                    .any(|t| sql.contains(t)))
        {
            h.db().execute(&statement).await?;
        }
    }
    Ok(outbox)
}

pub(crate) async fn malformed_rows_are_named_and_buried(h: Harness) -> CaseResult {
    let outbox = loose_outbox(&h).await?;
    let good = enqueue(&outbox, "mail").await?;
    let now = h.later(Duration::ZERO)?.as_unix_millis();
    let insert = format!(
        "INSERT INTO \"{}\" (state, due_at, id, topic, payload, created_at) VALUES ('ready', ?, ?, ?, ?, ?)",
        outbox.table()
    );
    for (id, topic, payload, created_at) in [
        (
            "bad-topic",
            Value::Null,
            Value::from("{}"),
            Value::from(now),
        ),
        (
            "bad-payload",
            Value::from("mail"),
            Value::from(42i64),
            Value::from(now),
        ),
        (
            "bad-created",
            Value::from("mail"),
            Value::from("{}"),
            Value::from(-5i64),
        ),
    ] {
        if !h.capabilities().dynamic_typing && id == "bad-payload" {
            // A typed column cannot hold a number where text belongs.
            continue;
        }
        h.sql(
            &insert,
            vec![now.into(), id.into(), topic, payload, created_at],
        )
        .await?;
    }

    let claim = outbox.claim(10, LEASE).await?;
    ensure_eq!(
        claim
            .messages
            .iter()
            .map(|m| m.id.clone())
            .collect::<Vec<_>>(),
        vec![good]
    );
    let mut named: Vec<(String, String)> = claim
        .malformed
        .iter()
        .map(|m| match &m.error {
            Error::MalformedRow {
                row: Some(row),
                column,
                ..
            } => Ok((row.clone(), column.clone())),
            other => Err(Failure(format!("unexpected {other:?}"))),
        })
        .collect::<Result<_, _>>()?;
    named.sort();
    let mut expected = vec![
        ("bad-created".to_owned(), "created_at".to_owned()),
        ("bad-payload".to_owned(), "payload".to_owned()),
        ("bad-topic".to_owned(), "topic".to_owned()),
    ];
    if !h.capabilities().dynamic_typing {
        expected.remove(1);
    }
    ensure_eq!(named, expected);

    // Each can be parked through its lease, so it stops coming back.
    let mut buried = Vec::new();
    for malformed in &claim.malformed {
        let lease = malformed
            .lease
            .as_ref()
            .ok_or_else(|| Failure("no lease on a malformed row".into()))?;
        buried.push((
            lease,
            Delivery::Permanent {
                error: malformed.error.to_string(),
            },
        ));
    }
    ensure_eq!(outbox.settle(&buried).await?.dead as usize, expected.len());
    h.clock().advance(LEASE);
    ensure!(
        outbox.claim(10, LEASE).await?.malformed.is_empty(),
        "a buried row came back"
    );

    // Reading them back names them too.
    let listed = outbox.list_dead(10, None).await;
    ensure!(
        matches!(&listed, Err(Error::MalformedRow { row: Some(row), .. }) if row.starts_with("bad-")),
        "got {listed:?}"
    );
    Ok(())
}

pub(crate) async fn times_out_of_range_are_refused(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    enqueue(&outbox, "mail").await?;
    let before = h.snapshot(&outbox).await?;
    h.clock()
        .set(Timestamp::MAX.saturating_sub(Duration::from_secs(1)));
    let claim = outbox.claim(10, LEASE).await;
    ensure!(
        matches!(
            claim,
            Err(Error::InvalidInput {
                what: "timestamp",
                ..
            })
        ),
        "got {claim:?}"
    );
    let leased = outbox.enqueue_leased(Message::raw_json("m", "{}"), LEASE);
    ensure!(
        matches!(
            leased,
            Err(Error::InvalidInput {
                what: "timestamp",
                ..
            })
        ),
        "got {:?}",
        leased.map(|l| l.id().to_owned())
    );
    ensure!(
        Timestamp::from_unix_millis(-1).is_err(),
        "a negative time was accepted"
    );
    ensure_eq!(h.snapshot(&outbox).await?, before);
    Ok(())
}
