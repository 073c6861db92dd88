//! Rollups: counted in the same atomic call as what they count, exactly
//! once, folded and forgotten on schedule.

use std::time::Duration;

use super::{CaseResult, Failure, Harness, LEASE, enqueue, ensure, ensure_eq};
use crate::drain::deliver_fn;
use crate::drain::drainer::Drainer;
use crate::manual_clock::ManualClock;
use crate::outbox::{ClaimedMessage, Counts, Delivery, Outbox, Resolution, Rollup};
use crate::time::{Clock, Timestamp};

/// The rollups of the last `back` up to a minute from now.
async fn recent(
    h: &Harness,
    outbox: &Outbox,
    back: Duration,
    resolution: Resolution,
) -> Result<Vec<Rollup>, Failure> {
    let now = h.clock().now();
    let from = Timestamp::from_unix_millis(
        now.as_unix_millis() - i64::try_from(back.as_millis()).unwrap_or(i64::MAX),
    )?;
    Ok(outbox
        .rollups(from, h.later(Duration::from_secs(60))?, resolution)
        .await?)
}

/// `rollups` summed into one (`None` if there are none).
fn merged<'r>(rollups: impl IntoIterator<Item = &'r Rollup>) -> Option<Rollup> {
    let mut sum: Option<Rollup> = None;
    for rollup in rollups {
        match &mut sum {
            Some(sum) => sum.merge(rollup),
            None => sum = Some(rollup.clone()),
        }
    }
    sum
}

/// The counts of `topic`, summed over `rollups`.
fn counts_of(rollups: &[Rollup], topic: &str) -> Counts {
    merged(rollups.iter().filter(|rollup| rollup.topic == topic))
        .map(|sum| sum.counts)
        .unwrap_or_default()
}

fn counts(delivered: u64, retried: u64, deferred: u64, dead: u64) -> Counts {
    Counts {
        delivered,
        retried,
        deferred,
        dead,
        ..Counts::default()
    }
}

pub(crate) async fn settles_count_what_they_changed(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for _ in 0..4 {
        enqueue(&outbox, "mail").await?;
    }
    enqueue(&outbox, "hook").await?;
    h.clock().advance(Duration::from_millis(2_000));
    let claim = outbox.claim(10, LEASE).await?;
    let mail: Vec<_> = claim
        .messages
        .iter()
        .filter(|m| m.topic == "mail")
        .collect();
    let hook = claim
        .messages
        .iter()
        .find(|m| m.topic == "hook")
        .ok_or_else(|| Failure("no hook message claimed".into()))?;
    ensure_eq!(mail.len(), 4);
    let verdicts = [
        (mail[0].lease(), Delivery::Delivered),
        (mail[1].lease(), Delivery::retry("500")),
        (mail[2].lease(), Delivery::unavailable("503", None)),
        (mail[3].lease(), Delivery::permanent("400")),
        (hook.lease(), Delivery::Delivered),
    ];
    let trips = h.counts().round_trips;
    let report = outbox.settle(&verdicts).await?;
    ensure_eq!(h.counts().round_trips, trips + 1);
    ensure_eq!((report.completed, report.lease_lost.len()), (2, 0));

    let minutes = recent(&h, &outbox, Duration::from_secs(3600), Resolution::Minute).await?;
    ensure_eq!(counts_of(&minutes, "mail"), counts(1, 1, 1, 1));
    ensure_eq!(counts_of(&minutes, "hook"), counts(1, 0, 0, 0));
    let mail_minute = minutes
        .iter()
        .find(|rollup| rollup.topic == "mail")
        .ok_or_else(|| Failure("no rollup of mail".into()))?;
    ensure_eq!(mail_minute.period, Duration::from_secs(60));
    // Enqueued and due 2 s before delivery: one value each, at most 2.5 s.
    ensure_eq!(mail_minute.lateness.count(), 1);
    ensure_eq!(
        mail_minute.lateness.quantile(0.99),
        Some(Duration::from_millis(2_500))
    );
    ensure_eq!(mail_minute.age.count(), 1);
    // No drain measured a duration.
    ensure_eq!(mail_minute.duration.count(), 0);

    // Sent again (as after an error that may have committed): nothing holds.
    let again = outbox.settle(&verdicts).await?;
    ensure_eq!(again.lease_lost.len(), 5);
    ensure_eq!(
        recent(&h, &outbox, Duration::from_secs(3600), Resolution::Minute).await?,
        minutes
    );
    // Read by the hour, the same counts.
    let hours = recent(&h, &outbox, Duration::from_secs(3600), Resolution::Hour).await?;
    ensure_eq!(counts_of(&hours, "mail"), counts(1, 1, 1, 1));
    ensure!(
        hours
            .iter()
            .all(|rollup| rollup.period == Duration::from_secs(3600)),
        "{hours:?}"
    );
    Ok(())
}

/// Delivered leases of one claim with many rollup keys (here one topic
/// each) are deleted by one statement and counted by reading, once.
pub(crate) async fn a_claim_of_many_topics_is_deleted_at_once_and_counted_once(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    let topics = ["a", "b", "c", "d", "e"];
    for topic in topics {
        enqueue(&outbox, topic).await?;
    }
    let claim = outbox.claim(10, LEASE).await?;
    ensure_eq!(claim.messages.len(), topics.len());
    let fates: Vec<_> = claim
        .messages
        .iter()
        .map(|message| (message.lease(), crate::outbox::Fate::Complete))
        .collect();
    // One delete of the claim's listed rows and its check that each was
    // deleted (SQLite: two statements; Postgres: one, after the planner's
    // settings), and the count of what they add, known without reading a
    // row: on SQLite one upsert per topic, of the columns it adds to; on
    // Postgres one statement, last, for every topic.
    let upserts = match h.db().dialect() {
        crate::database::Dialect::Sqlite => topics.len(),
        crate::database::Dialect::Postgres => 1,
    };
    ensure_eq!(
        outbox.prepare_fates(&fates)?.statements().len(),
        2 + upserts
    );
    let verdicts: Vec<_> = claim
        .messages
        .iter()
        .map(|message| (message.lease(), Delivery::Delivered))
        .collect();
    let report = outbox.settle(&verdicts).await?;
    ensure_eq!((report.completed, report.lease_lost.len()), (5, 0));
    let again = outbox.settle(&verdicts).await?;
    ensure_eq!((again.completed, again.lease_lost.len()), (0, 5));
    let minutes = recent(&h, &outbox, Duration::from_secs(3600), Resolution::Minute).await?;
    for topic in topics {
        ensure_eq!(counts_of(&minutes, topic), counts(1, 0, 0, 0));
    }
    let all = merged(&minutes).ok_or_else(|| Failure("no rollups".into()))?;
    ensure_eq!((all.lateness.count(), all.age.count()), (5, 5));
    Ok(())
}

pub(crate) async fn a_stale_holder_counts_nothing_and_a_lost_lease_counts_once(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    enqueue(&outbox, "mail").await?;
    let first = outbox.claim(1, LEASE).await?;
    h.clock().advance(LEASE * 2);
    let second = outbox.claim(1, LEASE).await?;
    ensure_eq!(second.messages.len(), 1);
    let stale = outbox
        .settle(&[(first.messages[0].lease(), Delivery::Delivered)])
        .await?;
    ensure_eq!(stale.lease_lost.len(), 1);
    ensure_eq!(
        recent(&h, &outbox, Duration::from_secs(3600), Resolution::Minute).await?,
        vec![]
    );
    outbox
        .settle(&[(second.messages[0].lease(), Delivery::Delivered)])
        .await?;
    let minutes = recent(&h, &outbox, Duration::from_secs(3600), Resolution::Minute).await?;
    ensure_eq!(
        counts_of(&minutes, "mail"),
        Counts {
            delivered: 1,
            lease_lost: 1,
            ..Counts::default()
        }
    );
    Ok(())
}

pub(crate) async fn a_claims_deaths_are_counted_with_it(h: Harness) -> CaseResult {
    let outbox = h.outbox_named("outbox", 1).await?;
    enqueue(&outbox, "mail").await?;
    let claim = outbox.claim(10, LEASE).await?;
    // Delivered alone, its attempt spent up front; the drainer dies.
    let (isolate, _) = outbox.isolate_statement(claim.messages[0].lease(), LEASE, true)?;
    ensure_eq!(h.db().execute(&isolate).await?, 1);
    h.clock().advance(LEASE);
    let trips = h.counts().round_trips;
    let claim = outbox.claim(10, LEASE).await?;
    ensure_eq!(h.counts().round_trips, trips + 1);
    ensure_eq!(claim.exhausted.len(), 1);
    let minutes = recent(&h, &outbox, Duration::from_secs(3600), Resolution::Minute).await?;
    ensure_eq!(counts_of(&minutes, "mail"), counts(0, 0, 0, 1));
    // A claim that parks nothing counts nothing.
    outbox.claim(10, LEASE).await?;
    ensure_eq!(
        recent(&h, &outbox, Duration::from_secs(3600), Resolution::Minute).await?,
        minutes
    );
    Ok(())
}

pub(crate) async fn a_drain_counts_durations_suspects_and_trips(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for _ in 0..3 {
        enqueue(&outbox, "mail").await?;
    }
    for _ in 0..6 {
        enqueue(&outbox, "down").await?;
    }
    let clock: ManualClock = h.clock().clone();
    let deliver = deliver_fn(move |message: ClaimedMessage| {
        let clock = clock.clone();
        async move {
            clock.advance(Duration::from_millis(40));
            if message.topic == "down" {
                Delivery::retry("503")
            } else {
                Delivery::Delivered
            }
        }
    });
    let limits = crate::drain::DrainLimits {
        concurrency: 1,
        ..super::drain::limits()
    };
    let report = Drainer::builder(outbox.clone(), deliver)
        .timer(std::sync::Arc::new(h.clock().clone()))
        .limits(limits)
        .build()?
        .drain()
        .await;
    ensure_eq!(report.delivered, 3);
    ensure_eq!(report.tripped, vec!["down".to_owned()]);
    let minutes = recent(&h, &outbox, Duration::from_secs(3600), Resolution::Minute).await?;
    let mail = counts_of(&minutes, "mail");
    ensure_eq!(mail.delivered, 3);
    let down = counts_of(&minutes, "down");
    ensure_eq!(down.breaker_trips, 1);
    let settled = down.retried + down.deferred + down.handed_back;
    ensure_eq!(settled, 6);
    let all = merged(&minutes).ok_or_else(|| Failure("no rollups".into()))?;
    // Every attempt took 40 ms on the drain's clock.
    ensure!(all.duration.count() >= 3, "{:?}", all.duration);
    ensure_eq!(all.duration.quantile(0.5), Some(Duration::from_millis(50)));
    Ok(())
}

pub(crate) async fn minutes_fold_into_hours_and_old_hours_are_forgotten(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let deliver_all = |outbox: &Outbox| {
        let outbox = outbox.clone();
        async move {
            let claim = outbox.claim(10, LEASE).await?;
            let verdicts: Vec<_> = claim
                .messages
                .iter()
                .map(|message| (message.lease(), Delivery::Delivered))
                .collect();
            outbox.settle(&verdicts).await.map(drop)
        }
    };
    enqueue(&outbox, "mail").await?;
    enqueue(&outbox, "mail").await?;
    deliver_all(&outbox).await?;
    // 13 min 20 s past the hour at the start: 30 min later is the same hour.
    h.clock().advance(Duration::from_secs(30 * 60));
    enqueue(&outbox, "mail").await?;
    deliver_all(&outbox).await?;
    let minutes = recent(&h, &outbox, Duration::from_secs(3600), Resolution::Minute).await?;
    ensure_eq!(minutes.len(), 2);
    let hours = recent(&h, &outbox, Duration::from_secs(7200), Resolution::Hour).await?;
    ensure_eq!(hours.len(), 1);
    ensure_eq!(hours[0].counts.delivered, 3);

    let sweep = |outbox: &Outbox| {
        let outbox = outbox.clone();
        let db = h.db();
        async move {
            let statements = outbox.sweep_statements()?;
            db.batch_atomic(&statements).await.map(drop)
        }
    };
    h.clock().advance(Duration::from_secs(49 * 3600));
    sweep(&outbox).await?;
    sweep(&outbox).await?;
    let back = Duration::from_secs(50 * 3600);
    ensure_eq!(recent(&h, &outbox, back, Resolution::Minute).await?, vec![]);
    let folded = recent(&h, &outbox, back, Resolution::Hour).await?;
    ensure_eq!(folded.len(), 1);
    ensure_eq!(folded[0].counts.delivered, 3);
    ensure_eq!(folded[0].lateness.count(), 3);
    ensure_eq!(folded[0].period_start, hours[0].period_start);

    h.clock().advance(Duration::from_secs(90 * 24 * 3600));
    sweep(&outbox).await?;
    ensure_eq!(
        outbox
            .rollups(
                hours[0].period_start,
                h.later(Duration::ZERO)?,
                Resolution::Hour
            )
            .await?,
        vec![]
    );
    Ok(())
}

pub(crate) async fn rollups_off_write_nothing(h: Harness) -> CaseResult {
    let outbox = h
        .outbox_builder(h.db(), &h.table("outbox"))
        .rollups(false)
        .build()?;
    h.db().batch_atomic(&outbox.schema_statements()).await?;
    enqueue(&outbox, "mail").await?;
    let statements = h.counts().statements;
    let claim = outbox.claim(10, LEASE).await?;
    outbox
        .settle(&[(claim.messages[0].lease(), Delivery::Delivered)])
        .await?;
    // One statement each: the claim, the delete; and (Postgres) the steps
    // of the claim floor and the settle's planner settings.
    let settle_settings = u64::from(
        crate::sql::dialects::of(outbox.dialect())
            .planner_settings()
            .is_some(),
    );
    ensure_eq!(
        h.counts().statements,
        statements
            + 2
            + crate::sql::dialects::of(outbox.dialect()).statements_before_claim()
            + settle_settings
    );
    ensure_eq!(
        recent(&h, &outbox, Duration::from_secs(3600), Resolution::Minute).await?,
        vec![]
    );
    Ok(())
}

pub(crate) async fn bad_ranges_are_refused(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let now = h.clock().now();
    for (from, to) in [
        (now, now),
        (h.later(Duration::from_secs(60))?, now),
        (now, h.later(Duration::from_secs(10_001 * 60))?),
    ] {
        match outbox.rollups(from, to, Resolution::Minute).await {
            Err(crate::error::Error::InvalidInput { what, .. }) => {
                ensure_eq!(what, "rollup range");
            }
            other => return Err(Failure(format!("{from:?}..{to:?}: got {other:?}"))),
        }
    }
    Ok(())
}
