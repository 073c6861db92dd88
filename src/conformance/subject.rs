//! A subject's rows: exported and erased in outbox and inbox alike.

use std::time::Duration;

use super::{CaseResult, Harness, LEASE, enqueue_message, ensure, ensure_eq};
use crate::database::Value;
use crate::outbox::{Message, MessageState};
use crate::subject::{Erased, erase_subject, export_subject};

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
