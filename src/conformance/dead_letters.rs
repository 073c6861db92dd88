//! Dead letters: listed with their error, replayed, purged.

use std::time::Duration;

use super::{CaseResult, Failure, Harness, LEASE, enqueue, ensure, ensure_eq, ids};
use crate::error::Error;
use crate::outbox::{Delivery, MessageState, Outbox};

/// Enqueues `n` messages and kills each after a permanent failure, one
/// second apart; returns their ids in order of death.
async fn kill(h: &Harness, outbox: &Outbox, n: usize) -> Result<Vec<String>, Failure> {
    let mut killed = Vec::new();
    for index in 0..n {
        enqueue(outbox, "mail").await?;
        let claim = outbox.claim(1, LEASE).await?;
        let message = &claim.messages[0];
        outbox
            .settle(&[(
                message.lease(),
                Delivery::Permanent {
                    error: format!("400 #{index}"),
                },
            )])
            .await?;
        killed.push(message.id.clone());
        h.clock().advance(Duration::from_secs(1));
    }
    Ok(killed)
}

pub(crate) async fn dead_messages_are_listed_and_replayed(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let killed = kill(&h, &outbox, 1).await?;
    let dead = outbox.list_dead(10, None).await?;
    ensure_eq!(dead.len(), 1);
    ensure_eq!(dead[0].id, killed[0]);
    ensure_eq!(dead[0].state, MessageState::Dead);
    ensure_eq!(dead[0].last_error.as_deref(), Some("400 #0"));

    outbox.replay(&killed[0]).await?;
    ensure!(outbox.list_dead(10, None).await?.is_empty(), "still dead");
    let claim = outbox.claim(10, LEASE).await?;
    ensure_eq!(ids(&claim), killed);
    ensure_eq!(claim.messages[0].attempt(), 1);
    outbox.complete(claim.messages[0].lease()).await?;
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    Ok(())
}

pub(crate) async fn replaying_an_unknown_id_is_not_found(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let live = enqueue(&outbox, "mail").await?;
    for id in ["01NOSUCHMESSAGE", live.as_str()] {
        ensure_eq!(
            outbox.replay(id).await,
            Err(Error::NotFound {
                what: "dead message",
                id: id.to_owned()
            })
        );
    }
    Ok(())
}

pub(crate) async fn purge_and_replay_all(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let killed = kill(&h, &outbox, 4).await?;
    // Deaths at START, +1 s, +2 s, +3 s; the clock is now at +4 s.
    let cutoff = h
        .later(Duration::ZERO)?
        .saturating_sub(Duration::from_millis(2_500));
    ensure_eq!(outbox.purge_dead(cutoff).await?, 2);
    let left: Vec<String> = outbox
        .list_dead(10, None)
        .await?
        .into_iter()
        .map(|m| m.id)
        .collect();
    ensure_eq!(left, killed[2..].to_vec());
    ensure_eq!(outbox.replay_all().await?, 2);
    ensure_eq!(outbox.claim(10, LEASE).await?.messages.len(), 2);
    Ok(())
}

pub(crate) async fn dead_letters_page_in_order(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let killed = kill(&h, &outbox, 5).await?;
    let mut seen = Vec::new();
    let mut page = outbox.list_dead(2, None).await?;
    while !page.is_empty() {
        ensure!(page.len() <= 2, "page of {}", page.len());
        seen.extend(page.iter().map(|m| m.id.clone()));
        let last = page.last().cloned();
        page = outbox.list_dead(2, last.as_ref()).await?;
    }
    ensure_eq!(seen, killed);
    Ok(())
}
