//! The attempt log: written in the drain's settle calls (no call of its
//! own), fenced by the lease, bounded per message, kept for its retention,
//! and reached by a subject's export and erasure.

use std::time::Duration;

use super::{
    CaseResult, Failure, Harness, drainer_through, enqueue_message, ensure, ensure_eq, yield_now,
};
use crate::drain::{AttemptLog, AttemptRecord, Deliver, DrainReport};
use crate::outbox::{ClaimedMessage, Delivery, Message, Outbox};

/// Answers 500 with a body to topic `bad`, delivers the rest; logs as
/// `log` says, as an HTTP deliverer would.
struct Flaky {
    log: AttemptLog,
}

impl Deliver for Flaky {
    fn deliver<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> crate::future::BoxFuture<'a, Delivery> {
        Box::pin(async move { self.deliver_logged(message).await.0 })
    }

    fn deliver_logged<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> crate::future::BoxFuture<'a, (Delivery, Option<AttemptRecord>)> {
        Box::pin(async move {
            yield_now().await;
            let (verdict, record) = if message.topic == "bad" {
                let record = AttemptRecord::new(Some(500), Duration::from_millis(120))
                    .header("Content-Type", "text/plain")
                    .body(&format!("boom {}", "x".repeat(5000)));
                (Delivery::retry("receiver answered 500"), record)
            } else {
                (
                    Delivery::Delivered,
                    AttemptRecord::new(Some(204), Duration::from_millis(5)),
                )
            };
            let logged = self.log.keeps(&verdict).then_some(record);
            (verdict, logged)
        })
    }
}

async fn drain(h: &Harness, outbox: &Outbox, log: AttemptLog) -> Result<DrainReport, Failure> {
    Ok(drainer_through(h, outbox, Flaky { log }, 1)?.drain().await)
}

async fn logged(h: &Harness, outbox: &Outbox) -> Result<i64, Failure> {
    h.count(&format!("{}_attempts", outbox.table())).await
}

pub(crate) async fn failures_are_logged_in_the_settle_call_and_bounded_per_message(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox_named("outbox", 30).await?;
    let bad = enqueue_message(&outbox, Message::raw_json("bad", "{}")).await?;
    enqueue_message(&outbox, Message::raw_json("good", "{}")).await?;
    let before = h.counts();
    let report = drain(&h, &outbox, AttemptLog::Failures).await?;
    ensure_eq!((report.delivered, report.retried), (1, 1));
    let with_log = h.counts().round_trips - before.round_trips;
    let attempts = outbox.attempts_of(&bad).await?;
    ensure_eq!(attempts.len(), 1);
    let first = &attempts[0];
    ensure_eq!(
        (first.topic.as_str(), first.attempt, first.status),
        ("bad", 1, Some(500))
    );
    ensure_eq!(
        (first.outcome.as_str(), first.error.as_deref()),
        ("failed", Some("receiver answered 500"))
    );
    ensure_eq!(first.duration_ms, 120);
    ensure_eq!(
        first.at,
        h.later(Duration::ZERO)?
            .saturating_sub(Duration::from_millis(120))
    );
    ensure_eq!(
        first.headers,
        vec![("content-type".to_owned(), "text/plain".to_owned())]
    );
    ensure!(
        first.body.starts_with("boom ") && first.body.len() == AttemptRecord::BODY_BYTES,
        "{}",
        first.body.len()
    );
    ensure_eq!(logged(&h, &outbox).await?, 1);

    // The same drain without a log makes as many calls.
    let quiet = h.outbox_named("quiet", 30).await?;
    enqueue_message(&quiet, Message::raw_json("bad", "{}")).await?;
    enqueue_message(&quiet, Message::raw_json("good", "{}")).await?;
    let before = h.counts();
    drain(&h, &quiet, AttemptLog::Off).await?;
    ensure_eq!(h.counts().round_trips - before.round_trips, with_log);
    ensure_eq!(logged(&h, &quiet).await?, 0);

    // Retried on and on, a message keeps its latest attempts only.
    for _ in 0..14 {
        h.clock().advance(Duration::from_secs(60));
        drain(&h, &outbox, AttemptLog::Failures).await?;
    }
    let attempts = outbox.attempts_of(&bad).await?;
    let kept = Outbox::ATTEMPTS_KEPT_PER_MESSAGE as usize;
    ensure_eq!(attempts.len(), kept);
    let numbers: Vec<u32> = attempts.iter().map(|a| a.attempt).collect();
    ensure_eq!(numbers, (6..=15).collect::<Vec<u32>>());
    Ok(())
}

pub(crate) async fn the_attempt_log_is_kept_for_its_retention_and_erased_with_its_subject(
    h: Harness,
) -> CaseResult {
    let outbox = h
        .outbox_builder(h.db(), &h.table("outbox"))
        .attempt_retention(Duration::from_secs(3600))
        .build()?;
    outbox.create_schema().await?;
    let inbox = h.inbox().await?;
    let ada = enqueue_message(&outbox, Message::raw_json("bad", "{}").subject("ada")).await?;
    enqueue_message(&outbox, Message::raw_json("bad", "{}").subject("bob")).await?;
    drain(&h, &outbox, AttemptLog::All).await?;
    ensure_eq!(logged(&h, &outbox).await?, 2);

    let export = crate::subject::export_subject(&outbox, &inbox, "ada").await?;
    ensure_eq!(export.attempts.len(), 1);
    ensure_eq!(export.attempts[0].message_id, ada);
    crate::subject::erase_subject(&outbox, &inbox, "ada").await?;
    ensure_eq!(logged(&h, &outbox).await?, 1);
    let export = crate::subject::export_subject(&outbox, &inbox, "ada").await?;
    ensure!(export.attempts.is_empty(), "{:?}", export.attempts);

    // Past the retention, a drain's sweep forgets it.
    h.clock().advance(Duration::from_secs(2 * 3600));
    drain(&h, &outbox, AttemptLog::Off).await?;
    ensure_eq!(logged(&h, &outbox).await?, 0);
    Ok(())
}

/// Refuses every message with a receiver's worst: a 4 KiB body and an error
/// that hold NUL characters; logs each attempt.
struct Hostile;

impl Deliver for Hostile {
    fn deliver<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> crate::future::BoxFuture<'a, Delivery> {
        Box::pin(async move { self.deliver_logged(message).await.0 })
    }

    fn deliver_logged<'a>(
        &'a self,
        _message: &'a ClaimedMessage,
    ) -> crate::future::BoxFuture<'a, (Delivery, Option<AttemptRecord>)> {
        Box::pin(async move {
            yield_now().await;
            let body = format!("\0{}", "<\"x\">".repeat(1_000));
            let record = AttemptRecord::new(Some(400), Duration::from_millis(3))
                .header("x-note", "a\0b")
                .body(&body);
            let error = format!("receiver answered 400: \0{}", "y".repeat(3_000));
            (Delivery::permanent(error), Some(record))
        })
    }
}

pub(crate) async fn hostile_answers_are_logged_in_bounded_statements_and_settle(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    let mut ids = Vec::new();
    for _ in 0..120 {
        ids.push(enqueue_message(&outbox, Message::raw_json("hooks", "{}")).await?);
    }
    let drainer = crate::drain::drainer::Drainer::builder(outbox.clone(), Hostile)
        .timer(std::sync::Arc::new(h.clock().clone()))
        .limits(crate::drain::DrainLimits {
            batch_size: 120,
            ..super::drain::limits()
        })
        .build()?;
    let report = drainer.drain().await;
    ensure_eq!(report.dead, 120);
    ensure_eq!(logged(&h, &outbox).await?, 120);
    let attempts = outbox.attempts_of(&ids[0]).await?;
    let attempt = attempts
        .first()
        .ok_or_else(|| Failure("not logged".into()))?;
    ensure!(
        !attempt.body.contains('\0') && attempt.body.starts_with('\u{FFFD}'),
        "{:?}",
        &attempt.body[..8]
    );
    let error = attempt.error.clone().unwrap_or_default();
    ensure!(
        !error.contains('\0') && error.len() <= 2_100,
        "{} bytes",
        error.len()
    );
    Ok(())
}
