//! Enqueueing: atomic with the state change, deduplicated, delayed, checked.

use std::time::Duration;

use super::{
    CaseResult, Failure, Harness, LEASE, enqueue_leased, enqueue_message, ensure, ensure_eq, ids,
};
use crate::batch::Batch;
use crate::database::Statement;
use crate::error::Error;
use crate::outbox::{Message, MessageLimits, Outbox};
use crate::queue::Envelope;
use crate::trace::TraceContext;

async fn accounts_table(h: &Harness) -> Result<String, Failure> {
    let table = h.table("accounts");
    h.sql(
        &format!("CREATE TABLE \"{table}\" (email TEXT PRIMARY KEY)"),
        vec![],
    )
    .await?;
    Ok(table)
}

fn signup(h: &Harness, table: &str, email: &str) -> Statement {
    h.statement(
        &format!("INSERT INTO \"{table}\" (email) VALUES (?)"),
        vec![email.into()],
    )
}

pub(crate) async fn enqueue_commits_with_the_state_change(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let accounts = accounts_table(&h).await?;
    let db = h.db();
    let first = outbox.enqueue(Message::raw_json("mail", r#"{"to":"a@x.io"}"#))?;
    db.batch_atomic(&[&[signup(&h, &accounts, "a@x.io")], first.statements()].concat())
        .await?;
    ensure_eq!(h.count(outbox.table().as_str()).await?, 1);

    // The second signup fails on the account, so its message never exists.
    let second = outbox.enqueue(Message::raw_json("mail", r#"{"to":"a@x.io"}"#))?;
    let result = db
        .batch_atomic(&[second.statements(), &[signup(&h, &accounts, "a@x.io")]].concat())
        .await;
    ensure!(
        matches!(result, Err(Error::Conflict { .. })),
        "got {result:?}"
    );
    ensure_eq!(h.count(outbox.table().as_str()).await?, 1);
    let claim = outbox.claim(10, LEASE).await?;
    ensure_eq!(ids(&claim), vec![first.id().to_owned()]);
    Ok(())
}

pub(crate) async fn dedup_key_makes_a_repeat_a_no_op(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let db = h.db();
    let message = || Message::raw_json("mail", "{}").dedup_key("welcome:a@x.io");
    for (attempt, expected) in [("first", true), ("repeat", false)] {
        let mut batch = Batch::new(db.clone());
        let ticket = batch.enqueue(&outbox, message())?;
        let written = batch.commit().await?.enqueued(&ticket)?;
        ensure!(
            written == expected,
            "the {attempt} enqueue wrote: {written}"
        );
    }
    ensure_eq!(h.count(outbox.table().as_str()).await?, 1);

    // Once delivered, the key is free again.
    let claim = outbox.claim(10, LEASE).await?;
    outbox.complete(claim.messages[0].lease()).await?;
    let written = outbox.enqueue_alone(message()).await?.written;
    ensure!(written, "the key stayed taken after delivery");
    Ok(())
}

pub(crate) async fn not_before_delays_delivery(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let later = h.later(Duration::from_secs(10))?;
    let id = enqueue_message(&outbox, Message::raw_json("mail", "{}").not_before(later)).await?;
    ensure!(
        outbox.claim(10, LEASE).await?.is_empty(),
        "claimed before its time"
    );
    h.clock().advance(Duration::from_millis(9_999));
    ensure!(
        outbox.claim(10, LEASE).await?.is_empty(),
        "claimed 1 ms early"
    );
    h.clock().advance(Duration::from_millis(1));
    ensure_eq!(ids(&outbox.claim(10, LEASE).await?), vec![id]);
    Ok(())
}

pub(crate) async fn caller_ids_are_unique(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let accounts = accounts_table(&h).await?;
    let db = h.db();
    let given = outbox.enqueue(Message::raw_json("mail", "{}").id("order-1"))?;
    ensure_eq!(given.id(), "order-1");
    db.batch_atomic(given.statements()).await?;
    let again = outbox.enqueue(Message::raw_json("mail", "{}").id("order-1"))?;
    let result = db
        .batch_atomic(&[&[signup(&h, &accounts, "b@x.io")], again.statements()].concat())
        .await;
    ensure_eq!(
        result,
        Err(Error::Conflict {
            constraint: format!("{}.id", outbox.table())
        })
    );
    ensure_eq!(h.count(&accounts).await?, 0);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 1);
    Ok(())
}

pub(crate) async fn bad_input_is_refused_and_writes_nothing(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let ok = || Message::raw_json("mail", "{}");
    let long = "k".repeat(MessageLimits::MAX_KEY_BYTES + 1);
    let oversized = format!(
        "\"{}\"",
        "x".repeat(MessageLimits::default().max_payload_bytes())
    );
    let cases: Vec<(Message, &str)> = vec![
        (Message::raw_json("", "{}"), "topic"),
        (Message::raw_json(long.clone(), "{}"), "topic"),
        (Message::raw_json("mail", "{\"unterminated\": "), "payload"),
        (Message::raw_json("mail", oversized), "payload"),
        (ok().subject(""), "subject"),
        (ok().dedup_key(long.clone()), "dedup key"),
        (ok().ordering_key(""), "ordering key"),
        (ok().id("two words"), "message id"),
        (
            ok().id("x".repeat(MessageLimits::MAX_ID_BYTES + 1)),
            "message id",
        ),
    ];
    for (message, expected) in cases {
        match outbox.enqueue(message) {
            Err(Error::InvalidInput { what, .. }) => ensure_eq!(what, expected),
            other => return Err(Failure(format!("{expected}: got {other:?}"))),
        }
    }
    let leased = outbox.enqueue_leased(ok().ordering_key("k"), LEASE);
    ensure!(
        matches!(
            leased,
            Err(Error::InvalidInput {
                what: "ordering key",
                ..
            })
        ),
        "got {leased:?}"
    );
    let zero = outbox.enqueue_leased(ok(), Duration::ZERO);
    ensure!(
        matches!(zero, Err(Error::InvalidInput { what: "lease", .. })),
        "got {zero:?}"
    );
    for table in ["x; DROP TABLE y", "", "\"quoted\"", &"t".repeat(200)] {
        let result = Outbox::new(h.db(), table);
        ensure!(
            matches!(
                result,
                Err(Error::InvalidInput {
                    what: "table name",
                    ..
                })
            ),
            "table {table:?} gave {:?}",
            result.map(|o| o.table().to_string())
        );
    }
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    ensure_eq!(h.counts().round_trips, 0);
    Ok(())
}

pub(crate) async fn sql_in_text_is_stored_verbatim(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let hostile = format!("x'); DROP TABLE \"{}\"; --", outbox.table());
    let id = enqueue_message(
        &outbox,
        Message::json(hostile.clone(), &hostile)?.subject(hostile.clone()),
    )
    .await?;
    let claim = outbox.claim(10, LEASE).await?;
    ensure_eq!(ids(&claim), vec![id]);
    ensure_eq!(claim.messages[0].topic, hostile);
    ensure_eq!(claim.messages[0].subject.as_deref(), Some(hostile.as_str()));
    ensure_eq!(claim.messages[0].payload_as::<String>()?, hostile);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 1);
    Ok(())
}

pub(crate) async fn pre_leased_message_settles_in_one_round_trip(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let claimed = enqueue_leased(&h, &outbox, Message::raw_json("mail", "{}"))
        .await?
        .ok_or_else(|| Failure("the pre-leased row was not confirmed".into()))?;
    ensure_eq!(claimed.attempt(), 1);
    // While leased, no claim takes it.
    ensure!(
        outbox.claim(10, LEASE).await?.is_empty(),
        "claimed a leased row"
    );
    let before = h.counts();
    outbox.complete(claimed.lease()).await?;
    ensure_eq!(h.counts().round_trips - before.round_trips, 1);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);

    // If the holder never settles, the lease runs out and a drain takes it.
    let abandoned = enqueue_leased(&h, &outbox, Message::raw_json("mail", "{}"))
        .await?
        .ok_or_else(|| Failure("not confirmed".into()))?;
    h.clock().advance(LEASE);
    let claim = outbox.claim(10, LEASE).await?;
    ensure_eq!(ids(&claim), vec![abandoned.id.clone()]);
    // An abandoned lease spends no attempt, and marks the message a suspect.
    ensure_eq!(
        (claim.messages[0].attempt(), claim.messages[0].is_suspect()),
        (1, true)
    );
    let stale = outbox.complete(abandoned.lease()).await;
    ensure!(
        matches!(stale, Err(Error::LeaseLost { .. })),
        "got {stale:?}"
    );
    Ok(())
}

pub(crate) async fn pre_leased_duplicate_is_not_confirmed(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let message = || Message::raw_json("mail", "{}").dedup_key("once");
    ensure!(
        enqueue_leased(&h, &outbox, message()).await?.is_some(),
        "first not confirmed"
    );
    ensure!(
        enqueue_leased(&h, &outbox, message()).await?.is_none(),
        "a deduplicated message was confirmed for delivery"
    );
    ensure_eq!(h.count(outbox.table().as_str()).await?, 1);
    Ok(())
}

pub(crate) async fn a_trace_context_travels_with_the_message(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let ok = || Message::raw_json("mail", "{}");
    let trace = TraceContext::parse(
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        Some("rojo=00f067aa0ba902b7"),
    )?;
    let traced = enqueue_message(&outbox, ok().trace(trace.clone())).await?;
    enqueue_message(&outbox, ok()).await?;
    let claim = outbox.claim(10, LEASE).await?;
    let mut traces: Vec<(bool, Option<TraceContext>)> = claim
        .messages
        .iter()
        .map(|message| (message.id == traced, message.trace.clone()))
        .collect();
    traces.sort_by_key(|(is_traced, _)| !is_traced);
    ensure_eq!(traces, vec![(true, Some(trace.clone())), (false, None)]);
    // Into a Queue and back, unchanged.
    let message = claim
        .messages
        .iter()
        .find(|message| message.id == traced)
        .ok_or_else(|| Failure("the traced message was not claimed".into()))?;
    let envelope = Envelope::of(message)?;
    let text = envelope.queue_text()?;
    let read: Envelope = serde_json::from_str(&text).map_err(|e| Failure(e.to_string()))?;
    ensure_eq!(read.trace, Some(trace.clone()));
    // Leased to the request that enqueued it, it carries the trace too.
    let leased = super::enqueue_leased(&h, &outbox, ok().trace(trace.clone()))
        .await?
        .ok_or_else(|| Failure("not leased".into()))?;
    ensure_eq!(leased.trace, Some(trace));
    // A stored value that does not parse (written by hand, or under looser
    // rules) costs the trace, never the message.
    let spoiled = enqueue_message(&outbox, ok()).await?;
    h.sql(
        &format!(
            "UPDATE \"{}\" SET traceparent = 'garbage' WHERE id = ?",
            outbox.table()
        ),
        vec![spoiled.as_str().into()],
    )
    .await?;
    h.clock().advance(LEASE);
    let claim = outbox.claim(10, LEASE).await?;
    ensure!(claim.malformed.is_empty(), "{:?}", claim.malformed);
    let read = claim
        .messages
        .iter()
        .find(|message| message.id == spoiled)
        .ok_or_else(|| Failure("the spoiled message was not claimed".into()))?;
    ensure_eq!(read.trace, None);
    Ok(())
}
