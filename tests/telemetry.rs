//! Live telemetry natively: the `metrics` facade gets OpenTelemetry-named
//! metrics of a drain, and `tracing` gets `send` and `process` spans linked
//! to the message's creation context.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_executor::block_on;
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tracing_core::field::{Field, Visit};
use tracing_core::span::{Attributes, Id, Record};
use tracing_core::{Event, Metadata, Subscriber};
use workers_outbox::drain::deliver_fn;
use workers_outbox::telemetry::MetricsTelemetry;
use workers_outbox::testing::TestOutbox;
use workers_outbox::trace::TraceContext;
use workers_outbox::{Delivery, DrainLimits, Drainer, Message};

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Enqueues two `mail` messages and one `bad`, a second before the drain.
fn enqueued(t: &TestOutbox) -> workers_outbox::Result<()> {
    for topic in ["mail", "mail", "bad"] {
        let trace = TraceContext::parse(TRACEPARENT, None)?;
        let message = Message::json(topic, &serde_json::json!({"n": 1}))?.trace(trace);
        let enqueue = t.outbox.enqueue(message)?;
        block_on(t.db.batch_atomic(enqueue.statements()))?;
    }
    t.clock.advance(Duration::from_secs(1));
    Ok(())
}

fn drain(t: &TestOutbox, telemetry: Option<MetricsTelemetry>) -> workers_outbox::Result<()> {
    let clock = t.clock.clone();
    let deliver = deliver_fn(move |message| {
        let clock = clock.clone();
        async move {
            clock.advance(Duration::from_millis(250));
            if message.topic == "bad" {
                Delivery::permanent("400")
            } else {
                Delivery::Delivered
            }
        }
    });
    let limits = DrainLimits {
        concurrency: 1,
        breaker: None,
        ..DrainLimits::scheduled()
    };
    let mut builder = Drainer::builder(t.outbox.clone(), deliver)
        .timer(Arc::new(t.clock.clone()))
        .limits(limits);
    if let Some(telemetry) = telemetry {
        builder = builder.telemetry(Arc::new(telemetry));
    }
    let report = block_on(builder.build()?.drain());
    assert_eq!((report.delivered, report.dead), (2, 1), "{report:?}");
    Ok(())
}

#[test]
fn metrics_are_named_after_the_opentelemetry_messaging_conventions() -> workers_outbox::Result<()> {
    let t = block_on(TestOutbox::new())?;
    enqueued(&t)?;
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || drain(&t, Some(MetricsTelemetry::new())))?;
    let mut seen: BTreeMap<String, DebugValue> = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let mut labels: Vec<String> = key
            .key()
            .labels()
            .map(|label| format!("{}={}", label.key(), label.value()))
            .collect();
        labels.sort();
        seen.insert(format!("{} {}", key.key().name(), labels.join(",")), value);
    }
    let base = "messaging.destination.name=mail,messaging.operation.name=send,messaging.system=workers_outbox,workers_outbox.outbox=outbox";
    assert_eq!(
        seen.get(&format!("messaging.client.sent.messages {base}")),
        Some(&DebugValue::Counter(2)),
        "{seen:#?}"
    );
    let failed = "error.type=permanent,messaging.destination.name=bad,messaging.operation.name=send,messaging.system=workers_outbox,workers_outbox.outbox=outbox";
    assert_eq!(
        seen.get(&format!("messaging.client.sent.messages {failed}")),
        Some(&DebugValue::Counter(1)),
        "a failed attempt carries its error.type: {seen:#?}"
    );
    let processed = base.replace("operation.name=send", "operation.name=process");
    let Some(DebugValue::Histogram(durations)) =
        seen.get(&format!("messaging.process.duration {processed}"))
    else {
        panic!("no process duration: {seen:#?}");
    };
    assert_eq!(
        durations
            .iter()
            .map(|d| d.into_inner())
            .collect::<Vec<f64>>(),
        [0.25, 0.25],
        "seconds, as OpenTelemetry has durations"
    );
    let topic = "messaging.destination.name=mail,messaging.system=workers_outbox,workers_outbox.outbox=outbox";
    assert_eq!(
        seen.get(&format!(
            "workers_outbox.settled.messages {topic},workers_outbox.outcome=delivered"
        )),
        Some(&DebugValue::Counter(2)),
        "{seen:#?}"
    );
    let Some(DebugValue::Histogram(lateness)) =
        seen.get(&format!("workers_outbox.lateness {topic}"))
    else {
        panic!("no lateness: {seen:#?}");
    };
    assert!(
        lateness.iter().all(|late| late.into_inner() >= 1.0),
        "due a second before the drain: {lateness:?}"
    );
    assert!(seen.contains_key(&format!("workers_outbox.age {topic}")));
    let outbox = "messaging.system=workers_outbox,workers_outbox.outbox=outbox";
    assert_eq!(
        seen.get(&format!("workers_outbox.backlog {outbox}")),
        Some(&DebugValue::Gauge(3.0.into())),
        "{seen:#?}"
    );
    assert_eq!(
        seen.get(&format!("workers_outbox.oldest_due_age {outbox}")),
        Some(&DebugValue::Gauge(1.0.into()))
    );
    assert!(
        seen.keys().all(|key| !key.contains("400")),
        "no error text in a label: {seen:#?}"
    );
    Ok(())
}

/// Spans as a subscriber sees them: name, then fields.
#[derive(Default)]
struct Spans(Mutex<Vec<(String, BTreeMap<String, String>)>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl Subscriber for Spans {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        let mut spans = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let mut fields = BTreeMap::new();
        span.record(&mut Fields(&mut fields));
        spans.push((span.metadata().name().to_owned(), fields));
        Id::from_u64(spans.len() as u64)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        let mut spans = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((_, fields)) = usize::try_from(span.into_u64() - 1)
            .ok()
            .and_then(|index| spans.get_mut(index))
        {
            values.record(&mut Fields(fields));
        }
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, _: &Event<'_>) {}
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

#[test]
fn spans_send_at_enqueue_and_process_at_delivery_with_the_creation_context()
-> workers_outbox::Result<()> {
    let t = block_on(TestOutbox::new())?;
    let spans = Arc::new(Spans::default());
    let dispatch = tracing_core::Dispatch::from(spans.clone());
    tracing_core::dispatcher::with_default(&dispatch, || {
        // Another test's thread may have met the spans' callsites first,
        // with no subscriber, and cached that no one is interested.
        tracing_core::callsite::rebuild_interest_cache();
        enqueued(&t)?;
        drain(&t, None)
    })?;
    let spans = spans.0.lock().unwrap_or_else(PoisonError::into_inner);
    let named = |name: &str| -> Vec<&BTreeMap<String, String>> {
        spans
            .iter()
            .filter(|(span, _)| span == name)
            .map(|(_, fields)| fields)
            .collect()
    };
    let sends = named("send");
    assert_eq!(sends.len(), 3);
    assert_eq!(sends[0]["otel.name"], "send mail");
    assert_eq!(sends[0]["otel.kind"], "producer");
    assert_eq!(sends[0]["messaging.operation.name"], "send");
    assert_eq!(sends[0]["messaging.destination.name"], "mail");
    let processes = named("process");
    assert_eq!(processes.len(), 3);
    let mail = processes
        .iter()
        .find(|fields| fields["otel.name"] == "process mail")
        .expect("a process span of a mail");
    assert_eq!(mail["otel.kind"], "consumer");
    assert_eq!(mail["messaging.operation.name"], "process");
    assert_eq!(mail["messaging.system"], "workers_outbox");
    assert_eq!(mail["messaging.creation_context"], TRACEPARENT);
    assert_eq!(mail["workers_outbox.outcome"], "delivered");
    let bad = processes
        .iter()
        .find(|fields| fields["otel.name"] == "process bad")
        .expect("a process span of the bad message");
    assert_eq!(bad["workers_outbox.outcome"], "permanent");
    assert!(
        spans
            .iter()
            .all(|(_, fields)| fields.values().all(|v| !v.contains("\"n\""))),
        "no payload in a span"
    );
    Ok(())
}

/// Takes every message in one call, delivered.
struct AllAtOnce;

impl workers_outbox::drain::DeliverBatch for AllAtOnce {
    fn limits(&self) -> workers_outbox::drain::BatchLimits {
        workers_outbox::drain::BatchLimits {
            max_messages: 100,
            max_bytes: usize::MAX,
        }
    }

    fn deliver_batch<'a>(
        &'a self,
        messages: &'a [workers_outbox::ClaimedMessage],
    ) -> workers_outbox::future::BoxFuture<'a, Vec<Delivery>> {
        Box::pin(std::future::ready(vec![
            Delivery::Delivered;
            messages.len()
        ]))
    }
}

#[test]
fn a_batch_call_is_one_process_span_counting_its_messages() -> workers_outbox::Result<()> {
    let t = block_on(TestOutbox::new())?;
    for _ in 0..3 {
        let enqueue = t
            .outbox
            .enqueue(Message::json("relay", &serde_json::json!({"n": 1}))?)?;
        block_on(t.db.batch_atomic(enqueue.statements()))?;
    }
    let spans = Arc::new(Spans::default());
    let dispatch = tracing_core::Dispatch::from(spans.clone());
    let report = tracing_core::dispatcher::with_default(&dispatch, || {
        let drainer = Drainer::batch_builder(t.outbox.clone(), AllAtOnce)
            .timer(Arc::new(t.clock.clone()))
            .build()?;
        Ok::<_, workers_outbox::Error>(block_on(drainer.drain()))
    })?;
    assert_eq!(report.delivered, 3);
    let spans = spans.0.lock().unwrap_or_else(PoisonError::into_inner);
    let processes: Vec<_> = spans.iter().filter(|(name, _)| name == "process").collect();
    assert_eq!(processes.len(), 1, "{spans:?}");
    let fields = &processes[0].1;
    assert_eq!(fields["otel.name"], "process relay");
    assert_eq!(fields["messaging.batch.message_count"], "3");
    assert_eq!(fields["messaging.destination.name"], "relay");
    Ok(())
}
