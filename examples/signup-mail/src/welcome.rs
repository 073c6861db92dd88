//! The Queue consumers: `account-events` writes each account's welcome row
//! exactly once (an inbox key, the outbox id, in the same D1 batch), and
//! `drain-requests` runs one fanned-out mail drain per request.

use worker::{MessageBatch, MessageExt};
use workers_outbox::queue::{Envelope, QueueConsumer};
use workers_outbox::{Batch, Result, Statement, Topic};

use crate::app::App;
use crate::signup::AccountCreated;

/// Applies a batch of `account.created` events: acks what committed or was
/// applied before, retries the rest (after 10 s); what keeps failing ends in
/// `account-events-dlq`.
pub(crate) async fn consume_events(app: &App, batch: &MessageBatch<serde_json::Value>) {
    let consumer = QueueConsumer::new(app.db.clone(), app.inbox.clone());
    let report = consumer.consume(batch, welcome).await;
    log::info!(
        "account events: {} applied, {} already applied, {} retried",
        report.applied,
        report.already_applied,
        report.retried
    );
}

/// The effect of one event: the account's welcome row.
fn welcome(envelope: &Envelope, effect: &mut Batch) -> Result<()> {
    if envelope.topic != AccountCreated::NAME {
        return Err(workers_outbox::Error::Database {
            message: format!("no consumer for topic {:?}", envelope.topic),
        });
    }
    let event: AccountCreated = envelope.payload_as()?;
    effect.push(Statement::new(
        "INSERT INTO welcomes (account_id, event_id, created_at) VALUES (?, ?, ?)",
        vec![
            event.account_id.into(),
            envelope.id.as_str().into(),
            event.created_at.into(),
        ],
    ));
    Ok(())
}

/// One drain per drain request, each in its own invocation (the consumer
/// takes one request a batch): its own connections and query budget.
pub(crate) async fn run_drains(app: &App, batch: &MessageBatch<serde_json::Value>) {
    for message in batch.raw_iter() {
        match app.drainer(app.scheduled) {
            Ok(drainer) => drop(drainer.drain().await),
            Err(error) => log::error!("cannot drain: {error}"),
        }
        message.ack();
    }
}
