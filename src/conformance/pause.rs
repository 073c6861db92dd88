//! The stored pause switch: a paused topic is not claimed and spends no
//! attempt, a receiver's `Gone` pauses its topic (fenced by the lease), and
//! resuming delivers what waited.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{CaseResult, Failure, Harness, LEASE, enqueue, ensure, ensure_eq, yield_now};
use crate::drain::drainer::Drainer;
use crate::drain::{Deliver, DrainLimits};
use crate::outbox::{ClaimedMessage, Delivery, Message, Outbox};

fn limits() -> DrainLimits {
    DrainLimits {
        concurrency: 2,
        ..super::drain::limits()
    }
}

/// Answers `Gone` for topic `hook` while `gone` is set, delivers the rest;
/// records each topic it was called for.
#[derive(Clone, Default)]
struct Receiver {
    gone: Arc<Mutex<bool>>,
    calls: Arc<Mutex<Vec<String>>>,
}

impl Receiver {
    fn calls(&self, topic: &str) -> usize {
        let calls = self.calls.lock().unwrap_or_else(PoisonError::into_inner);
        calls.iter().filter(|called| *called == topic).count()
    }

    fn set_gone(&self, gone: bool) {
        *self.gone.lock().unwrap_or_else(PoisonError::into_inner) = gone;
    }
}

impl Deliver for Receiver {
    fn deliver<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> crate::future::BoxFuture<'a, Delivery> {
        Box::pin(async move {
            yield_now().await;
            self.calls
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(message.topic.clone());
            let gone = *self.gone.lock().unwrap_or_else(PoisonError::into_inner);
            if gone && message.topic == "hook" {
                Delivery::gone("receiver answered 410: endpoint deleted")
            } else {
                Delivery::Delivered
            }
        })
    }
}

fn drainer(h: &Harness, outbox: &Outbox, receiver: &Receiver) -> Result<Drainer, Failure> {
    Ok(Drainer::builder(outbox.clone(), receiver.clone())
        .timer(Arc::new(h.clock().clone()))
        .limits(limits())
        .build()?)
}

/// The rows of `outbox`'s `topic`: how many, the most attempts any spent,
/// and how many are leased.
async fn spent(h: &Harness, outbox: &Outbox, topic: &str) -> Result<(i64, i64, i64), Failure> {
    let rows = h
        .sql(
            &format!(
                "SELECT COUNT(*) AS n, COALESCE(MAX(attempts), 0) AS attempts, \
                 COUNT(lease_token) AS leased FROM \"{}\" WHERE topic = ?",
                outbox.table()
            ),
            vec![topic.into()],
        )
        .await?;
    let row = rows.first().ok_or_else(|| Failure("no count row".into()))?;
    Ok((row.get("n")?, row.get("attempts")?, row.get("leased")?))
}

pub(crate) async fn a_paused_topic_is_not_drained_and_spends_nothing(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for topic in ["mail", "hook", "mail", "hook", "mail"] {
        enqueue(&outbox, topic).await?;
    }
    ensure!(
        outbox.pause_topic("hook", "maintenance").await?,
        "not paused"
    );
    ensure!(
        !outbox.pause_topic("hook", "again").await?,
        "a second pause reported a change"
    );
    let paused = outbox.paused_topics().await?;
    ensure_eq!(paused.len(), 1);
    ensure_eq!(
        (paused[0].topic.as_str(), paused[0].reason.as_str()),
        ("hook", "maintenance")
    );
    ensure_eq!(paused[0].paused_at, h.later(Duration::ZERO)?);

    let receiver = Receiver::default();
    let report = drainer(&h, &outbox, &receiver)?.drain().await;
    ensure_eq!((report.claimed, report.delivered), (3, 3));
    ensure_eq!((receiver.calls("mail"), receiver.calls("hook")), (3, 0));
    ensure_eq!(spent(&h, &outbox, "hook").await?, (2, 0, 0));

    ensure!(outbox.resume_topic("hook").await?, "not resumed");
    ensure!(
        !outbox.resume_topic("hook").await?,
        "resuming a topic not paused reported a change"
    );
    ensure!(outbox.paused_topics().await?.is_empty(), "still listed");
    let report = drainer(&h, &outbox, &receiver)?.drain().await;
    ensure_eq!(report.delivered, 2);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    ensure!(
        outbox.pause_topic("", "x").await.is_err(),
        "an empty topic was paused"
    );
    Ok(())
}

pub(crate) async fn a_gone_destination_pauses_its_topic_without_spending(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for topic in ["hook", "hook", "mail", "hook", "hook", "mail"] {
        enqueue(&outbox, topic).await?;
    }
    let receiver = Receiver::default();
    receiver.set_gone(true);
    let report = drainer(&h, &outbox, &receiver)?.drain().await;
    ensure_eq!(report.paused, vec!["hook".to_owned()]);
    ensure_eq!(report.delivered, 2);
    ensure_eq!((report.retried, report.dead), (0, 0));
    // Only the deliveries already in flight when the first 410 came.
    ensure!(
        (1..=limits().concurrency).contains(&receiver.calls("hook")),
        "hook was called {} times",
        receiver.calls("hook")
    );
    ensure_eq!(spent(&h, &outbox, "hook").await?, (4, 0, 0));
    let paused = outbox.paused_topics().await?;
    ensure_eq!(paused.len(), 1);
    ensure_eq!(
        (paused[0].topic.as_str(), paused[0].reason.as_str()),
        ("hook", "receiver answered 410: endpoint deleted")
    );

    // Later drains leave it alone, however long it stays paused.
    h.clock().advance(Duration::from_secs(3600));
    let calls = receiver.calls("hook");
    let report = drainer(&h, &outbox, &receiver)?.drain().await;
    ensure_eq!((report.claimed, receiver.calls("hook")), (0, calls));

    receiver.set_gone(false);
    outbox.resume_topic("hook").await?;
    let report = drainer(&h, &outbox, &receiver)?.drain().await;
    ensure_eq!(report.delivered, 4);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    Ok(())
}

pub(crate) async fn a_stale_holders_gone_pauses_nothing(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    enqueue(&outbox, "hook").await?;
    let stale = outbox.claim(1, LEASE).await?.messages.remove(0);
    h.clock().advance(LEASE);
    let current = outbox.claim(1, LEASE).await?.messages.remove(0);
    let settled = outbox
        .settle(&[(stale.lease(), Delivery::gone("late 410"))])
        .await?;
    ensure_eq!(
        (settled.paused, settled.lease_lost.clone()),
        (0, vec![stale.id.clone()])
    );
    ensure!(
        outbox.paused_topics().await?.is_empty(),
        "a stale holder paused the topic"
    );
    let settled = outbox
        .settle(&[(current.lease(), Delivery::gone("410"))])
        .await?;
    ensure_eq!(settled.paused, 1);
    // Sent again (its reply lost): nothing changes twice.
    let again = outbox
        .settle(&[(current.lease(), Delivery::gone("410"))])
        .await?;
    ensure_eq!((again.paused, again.lease_lost.len()), (0, 1));
    ensure_eq!(outbox.paused_topics().await?.len(), 1);
    ensure_eq!(spent(&h, &outbox, "hook").await?, (1, 0, 0));
    Ok(())
}

pub(crate) async fn a_leased_enqueue_of_a_paused_topic_is_not_delivered_at_once(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    outbox.pause_topic("hook", "maintenance").await?;
    let claimed = super::enqueue_leased(&h, &outbox, Message::raw_json("hook", "{}")).await?;
    ensure!(
        claimed.is_none(),
        "a paused topic's message was handed out to deliver"
    );
    ensure_eq!(spent(&h, &outbox, "hook").await?, (1, 0, 0));
    let other = super::enqueue_leased(&h, &outbox, Message::raw_json("mail", "{}")).await?;
    ensure!(other.is_some(), "another topic's message was not leased");

    outbox.resume_topic("hook").await?;
    let receiver = Receiver::default();
    h.clock().advance(LEASE);
    let report = drainer(&h, &outbox, &receiver)?.drain().await;
    ensure_eq!(report.delivered, 2);
    Ok(())
}

pub(crate) async fn resuming_makes_the_messages_a_pausing_drain_held_due_at_once(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    for _ in 0..3 {
        enqueue(&outbox, "hook").await?;
    }
    // One at a time: the first answers 410, the other two are still
    // claimed, not started, when the topic pauses.
    let one_at_a_time = DrainLimits {
        concurrency: 1,
        ..limits()
    };
    let receiver = Receiver::default();
    receiver.set_gone(true);
    let drainer = |receiver: &Receiver| -> Result<Drainer, Failure> {
        Ok(Drainer::builder(outbox.clone(), receiver.clone())
            .timer(Arc::new(h.clock().clone()))
            .limits(one_at_a_time)
            .build()?)
    };
    let report = drainer(&receiver)?.drain().await;
    ensure_eq!((report.claimed, receiver.calls("hook")), (3, 1));
    ensure_eq!((report.handed_back, report.released), (0, 3));
    receiver.set_gone(false);
    ensure!(outbox.resume_topic("hook").await?, "not resumed");
    // No time passes: every message of the topic is due at once.
    let report = drainer(&receiver)?.drain().await;
    ensure_eq!(report.delivered, 3);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    Ok(())
}

pub(crate) async fn resuming_makes_its_held_messages_due_at_once(h: Harness) -> CaseResult {
    let outbox = h.outbox_backing_off().await?;
    for _ in 0..3 {
        enqueue(&outbox, "hook").await?;
    }
    enqueue(&outbox, "mail").await?;
    // The hook's receiver is down: its messages wait for their backoff.
    let down = Arc::new(Mutex::new(true));
    let is_down = down.clone();
    let receiver = crate::drain::deliver_fn(move |message: ClaimedMessage| {
        let down = *is_down.lock().unwrap_or_else(PoisonError::into_inner);
        async move {
            if down {
                Delivery::unavailable(format!("{} receiver: 503", message.topic), None)
            } else {
                Delivery::Delivered
            }
        }
    });
    let drain = || {
        Drainer::builder(outbox.clone(), receiver.clone())
            .timer(Arc::new(h.clock().clone()))
            .limits(limits())
            .build()
    };
    let report = drain()?.drain().await;
    ensure_eq!((report.deferred, report.retried), (4, 0));
    outbox.pause_topic("hook", "maintenance").await?;
    *down.lock().unwrap_or_else(PoisonError::into_inner) = false;
    ensure!(outbox.resume_topic("hook").await?, "not resumed");
    // No time passes: the hook's messages are due at once; the mail's
    // (another topic) still waits for its backoff.
    let report = drain()?.drain().await;
    ensure_eq!(report.delivered, 3);
    ensure_eq!(spent(&h, &outbox, "mail").await?, (1, 0, 0));
    ensure_eq!(spent(&h, &outbox, "hook").await?.0, 0);
    Ok(())
}
