//! The library-owned batch: parts read through typed tickets, inbox keys
//! first, one round trip; typed topics routed to their handlers.

use super::{CaseResult, Harness, LEASE, ensure, ensure_eq, yield_now};
use crate::batch::Batch;
use crate::database::Statement;
use crate::database::value::Value;
use crate::drain::Deliver;
use crate::error::Error;
use crate::outbox::{Delivery, Message};
use crate::topic::Router;
use crate::topic::typed::Topic;

async fn accounts(h: &Harness) -> Result<String, super::Failure> {
    let table = h.table("accounts");
    h.sql(
        &format!("CREATE TABLE \"{table}\" (email TEXT NOT NULL PRIMARY KEY)"),
        vec![],
    )
    .await?;
    Ok(table)
}

fn insert(h: &Harness, table: &str, email: &str) -> Statement {
    h.statement(
        &format!("INSERT INTO \"{table}\" (email) VALUES (?)"),
        vec![Value::from(email)],
    )
}

pub(crate) async fn parts_are_read_through_their_tickets(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let inbox = h.inbox().await?;
    let table = accounts(&h).await?;
    let mail = || Message::raw_json("mail", "{}").dedup_key("ada");
    let mut batch = Batch::new(h.db());
    let account = batch.statement(insert(&h, &table, "ada@example.com"));
    // An inbox key added late still goes first; the tickets must not shift.
    let _key = batch.inbox_key(&inbox, "event-9", None)?;
    let second_key = batch.inbox_key(&inbox, "event-10", None);
    ensure!(
        matches!(
            second_key,
            Err(Error::InvalidInput {
                what: "inbox key",
                ..
            })
        ),
        "a second key of one inbox was accepted: {second_key:?}"
    );
    let first = batch.enqueue_leased(&outbox, mail(), LEASE)?;
    let repeat = batch.enqueue(&outbox, mail())?;
    let repeat_leased = batch.enqueue_leased(&outbox, mail(), LEASE)?;
    let before = h.counts();
    let mut committed = batch.commit().await?;
    ensure_eq!(h.counts().round_trips - before.round_trips, 1);
    ensure_eq!(committed.outcome(&account)?.rows_affected, 1);
    ensure!(
        committed.claimed(first)?.is_some(),
        "the first message was not leased to us"
    );
    ensure!(!committed.enqueued(&repeat)?, "a dedup key let a repeat in");
    ensure!(
        committed.claimed(repeat_leased)?.is_none(),
        "a message that was never written was handed out for delivery"
    );
    ensure_eq!(h.count(outbox.table().as_str()).await?, 1);
    Ok(())
}

pub(crate) async fn a_ticket_of_another_batch_is_refused(h: Harness) -> CaseResult {
    let table = accounts(&h).await?;
    let mut one = Batch::new(h.db());
    let ticket = one.statement(insert(&h, &table, "a@example.com"));
    let mut other = Batch::new(h.db());
    other.push(insert(&h, &table, "b@example.com"));
    let committed = other.commit().await?;
    let read = committed.outcome(&ticket);
    ensure!(
        matches!(read, Err(Error::InvalidInput { what: "ticket", .. })),
        "got {read:?}"
    );
    drop(one);
    Ok(())
}

pub(crate) async fn inbox_keys_go_first_and_a_repeat_writes_nothing(h: Harness) -> CaseResult {
    let inbox = h.inbox().await?;
    let table = accounts(&h).await?;
    for attempt in 0..2 {
        let mut batch = Batch::new(h.db());
        // The effect is added before the key; the key still goes first.
        batch.push(insert(&h, &table, &format!("user{attempt}@example.com")));
        let key = batch.inbox_key(&inbox, "event-1", None)?;
        match (attempt, batch.commit().await) {
            (0, Ok(_)) => {}
            (1, Err(error)) if key.already_processed(&error) => {}
            (_, other) => return Err(super::Failure(format!("attempt {attempt}: {other:?}"))),
        }
    }
    ensure_eq!(h.count(&table).await?, 1);
    Ok(())
}

pub(crate) async fn an_erasure_counts_what_it_removed(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let inbox = h.inbox().await?;
    for _ in 0..2 {
        outbox
            .enqueue_alone(Message::raw_json("mail", "{}").subject("acct-1"))
            .await?;
    }
    inbox.process_once("event-1", Some("acct-1"), &[]).await?;
    let mut batch = Batch::new(h.db());
    let messages = batch.erase_outbox_subject(&outbox, "acct-1")?;
    let keys = batch.erase_inbox_subject(&inbox, "acct-1")?;
    let committed = batch.commit().await?;
    ensure_eq!(
        (committed.erased(&messages)?, committed.erased(&keys)?),
        (2, 1)
    );
    Ok(())
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Welcome {
    to: String,
}

impl Topic for Welcome {
    const NAME: &'static str = "welcome";
}

pub(crate) async fn typed_topics_are_routed_and_decoded(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    outbox
        .enqueue_alone(Message::of(&Welcome {
            to: "ada@example.com".into(),
        })?)
        .await?;
    outbox
        .enqueue_alone(Message::raw_json("welcome", "{\"from\": 1}"))
        .await?;
    outbox
        .enqueue_alone(Message::raw_json("unknown", "{}"))
        .await?;
    let router = Router::new().handle(|mail: Welcome, _message| async move {
        yield_now().await;
        if mail.to == "ada@example.com" {
            Delivery::Delivered
        } else {
            Delivery::retry("wrong address")
        }
    });
    let claim = outbox.claim(10, LEASE).await?;
    let mut verdicts = Vec::new();
    for message in &claim.messages {
        verdicts.push(match router.deliver(message).await {
            Delivery::Delivered => "delivered".to_owned(),
            Delivery::Permanent { error } => error,
            Delivery::Unavailable { error, .. } => error,
            other => format!("{other:?}"),
        });
    }
    verdicts.sort();
    ensure_eq!(verdicts[0], "delivered");
    ensure!(
        verdicts[1].starts_with("no route for topic \"unknown\""),
        "{verdicts:?}"
    );
    ensure!(
        verdicts[2].starts_with("the payload is not a welcome"),
        "{verdicts:?}"
    );
    Ok(())
}
