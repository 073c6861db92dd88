//! Consuming relayed messages: each outbox id's effect applied once.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use worker::{MessageBatch, MessageExt, QueueRetryOptionsBuilder, RawMessage};

use super::envelope::Envelope;
use crate::batch::Batch;
use crate::database::Database;
use crate::error::{Error, Result};
use crate::inbox::Inbox;

/// Applies relayed messages in a `#[event(queue)]` handler: each message's
/// effect goes into one atomic batch with an inbox key (the outbox id), so
/// a message the Queue delivers again — or the outbox relays again —
/// changes nothing twice.
///
/// [`consume`](QueueConsumer::consume) acks what committed or was applied
/// before, and what carries an erased subject (see
/// [`subject`](crate::subject): its effect is not applied), and retries the rest after [`retry_delay`](QueueConsumer::retry_delay)
/// (which takes the place of the consumer's `retry_delay` in
/// `wrangler.toml`); a message that keeps failing (an undecodable body, an
/// effect that always fails) ends in the Queue's dead letter queue after the
/// consumer's `max_retries`: declare one in `wrangler.toml`.
///
/// Exactly once holds while the inbox remembers a key: keep inbox keys
/// longer than the Queue's retention and any replay from its dead letter
/// queue (`Inbox::purge` only older keys). Read envelopes through this
/// consumer (the relay sends them as JSON text), not through
/// `MessageBatch::messages`.
pub struct QueueConsumer {
    db: Arc<dyn Database>,
    inbox: Inbox,
    retry_delay: Duration,
}

impl std::fmt::Debug for QueueConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueConsumer")
            .field("inbox", &self.inbox.table())
            .field("retry_delay", &self.retry_delay)
            .finish_non_exhaustive()
    }
}

/// What happened to one message.
#[derive(Debug, Clone, PartialEq)]
pub enum Consumed {
    /// Its effect committed now.
    Applied,
    /// Its effect had been applied before: nothing changed.
    AlreadyApplied,
    /// Its subject was erased: its effect is not applied, and never will be.
    SubjectErased,
    /// Its effect failed, or its body is not an [`Envelope`]; nothing
    /// changed.
    Failed(Error),
}

impl Consumed {
    /// Whether the Queue may forget the message (ack it).
    pub fn is_done(&self) -> bool {
        !matches!(self, Consumed::Failed(_))
    }
}

/// What one [`consume`](QueueConsumer::consume) did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ConsumeReport {
    /// Effects committed.
    pub applied: u32,
    /// Messages whose effect had been applied before (acked, unchanged).
    pub already_applied: u32,
    /// Messages of an erased subject (acked, not applied).
    pub erased: u32,
    /// Messages handed back to the Queue to retry.
    pub retried: u32,
}

impl QueueConsumer {
    /// A consumer recording applied outbox ids in `inbox` (in the database
    /// the effects go to).
    pub fn new(db: Arc<dyn Database>, inbox: Inbox) -> Self {
        QueueConsumer {
            db,
            inbox,
            retry_delay: Duration::from_secs(10),
        }
    }

    /// How long the Queue waits before redelivering a failed message
    /// (default 10 s; whole seconds, at most 12 hours).
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay.min(Duration::from_secs(12 * 3600));
        self
    }

    /// Applies every message of `batch` with `apply`, which adds the effect's
    /// statements to the batch it is given; acks or retries each message.
    pub async fn consume<T, F>(&self, batch: &MessageBatch<T>, apply: F) -> ConsumeReport
    where
        F: Fn(&Envelope, &mut Batch) -> Result<()>,
    {
        let mut report = ConsumeReport::default();
        for message in batch.raw_iter() {
            let consumed = self.consume_one(&message, &apply).await;
            match &consumed {
                Consumed::Applied => report.applied += 1,
                Consumed::AlreadyApplied => report.already_applied += 1,
                Consumed::SubjectErased => report.erased += 1,
                Consumed::Failed(_) => report.retried += 1,
            }
            self.settle(&message, &consumed);
        }
        report
    }

    /// Applies one message without acking or retrying it; pass the result
    /// to [`settle`](QueueConsumer::settle).
    pub async fn consume_one<F>(&self, message: &RawMessage, apply: &F) -> Consumed
    where
        F: Fn(&Envelope, &mut Batch) -> Result<()>,
    {
        let envelope = match decode(&message.body()) {
            Ok(envelope) => envelope,
            Err(error) => return Consumed::Failed(error),
        };
        let mut batch = Batch::new(self.db.clone());
        let key = match batch.inbox_key(&self.inbox, &envelope.id, envelope.subject.as_deref()) {
            Ok(key) => key,
            Err(error) => return Consumed::Failed(error),
        };
        if let Err(error) = apply(&envelope, &mut batch) {
            return Consumed::Failed(error);
        }
        match batch.commit().await {
            Ok(_) => Consumed::Applied,
            Err(error) if key.already_processed(&error) => Consumed::AlreadyApplied,
            Err(Error::SubjectErased { .. }) => Consumed::SubjectErased,
            Err(error) => Consumed::Failed(error),
        }
    }

    /// Acks a message that is done, and retries one that failed after the
    /// retry delay (logging why, without its payload).
    pub fn settle(&self, message: &RawMessage, consumed: &Consumed) {
        match consumed {
            Consumed::Failed(error) => {
                log::warn!("queue message {} retried: {error}", message.id());
                let seconds = u32::try_from(self.retry_delay.as_secs()).unwrap_or(u32::MAX);
                message.retry_with_options(
                    &QueueRetryOptionsBuilder::new()
                        .with_delay_seconds(seconds)
                        .build(),
                );
            }
            _ => message.ack(),
        }
    }
}

/// Reads a message body as an [`Envelope`]: the JSON text the relay sends,
/// or a JSON object sent by other means.
fn decode(body: &wasm_bindgen::JsValue) -> Result<Envelope> {
    let json = match body.as_string() {
        Some(text) => text,
        None => js_sys::JSON::stringify(body)
            .ok()
            .and_then(|text| text.as_string())
            .ok_or_else(|| Error::invalid("queue message", "the body is not JSON"))?,
    };
    serde_json::from_str(&json).map_err(|error| {
        Error::invalid(
            "queue message",
            format!("the body is not an outbox envelope: {error}"),
        )
    })
}
