//! The Queue consumers: `account-events` writes each account's welcome row
//! exactly once (an inbox key, the outbox id, in the same D1 batch), and
//! `drain-requests` runs one fanned-out mail drain per request.

use worker::{MessageBatch, MessageExt};
use workers_outbox::queue::{DrainRequest, Envelope, QueueConsumer};
use workers_outbox::{Batch, Clock, Result, Statement, SystemClock, Topic};

use crate::app::App;
use crate::signup::AccountCreated;

/// Applies a batch of `account.created` events: acks what committed or was
/// applied before, retries the rest (after 10 s); what keeps failing ends in
/// `account-events-dlq`.
pub(crate) async fn consume_events(app: &App, batch: &MessageBatch<serde_json::Value>) {
    let consumer = QueueConsumer::new(app.db.clone(), app.inbox.clone());
    let report = consumer.consume(batch, welcome).await;
    log::info!(
        "account events: {} applied, {} already applied, {} of erased accounts, {} retried",
        report.applied,
        report.already_applied,
        report.erased,
        report.retried
    );
}

/// The effect of one event: the account's welcome row.
fn welcome(envelope: &Envelope, effect: &mut Batch) -> Result<()> {
    if envelope.topic != AccountCreated::NAME {
        // Retried, then left to the dead letter queue: a newer deployment
        // may consume it.
        return Err(workers_outbox::Error::InvalidInput {
            what: "topic",
            reason: format!("no consumer for topic {:?}", envelope.topic),
        });
    }
    let event: AccountCreated = envelope.payload_as()?;
    // An event still in the Queue when its account is erased brings nothing
    // back: its inbox key carries the account as its subject, so the
    // library refuses this batch whole (and the consumer acks the event).
    // Only for an account that exists, too: an event replayed from the dead
    // letter queue after the tombstone's 30 days writes no welcome either.
    // The sign-up's trace id, carried in the envelope: the welcome is
    // found from the request that caused it.
    let trace_id = envelope.trace.as_ref().map(|trace| trace.trace_id());
    effect.push(Statement::new(
        "INSERT INTO welcomes (account_id, event_id, created_at, trace_id) \
         SELECT id, ?, ?, ? FROM accounts WHERE id = ?",
        vec![
            envelope.id.as_str().into(),
            event.created_at.into(),
            trace_id.into(),
            event.account_id.into(),
        ],
    ));
    Ok(())
}

/// One drain per drain request, each in its own invocation (the consumer
/// takes one request a batch): its own connections and query budget. A
/// request older than a cron period is dropped: the next run asks afresh.
pub(crate) async fn run_drains(app: &App, batch: &MessageBatch<serde_json::Value>) {
    let now = SystemClock.now().as_unix_millis();
    for message in batch.raw_iter() {
        let request = js_sys::JSON::stringify(&message.body())
            .ok()
            .and_then(|text| text.as_string())
            .and_then(|text| serde_json::from_str::<DrainRequest>(&text).ok());
        match request {
            Some(request) if now - request.requested_at > 60_000 => {}
            Some(_) => match app.drainer(app.scheduled) {
                Ok(drainer) => drop(drainer.drain().await),
                Err(error) => {
                    log::error!("cannot drain: {error}");
                    message.retry();
                    continue;
                }
            },
            None => log::warn!("drain-requests: a message that is no drain request"),
        }
        message.ack();
    }
}
