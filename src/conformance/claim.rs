//! Claiming: one statement, due rows only, oldest first, never shared.

use std::collections::BTreeSet;
use std::time::Duration;

use futures_util::future::join3;

use super::{
    CaseResult, Failure, Harness, LEASE, enqueue, enqueue_message, ensure, ensure_eq, ids,
};
use crate::database::{Dialect, Statement};
use crate::error::Error;
use crate::outbox::Fate;
use crate::outbox::{Delivery, Message, Outbox};

pub(crate) async fn one_round_trip_per_claim_whatever_the_batch(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for _ in 0..60 {
        enqueue(&outbox, "mail").await?;
    }
    for limit in [1u32, 10, 49] {
        let before = h.counts();
        let claim = outbox.claim(limit, LEASE).await?;
        let after = h.counts();
        ensure_eq!(claim.messages.len(), limit as usize);
        ensure_eq!(after.round_trips - before.round_trips, 1);
        // The claim, the count of the rows it parked as dead, and (Postgres)
        // the steps of its floor.
        ensure_eq!(
            after.statements - before.statements,
            2 + crate::sql::dialects::of(outbox.dialect()).statements_before_claim()
        );
    }
    Ok(())
}

pub(crate) async fn takes_due_rows_oldest_first_up_to_the_limit(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let at = |seconds| h.later(Duration::from_secs(seconds));
    let message = |seconds| -> Result<Message, Failure> {
        Ok(Message::raw_json("mail", "{}").not_before(at(seconds)?))
    };
    let third = enqueue_message(&outbox, message(3)?).await?;
    let mut tied = vec![enqueue_message(&outbox, message(1)?).await?];
    let second = enqueue_message(&outbox, message(2)?).await?;
    tied.push(enqueue_message(&outbox, message(1)?).await?);
    tied.push(enqueue_message(&outbox, message(1)?).await?);
    tied.sort();
    h.clock().advance(Duration::from_secs(3));

    // A limit that cuts through rows due at the same time takes exactly
    // that many, in id order.
    ensure_eq!(ids(&outbox.claim(2, LEASE).await?), tied[..2].to_vec());
    ensure_eq!(
        ids(&outbox.claim(2, LEASE).await?),
        vec![tied[2].clone(), second]
    );
    ensure_eq!(ids(&outbox.claim(10, LEASE).await?), vec![third]);
    Ok(())
}

pub(crate) async fn sub_second_due_times_order_correctly(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let at = |millis| h.later(Duration::from_millis(millis));
    // As RFC 3339 text, "…:01.5Z" sorts before "…:01Z"; as integers it does not.
    let late =
        enqueue_message(&outbox, Message::raw_json("m", "{}").not_before(at(1_500)?)).await?;
    let whole =
        enqueue_message(&outbox, Message::raw_json("m", "{}").not_before(at(1_000)?)).await?;
    let early = enqueue_message(&outbox, Message::raw_json("m", "{}").not_before(at(500)?)).await?;
    h.clock().advance(Duration::from_millis(1_000));
    ensure_eq!(ids(&outbox.claim(10, LEASE).await?), vec![early, whole]);
    h.clock().advance(Duration::from_millis(500));
    ensure_eq!(ids(&outbox.claim(10, LEASE).await?), vec![late]);
    Ok(())
}

pub(crate) async fn leased_rows_are_skipped_until_the_lease_expires(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for _ in 0..3 {
        enqueue(&outbox, "mail").await?;
    }
    let first = outbox.claim(10, LEASE).await?;
    ensure_eq!(first.messages.len(), 3);
    ensure!(
        first.messages.iter().all(|m| m.attempt() == 1),
        "first attempts"
    );
    ensure!(
        outbox.claim(10, LEASE).await?.is_empty(),
        "re-claimed leased rows"
    );
    h.clock().advance(LEASE - Duration::from_millis(1));
    ensure!(
        outbox.claim(10, LEASE).await?.is_empty(),
        "claimed 1 ms early"
    );
    h.clock().advance(Duration::from_millis(1));
    let again = outbox.claim(10, LEASE).await?;
    ensure_eq!(ids(&again), ids(&first));
    // The lapsed leases spent no attempt; their rows come back suspects.
    ensure!(
        again
            .messages
            .iter()
            .all(|m| m.attempt() == 1 && m.unsettled_leases() == 1),
        "second claims"
    );
    ensure!(
        again.messages[0].lease() != first.messages[0].lease(),
        "a new lease reused the old token"
    );
    Ok(())
}

pub(crate) async fn overlapping_claims_never_share_a_row(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for _ in 0..20 {
        enqueue(&outbox, "mail").await?;
    }
    let (a, b, c) = join3(
        outbox.claim(8, LEASE),
        outbox.claim(8, LEASE),
        outbox.claim(8, LEASE),
    )
    .await;
    let all: Vec<String> = [a?, b?, c?].iter().flat_map(ids).collect();
    let distinct: BTreeSet<&String> = all.iter().collect();
    ensure_eq!(all.len(), 20);
    ensure_eq!(distinct.len(), 20);
    Ok(())
}

/// The query plan of `statement`, one detail line per step.
/// The statement's query plan, one step a line, in SQLite's words: `SCAN t`
/// reads the whole table, `SEARCH t` goes through an index.
async fn plan(h: &Harness, statement: &Statement) -> Result<Vec<String>, Failure> {
    if h.db().dialect() == Dialect::Postgres {
        return postgres_plan(h, statement).await;
    }
    let rows = h
        .sql(
            &format!("EXPLAIN QUERY PLAN {}", statement.sql()),
            statement.values().to_vec(),
        )
        .await?;
    rows.iter()
        .map(|row| row.get::<String>("detail").map_err(Failure::from))
        .collect()
}

/// Postgres costs a scan of a small table below any index, so the plan is
/// asked for with sequential scans priced out (`enable_seqscan = off`, for
/// this transaction only): a `Seq Scan` that remains means no index serves
/// the statement. Its lines are told in SQLite's words.
async fn postgres_plan(h: &Harness, statement: &Statement) -> Result<Vec<String>, Failure> {
    let outcomes =
        h.db.batch_atomic(&[
            Statement::new("SET LOCAL enable_seqscan = off", vec![]),
            Statement::new(
                format!("EXPLAIN {}", statement.sql()),
                statement.values().to_vec(),
            ),
        ])
        .await?;
    let lines = outcomes
        .last()
        .map(|outcome| {
            outcome
                .rows
                .iter()
                .map(|row| row.get::<String>("QUERY PLAN"))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()?
        .unwrap_or_default();
    // An index scan searches only with an `Index Cond` (or, for a bitmap
    // heap scan, a `Recheck Cond` from its index) among its own detail
    // lines; without one it reads the whole index, a scan.
    let steps: Vec<String> = lines
        .iter()
        .map(|line| line.trim_start_matches([' ', '-', '>']).to_owned())
        .collect();
    Ok(steps
        .iter()
        .enumerate()
        .map(|(at, step)| {
            let on = |table: &str| {
                step.split(" on ")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next())
                    .map(|name| format!("{table} {}", name.trim_matches('"')))
            };
            let conditioned = || {
                lines[at + 1..]
                    .iter()
                    .take_while(|line| !line.contains("->"))
                    .any(|line| line.contains("Index Cond:") || line.contains("Recheck Cond:"))
            };
            let index_scan = step.contains("Index Scan")
                || step.contains("Index Only Scan")
                || step.starts_with("Bitmap Heap Scan");
            if step.starts_with("Seq Scan") || (index_scan && !conditioned()) {
                on("SCAN").unwrap_or_else(|| step.clone())
            } else if index_scan {
                on("SEARCH").unwrap_or_else(|| step.clone())
            } else {
                step.clone()
            }
        })
        .collect())
}

/// Whether a step reads the whole of `table` (not another table whose name
/// starts with it, such as its small `<table>_paused`).
fn scans(plan: &[String], table: &str) -> bool {
    plan.iter().any(|step| {
        step.strip_prefix("SCAN ")
            .and_then(|rest| rest.split_whitespace().next())
            .is_some_and(|scanned| scanned == table)
            && !step.contains("USING INDEX")
            && !step.contains("USING COVERING INDEX")
    })
}

pub(crate) async fn claim_searches_and_never_scans(h: Harness) -> CaseResult {
    let outbox: Outbox = h.outbox().await?;
    let table = outbox.table().to_string();
    // A table with many rows that are not due: leased, delayed, dead.
    for n in 0..40 {
        let message = Message::raw_json("m", "{}").ordering_key(format!("k{}", n % 4));
        enqueue_message(&outbox, message).await?;
        enqueue_message(
            &outbox,
            Message::raw_json("m", "{}").not_before(h.later(Duration::from_secs(3600))?),
        )
        .await?;
    }
    h.sql(&format!("ANALYZE \"{table}\""), vec![]).await?;
    let claim = outbox.claim(2, LEASE).await?;
    let lease = claim.messages[0].lease();

    let mut statements: Vec<(&str, _)> = outbox
        .claim_statement(100, LEASE)?
        .statements()
        .into_iter()
        .map(|statement| ("claim", statement))
        .collect();
    for (name, fate) in [
        ("complete", Delivery::Delivered.into()),
        ("retry", Delivery::retry("e").into()),
        ("defer", Delivery::unavailable("e", None).into()),
        ("dead", Delivery::permanent("e").into()),
        ("gone", Delivery::gone("e").into()),
        (
            "release",
            Fate::Release {
                due: h.later(LEASE)?,
            },
        ),
    ] {
        for statement in outbox.prepare_fates(&[(lease, fate)])?.statements().iter() {
            statements.push((name, statement.clone()));
        }
    }
    statements.push(("isolate", outbox.isolate_statement(lease, LEASE, true)?.0));
    if h.db().dialect() == Dialect::Postgres {
        // The count of a claim's dead rows, as the table's `_add_counts`
        // function runs it (src/outbox/schema.postgres.sql).
        statements.push((
            "claim deaths (in the add-counts function)",
            Statement::new(
                format!(
                    "SELECT o.topic, COUNT(*) FROM \"{table}\" AS o WHERE o.state = 'dead' \
                     AND o.due_at = CAST($1 AS BIGINT) AND o.lease_token = CAST($2 AS TEXT) GROUP BY 1"
                ),
                vec![lease.until().as_unix_millis().into(), "tok".into()],
            ),
        ));
    }
    statements.push((
        "ordered enqueue",
        outbox
            .enqueue(Message::raw_json("m", "{}").ordering_key("k1"))?
            .statements()
            .last()
            .cloned()
            .ok_or_else(|| Failure("an enqueue has no insert".into()))?,
    ));
    if h.db().dialect() == Dialect::Sqlite {
        // A replay of one dead letter looks it up by id, however many there are.
        let steps = plan(&h, &outbox.replay_statement(Some(lease.id()))?).await?;
        ensure!(
            steps
                .iter()
                .any(|step| step.contains(&format!("INDEX {table}_dead_id"))),
            "a replay by id does not use {table}_dead_id: {steps:?}"
        );
    }
    for (name, statement) in statements {
        let steps = plan(&h, &statement).await?;
        ensure!(!scans(&steps, &table), "{name} scans {table}: {steps:?}");
        // A count that rides on the statement before it reads no row of
        // the outbox.
        if !statement.sql().contains(&format!("\"{table}\"")) {
            continue;
        }
        ensure!(
            steps.iter().any(|step| {
                step.strip_prefix("SEARCH ")
                    .and_then(|rest| rest.split_whitespace().next())
                    .is_some_and(|searched| searched == table)
            }),
            "{name} never searches {table}: {steps:?}"
        );
    }
    Ok(())
}

pub(crate) async fn bad_limits_and_leases_are_refused(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    enqueue(&outbox, "mail").await?;
    let before = h.snapshot(&outbox).await?;
    let trips = h.counts().round_trips;
    for (limit, lease, expected) in [
        (0, LEASE, "batch size"),
        (Outbox::MAX_CLAIM + 1, LEASE, "batch size"),
        (10, Duration::ZERO, "lease"),
        (10, Duration::from_secs(25 * 3600), "lease"),
    ] {
        match outbox.claim(limit, lease).await {
            Err(Error::InvalidInput { what, .. }) => ensure_eq!(what, expected),
            other => return Err(Failure(format!("{limit}/{lease:?}: got {other:?}"))),
        }
    }
    ensure_eq!(h.counts().round_trips, trips);
    ensure_eq!(h.snapshot(&outbox).await?, before);
    Ok(())
}
