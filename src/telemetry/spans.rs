//! `tracing` spans after the OpenTelemetry messaging conventions (feature
//! `tracing`; without it, nothing):
//! - `send {topic}` (kind producer) when a message is enqueued, inside the
//!   caller's span: the request that caused it;
//! - `process {topic}` (kind consumer) around each delivery, with the
//!   message's stored `traceparent` as `messaging.creation_context`, so a
//!   trace backend can link the delivery to the request that enqueued it;
//!   around a batch call, one span with `messaging.batch.message_count`
//!   (named after the topic when the batch has one).

#[cfg(feature = "tracing")]
use crate::outbox::ClaimedMessage;

/// A message was enqueued.
#[cfg(feature = "tracing")]
pub(crate) fn sent(topic: &str, id: &str) {
    let span = tracing::info_span!(
        "send",
        otel.name = %format_args!("send {topic}"),
        otel.kind = "producer",
        messaging.system = super::MESSAGING_SYSTEM,
        messaging.operation.type = "send",
        messaging.destination.name = %topic,
        messaging.message.id = %id,
    );
    drop(span.enter());
}

#[cfg(not(feature = "tracing"))]
pub(crate) fn sent(_topic: &str, _id: &str) {}

/// The span of one delivery of `message`.
#[cfg(feature = "tracing")]
pub(crate) fn process(message: &ClaimedMessage) -> tracing::Span {
    tracing::info_span!(
        "process",
        otel.name = %format_args!("process {}", message.topic),
        otel.kind = "consumer",
        messaging.system = super::MESSAGING_SYSTEM,
        messaging.operation.type = "process",
        messaging.destination.name = %message.topic,
        messaging.message.id = %message.id,
        messaging.delivery.attempt = message.attempt(),
        messaging.creation_context = message.trace.as_ref().map(|trace| trace.traceparent()),
        workers_outbox.outcome = tracing::field::Empty,
    )
}

/// Runs `delivery` inside `message`'s `process` span, and records its
/// verdict there.
#[cfg(feature = "tracing")]
pub(crate) fn in_process_span<'a>(
    message: &'a ClaimedMessage,
    delivery: crate::future::BoxFuture<'a, crate::verdict::Delivery>,
) -> crate::future::BoxFuture<'a, crate::verdict::Delivery> {
    use tracing::Instrument;
    let span = process(message);
    let recorded = span.clone();
    Box::pin(
        async move {
            let verdict = delivery.await;
            recorded.record("workers_outbox.outcome", verdict.class());
            verdict
        }
        .instrument(span),
    )
}

#[cfg(not(feature = "tracing"))]
pub(crate) fn in_process_span<'a>(
    _message: &'a crate::outbox::ClaimedMessage,
    delivery: crate::future::BoxFuture<'a, crate::verdict::Delivery>,
) -> crate::future::BoxFuture<'a, crate::verdict::Delivery> {
    delivery
}

/// Runs the batch call `delivery` of `messages` inside one `process` span.
#[cfg(feature = "tracing")]
pub(crate) fn in_batch_span<'a>(
    messages: &[ClaimedMessage],
    delivery: crate::future::BoxFuture<'a, Vec<crate::verdict::Delivery>>,
) -> crate::future::BoxFuture<'a, Vec<crate::verdict::Delivery>> {
    use tracing::Instrument;
    let topic = messages.first().map_or("", |first| first.topic.as_str());
    let one_topic = messages.iter().all(|message| message.topic == topic);
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
        messaging.destination.name = one_topic.then_some(topic),
        messaging.batch.message_count = messages.len(),
    );
    Box::pin(delivery.instrument(span))
}

#[cfg(not(feature = "tracing"))]
pub(crate) fn in_batch_span<'a>(
    _messages: &[crate::outbox::ClaimedMessage],
    delivery: crate::future::BoxFuture<'a, Vec<crate::verdict::Delivery>>,
) -> crate::future::BoxFuture<'a, Vec<crate::verdict::Delivery>> {
    delivery
}
