//! Ordering keys: one at a time, in enqueue order; a dead row blocks.

use std::time::Duration;

use super::{CaseResult, Harness, LEASE, enqueue, enqueue_message, ensure, ensure_eq, ids};
use crate::outbox::{Delivery, Message};

fn keyed(key: &str) -> Message {
    Message::raw_json("event", "{}").ordering_key(key)
}

pub(crate) async fn keyed_messages_go_one_at_a_time_in_order(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let k1 = enqueue_message(&outbox, keyed("order-7")).await?;
    let k2 = enqueue_message(&outbox, keyed("order-7")).await?;
    let k3 = enqueue_message(&outbox, keyed("order-7")).await?;
    let free = enqueue(&outbox, "other").await?;

    let claim = outbox.claim(10, LEASE).await?;
    ensure_eq!(ids(&claim), vec![k1.clone(), free]);
    ensure!(
        outbox.claim(10, LEASE).await?.is_empty(),
        "k2 jumped the queue"
    );
    outbox.complete(claim.messages[0].lease()).await?;

    let second = outbox.claim(10, LEASE).await?;
    ensure_eq!(ids(&second), vec![k2.clone()]);
    outbox.reschedule(second.messages[0].lease(), "503").await?;
    h.clock().advance(Duration::from_secs(10));
    // A retried row keeps its place: k2 again, not k3.
    let again = outbox.claim(10, LEASE).await?;
    ensure_eq!(ids(&again), vec![k2]);
    outbox.complete(again.messages[0].lease()).await?;
    ensure_eq!(ids(&outbox.claim(10, LEASE).await?), vec![k3]);
    Ok(())
}

pub(crate) async fn a_dead_message_blocks_its_key_until_replayed(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let first = enqueue_message(&outbox, keyed("k")).await?;
    let second = enqueue_message(&outbox, keyed("k")).await?;
    let claim = outbox.claim(10, LEASE).await?;
    outbox
        .settle(&[(
            claim.messages[0].lease(),
            Delivery::Permanent {
                error: "400".into(),
            },
        )])
        .await?;
    ensure!(
        outbox.claim(10, LEASE).await?.is_empty(),
        "the key was not blocked"
    );
    outbox.replay(&first).await?;
    let replayed = outbox.claim(10, LEASE).await?;
    ensure_eq!(ids(&replayed), vec![first]);
    outbox.complete(replayed.messages[0].lease()).await?;
    ensure_eq!(ids(&outbox.claim(10, LEASE).await?), vec![second]);
    Ok(())
}

pub(crate) async fn purging_a_dead_head_releases_its_key(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    enqueue_message(&outbox, keyed("k")).await?;
    let second = enqueue_message(&outbox, keyed("k")).await?;
    let claim = outbox.claim(10, LEASE).await?;
    outbox.bury(claim.messages[0].lease(), "400").await?;
    h.clock().advance(Duration::from_secs(1));
    ensure_eq!(outbox.purge_dead(h.later(Duration::ZERO)?).await?, 1);
    ensure_eq!(ids(&outbox.claim(10, LEASE).await?), vec![second]);
    Ok(())
}

pub(crate) async fn erasing_an_in_flight_message_holds_its_key_until_its_lease_ends(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    let first = enqueue_message(&outbox, keyed("order-9").subject("acct-1")).await?;
    let second = enqueue_message(&outbox, keyed("order-9").subject("acct-2")).await?;
    let claim = outbox.claim(10, LEASE).await?;
    ensure_eq!(ids(&claim), vec![first]);
    // The first is being delivered (it cannot be recalled) when its subject
    // is erased: the second must not start alongside it.
    ensure_eq!(outbox.erase_subject("acct-1").await?, 1);
    h.clock().advance(LEASE - Duration::from_millis(1));
    ensure!(
        outbox.claim(10, LEASE).await?.is_empty(),
        "the next message of the key started while the erased one was in flight"
    );
    h.clock().advance(Duration::from_millis(1));
    ensure_eq!(ids(&outbox.claim(10, LEASE).await?), vec![second]);
    Ok(())
}
