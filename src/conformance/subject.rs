//! A subject's rows: exported and erased in outbox and inbox alike, and
//! never written again while its tombstone is kept.

use std::sync::Arc;
use std::time::Duration;

use super::{CaseResult, Failure, Harness, LEASE, enqueue_message, ensure, ensure_eq};
use crate::batch::Batch;
use crate::database::value::Value;
use crate::drain::drainer::Drainer;
use crate::drain::{DrainLimits, deliver_fn};
use crate::error::Error;
use crate::outbox::{Delivery, Message, MessageState};
use crate::subject::{ERASURE_MEMORY, Erased, erase_subject, export_subject};

pub(crate) async fn export_and_erase_reach_every_row_of_a_subject(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let inbox = h.inbox().await?;
    let of = |subject: &str| Message::raw_json("mail", "{}").subject(subject);
    for _ in 0..3 {
        enqueue_message(&outbox, of("acct-1")).await?;
    }
    h.clock().advance(Duration::from_millis(1));
    let other = enqueue_message(&outbox, of("acct-2")).await?;
    let claim = outbox.claim(2, LEASE).await?;
    outbox.bury(claim.messages[0].lease(), "400").await?;
    inbox.process_once("event-1", Some("acct-1"), &[]).await?;
    inbox.process_once("event-2", Some("acct-2"), &[]).await?;

    let export = export_subject(&outbox, &inbox, "acct-1").await?;
    let mut states: Vec<MessageState> = export.outbox.iter().map(|m| m.state).collect();
    states.sort_by_key(|state| format!("{state:?}"));
    ensure_eq!(
        states,
        vec![
            MessageState::Dead,
            MessageState::Leased,
            MessageState::Pending
        ]
    );
    ensure_eq!(export.inbox.len(), 1);
    ensure_eq!(export.inbox[0].key, "event-1");

    let erased = erase_subject(&outbox, &inbox, "acct-1").await?;
    ensure_eq!(
        erased,
        Erased {
            outbox: 3,
            inbox: 1
        }
    );
    for table in [outbox.table().to_string(), inbox.table().to_string()] {
        let left = h
            .sql(
                &format!("SELECT COUNT(*) AS n FROM \"{table}\" WHERE subject = ?"),
                vec![Value::from("acct-1")],
            )
            .await?;
        ensure_eq!(
            left.first().map(|r| r.get::<i64>("n")).transpose()?,
            Some(0)
        );
    }
    let rest = export_subject(&outbox, &inbox, "acct-2").await?;
    ensure_eq!(rest.outbox.len(), 1);
    ensure_eq!(rest.outbox[0].id, other);
    ensure!(
        rest.inbox.len() == 1,
        "the other subject's inbox key is gone"
    );
    Ok(())
}

/// Rows of `table` carrying `subject`.
async fn rows_of(h: &Harness, table: &str, subject: &str) -> Result<i64, Failure> {
    let rows = h
        .sql(
            &format!("SELECT COUNT(*) AS n FROM \"{table}\" WHERE subject = ?"),
            vec![Value::from(subject)],
        )
        .await?;
    Ok(rows
        .first()
        .map(|r| r.get::<i64>("n"))
        .transpose()?
        .unwrap_or(-1))
}

fn is_erased<T: std::fmt::Debug>(
    result: &crate::error::Result<T>,
    subject: &str,
) -> Result<(), Failure> {
    match result {
        Err(Error::SubjectErased { subjects }) if subjects == &[subject.to_owned()] => Ok(()),
        other => Err(Failure(format!(
            "a write carrying the erased {subject:?} got {other:?}"
        ))),
    }
}

pub(crate) async fn nothing_carrying_an_erased_subject_is_written_again(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let inbox = h.inbox().await?;
    let notes = h.table("notes");
    h.sql(
        &format!("CREATE TABLE \"{notes}\" (note TEXT NOT NULL)"),
        vec![],
    )
    .await?;
    let note = |text: &str| {
        h.statement(
            &format!("INSERT INTO \"{notes}\" (note) VALUES (?)"),
            vec![Value::from(text)],
        )
    };
    let mail = |subject: &str| Message::raw_json("mail", "{}").subject(subject);
    enqueue_message(&outbox, mail("acct-1")).await?;
    inbox.process_once("event-1", Some("acct-1"), &[]).await?;
    h.clock().advance(Duration::from_secs(5));
    erase_subject(&outbox, &inbox, "acct-1").await?;
    let erased_at = h.later(Duration::ZERO)?;
    h.clock().advance(Duration::from_secs(1));

    // Every way the library writes a row carrying a subject is refused, and
    // the rest of its batch with it.
    let mut batch = Batch::new(h.db());
    batch.push(note("with a message"));
    let _ = batch.enqueue(&outbox, mail("acct-1"))?;
    is_erased(&batch.commit().await, "acct-1")?;
    let mut batch = Batch::new(h.db());
    batch.push(note("with a leased message"));
    let _ = batch.enqueue_leased(&outbox, mail("acct-1"), LEASE)?;
    is_erased(&batch.commit().await, "acct-1")?;
    let mut batch = Batch::new(h.db());
    let _ = batch.inbox_key(&inbox, "event-2", Some("acct-1"))?;
    batch.push(note("with an inbox key"));
    is_erased(&batch.commit().await, "acct-1")?;
    is_erased(&outbox.enqueue_alone(mail("acct-1")).await, "acct-1")?;
    is_erased(
        &inbox
            .process_once("event-3", Some("acct-1"), &[note("processed")])
            .await,
        "acct-1",
    )?;
    // The raw statements refuse the same way, and say so.
    let raw = outbox.enqueue(mail("acct-1"))?;
    let error = h
        .db()
        .batch_atomic(&[&[note("raw")], raw.statements()].concat())
        .await
        .err()
        .ok_or_else(|| Failure("a raw enqueue of an erased subject committed".into()))?;
    ensure!(raw.is_erased(&error), "{error:?} not seen as an erasure");
    let key = inbox.key_statement("event-4", Some("acct-1"))?;
    let error = h
        .db()
        .batch_atomic(&[key.statements(), &[note("raw key")]].concat())
        .await
        .err()
        .ok_or_else(|| Failure("a raw inbox key of an erased subject committed".into()))?;
    ensure!(key.is_erased(&error), "{error:?} not seen as an erasure");
    ensure!(!key.is_duplicate(&error), "an erasure is no duplicate");

    ensure_eq!(rows_of(&h, outbox.table().as_str(), "acct-1").await?, 0);
    ensure_eq!(rows_of(&h, inbox.table().as_str(), "acct-1").await?, 0);
    ensure_eq!(h.count(&notes).await?, 0);
    let export = export_subject(&outbox, &inbox, "acct-1").await?;
    ensure!(
        export.outbox.is_empty() && export.inbox.is_empty(),
        "{export:?}"
    );
    ensure_eq!(export.erased_at, Some(erased_at));

    // Other subjects, and rows without one, are written as before; so is a
    // batch carrying another subject beside nothing of the erased one.
    let mut batch = Batch::new(h.db());
    batch.push(note("another subject"));
    let other = batch.enqueue(&outbox, mail("acct-2"))?;
    let _ = batch.inbox_key(&inbox, "event-5", Some("acct-2"))?;
    ensure!(
        batch.commit().await?.enqueued(&other)?,
        "acct-2 was refused"
    );
    outbox
        .enqueue_alone(Message::raw_json("mail", "{}"))
        .await?;
    inbox.process_once("event-6", None, &[]).await?;
    ensure_eq!(h.count(&notes).await?, 1);
    ensure_eq!(
        export_subject(&outbox, &inbox, "acct-2").await?.erased_at,
        None
    );
    // A batch carrying both subjects is refused whole, naming the erased one.
    let mut batch = Batch::new(h.db());
    let _ = batch.enqueue(&outbox, mail("acct-2"))?;
    let _ = batch.enqueue(&outbox, mail("acct-1"))?;
    is_erased(&batch.commit().await, "acct-1")?;
    ensure_eq!(rows_of(&h, outbox.table().as_str(), "acct-2").await?, 1);
    // So is a batch that erases a subject and writes it again.
    let mut batch = Batch::new(h.db());
    let _ = batch.erase_outbox_subject(&outbox, "acct-2")?;
    let _ = batch.enqueue(&outbox, mail("acct-2"))?;
    is_erased(&batch.commit().await, "acct-2")?;
    ensure_eq!(rows_of(&h, outbox.table().as_str(), "acct-2").await?, 1);
    Ok(())
}

pub(crate) async fn each_erasure_records_a_tombstone(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let inbox = h.inbox().await?;
    let mail = |subject: &str| Message::raw_json("mail", "{}").subject(subject);
    // Through the outbox alone, the inbox alone, and a batch of your own.
    ensure_eq!(outbox.erase_subject("acct-1").await?, 0);
    ensure_eq!(inbox.erase_subject("acct-2").await?, 0);
    let mut batch = Batch::new(h.db());
    let _ = batch.erase_outbox_subject(&outbox, "acct-3")?;
    batch.commit().await?;
    for subject in ["acct-1", "acct-2", "acct-3"] {
        is_erased(&outbox.enqueue_alone(mail(subject)).await, subject)?;
        is_erased(&inbox.process_once("k", Some(subject), &[]).await, subject)?;
    }
    // Erasing again renews the tombstone and changes nothing else.
    h.clock().advance(Duration::from_secs(60));
    erase_subject(&outbox, &inbox, "acct-1").await?;
    ensure_eq!(
        export_subject(&outbox, &inbox, "acct-1").await?.erased_at,
        Some(h.later(Duration::ZERO)?)
    );
    // A tombstone holds the subject and the time of its erasure, nothing else.
    let tombstones = h
        .sql(
            &format!(
                "SELECT subject, erased_at FROM \"{}\" ORDER BY subject",
                h.table(super::TOMBSTONES)
            ),
            vec![],
        )
        .await?;
    ensure_eq!(tombstones.len(), 3);
    ensure_eq!(tombstones.columns().len(), 2);
    Ok(())
}

pub(crate) async fn a_tombstone_is_forgotten_after_its_memory(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let inbox = h.inbox().await?;
    let mail = |subject: &str| Message::raw_json("mail", "{}").subject(subject);
    erase_subject(&outbox, &inbox, "acct-1").await?;
    erase_subject(&outbox, &inbox, "acct-2").await?;
    let drain = || -> Result<Drainer, Failure> {
        Ok(Drainer::builder(
            outbox.clone(),
            deliver_fn(|_| async { Delivery::Delivered }),
        )
        .timer(Arc::new(h.clock().clone()))
        .limits(DrainLimits::default())
        .build()?)
    };
    let tombstones = || async { h.count(&h.table(super::TOMBSTONES)).await };
    // Just before its memory ends, a drain's sweep keeps it.
    h.clock()
        .advance(ERASURE_MEMORY.saturating_sub(Duration::from_secs(1)));
    drain()?.drain().await;
    is_erased(&outbox.enqueue_alone(mail("acct-1")).await, "acct-1")?;
    ensure_eq!(tombstones().await?, 2);
    // After it, it refuses nothing even before a sweep forgets it; a drain
    // forgets it (a drain sweeps at most once a minute: the second drainer
    // is new), and so does an inbox purge.
    h.clock().advance(Duration::from_secs(2));
    inbox
        .process_once("before-sweep", Some("acct-2"), &[])
        .await?;
    let forgetting = drain()?;
    forgetting.drain().await;
    ensure_eq!(tombstones().await?, 0);
    ensure!(
        outbox.enqueue_alone(mail("acct-1")).await?.written,
        "a forgotten tombstone still refuses"
    );
    ensure_eq!(
        export_subject(&outbox, &inbox, "acct-1").await?.erased_at,
        None
    );
    erase_subject(&outbox, &inbox, "acct-3").await?;
    h.clock().advance(ERASURE_MEMORY + Duration::from_secs(1));
    inbox.purge(h.later(Duration::ZERO)?).await?;
    ensure_eq!(tombstones().await?, 0);
    inbox.process_once("acct-3", Some("acct-3"), &[]).await?;
    Ok(())
}
