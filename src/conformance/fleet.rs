//! The fleet: a member's drain reports its outbox's summary (bounded counts,
//! the oldest due message, the last error) into the registry when it is
//! worth writing; the registry pages by name, by dead letters and by the
//! oldest due message, each from where the last page ended.

use std::time::Duration;

use super::{CaseResult, Harness, enqueue_message, ensure, ensure_eq};
use crate::drain::deliver_fn;
use crate::error::Error;
use crate::fleet::{Fleet, FleetCursor, FleetMember, FleetOrder};
use crate::outbox::{ClaimedMessage, Delivery, Message, Outbox, OutboxSummary};
use crate::time::{Clock, Timestamp};

pub(crate) async fn a_members_drain_reports_its_outbox_to_the_fleet(h: Harness) -> CaseResult {
    let fleet = Fleet::new(h.db(), &h.table("fleet"))?;
    fleet.create_schema().await?;
    let outbox = h.outbox().await?;
    let in_an_hour = || {
        h.clock()
            .now()
            .checked_add(Duration::from_secs(3600))
            .unwrap_or(Timestamp::MAX)
    };
    let member = FleetMember::new(fleet.clone(), "customer-7")?;
    // "mail" is refused for good; "later" is due in an hour.
    let deliver = deliver_fn(|message: ClaimedMessage| async move {
        if message.topic == "mail" {
            Delivery::permanent("receiver answered 422: no such mailbox")
        } else {
            Delivery::Delivered
        }
    });
    let drainer = crate::drain::drainer::Drainer::builder(outbox.clone(), deliver)
        .timer(std::sync::Arc::new(h.clock().clone()))
        .limits(super::drain::limits())
        .fleet(member.clone())
        .build()?;
    enqueue_message(&outbox, Message::raw_json("mail", "{}")).await?;
    enqueue_message(&outbox, Message::raw_json("ok", "{}")).await?;
    enqueue_message(
        &outbox,
        Message::raw_json("later", "{}").not_before(in_an_hour()),
    )
    .await?;
    drainer.drain().await;

    let page = fleet.list(FleetOrder::Name, None, 10).await?;
    ensure_eq!(page.entries.len(), 1);
    let entry = &page.entries[0];
    ensure_eq!(
        (entry.member.as_str(), entry.outbox.as_str()),
        ("customer-7", outbox.table().as_str())
    );
    // One scheduled, one dead.
    ensure_eq!((entry.summary.backlog, entry.summary.dead), (1, 1));
    ensure_eq!(entry.summary.oldest_due_at, None);
    ensure_eq!(
        entry.summary.last_error.as_deref(),
        Some("receiver answered 422: no such mailbox")
    );
    ensure_eq!(entry.reported_at, h.clock().now());
    ensure_eq!(page.next, None);

    // Nothing changed: the next drain writes nothing; a drifting count
    // waits for its interval, a new dead letter does not.
    h.clock().advance(Duration::from_secs(1));
    drainer.drain().await;
    let first = fleet.list(FleetOrder::Name, None, 10).await?.entries[0].clone();
    ensure_eq!(first.reported_at, entry.reported_at);
    enqueue_message(
        &outbox,
        Message::raw_json("later", "{}").not_before(in_an_hour()),
    )
    .await?;
    drainer.drain().await;
    // A backlog's drift is held back: the member owes it.
    ensure_eq!(
        fleet.list(FleetOrder::Name, None, 10).await?.entries[0]
            .summary
            .backlog,
        1
    );
    ensure!(member.owes(&outbox), "a held-back report is owed");
    ensure_eq!(member.retry_in(&outbox), Some(FleetMember::DEFAULT_EVERY));
    enqueue_message(&outbox, Message::raw_json("mail", "{}")).await?;
    drainer.drain().await;
    let now = fleet.list(FleetOrder::Name, None, 10).await?.entries[0].clone();
    ensure_eq!((now.summary.backlog, now.summary.dead), (2, 2));
    ensure_eq!(now.reported_at, h.clock().now());
    ensure!(!member.owes(&outbox), "written: nothing owed");

    // A report that cannot be written (no registry table) is owed, and
    // fails nothing.
    let nowhere = FleetMember::new(Fleet::new(h.db(), &h.table("no_fleet"))?, "customer-7")?;
    ensure!(
        nowhere.report(&outbox).await.is_err(),
        "no table, no report"
    );
    ensure!(nowhere.owes(&outbox), "a failed report is owed");
    // Tried again later each time it fails, at most an hour later.
    ensure_eq!(nowhere.retry_in(&outbox), Some(Duration::from_secs(60)));
    for _ in 0..10 {
        ensure!(nowhere.report(&outbox).await.is_err(), "still no table");
    }
    ensure_eq!(nowhere.retry_in(&outbox), Some(FleetMember::HEARTBEAT));
    ensure_eq!(member.retry_in(&outbox), None);

    // Counts stop one past the cap: "more than 100".
    let mut many = crate::batch::Batch::new(h.db());
    for _ in 0..Outbox::SUMMARY_CAP + 5 {
        let _ticket = many.enqueue(
            &outbox,
            Message::raw_json("later", "{}").not_before(in_an_hour()),
        )?;
    }
    many.commit().await?;
    let summary = outbox.summary().await?;
    ensure_eq!(summary.backlog, Outbox::SUMMARY_CAP + 1);
    ensure_eq!(summary.dead, 2);
    // Two hours on, the first scheduled message is the most overdue.
    h.clock().advance(Duration::from_secs(7200));
    ensure_eq!(
        outbox.summary().await?.oldest_due_at,
        Some(Timestamp::from_unix_millis(super::START + 3_600_000)?)
    );
    Ok(())
}

pub(crate) async fn the_fleet_pages_by_name_dead_letters_and_oldest_due(h: Harness) -> CaseResult {
    let fleet = Fleet::new(h.db(), &h.table("fleet"))?;
    fleet.create_schema().await?;
    let at = |ms: i64| Timestamp::from_unix_millis(super::START + ms);
    let summary = |dead: u32, due: Option<i64>| -> Result<OutboxSummary, Error> {
        Ok(OutboxSummary {
            backlog: 3,
            dead,
            oldest_due_at: due.map(at).transpose()?,
            last_error: (dead > 0).then(|| "receiver answered 500".to_owned()),
        })
    };
    // (member, dead, due): two tie on dead letters, two have nothing due.
    let members = [
        ("acme", 0, None),
        ("beta", 4, Some(500)),
        ("ceta", 9, None),
        ("delta", 4, Some(100)),
        ("échelle", 1, Some(300)),
    ];
    for (member, dead, due) in members {
        fleet
            .report(member, "outbox", &summary(dead, due)?, at(1_000)?)
            .await?;
    }
    // Written again: one row each, the last report's.
    fleet
        .report("acme", "outbox", &summary(0, Some(900))?, at(2_000)?)
        .await?;

    let walk = |order: FleetOrder| {
        let fleet = fleet.clone();
        async move {
            let mut names = Vec::new();
            let mut after: Option<FleetCursor> = None;
            loop {
                let page = fleet.list(order, after.as_ref(), 2).await?;
                names.extend(page.entries.iter().map(|entry| entry.member.clone()));
                match page.next {
                    Some(next) => after = Some(FleetCursor::parse(&next.to_string())?),
                    None => break,
                }
            }
            Ok::<Vec<String>, Error>(names)
        }
    };
    ensure_eq!(
        walk(FleetOrder::Name).await?,
        ["acme", "beta", "ceta", "delta", "échelle"]
    );
    ensure_eq!(
        walk(FleetOrder::Dead).await?,
        ["ceta", "delta", "beta", "échelle"]
    );
    ensure_eq!(
        walk(FleetOrder::OldestDue).await?,
        ["delta", "échelle", "beta", "acme"]
    );
    let acme = fleet.list(FleetOrder::Name, None, 1).await?.entries[0].clone();
    ensure_eq!(acme.reported_at, at(2_000)?);
    ensure_eq!(acme.summary.oldest_due_at, Some(at(900)?));

    ensure_eq!(fleet.forget("beta").await?, 1);
    ensure_eq!(walk(FleetOrder::Dead).await?, ["ceta", "delta", "échelle"]);

    // Bad input is refused and writes nothing.
    for refused in [
        fleet.list(FleetOrder::Name, None, 0).await.err(),
        fleet
            .list(FleetOrder::Name, None, Fleet::MAX_PAGE + 1)
            .await
            .err(),
        fleet
            .report("", "outbox", &summary(0, None)?, at(0)?)
            .await
            .err(),
        fleet
            .report("a\0b", "outbox", &summary(0, None)?, at(0)?)
            .await
            .err(),
        FleetCursor::parse("[1, \"a\"]").err(),
        "nothing".parse::<FleetOrder>().err(),
    ] {
        ensure!(
            matches!(refused, Some(Error::InvalidInput { .. })),
            "{refused:?}"
        );
    }
    ensure_eq!(walk(FleetOrder::Name).await?.len(), 4);
    Ok(())
}
