//! Sealed payloads (see [`seal`](crate::seal)): stored sealed and delivered
//! clear; rotated by a reseal pass; held, never dead, when they do not open;
//! unreadable in a copy taken before their subject's erasure; subjects,
//! tombstones and keys stored as keyed hashes that still match.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::{CaseResult, Failure, Harness, enqueue_message, ensure, ensure_eq};
use crate::database::value::Value;
use crate::drain::deliver_fn;
use crate::drain::drainer::Drainer;
use crate::error::Error;
use crate::inbox::Processed;
use crate::outbox::{ClaimedMessage, Delivery, Message, MessageState, Outbox, Resealed};
use crate::seal::{KeyRing, SEALED_PREFIX};
use crate::subject::{erase_subject, export_subject};

/// A ring of `ids`, each key 32 bytes of its id's first letter.
fn ring(ids: &[&str]) -> Result<KeyRing, Failure> {
    let mut builder = KeyRing::builder().hash_key(&[7; 32]);
    for id in ids {
        builder = builder.key(id, &[id.as_bytes()[0]; 32]);
    }
    Ok(builder.build()?)
}

/// An outbox in `<case>_outbox` sealing under `ring`, keys hashed.
async fn sealed_outbox(h: &Harness, ring: KeyRing) -> Result<Outbox, Failure> {
    let outbox = h
        .outbox_builder(h.db(), &h.table("outbox"))
        .key_ring(ring)
        .hash_keys(true)
        .build()?;
    h.db().batch_atomic(&outbox.schema_statements()).await?;
    Ok(outbox)
}

/// Drains `outbox` once, returning the payloads delivered, by id.
async fn drain(h: &Harness, outbox: &Outbox) -> Result<Vec<(String, String)>, Failure> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let delivered = seen.clone();
    let deliver = deliver_fn(move |message: ClaimedMessage| {
        let delivered = delivered.clone();
        async move {
            if let Ok(mut seen) = delivered.lock() {
                seen.push((message.id.clone(), message.payload.clone()));
            }
            Delivery::Delivered
        }
    });
    let drainer = Drainer::builder(outbox.clone(), deliver)
        .timer(Arc::new(h.clock().clone()))
        .limits(super::drain::limits())
        .build()?;
    drainer.drain().await;
    let mut seen = seen.lock().map(|seen| seen.clone()).unwrap_or_default();
    seen.sort();
    Ok(seen)
}

/// Every row of the outbox table as stored: (id, payload, subject, dedup
/// key, ordering key).
async fn stored(h: &Harness, outbox: &Outbox) -> Result<Vec<[Option<String>; 5]>, Failure> {
    let rows = h
        .sql(
            &format!(
                "SELECT id, payload, subject, dedup_key, ordering_key FROM \"{}\" ORDER BY id",
                outbox.table()
            ),
            Vec::new(),
        )
        .await?;
    rows.iter()
        .map(|row| {
            Ok([
                row.get("id")?,
                row.get("payload")?,
                row.get("subject")?,
                row.get("dedup_key")?,
                row.get("ordering_key")?,
            ])
        })
        .collect::<Result<_, Error>>()
        .map_err(Failure::from)
}

async fn data_keys(h: &Harness, outbox: &Outbox) -> Result<i64, Failure> {
    let rows = h
        .sql(
            &format!("SELECT COUNT(*) AS n FROM \"{}_keys\"", outbox.table()),
            Vec::new(),
        )
        .await?;
    Ok(rows
        .first()
        .map(|row| row.get::<i64>("n"))
        .transpose()?
        .unwrap_or(0))
}

pub(crate) async fn sealed_payloads_are_stored_sealed_and_delivered_clear(
    h: Harness,
) -> CaseResult {
    let outbox = sealed_outbox(&h, ring(&["a"])?).await?;
    let plain = enqueue_message(&outbox, Message::raw_json("mail", r#"{"n":"plain"}"#)).await?;
    let ada = enqueue_message(
        &outbox,
        Message::raw_json("mail", r#"{"to":"ada@example.com"}"#)
            .subject("ada@example.com")
            .dedup_key("signup:ada@example.com"),
    )
    .await?;
    // The hashed dedup key still matches.
    let again = outbox
        .enqueue_alone(
            Message::raw_json("mail", r#"{"to":"ada@example.com"}"#)
                .dedup_key("signup:ada@example.com"),
        )
        .await?;
    ensure!(
        !again.written,
        "a duplicate of a hashed dedup key was written"
    );

    let rows = stored(&h, &outbox).await?;
    ensure_eq!(rows.len(), 2);
    for row in &rows {
        let [id, payload, subject, dedup, _] = row;
        let payload = payload.as_deref().unwrap_or_default();
        ensure!(
            payload.starts_with(SEALED_PREFIX),
            "stored clear: {payload}"
        );
        ensure!(
            !payload.contains("ada") && !payload.contains("plain"),
            "{payload}"
        );
        if id.as_deref() == Some(ada.as_str()) {
            ensure!(payload.starts_with("sealed:1:d:"), "{payload}");
            for hashed in [subject, dedup] {
                let hashed = hashed.as_deref().unwrap_or_default();
                ensure!(
                    hashed.starts_with("h1:") && !hashed.contains("ada"),
                    "{hashed}"
                );
            }
        } else {
            ensure!(payload.starts_with("sealed:1:r:a:"), "{payload}");
        }
    }
    ensure_eq!(data_keys(&h, &outbox).await?, 1);

    // Exported opened, named as asked.
    let inbox = h.inbox().await?;
    let export = export_subject(&outbox, &inbox, "ada@example.com").await?;
    ensure_eq!(export.outbox.len(), 1);
    ensure_eq!(export.outbox[0].payload, r#"{"to":"ada@example.com"}"#);
    ensure_eq!(export.outbox[0].subject.as_deref(), Some("ada@example.com"));
    ensure_eq!(export.outbox[0].unopened, None);

    let delivered = drain(&h, &outbox).await?;
    let mut expected = vec![
        (plain, r#"{"n":"plain"}"#.to_owned()),
        (ada, r#"{"to":"ada@example.com"}"#.to_owned()),
    ];
    expected.sort();
    ensure_eq!(delivered, expected);
    // A delivered message's data key goes with its row.
    ensure_eq!(data_keys(&h, &outbox).await?, 0);
    Ok(())
}

pub(crate) async fn rotation_reseals_old_values_and_rewraps_data_keys(h: Harness) -> CaseResult {
    let old = sealed_outbox(&h, ring(&["a"])?).await?;
    enqueue_message(&old, Message::raw_json("mail", r#"{"n":1}"#)).await?;
    enqueue_message(&old, Message::raw_json("mail", r#"{"n":2}"#).subject("s-2")).await?;
    // The new key seals; the old one still opens.
    let rotated = sealed_outbox(&h, ring(&["b", "a"])?).await?;
    enqueue_message(&rotated, Message::raw_json("mail", r#"{"n":3}"#)).await?;
    let mut total = Resealed::default();
    let mut cursor = None;
    let mut calls = 0;
    loop {
        let step = rotated.reseal(cursor.as_ref(), 1).await?;
        total.keys += step.keys;
        total.payloads += step.payloads;
        total.unopenable += step.unopenable;
        calls += 1;
        ensure!(calls < 20, "the pass does not end");
        match step.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    // One data key re-wrapped, one ring-sealed payload resealed; the new
    // message and the data-sealed payload untouched.
    ensure_eq!((total.keys, total.payloads, total.unopenable), (1, 1, 0));
    let again = rotated.reseal(None, 1000).await?;
    let again = rotated.reseal(again.next.as_ref(), 1000).await?;
    let again = rotated.reseal(again.next.as_ref(), 1000).await?;
    ensure_eq!((again.keys, again.payloads, again.next), (0, 0, None));
    let keys = h
        .sql(
            &format!("SELECT ring_key FROM \"{}_keys\"", rotated.table()),
            Vec::new(),
        )
        .await?;
    let ring_key = keys
        .first()
        .map(|row| row.get::<String>("ring_key"))
        .transpose()?;
    ensure_eq!(ring_key.as_deref(), Some("b"));

    // The old key dropped, everything still opens.
    let only_new = sealed_outbox(&h, ring(&["b"])?).await?;
    let delivered: Vec<String> = drain(&h, &only_new)
        .await?
        .into_iter()
        .map(|(_, payload)| payload)
        .collect();
    let mut delivered = delivered;
    delivered.sort();
    ensure_eq!(delivered, vec![r#"{"n":1}"#, r#"{"n":2}"#, r#"{"n":3}"#]);
    ensure!(
        rotated.reseal(None, 0).await.is_err(),
        "a limit of 0 was accepted"
    );
    Ok(())
}

pub(crate) async fn a_payload_that_does_not_open_is_held_not_dead(h: Harness) -> CaseResult {
    let sealing = sealed_outbox(&h, ring(&["a"])?).await?;
    let id = enqueue_message(&sealing, Message::raw_json("mail", r#"{"n":1}"#)).await?;
    // Deployed with the key missing, then with another key under its id.
    let missing = sealed_outbox(&h, ring(&["b"])?).await?;
    let impostor = {
        let ring = KeyRing::builder()
            .hash_key(&[7; 32])
            .key("a", &[9; 32])
            .build()?;
        h.outbox_builder(h.db(), &h.table("outbox"))
            .key_ring(ring)
            .build()?
    };
    let no_ring = h.outbox().await?;
    for (outbox, says) in [
        (&missing, "holds no key \"a\""),
        (&impostor, "does not open"),
        (&no_ring, "no key ring"),
    ] {
        // Many more drains than attempts: it never dies of this.
        for _ in 0..4 {
            ensure_eq!(drain(&h, outbox).await?, Vec::new());
            h.clock().advance(crate::outbox::HELD_UNSEALABLE_FOR);
        }
        let rows = h
            .sql(
                &format!(
                    "SELECT state, due_at, attempts, deferrals, last_error FROM \"{}\"",
                    outbox.table()
                ),
                Vec::new(),
            )
            .await?;
        ensure_eq!(rows.len(), 1);
        let row = rows.iter().next().ok_or_else(|| Failure("no row".into()))?;
        ensure_eq!(row.get::<String>("state")?, "ready");
        ensure_eq!(
            (row.get::<i64>("attempts")?, row.get::<i64>("deferrals")?),
            (0, 0)
        );
        let error: String = row.get::<Option<String>>("last_error")?.unwrap_or_default();
        ensure!(
            error.contains(says),
            "last error {error:?} does not say {says:?}"
        );
        let key = crate::outbox::BrowseCursor::from_parts(row.get("due_at")?, &id);
        let message = outbox
            .message_at(&key)
            .await?
            .ok_or_else(|| Failure("the held message was not found".into()))?
            .message;
        ensure_eq!(message.state, MessageState::Pending);
        ensure!(
            message.unopened.is_some(),
            "a payload that does not open was shown opened"
        );
    }
    let delivered = drain(&h, &sealing).await?;
    ensure_eq!(delivered, vec![(id, r#"{"n":1}"#.to_owned())]);
    Ok(())
}

pub(crate) async fn a_copy_taken_before_an_erasure_cannot_open_the_erased_subjects_payloads(
    h: Harness,
) -> CaseResult {
    let outbox = sealed_outbox(&h, ring(&["a"])?).await?;
    let inbox = h.inbox().await?.with_key_ring(ring(&["a"])?, true);
    for subject in ["ada", "bob"] {
        for n in 0..2 {
            enqueue_message(
                &outbox,
                Message::raw_json("mail", format!(r#"{{"to":"{subject}","n":{n}}}"#))
                    .subject(subject),
            )
            .await?;
        }
    }
    // One of ada's is a dead letter, exported last week.
    let claim = outbox.claim(1, super::LEASE).await?;
    outbox.bury(claim.messages[0].lease(), "422").await?;
    // The copy: every row, as a backup or replica holds it.
    let copy: Vec<(Option<String>, String)> = stored(&h, &outbox)
        .await?
        .into_iter()
        .filter_map(|[_, payload, subject, ..]| Some((subject, payload?)))
        .collect();
    ensure_eq!(copy.len(), 4);

    // Counted as erased: its messages, not their data keys too.
    let erased = erase_subject(&outbox, &inbox, "ada").await?;
    ensure_eq!((erased.outbox, erased.inbox), (2, 0));

    // Opened with the keys the live database still has.
    let keys = outbox
        .data_keys_of(
            copy.iter()
                .map(|(subject, payload)| (subject.as_deref(), payload.as_str())),
        )
        .await?;
    let mut opened = Vec::new();
    for (_, payload) in &copy {
        let key =
            crate::seal::Envelope::parse(payload)?.and_then(|envelope| keys.get(envelope.key));
        match outbox.open_payload(payload, key) {
            Ok(clear) => opened.push(clear),
            Err(Error::Unsealable { reason, .. }) => {
                ensure!(reason.contains("data key is gone"), "{reason}");
            }
            Err(other) => return Err(other.into()),
        }
    }
    opened.sort();
    ensure_eq!(
        opened,
        vec![r#"{"to":"bob","n":0}"#, r#"{"to":"bob","n":1}"#]
    );
    let left = h
        .sql(
            &format!(
                "SELECT COUNT(*) AS n FROM \"{}_keys\" WHERE subject = ?",
                outbox.table()
            ),
            vec![Value::from(ring(&["a"])?.hash("ada"))],
        )
        .await?;
    ensure_eq!(
        left.first().map(|row| row.get::<i64>("n")).transpose()?,
        Some(0)
    );
    Ok(())
}

pub(crate) async fn tombstones_and_hashed_keys_match_and_name_nobody(h: Harness) -> CaseResult {
    let outbox = sealed_outbox(&h, ring(&["a"])?).await?;
    let inbox = h.inbox().await?.with_key_ring(ring(&["a"])?, true);
    erase_subject(&outbox, &inbox, "ada@example.com").await?;
    let tombstones = h
        .sql(
            &format!("SELECT subject FROM \"{}\"", h.table(super::TOMBSTONES)),
            Vec::new(),
        )
        .await?;
    let held: Vec<String> = tombstones
        .iter()
        .map(|row| row.get::<String>("subject"))
        .collect::<Result<_, _>>()?;
    ensure_eq!(held, vec![ring(&["a"])?.hash("ada@example.com")]);

    // The hashed tombstone refuses the subject, named as given.
    let refused = outbox
        .enqueue_alone(Message::raw_json("mail", "{}").subject("ada@example.com"))
        .await;
    match refused {
        Err(Error::SubjectErased { subjects }) => {
            ensure_eq!(subjects, vec!["ada@example.com".to_owned()]);
        }
        other => return Err(Failure(format!("expected SubjectErased, got {other:?}"))),
    }
    let refused = inbox
        .process_once("evt-1", Some("ada@example.com"), &[])
        .await;
    ensure!(
        matches!(refused, Err(Error::SubjectErased { .. })),
        "the inbox wrote a key of an erased subject: {refused:?}"
    );

    // Hashed inbox keys are first-writer-wins as before.
    ensure!(
        matches!(
            inbox.process_once("evt-2", None, &[]).await?,
            Processed::Applied(_)
        ),
        "the first key was not applied"
    );
    ensure!(
        matches!(
            inbox.process_once("evt-2", None, &[]).await?,
            Processed::AlreadyProcessed
        ),
        "a hashed key was processed twice"
    );
    ensure!(inbox.seen("evt-2").await?, "a hashed key was not seen");
    let keys = h
        .sql(
            &format!("SELECT key FROM \"{}\"", inbox.table()),
            Vec::new(),
        )
        .await?;
    let key: String = keys
        .first()
        .map(|row| row.get("key"))
        .transpose()?
        .unwrap_or_default();
    ensure!(key.starts_with("h1:") && !key.contains("evt"), "{key}");

    // Hashed ordering keys still order.
    let first =
        enqueue_message(&outbox, Message::raw_json("mail", "{}").ordering_key("ada")).await?;
    h.clock().advance(Duration::from_millis(1));
    enqueue_message(&outbox, Message::raw_json("mail", "{}").ordering_key("ada")).await?;
    let claim = outbox.claim(10, super::LEASE).await?;
    ensure_eq!(
        claim
            .messages
            .iter()
            .map(|message| message.id.clone())
            .collect::<Vec<_>>(),
        vec![first]
    );
    Ok(())
}

pub(crate) async fn giving_a_ring_loses_no_erasure_of_rows_written_before(
    h: Harness,
) -> CaseResult {
    // Before the ring: a message of "ada", and "bob" erased.
    let before = h.outbox().await?;
    let inbox = h.inbox().await?;
    let old = enqueue_message(
        &before,
        Message::raw_json("mail", r#"{"n":1}"#).subject("ada"),
    )
    .await?;
    erase_subject(&before, &inbox, "bob").await?;

    let outbox = sealed_outbox(&h, ring(&["a"])?).await?;
    let inbox = inbox.with_key_ring(ring(&["a"])?, false);
    // The old tombstone still refuses, named as given.
    match outbox
        .enqueue_alone(Message::raw_json("mail", "{}").subject("bob"))
        .await
    {
        Err(Error::SubjectErased { subjects }) => ensure_eq!(subjects, vec!["bob".to_owned()]),
        other => return Err(Failure(format!("expected SubjectErased, got {other:?}"))),
    }
    // The old message is exported and erased with the new one.
    enqueue_message(
        &outbox,
        Message::raw_json("mail", r#"{"n":2}"#).subject("ada"),
    )
    .await?;
    let export = export_subject(&outbox, &inbox, "ada").await?;
    let mut payloads: Vec<&str> = export.outbox.iter().map(|m| m.payload.as_str()).collect();
    payloads.sort_unstable();
    ensure_eq!(payloads, vec![r#"{"n":1}"#, r#"{"n":2}"#]);
    ensure!(
        export.outbox.iter().any(|m| m.id == old),
        "the old message was not exported"
    );
    let erased = erase_subject(&outbox, &inbox, "ada").await?;
    ensure_eq!(erased.outbox, 2);
    ensure_eq!(stored(&h, &outbox).await?.len(), 0);
    Ok(())
}
