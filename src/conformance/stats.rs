//! Stats: a count per state and the age of the most overdue message.

use std::time::Duration;

use super::{CaseResult, Harness, LEASE, enqueue, enqueue_message, ensure_eq, one_in_each_state};
use crate::outbox::{Message, OutboxStats};

pub(crate) async fn stats_count_each_state(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    ensure_eq!(outbox.stats().await?, OutboxStats::default());
    one_in_each_state(&h, &outbox, 0).await?;
    ensure_eq!(
        outbox.stats().await?,
        OutboxStats {
            pending: 3,
            due: 1,
            leased: 1,
            dead: 1,
            oldest_due_age: Some(Duration::from_secs(7)),
        }
    );
    Ok(())
}

pub(crate) async fn due_count_is_bounded(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    ensure_eq!(outbox.count_due(10).await?, 0);
    for _ in 0..5 {
        enqueue(&outbox, "due").await?;
    }
    enqueue_message(
        &outbox,
        Message::raw_json("m", "{}").not_before(h.later(Duration::from_secs(600))?),
    )
    .await?;
    drop(outbox.claim(1, LEASE).await?); // leased: not due
    ensure_eq!(outbox.count_due(100).await?, 4);
    ensure_eq!(outbox.count_due(3).await?, 3);
    ensure_eq!(outbox.count_due(0).await?, 0);
    Ok(())
}
