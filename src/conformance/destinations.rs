//! Destinations: a topic that fans out to several receivers keeps a
//! breaker per receiver, and destination limits hold across topics.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::{Either, select};

use super::{CaseResult, Failure, Harness, enqueue_message, ensure, ensure_eq, yield_now};
use crate::drain::drainer::Drainer;
use crate::drain::{Deliver, DestinationLimits, DrainLimits, DrainReport};
use crate::manual_clock::ManualClock;
use crate::outbox::{ClaimedMessage, Delivery, Message, Outbox};
use crate::time::{Clock, Timestamp};

fn limits() -> DrainLimits {
    DrainLimits {
        batch_size: 50,
        ..super::drain::limits()
    }
}

/// A message's destination: its payload, a JSON string.
fn destination_of(message: &ClaimedMessage) -> Option<String> {
    serde_json::from_str(&message.payload).ok()
}

fn to(topic: &str, destination: &str) -> Message {
    Message::raw_json(topic, format!("{destination:?}"))
}

/// Receivers named by each message's payload: "down" answers 503, the
/// rest deliver after a few yields. Records each start (time, destination)
/// and the most requests each destination had in flight at once.
#[derive(Clone)]
struct FanOut {
    clock: ManualClock,
    starts: Arc<Mutex<Vec<(Timestamp, String)>>>,
    in_flight: Arc<Mutex<BTreeMap<String, (usize, usize)>>>,
}

impl FanOut {
    fn new(h: &Harness) -> Self {
        FanOut {
            clock: h.clock().clone(),
            starts: Arc::default(),
            in_flight: Arc::default(),
        }
    }

    fn starts_of(&self, destination: &str) -> Vec<Timestamp> {
        let starts = self.starts.lock().unwrap_or_else(PoisonError::into_inner);
        starts
            .iter()
            .filter(|(_, to)| to == destination)
            .map(|(at, _)| *at)
            .collect()
    }

    /// Whether any request is in flight.
    fn busy(&self) -> bool {
        let in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        in_flight.values().any(|(now, _)| *now > 0)
    }

    fn most_in_flight(&self, destination: &str) -> usize {
        let in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        in_flight.get(destination).map_or(0, |(_, most)| *most)
    }
}

impl Deliver for FanOut {
    fn deliver<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> crate::future::BoxFuture<'a, Delivery> {
        Box::pin(async move {
            let to = destination_of(message).unwrap_or_default();
            self.starts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((self.clock.now(), to.clone()));
            {
                let mut in_flight = self
                    .in_flight
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let (now, most) = in_flight.entry(to.clone()).or_default();
                *now += 1;
                *most = (*most).max(*now);
            }
            for _ in 0..4 {
                yield_now().await;
            }
            if let Some((now, _)) = self
                .in_flight
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_mut(&to)
            {
                *now -= 1;
            }
            if to == "down" {
                Delivery::unavailable("receiver answered 503", None)
            } else {
                Delivery::Delivered
            }
        })
    }

    fn destination(&self, message: &ClaimedMessage) -> Option<String> {
        destination_of(message)
    }

    /// A destination named `rated-N` takes N requests a second.
    fn destination_rate(&self, message: &ClaimedMessage) -> Option<u32> {
        destination_of(message)?
            .strip_prefix("rated-")?
            .parse()
            .ok()
    }
}

fn drainer(
    h: &Harness,
    outbox: &Outbox,
    receiver: &FanOut,
    destinations: Option<DestinationLimits>,
) -> Result<Drainer, Failure> {
    let mut builder = Drainer::builder(outbox.clone(), receiver.clone())
        .timer(Arc::new(h.clock().clone()))
        .limits(limits());
    if let Some(destinations) = destinations {
        builder = builder.destination_limits(destinations);
    }
    Ok(builder.build()?)
}

/// Drains while time passes whenever the drain waits on the clock with no
/// request in flight (10 ms a turn), so a drain waiting for a
/// destination's bucket goes on, and time stands still while it waits for
/// its database.
async fn drain_as_time_passes(h: &Harness, drainer: &Drainer, receiver: &FanOut) -> DrainReport {
    let drain = std::pin::pin!(drainer.drain());
    let ticks = std::pin::pin!(async {
        loop {
            h.clock().someone_sleeps().await;
            if !receiver.busy() {
                h.clock().advance(Duration::from_millis(10));
            }
            yield_now().await;
        }
    });
    match select(drain, ticks).await {
        Either::Left((report, _)) => report,
        Either::Right(((), _)) => unreachable!("the ticks never end"),
    }
}

pub(crate) async fn a_failing_receiver_of_a_fanned_out_topic_stops_only_its_own_messages(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    let mut down = Vec::new();
    for _ in 0..6 {
        down.push(enqueue_message(&outbox, to("hook", "down")).await?);
        enqueue_message(&outbox, to("hook", "up")).await?;
    }
    let receiver = FanOut::new(&h);
    let report = drainer(&h, &outbox, &receiver, None)?.drain().await;
    ensure_eq!(report.tripped, vec!["hook @ down".to_owned()]);
    ensure_eq!(report.delivered, 6);
    ensure_eq!((report.retried, report.dead), (0, 0));
    // The healthy receiver answering in between does not make the failing
    // one's outage its messages' fault: none spent an attempt.
    let rows = h
        .sql(
            &format!("SELECT MAX(attempts) AS most FROM \"{}\"", outbox.table()),
            vec![],
        )
        .await?;
    let most: i64 = rows
        .first()
        .ok_or_else(|| Failure("no row".into()))?
        .get("most")?;
    ensure_eq!(most, 0);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 6);
    ensure!(
        receiver.starts_of("down").len() <= 5 + limits().concurrency,
        "the failing receiver was called {} times after it tripped",
        receiver.starts_of("down").len()
    );
    Ok(())
}

pub(crate) async fn destination_limits_hold_across_topics_and_spare_other_destinations(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    for n in 0..8 {
        let topic = if n % 2 == 0 { "mail" } else { "hook" };
        enqueue_message(&outbox, to(topic, "slow")).await?;
        enqueue_message(&outbox, to(topic, "other")).await?;
    }
    let receiver = FanOut::new(&h);
    let limits = DestinationLimits {
        in_flight: 1,
        per_second: Some(4),
        burst: 1,
    };
    let drainer = drainer(&h, &outbox, &receiver, Some(limits))?;
    let report = drain_as_time_passes(&h, &drainer, &receiver).await;
    ensure_eq!(report.delivered, 16);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    for destination in ["slow", "other"] {
        ensure_eq!(receiver.most_in_flight(destination), 1);
        let starts = receiver.starts_of(destination);
        ensure_eq!(starts.len(), 8);
        for pair in starts.windows(2) {
            let gap = pair[1].duration_since(pair[0]);
            ensure!(
                gap >= Duration::from_millis(250),
                "{destination}: two requests {} ms apart at 4 a second",
                gap.as_millis()
            );
        }
    }
    // Each destination's bucket is its own: both go at the same pace,
    // side by side, not one after the other.
    let (slow, other) = (receiver.starts_of("slow"), receiver.starts_of("other"));
    ensure!(
        other[0] < slow[1] && slow[0] < other[1],
        "one destination waited for the other: {slow:?} / {other:?}"
    );
    Ok(())
}

pub(crate) async fn a_destination_s_own_rate_holds_without_the_drainer_s_limits(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    for _ in 0..6 {
        enqueue_message(&outbox, to("hook", "rated-4")).await?;
        enqueue_message(&outbox, to("hook", "other")).await?;
    }
    let receiver = FanOut::new(&h);
    let drainer = drainer(&h, &outbox, &receiver, None)?;
    let report = drain_as_time_passes(&h, &drainer, &receiver).await;
    ensure_eq!(report.delivered, 12);
    ensure_eq!((report.retried, report.dead), (0, 0));
    let rated = receiver.starts_of("rated-4");
    ensure_eq!(rated.len(), 6);
    for pair in rated.windows(2) {
        let gap = pair[1].duration_since(pair[0]);
        ensure!(
            gap >= Duration::from_millis(250),
            "two requests {} ms apart at its own 4 a second",
            gap.as_millis()
        );
    }
    // The destination without a rate of its own is not held back.
    let other = receiver.starts_of("other");
    ensure_eq!(other.len(), 6);
    ensure!(
        other.iter().all(|start| *start < rated[1]),
        "the unlimited destination waited: {other:?} / {rated:?}"
    );
    Ok(())
}

pub(crate) async fn a_slow_destination_gives_its_backlog_back_and_stalls_no_other(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    // The slow destination's backlog is the oldest: a claim brings a whole
    // batch of it.
    for _ in 0..12 {
        enqueue_message(&outbox, to("hook", "rated-1")).await?;
    }
    for _ in 0..4 {
        enqueue_message(&outbox, to("hook", "other")).await?;
    }
    let receiver = FanOut::new(&h);
    let drainer = Drainer::builder(outbox.clone(), receiver.clone())
        .timer(Arc::new(h.clock().clone()))
        .limits(DrainLimits {
            batch_size: 8,
            ..limits()
        })
        .build()?;
    let started = h.clock().now();
    let report = drain_as_time_passes(&h, &drainer, &receiver).await;
    ensure_eq!(receiver.starts_of("other").len(), 4);
    ensure_eq!((report.retried, report.dead), (0, 0));
    // At 1 a second it waits in the run for at most its next 2 seconds'
    // worth; the rest went back due at the slots booked for them, one
    // second apart, no attempt spent.
    let rated = receiver.starts_of("rated-1");
    ensure!(
        (1..=3).contains(&rated.len()),
        "{} started in the run",
        rated.len()
    );
    let rows = h
        .sql(
            &format!(
                "SELECT due_at, attempts FROM \"{}\" ORDER BY due_at",
                outbox.table()
            ),
            vec![],
        )
        .await?;
    ensure_eq!(rows.len(), 12 - rated.len());
    let mut previous: Option<i64> = None;
    for row in rows.iter() {
        ensure_eq!(row.get::<i64>("attempts")?, 0);
        let due: i64 = row.get("due_at")?;
        ensure!(
            due > started.as_unix_millis(),
            "a row given back due at once"
        );
        if let Some(previous) = previous {
            ensure!(due - previous >= 1_000, "{previous} then {due}");
        }
        previous = Some(due);
    }
    Ok(())
}
