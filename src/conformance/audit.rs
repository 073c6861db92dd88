//! The audit log: an entry is written in the atomic call of the change it
//! records, once, and only if the change commits; its result is recorded
//! after; pages go newest first; a drain's sweep keeps the retention.

use std::time::Duration;

use super::{CaseResult, Harness, drainer_through, enqueue_message, ensure, ensure_eq};
use crate::drain::deliver_fn;
use crate::endpoint::{Endpoints, NewEndpoint};
use crate::error::Error;
use crate::outbox::{Audit, ClaimedMessage, Delivery, Message};

fn audit(action: &str, selection: serde_json::Value) -> Audit {
    Audit::new("ops-alice", "operator", action, selection)
}

pub(crate) async fn an_audit_entry_commits_with_its_change_once_or_not_at_all(
    h: Harness,
) -> CaseResult {
    let outbox = h
        .outbox_builder(h.db(), &h.table("outbox"))
        .audit_retention(Duration::from_secs(3600))
        .build()?;
    outbox.create_schema().await?;

    // Reads through the handle write nothing; its first write writes the
    // entry, its second no other.
    let pause = audit("topics/pause", serde_json::json!({ "topic": "mail" }));
    let (audited, paused) = outbox.audited(&pause)?;
    ensure!(
        audited.paused_topics().await?.is_empty(),
        "nothing paused yet"
    );
    ensure!(
        outbox.audit_log(None, 10).await?.is_empty(),
        "a read wrote an entry"
    );
    ensure!(audited.pause_topic("mail", "migrating").await?, "paused");
    ensure!(!audited.resume_topic("other").await?, "resumed nothing");
    let log = outbox.audit_log(None, 10).await?;
    ensure_eq!(log.len(), 1);
    ensure_eq!(log[0].key.clone(), paused.clone());
    ensure_eq!(
        (
            log[0].who.as_str(),
            log[0].role.as_str(),
            log[0].action.as_str()
        ),
        ("ops-alice", "operator", "topics/pause")
    );
    ensure_eq!(log[0].selection.clone(), pause.selection);
    ensure_eq!(log[0].result.clone(), None);
    let did = serde_json::json!({ "changed": true });
    outbox.record_audit_result(&paused, &did).await?;
    ensure_eq!(
        outbox.audit_log(None, 10).await?[0].result.clone(),
        Some(did)
    );

    // A change that fails writes no entry.
    enqueue_message(&outbox, Message::raw_json("mail", "{}").id("m-1")).await?;
    let (refused, lost) = outbox.audited(&audit("enqueue", serde_json::json!({})))?;
    let again = refused
        .enqueue_alone(Message::raw_json("mail", "{}").id("m-1"))
        .await;
    ensure!(matches!(again, Err(Error::Conflict { .. })), "{again:?}");
    ensure_eq!(outbox.audit_log(None, 10).await?.len(), 1);
    ensure!(
        matches!(
            outbox
                .record_audit_result(&lost, &serde_json::json!({}))
                .await,
            Err(Error::NotFound { .. })
        ),
        "a result recorded for a change that did not commit"
    );

    // An endpoint's change is audited alike; pages go newest first.
    let endpoints = Endpoints::new(&outbox);
    let endpoint = endpoints
        .create(NewEndpoint::new(
            "acme",
            "https://a.example/hooks",
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        ))
        .await?;
    h.clock().advance(Duration::from_secs(1));
    let (through, disabled) = endpoints.audited(&audit(
        "endpoint/disable",
        serde_json::json!({ "owner": "acme", "id": endpoint.id }),
    ))?;
    through.disable("acme", &endpoint.id, "moving").await?;
    let log = outbox.audit_log(None, 10).await?;
    ensure_eq!(
        log.iter()
            .map(|entry| entry.key.clone())
            .collect::<Vec<_>>(),
        vec![disabled.clone(), paused.clone()]
    );
    let older = outbox.audit_log(Some(&disabled), 10).await?;
    ensure_eq!(older.len(), 1);
    ensure_eq!(older[0].key.clone(), paused);
    for limit in [0, crate::outbox::Outbox::MAX_AUDIT_PAGE + 1] {
        ensure!(
            matches!(
                outbox.audit_log(None, limit).await,
                Err(Error::InvalidInput { .. })
            ),
            "a page limit out of range is refused"
        );
    }

    // Past the retention, a drain's sweep forgets them.
    h.clock().advance(Duration::from_secs(2 * 3600));
    let deliver = deliver_fn(|_: ClaimedMessage| async { Delivery::Delivered });
    drainer_through(&h, &outbox, deliver, 1)?.drain().await;
    ensure!(
        outbox.audit_log(None, 10).await?.is_empty(),
        "kept past its retention"
    );
    Ok(())
}
