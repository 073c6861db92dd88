//! What travels through the Queue: an outbox message, whole.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::error::{Error, Result};
use crate::outbox::ClaimedMessage;
use crate::trace::TraceContext;

/// The most bytes one Queue message may take, its metadata included
/// (Cloudflare: 128 KB).
pub const MAX_MESSAGE_BYTES: usize = 128_000;
/// The most messages one `send_batch` may carry.
pub const MAX_BATCH_MESSAGES: usize = 100;
/// The most bytes one `send_batch` may carry (Cloudflare: 256 KB).
pub const MAX_BATCH_BYTES: usize = 256_000;
/// What the Queue adds to each message, counted against both limits
/// (Cloudflare documents about 100 bytes).
pub const METADATA_BYTES: usize = 128;

/// An outbox message as a Queue message body (JSON): its outbox id (the
/// consumer's inbox key), topic, subject, payload (the enqueued JSON,
/// embedded as JSON, not as an escaped string) and enqueue time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope {
    /// The outbox message's id: unique, stable across redeliveries.
    pub id: String,
    /// Its topic.
    pub topic: String,
    /// Its subject, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// Its payload, the JSON exactly as enqueued.
    pub payload: Box<RawValue>,
    /// When it was enqueued (epoch milliseconds).
    pub created_at: i64,
    /// The W3C trace context it was enqueued with, if any (checked when an
    /// envelope is read: a malformed one is dropped, never the message).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "lenient_trace"
    )]
    pub trace: Option<TraceContext>,
}

/// A trace context that does not parse reads as none.
fn lenient_trace<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> std::result::Result<Option<TraceContext>, D::Error> {
    let value = Option::<serde_json::Value>::deserialize(deserializer)?;
    Ok(value.and_then(|value| serde_json::from_value(value).ok()))
}

impl PartialEq for Envelope {
    fn eq(&self, other: &Self) -> bool {
        (
            &self.id,
            &self.topic,
            &self.subject,
            self.payload.get(),
            self.created_at,
            &self.trace,
        ) == (
            &other.id,
            &other.topic,
            &other.subject,
            other.payload.get(),
            other.created_at,
            &other.trace,
        )
    }
}

impl Eq for Envelope {}

impl Envelope {
    /// The envelope of a claimed outbox message.
    ///
    /// # Errors
    /// [`Error::MalformedRow`] naming the message if its payload is not JSON.
    pub fn of(message: &ClaimedMessage) -> Result<Self> {
        let payload = RawValue::from_string(message.payload.clone()).map_err(|error| {
            Error::MalformedRow {
                table: None,
                row: Some(message.id.clone()),
                column: "payload".into(),
                reason: format!("not JSON: {error}"),
            }
        })?;
        Ok(Envelope {
            id: message.id.clone(),
            topic: message.topic.clone(),
            subject: message.subject.clone(),
            payload,
            created_at: message.created_at.as_unix_millis(),
            trace: message.trace.clone(),
        })
    }

    /// The payload decoded as `T`.
    ///
    /// # Errors
    /// [`Error::MalformedRow`] naming the message if the payload does not
    /// decode as `T`.
    pub fn payload_as<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(self.payload.get()).map_err(|error| Error::MalformedRow {
            table: None,
            row: Some(self.id.clone()),
            column: "payload".into(),
            reason: error.to_string(),
        })
    }

    /// The bytes this envelope takes in a Queue: its JSON and the Queue's
    /// metadata.
    pub fn queue_bytes(&self) -> usize {
        // Serializing strings, raw JSON and integers cannot fail.
        serde_json::to_string(self).map_or(usize::MAX, |json| json.len()) + METADATA_BYTES
    }

    /// Why this envelope cannot go into a Queue, if it cannot: a sentence
    /// for the message's dead letter.
    pub fn too_large(&self) -> Option<String> {
        self.oversize(self.queue_bytes())
    }

    /// The JSON text to send, serialized once and checked against the
    /// Queue's message limit.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] with [`too_large`](Envelope::too_large)'s
    /// sentence, or if the envelope does not serialize.
    pub fn queue_text(&self) -> Result<String> {
        let json = serde_json::to_string(self)
            .map_err(|error| Error::invalid("queue message", error.to_string()))?;
        match self.oversize(json.len() + METADATA_BYTES) {
            Some(why) => Err(Error::invalid("queue message", why)),
            None => Ok(json),
        }
    }

    fn oversize(&self, bytes: usize) -> Option<String> {
        (bytes > MAX_MESSAGE_BYTES).then(|| {
            format!(
                "the message takes {bytes} bytes in a Queue (payload {} bytes), over the \
                 {MAX_MESSAGE_BYTES}-byte limit of a Queue message: it can never be relayed; \
                 send a reference to the data instead",
                self.payload.get().len()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(payload_bytes: usize) -> Envelope {
        Envelope {
            id: "01HZX".into(),
            topic: "account.created".into(),
            subject: Some("user-1".into()),
            payload: RawValue::from_string(format!("\"{}\"", "x".repeat(payload_bytes))).unwrap(),
            created_at: 1_700_000_000_000,
            trace: None,
        }
    }

    #[test]
    fn envelopes_round_trip_as_json() {
        let original = envelope(10);
        let json = serde_json::to_string(&original).unwrap();
        assert_eq!(serde_json::from_str::<Envelope>(&json).unwrap(), original);
        assert_eq!(original.payload_as::<String>().unwrap(), "x".repeat(10));
        assert!(matches!(
            original.payload_as::<u32>(),
            Err(Error::MalformedRow { .. })
        ));
        let bare: Envelope =
            serde_json::from_str(r#"{"id":"a","topic":"t","payload":"1","created_at":5}"#).unwrap();
        assert_eq!(bare.subject, None);
        assert_eq!(bare.trace, None);
        // A malformed trace context is dropped on the way in, not the message.
        let forged =
            r#"{"id":"a","topic":"t","payload":"1","created_at":5,"trace":{"traceparent":"x"}}"#;
        assert_eq!(
            serde_json::from_str::<Envelope>(forged).unwrap().trace,
            None
        );
    }

    #[test]
    fn size_counts_json_and_metadata_and_names_the_limit() {
        let small = envelope(100);
        let json = serde_json::to_string(&small).unwrap();
        assert_eq!(small.queue_bytes(), json.len() + METADATA_BYTES);
        assert_eq!(small.too_large(), None);
        assert_eq!(small.queue_text().unwrap(), json);
        let large = envelope(MAX_MESSAGE_BYTES);
        let why = large.too_large().unwrap();
        assert!(why.contains("128000-byte limit"), "{why}");
        assert!(matches!(
            large.queue_text(),
            Err(Error::InvalidInput { .. })
        ));
    }
}
