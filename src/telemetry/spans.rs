//! `tracing` spans after the OpenTelemetry messaging conventions (feature
//! `tracing`; without it, nothing):
//! - `send {topic}` (kind producer) when a message's enqueue statements
//!   are built, inside the caller's span: the request that caused it (the
//!   message exists once the caller's batch commits);
//! - `process {topic}` (kind consumer) around each delivery, with the
//!   message's stored `traceparent` in the field
//!   `messaging.creation_context` (a subscriber such as
//!   `tracing-opentelemetry` can make it a span link to the request that
//!   enqueued it; `tracing` itself has no links);
//!   around a batch call, one span with `messaging.batch.message_count`
//!   (named after the topic when the batch has one).

use crate::future::BoxFuture;
use crate::verdict::Delivery;

/// What a `process` span names of the message it delivers.
#[derive(Debug, Clone, Copy)]
// Read only by the spans of the `tracing` feature.
#[cfg_attr(not(feature = "tracing"), allow(dead_code))]
pub(crate) struct Processed<'a> {
    pub(crate) topic: &'a str,
    pub(crate) id: &'a str,
    pub(crate) attempt: u32,
    /// The `traceparent` it was enqueued with.
    pub(crate) creation_context: Option<&'a str>,
}

/// A message was enqueued.
#[cfg(feature = "tracing")]
pub(crate) fn sent(topic: &str, id: &str) {
    let span = tracing::info_span!(
        "send",
        otel.name = %format_args!("send {topic}"),
        otel.kind = "producer",
        messaging.system = super::MESSAGING_SYSTEM,
        messaging.operation.type = "send",
        messaging.operation.name = "send",
        messaging.destination.name = %topic,
        messaging.message.id = %id,
    );
    drop(span.enter());
}

#[cfg(not(feature = "tracing"))]
pub(crate) fn sent(_topic: &str, _id: &str) {}

/// Runs `delivery` inside its message's `process` span, and records its
/// verdict (read from its result by `verdict`) there.
#[cfg(feature = "tracing")]
pub(crate) fn in_process_span<'a, T: crate::future::MaybeSend + 'a>(
    message: Processed<'_>,
    delivery: BoxFuture<'a, T>,
    verdict: fn(&T) -> &Delivery,
) -> BoxFuture<'a, T> {
    use tracing::Instrument;
    let span = tracing::info_span!(
        "process",
        otel.name = %format_args!("process {}", message.topic),
        otel.kind = "consumer",
        messaging.system = super::MESSAGING_SYSTEM,
        messaging.operation.type = "process",
        messaging.operation.name = "process",
        messaging.destination.name = %message.topic,
        messaging.message.id = %message.id,
        messaging.delivery.attempt = message.attempt,
        messaging.creation_context = message.creation_context,
        workers_outbox.outcome = tracing::field::Empty,
    );
    let recorded = span.clone();
    Box::pin(
        async move {
            let answered = delivery.await;
            recorded.record("workers_outbox.outcome", verdict(&answered).class());
            answered
        }
        .instrument(span),
    )
}

#[cfg(not(feature = "tracing"))]
pub(crate) fn in_process_span<'a, T>(
    _message: Processed<'_>,
    delivery: BoxFuture<'a, T>,
    _verdict: fn(&T) -> &Delivery,
) -> BoxFuture<'a, T> {
    delivery
}

/// Runs the batch call `delivery` of `messages` inside one `process` span.
#[cfg(feature = "tracing")]
pub(crate) fn in_batch_span<'a, 't>(
    topics: impl ExactSizeIterator<Item = &'t str>,
    delivery: BoxFuture<'a, Vec<Delivery>>,
) -> BoxFuture<'a, Vec<Delivery>> {
    use tracing::Instrument;
    let count = topics.len();
    let mut topics = topics.peekable();
    let topic = topics.peek().copied().unwrap_or("");
    let one_topic = topics.all(|other| other == topic);
    let name = if one_topic {
        format!("process {topic}")
    } else {
        "process".to_owned()
    };
    let span = tracing::info_span!(
        "process",
        otel.name = %name,
        otel.kind = "consumer",
        messaging.system = super::MESSAGING_SYSTEM,
        messaging.operation.type = "process",
        messaging.operation.name = "process",
        messaging.destination.name = one_topic.then_some(topic),
        messaging.batch.message_count = count,
    );
    Box::pin(delivery.instrument(span))
}

#[cfg(not(feature = "tracing"))]
pub(crate) fn in_batch_span<'a, 't>(
    _topics: impl ExactSizeIterator<Item = &'t str>,
    delivery: BoxFuture<'a, Vec<Delivery>>,
) -> BoxFuture<'a, Vec<Delivery>> {
    delivery
}
