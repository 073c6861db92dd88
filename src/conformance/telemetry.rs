//! Live telemetry: a drain tells its sinks each settle as the database
//! applied it, with the classes and times a dashboard needs, and agrees
//! with the rollups the settles counted.

use std::sync::Arc;
use std::time::Duration;

use super::{CaseResult, Failure, Harness, LEASE, enqueue, ensure, ensure_eq};
use crate::drain::DrainLimits;
use crate::drain::deliver_fn;
use crate::drain::drainer::Drainer;
use crate::manual_clock::ManualClock;
use crate::outbox::{ClaimedMessage, Delivery, Resolution};
use crate::telemetry::Outcome;
use crate::testing::RecordingTelemetry;
use crate::time::Clock;

pub(crate) async fn a_drain_tells_its_sinks_what_it_settled(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    for topic in ["mail", "mail", "bad", "flaky"] {
        enqueue(&outbox, topic).await?;
    }
    // Due a second ago when the drain starts.
    h.clock().advance(Duration::from_secs(1));
    let clock: ManualClock = h.clock().clone();
    let deliver = deliver_fn(move |message: ClaimedMessage| {
        let clock = clock.clone();
        async move {
            clock.advance(Duration::from_millis(40));
            match message.topic.as_str() {
                "bad" => Delivery::permanent("400: no such address"),
                "flaky" => Delivery::retry("500"),
                _ => Delivery::Delivered,
            }
        }
    });
    let telemetry = RecordingTelemetry::default();
    let limits = DrainLimits {
        concurrency: 1,
        breaker: None,
        ..super::drain::limits()
    };
    let report = Drainer::builder(outbox.clone(), deliver)
        .timer(Arc::new(h.clock().clone()))
        .limits(limits)
        .telemetry(Arc::new(telemetry.clone()))
        .build()?
        .drain()
        .await;
    ensure_eq!((report.delivered, report.dead, report.retried), (2, 1, 1));
    let told = telemetry.told();
    let table = outbox.table().as_str().to_owned();
    ensure_eq!(told.runs_ended, vec![table.clone()]);
    ensure_eq!(
        told.backlogs,
        // Sampled before the first claim.
        vec![(table.clone(), 4, Some(Duration::from_secs(1)))]
    );
    ensure_eq!(told.settled.len(), 4);
    let mut seen: Vec<(&str, Outcome, Option<&str>)> = told
        .settled
        .iter()
        .map(|settle| (settle.topic.as_str(), settle.outcome, settle.error_type))
        .collect();
    seen.sort_unstable();
    ensure_eq!(
        seen,
        vec![
            ("bad", Outcome::Dead, Some("permanent")),
            ("flaky", Outcome::Retried, Some("failed")),
            ("mail", Outcome::Delivered, None),
            ("mail", Outcome::Delivered, None),
        ]
    );
    for settle in &told.settled {
        ensure_eq!(settle.duration, Some(Duration::from_millis(40)));
        ensure!(!settle.alone && !settle.tripped, "{settle:?}");
        if settle.outcome == Outcome::Delivered {
            let lateness = settle
                .lateness
                .ok_or_else(|| Failure("no lateness".into()))?;
            ensure!(lateness >= Duration::from_secs(1), "{settle:?}");
            ensure!(settle.age >= Some(lateness), "{settle:?}");
        } else {
            ensure_eq!((settle.lateness, settle.age), (None, None));
        }
    }
    // The live numbers agree with the exact ones.
    let from =
        crate::time::Timestamp::from_unix_millis(h.clock().now().as_unix_millis() - 3_600_000)?;
    let rollups = outbox
        .rollups(from, h.later(Duration::from_secs(60))?, Resolution::Minute)
        .await?;
    let counted = |topic: &str| {
        rollups
            .iter()
            .filter(|rollup| rollup.topic == topic)
            .map(|rollup| {
                let counts = &rollup.counts;
                (counts.delivered, counts.retried, counts.dead)
            })
            .fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2))
    };
    ensure_eq!(counted("mail"), (2, 0, 0));
    ensure_eq!(counted("flaky"), (0, 1, 0));
    ensure_eq!(counted("bad"), (0, 0, 1));
    Ok(())
}

pub(crate) async fn a_claims_deaths_are_told(h: Harness) -> CaseResult {
    let outbox = h.outbox_named("outbox", 1).await?;
    let poison = enqueue(&outbox, "poison").await?;
    let claim = outbox.claim(10, LEASE).await?;
    // Delivered alone, its one attempt spent up front; the drainer dies.
    let (isolate, _) = outbox.isolate_statement(claim.messages[0].lease(), LEASE, true)?;
    ensure_eq!(h.db().execute(&isolate).await?, 1);
    h.clock().advance(LEASE);
    let telemetry = RecordingTelemetry::default();
    let drainer = Drainer::builder(
        outbox.clone(),
        deliver_fn(|_| async { Delivery::Delivered }),
    )
    .timer(Arc::new(h.clock().clone()))
    .limits(super::drain::limits())
    .telemetry(Arc::new(telemetry.clone()))
    .build()?;
    let report = drainer.drain().await;
    ensure_eq!(report.dead, 1);
    let told = telemetry.told();
    ensure_eq!(told.settled.len(), 1);
    let death = &told.settled[0];
    ensure_eq!(
        (
            death.id.as_str(),
            death.topic.as_str(),
            death.outcome,
            death.error_type
        ),
        (
            poison.as_str(),
            "poison",
            Outcome::Dead,
            Some("attempts_exhausted")
        )
    );
    Ok(())
}

pub(crate) async fn a_stale_holders_settle_is_told_as_lease_lost(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let id = enqueue(&outbox, "mail").await?;
    let leased = outbox.claim(1, LEASE).await?.messages;
    let telemetry = RecordingTelemetry::default();
    // While its delivery runs, another drainer takes the message over (its
    // lease token changes under the delivery).
    let db = h.db();
    let takeover = crate::database::Statement::new(
        h.db().dialect().number_placeholders(&format!(
            "UPDATE \"{}\" SET lease_token = 'another drainer' WHERE id = ?",
            outbox.table()
        )),
        vec![id.clone().into()],
    );
    let overtaken = deliver_fn(move |_| {
        let (db, takeover) = (db.clone(), takeover.clone());
        async move {
            match db.execute(&takeover).await {
                Ok(1) => Delivery::retry("500"),
                other => Delivery::permanent(format!("the takeover failed: {other:?}")),
            }
        }
    });
    let report = Drainer::builder(outbox.clone(), overtaken)
        .timer(Arc::new(h.clock().clone()))
        .limits(DrainLimits {
            breaker: None,
            ..super::drain::limits()
        })
        .telemetry(Arc::new(telemetry.clone()))
        .build()?
        .deliver_claimed(leased)
        .await;
    ensure_eq!(report.lease_lost, 1);
    let told = telemetry.told();
    ensure_eq!(told.settled.len(), 1);
    let lost = &told.settled[0];
    // Told once, keeping what went wrong with the attempt.
    ensure_eq!(
        (lost.id.as_str(), lost.outcome, lost.error_type),
        (id.as_str(), Outcome::LeaseLost, Some("failed"))
    );
    ensure!(
        told.backlogs.is_empty(),
        "a delivery of leased messages samples no backlog"
    );
    Ok(())
}
