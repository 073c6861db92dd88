//! Settling: complete, retry, dead; fenced by the lease; batched.

use std::time::Duration;

use super::{CaseResult, Failure, Harness, LEASE, enqueue, ensure, ensure_eq, ids};
use crate::error::Error;
use crate::outbox::{Delivery, MessageState, Outbox, StoredMessage};
use crate::retry::ExponentialBackoff;

/// The dead message `id`, as the dead-letter list shows it.
async fn dead(outbox: &Outbox, id: &str) -> Result<StoredMessage, Failure> {
    let dead = outbox.list_dead(Outbox::MAX_CLAIM, None).await?;
    dead.into_iter()
        .find(|m| m.id == id)
        .ok_or_else(|| Failure(format!("{id} is not dead")))
}

pub(crate) async fn complete_deletes_the_row(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    enqueue(&outbox, "mail").await?;
    let claim = outbox.claim(1, LEASE).await?;
    outbox.complete(claim.messages[0].lease()).await?;
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    Ok(())
}

pub(crate) async fn retry_reschedules_with_jittered_backoff(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let id = enqueue(&outbox, "mail").await?;
    let backoff = ExponentialBackoff {
        base: Duration::from_secs(1),
        cap: Duration::from_secs(10),
    };
    for attempt in 1..=2u32 {
        let claim = outbox.claim(1, LEASE).await?;
        ensure_eq!(ids(&claim), vec![id.clone()]);
        ensure_eq!(claim.messages[0].attempt(), attempt);
        outbox
            .reschedule(
                claim.messages[0].lease(),
                &format!("503 on attempt {attempt}"),
            )
            .await?;
        // Due again within the backoff ceiling of this attempt, not before 0.
        let ceiling = backoff.ceiling(attempt);
        let rows = h
            .sql(
                &format!(
                    "SELECT due_at, last_error, lease_token FROM \"{}\"",
                    outbox.table()
                ),
                vec![],
            )
            .await?;
        let row = rows.first().ok_or_else(|| Failure("row gone".into()))?;
        let due: i64 = row.get("due_at")?;
        let now = h.later(Duration::ZERO)?.as_unix_millis();
        ensure!(
            due >= now && due <= now + i64::try_from(ceiling.as_millis()).unwrap_or(i64::MAX),
            "due at {due}, now {now}, ceiling {ceiling:?}"
        );
        ensure_eq!(row.get::<Option<String>>("lease_token")?, None);
        ensure_eq!(
            row.get::<String>("last_error")?,
            format!("503 on attempt {attempt}")
        );
        h.clock().advance(ceiling);
    }
    Ok(())
}

pub(crate) async fn failure_on_the_last_attempt_parks_the_message(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let id = enqueue(&outbox, "mail").await?;
    for attempt in 1..=3 {
        let claim = outbox.claim(1, LEASE).await?;
        ensure_eq!(claim.messages[0].attempt(), attempt);
        outbox.reschedule(claim.messages[0].lease(), "503").await?;
        h.clock().advance(Duration::from_secs(10));
    }
    ensure!(
        outbox.claim(10, LEASE).await?.is_empty(),
        "claimed a dead row"
    );
    let dead = dead(&outbox, &id).await?;
    ensure_eq!(dead.state, MessageState::Dead);
    ensure_eq!(dead.attempts, 3);
    ensure_eq!(
        dead.last_error.as_deref(),
        Some("attempts exhausted (3 of 3); last error: 503")
    );
    Ok(())
}

pub(crate) async fn permanent_failure_parks_the_message(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let id = enqueue(&outbox, "mail").await?;
    let claim = outbox.claim(1, LEASE).await?;
    outbox
        .bury(claim.messages[0].lease(), "400: no such mailbox")
        .await?;
    let dead = dead(&outbox, &id).await?;
    ensure_eq!(dead.attempts, 1);
    ensure_eq!(dead.last_error.as_deref(), Some("400: no such mailbox"));
    ensure_eq!(dead.due_at, h.later(Duration::ZERO)?);
    Ok(())
}

pub(crate) async fn stale_holder_is_fenced_and_changes_nothing(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    enqueue(&outbox, "mail").await?;
    let stale = outbox.claim(1, LEASE).await?.messages.remove(0);
    h.clock().advance(LEASE);
    let current = outbox.claim(1, LEASE).await?.messages.remove(0);
    ensure_eq!(stale.id, current.id);
    let before = h.snapshot(&outbox).await?;
    for result in [
        outbox.complete(stale.lease()).await,
        outbox.reschedule(stale.lease(), "late").await,
        outbox.bury(stale.lease(), "late").await,
    ] {
        ensure_eq!(
            result,
            Err(Error::LeaseLost {
                id: stale.id.clone()
            })
        );
    }
    ensure_eq!(h.snapshot(&outbox).await?, before);
    outbox.complete(current.lease()).await?;
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    Ok(())
}

pub(crate) async fn batched_settle_is_one_round_trip_and_reports_each_row(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    for _ in 0..7 {
        enqueue(&outbox, "mail").await?;
    }
    let claim = outbox.claim(7, LEASE).await?;
    let m = &claim.messages;
    // Rows of one claim delivered together: one round trip.
    let before = h.counts();
    let report = outbox
        .settle(&[
            (m[5].lease(), Delivery::Delivered),
            (m[6].lease(), Delivery::Delivered),
        ])
        .await?;
    ensure_eq!(h.counts().round_trips - before.round_trips, 1);
    ensure_eq!((report.completed, report.lease_lost.len()), (2, 0));
    // One of them is leased again by someone else before the settle.
    outbox.release(m[4].lease()).await?;
    let taken = outbox.claim(1, LEASE).await?;
    ensure_eq!(ids(&taken), vec![m[4].id.clone()]);

    let before = h.counts();
    let report = outbox
        .settle(&[
            (m[0].lease(), Delivery::Delivered),
            (m[1].lease(), Delivery::Delivered),
            (
                m[2].lease(),
                Delivery::Retry {
                    error: "503".into(),
                },
            ),
            (
                m[3].lease(),
                Delivery::Permanent {
                    error: "400".into(),
                },
            ),
            (m[4].lease(), Delivery::Delivered),
        ])
        .await?;
    // A claim's delivered rows are deleted by a list whose check fails the
    // batch when a lease of it was lost (so it changed nothing), and the
    // settle is sent again with a delete that tells each row apart: a
    // round trip more, only then.
    ensure_eq!(h.counts().round_trips - before.round_trips, 2);
    ensure_eq!(
        (
            report.completed,
            report.retried,
            report.dead,
            report.released
        ),
        (2, 1, 1, 0)
    );
    ensure_eq!(report.lease_lost, vec![m[4].id.clone()]);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 3);
    Ok(())
}

pub(crate) async fn expired_lease_settles_if_nobody_took_it(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    enqueue(&outbox, "mail").await?;
    let claim = outbox.claim(1, LEASE).await?;
    h.clock().advance(LEASE * 2);
    outbox.complete(claim.messages[0].lease()).await?;
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    Ok(())
}

pub(crate) async fn unsettled_leases_spend_attempts_only_when_alone(h: Harness) -> CaseResult {
    let outbox = h.outbox_named("outbox", 2).await?;
    let id = enqueue(&outbox, "mail").await?;
    // A batch lease that expires unsettled (a lost claim reply, a crash
    // elsewhere in the batch) spends nothing; the row comes back a suspect.
    let first = outbox.claim(10, LEASE).await?;
    ensure!(!first.messages[0].is_suspect(), "fresh row is a suspect");
    h.clock().advance(LEASE);
    for attempt in 1..=2 {
        let claim = outbox.claim(10, LEASE).await?;
        let message = &claim.messages[0];
        ensure_eq!(
            (message.attempt(), message.unsettled_leases()),
            (attempt, attempt)
        );
        // Delivered alone, spending its attempt up front; the drainer dies.
        let (isolate, _) = outbox.isolate_statement(message.lease(), LEASE, true)?;
        ensure_eq!(h.db().execute(&isolate).await?, 1);
        h.clock().advance(LEASE);
    }
    let claim = outbox.claim(10, LEASE).await?;
    ensure!(claim.messages.is_empty(), "leased past the last attempt");
    ensure_eq!(claim.exhausted, vec![id.clone()]);
    let dead = dead(&outbox, &id).await?;
    ensure_eq!((dead.attempts, dead.unsettled_leases), (2, 3));
    let error = dead.last_error.unwrap_or_default();
    ensure!(
        error.starts_with("attempts exhausted (2 of 2): the lease of the last attempt, delivered alone, expired without a settle, so its outcome is unknown"),
        "last error {error:?}"
    );
    Ok(())
}

pub(crate) async fn released_lease_does_not_count_an_attempt(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    enqueue(&outbox, "mail").await?;
    let claim = outbox.claim(1, LEASE).await?;
    outbox.release(claim.messages[0].lease()).await?;
    let again = outbox.claim(1, LEASE).await?;
    ensure_eq!(again.messages[0].attempt(), 1);
    Ok(())
}
