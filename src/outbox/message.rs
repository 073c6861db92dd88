//! A message to enqueue, and the limits it is checked against.

use serde::Serialize;

use crate::error::{Error, Result};
use crate::time::Timestamp;

/// Size limits checked when a message is enqueued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageLimits {
    max_payload_bytes: usize,
}

impl MessageLimits {
    /// The largest payload limit allowed: safely under D1's 100 KB statement
    /// and 2 MB row limits.
    pub const PAYLOAD_CEILING: usize = 96 * 1024;
    /// The longest topic, subject, dedup key or ordering key, in bytes.
    pub const MAX_KEY_BYTES: usize = 256;
    /// The longest caller-given message id, in bytes.
    pub const MAX_ID_BYTES: usize = 128;

    /// Limits with payloads of at most `max_payload_bytes` bytes of JSON.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless `1 <= max_payload_bytes <= PAYLOAD_CEILING`.
    pub fn with_max_payload_bytes(max_payload_bytes: usize) -> Result<Self> {
        if !(1..=Self::PAYLOAD_CEILING).contains(&max_payload_bytes) {
            return Err(Error::invalid(
                "payload limit",
                format!(
                    "{max_payload_bytes} bytes is outside 1 ..= {}",
                    Self::PAYLOAD_CEILING
                ),
            ));
        }
        Ok(MessageLimits { max_payload_bytes })
    }

    /// The payload limit, in bytes.
    pub fn max_payload_bytes(&self) -> usize {
        self.max_payload_bytes
    }
}

impl Default for MessageLimits {
    /// Payloads up to 64 KiB.
    fn default() -> Self {
        MessageLimits {
            max_payload_bytes: 64 * 1024,
        }
    }
}

/// Work to send: a topic the deliverer routes on, a JSON payload, and
/// optional scheduling and identity.
///
/// Nothing is checked until [`Outbox::enqueue`](crate::outbox::Outbox::enqueue),
/// which rejects bad input with a typed error before anything is written.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub(crate) topic: String,
    pub(crate) payload: String,
    pub(crate) subject: Option<String>,
    pub(crate) not_before: Option<Timestamp>,
    pub(crate) dedup_key: Option<String>,
    pub(crate) ordering_key: Option<String>,
    pub(crate) id: Option<String>,
    pub(crate) trace: Option<crate::trace::TraceContext>,
}

impl Message {
    /// A message whose payload is `payload` serialized as JSON.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `payload` does not serialize.
    pub fn json<T: Serialize + ?Sized>(topic: impl Into<String>, payload: &T) -> Result<Self> {
        let payload = serde_json::to_string(payload)
            .map_err(|error| Error::invalid("payload", error.to_string()))?;
        Ok(Self::raw_json(topic, payload))
    }

    /// A message whose payload is already JSON text (checked at enqueue).
    pub fn raw_json(topic: impl Into<String>, payload: impl Into<String>) -> Self {
        Message {
            topic: topic.into(),
            payload: payload.into(),
            subject: None,
            not_before: None,
            dedup_key: None,
            ordering_key: None,
            id: None,
            trace: None,
        }
    }

    /// The person (account id, …) this message is about, so that
    /// [`export_subject`](crate::subject::export_subject) and
    /// [`erase_subject`](crate::subject::erase_subject) find it. Rows
    /// without a subject belong to nobody's export.
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }

    /// Deliver no earlier than `time`.
    pub fn not_before(mut self, time: Timestamp) -> Self {
        self.not_before = Some(time);
        self
    }

    /// While a message with this key is in the outbox (pending, leased or
    /// dead), enqueueing another with the same key does nothing.
    pub fn dedup_key(mut self, key: impl Into<String>) -> Self {
        self.dedup_key = Some(key.into());
        self
    }

    /// Messages sharing this key are delivered one at a time, in enqueue
    /// order; a dead message blocks its key until replayed or purged.
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// Use this id instead of a generated ULID. It must be unique among the
    /// outbox's rows (a duplicate is refused with
    /// [`Error::Conflict`]) and printable ASCII without `.`, since it
    /// travels in headers such as `Idempotency-Key` and is signed as
    /// `webhook-id` (whose scheme separates the id from the time with `.`).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Carries `trace` (W3C `traceparent`, `tracestate`) to the receiver:
    /// the HTTP deliverer sends it as headers, the Queue relay inside the
    /// [`Envelope`](crate::queue::Envelope). Take it from the incoming
    /// request with [`TraceContext::from_headers`](crate::trace::TraceContext::from_headers).
    pub fn trace(mut self, trace: crate::trace::TraceContext) -> Self {
        self.trace = Some(trace);
        self
    }

    /// The topic.
    pub fn topic_name(&self) -> &str {
        &self.topic
    }

    /// The payload's JSON text.
    pub fn payload_json(&self) -> &str {
        &self.payload
    }

    pub(crate) fn validate(&self, limits: &MessageLimits) -> Result<()> {
        check_key("topic", Some(&self.topic))?;
        check_key("subject", self.subject.as_deref())?;
        check_key("dedup key", self.dedup_key.as_deref())?;
        check_key("ordering key", self.ordering_key.as_deref())?;
        if let Some(id) = &self.id {
            if id.is_empty() || id.len() > MessageLimits::MAX_ID_BYTES {
                return Err(Error::invalid(
                    "message id",
                    format!(
                        "it is {} bytes; ids are 1 ..= {} bytes",
                        id.len(),
                        MessageLimits::MAX_ID_BYTES
                    ),
                ));
            }
            if let Some(bad) = id.chars().find(|c| !c.is_ascii_graphic() || *c == '.') {
                return Err(Error::invalid(
                    "message id",
                    format!(
                        "{id:?} contains {bad:?}; ids are printable ASCII without spaces or \
                         '.' (a webhook's signature separates its id from its time with '.')"
                    ),
                ));
            }
        }
        limits.check_payload(&self.payload)
    }
}

impl MessageLimits {
    /// `payload` is JSON within the limit.
    pub(crate) fn check_payload(&self, payload: &str) -> Result<()> {
        if payload.len() > self.max_payload_bytes {
            return Err(Error::invalid(
                "payload",
                format!(
                    "it is {} bytes; the limit is {}",
                    payload.len(),
                    self.max_payload_bytes
                ),
            ));
        }
        serde_json::from_str::<serde::de::IgnoredAny>(payload)
            .map_err(|error| Error::invalid("payload", format!("not JSON: {error}")))?;
        Ok(())
    }
}

pub(crate) fn check_key(what: &'static str, value: Option<&str>) -> Result<()> {
    match value {
        Some("") => Err(Error::invalid(what, "it is empty")),
        Some(text) if text.len() > MessageLimits::MAX_KEY_BYTES => Err(Error::invalid(
            what,
            format!(
                "it is {} bytes; the limit is {}",
                text.len(),
                MessageLimits::MAX_KEY_BYTES
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn what(error: Error) -> &'static str {
        match error {
            Error::InvalidInput { what, .. } => what,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn a_plain_message_is_valid() {
        let message = Message::json("mail", &serde_json::json!({"to": "a@b.c"})).unwrap();
        assert!(message.validate(&MessageLimits::default()).is_ok());
    }

    #[test]
    fn each_bad_field_is_named() {
        let limits = MessageLimits::default();
        let ok = || Message::raw_json("mail", "{}");
        let cases = [
            (Message::raw_json("", "{}"), "topic"),
            (ok().subject(""), "subject"),
            (ok().dedup_key("k".repeat(300)), "dedup key"),
            (ok().ordering_key(""), "ordering key"),
            (ok().id("has space"), "message id"),
            (ok().id("order.1"), "message id"),
            (ok().id(""), "message id"),
            (Message::raw_json("mail", "{not json"), "payload"),
            (
                Message::raw_json("mail", format!("\"{}\"", "x".repeat(70_000))),
                "payload",
            ),
        ];
        for (message, expected) in cases {
            assert_eq!(what(message.validate(&limits).unwrap_err()), expected);
        }
    }

    #[test]
    fn payload_limits_stay_under_the_ceiling() {
        assert!(MessageLimits::with_max_payload_bytes(0).is_err());
        assert!(MessageLimits::with_max_payload_bytes(MessageLimits::PAYLOAD_CEILING + 1).is_err());
        let small = MessageLimits::with_max_payload_bytes(8).unwrap();
        assert!(
            Message::raw_json("t", "[1,2,3,4,5]")
                .validate(&small)
                .is_err()
        );
    }
}
