//! Relaying outbox messages into a Cloudflare Queue.

use crate::drain::{BatchLimits, DeliverBatch};
use crate::future::BoxFuture;
use crate::outbox::ClaimedMessage;
use crate::verdict::Delivery;

use super::envelope::{Envelope, MAX_BATCH_BYTES, MAX_BATCH_MESSAGES};

/// Relays outbox messages into a Cloudflare Queue: each drain call is one
/// `send_batch` (one subrequest) of up to 100 messages and 256 KB, each
/// message an [`Envelope`]. Give it to
/// [`Drainer::batch_builder`](crate::Drainer::batch_builder).
///
/// Verdicts: all of a call's messages are delivered once `send_batch`
/// succeeds (the Queue then owns them). A message over the Queue's 128 KB
/// (the outbox's 96 KiB payload ceiling keeps its own messages under it; a
/// row written by other means may not be), or whose payload is not JSON,
/// is a permanent failure whose dead letter says why. A `send_batch` that
/// fails twice in a row is [`Delivery::Unavailable`] for its messages, as
/// is a call that times out: no attempt is spent, since the Queue most
/// likely failed, not the messages. Messages travel as JSON text (content
/// type `text`), so payloads arrive byte for byte.
///
/// At least once: a relay whose settle is lost sends the message again, so
/// consume with [`QueueConsumer`](super::QueueConsumer), which applies each
/// outbox id once.
pub struct QueueDeliverer {
    queue: worker::Queue,
}

impl std::fmt::Debug for QueueDeliverer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueueDeliverer").finish_non_exhaustive()
    }
}

impl QueueDeliverer {
    /// Relays into `queue` (`env.queue("BINDING")?`).
    pub fn new(queue: worker::Queue) -> Self {
        QueueDeliverer { queue }
    }
}

impl DeliverBatch for QueueDeliverer {
    fn limits(&self) -> BatchLimits {
        BatchLimits {
            max_messages: MAX_BATCH_MESSAGES,
            max_bytes: MAX_BATCH_BYTES,
        }
    }

    /// One message cannot crash a relay that forwards its bytes: suspects
    /// travel in batches.
    fn isolates_suspects(&self) -> bool {
        false
    }

    fn size_of(&self, message: &ClaimedMessage) -> usize {
        Envelope::of(message).map_or(message.payload.len(), |envelope| envelope.queue_bytes())
    }

    fn deliver_batch<'a>(&'a self, messages: &'a [ClaimedMessage]) -> BoxFuture<'a, Vec<Delivery>> {
        Box::pin(async move {
            let mut verdicts: Vec<Option<Delivery>> = vec![None; messages.len()];
            let mut texts = Vec::with_capacity(messages.len());
            for (verdict, message) in verdicts.iter_mut().zip(messages) {
                match Envelope::of(message).and_then(|envelope| envelope.queue_text()) {
                    Err(why) => *verdict = Some(Delivery::permanent(why.to_string())),
                    Ok(text) => texts.push(text),
                }
            }
            let sent = if texts.is_empty() {
                Delivery::Delivered
            } else {
                // One failed call must not fail a hundred messages: send it
                // once more before calling the Queue unavailable.
                match self.queue.send_raw_batch(bodies(&texts)).await {
                    Ok(()) => Delivery::Delivered,
                    Err(_) => match self.queue.send_raw_batch(bodies(&texts)).await {
                        Ok(()) => Delivery::Delivered,
                        Err(error) => Delivery::unavailable(
                            format!("Queue send_batch failed twice: {error}"),
                            None,
                        ),
                    },
                }
            };
            verdicts
                .into_iter()
                .map(|verdict| verdict.unwrap_or_else(|| sent.clone()))
                .collect()
        })
    }
}

/// Sends `message` alone into `queue`, as an envelope: delivered once the
/// Queue has it; a message the Queue cannot take is permanent; a failed
/// send is the Queue's failure, not the message's (unavailable: no attempt
/// spent), as in a relay.
pub(crate) async fn send_one(queue: &worker::Queue, message: &ClaimedMessage) -> Delivery {
    match Envelope::of(message).and_then(|envelope| envelope.queue_text()) {
        Err(why) => Delivery::permanent(why.to_string()),
        Ok(text) => match queue.send_raw_batch(bodies(&[text])).await {
            Ok(()) => Delivery::Delivered,
            Err(error) => Delivery::unavailable(format!("Queue send failed: {error}"), None),
        },
    }
}

/// The envelopes as Queue messages of content type text, so that nothing on
/// the way parses them (a JavaScript number would round integers beyond
/// 2^53); [`QueueConsumer`](super::QueueConsumer) reads them back.
fn bodies(texts: &[String]) -> Vec<worker::SendMessage<wasm_bindgen::JsValue>> {
    texts
        .iter()
        .map(|text| {
            worker::RawMessageBuilder::new(wasm_bindgen::JsValue::from_str(text))
                .build_with_content_type(worker::QueueContentType::Text)
        })
        .collect()
}
