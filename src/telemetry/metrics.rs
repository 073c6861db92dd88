//! Drains recorded through the `metrics` crate's facade: plug in
//! `metrics-exporter-prometheus`, an OpenTelemetry bridge or any recorder.

use super::{Backlog, MESSAGING_SYSTEM, Outcome, Settled, Telemetry};

/// Delivery attempts: every message handed to its receiver.
pub(crate) const SENT_MESSAGES: &str = "messaging.client.sent.messages";
/// How long a delivery attempt took, in seconds.
pub(crate) const PROCESS_DURATION: &str = "messaging.process.duration";
/// Settles by outcome (attempted or not).
pub(crate) const SETTLED_MESSAGES: &str = "workers_outbox.settled.messages";
/// Delivered − due, in seconds.
pub(crate) const LATENESS: &str = "workers_outbox.lateness";
/// Delivered − enqueued, in seconds.
pub(crate) const AGE: &str = "workers_outbox.age";
/// Circuit breaker trips.
pub(crate) const BREAKER_TRIPS: &str = "workers_outbox.breaker.trips";
/// Messages due now (at most [`BACKLOG_CAP`](super::BACKLOG_CAP)).
pub(crate) const BACKLOG: &str = "workers_outbox.backlog";
/// How far behind schedule the most overdue message is, in seconds (0:
/// none is due).
pub(crate) const OLDEST_DUE_AGE: &str = "workers_outbox.oldest_due_age";

/// Records what drains did through the [`metrics`] facade, named after the
/// OpenTelemetry messaging conventions: attributes `messaging.system`
/// (`workers_outbox`), `messaging.destination.name` (the topic),
/// `messaging.operation.name` (`send` for the attempts a drain sends its
/// receivers, `process` for their durations), `error.type` (the failure's
/// class, on failed attempts) and `workers_outbox.outbox` (the table);
/// settles carry `workers_outbox.outcome`.
///
/// | metric | kind | unit |
/// |---|---|---|
/// | `messaging.client.sent.messages` | counter | attempts |
/// | `messaging.process.duration` | histogram | seconds |
/// | `workers_outbox.settled.messages` | counter | messages, by outcome |
/// | `workers_outbox.lateness`, `workers_outbox.age` | histogram | seconds, delivered messages |
/// | `workers_outbox.breaker.trips` | counter | trips |
/// | `workers_outbox.backlog` | gauge | messages due (capped) |
/// | `workers_outbox.oldest_due_age` | gauge | seconds |
///
/// Exporters that do not allow dots in names (Prometheus) turn them into
/// underscores.
#[derive(Debug, Clone, Copy, Default)]
pub struct MetricsTelemetry;

impl MetricsTelemetry {
    /// Records into the global recorder (or a thread's local one), and
    /// describes each metric to it.
    pub fn new() -> Self {
        use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
        describe_counter!(
            SENT_MESSAGES,
            Unit::Count,
            "Messages handed to their receiver (delivery attempts)."
        );
        describe_histogram!(
            PROCESS_DURATION,
            Unit::Seconds,
            "How long a delivery attempt took."
        );
        describe_counter!(
            SETTLED_MESSAGES,
            Unit::Count,
            "Messages settled, by outcome."
        );
        describe_histogram!(
            LATENESS,
            Unit::Seconds,
            "How long after it was due a message was delivered."
        );
        describe_histogram!(
            AGE,
            Unit::Seconds,
            "How long after its enqueue a message was delivered."
        );
        describe_counter!(
            BREAKER_TRIPS,
            Unit::Count,
            "Times a receiver's circuit breaker opened."
        );
        describe_gauge!(
            BACKLOG,
            Unit::Count,
            "Messages due now, counted up to a cap."
        );
        describe_gauge!(
            OLDEST_DUE_AGE,
            Unit::Seconds,
            "How far behind schedule the most overdue message is."
        );
        MetricsTelemetry
    }
}

impl Telemetry for MetricsTelemetry {
    fn settled(&self, settled: &Settled<'_>) {
        let topic = settled.topic.to_owned();
        let outbox = settled.outbox.to_owned();
        let error = settled.error_type.unwrap_or("");
        if let Some(took) = settled.duration {
            let labels = |operation: &str| {
                let mut labels = vec![
                    ("messaging.system", MESSAGING_SYSTEM.to_owned()),
                    ("messaging.destination.name", topic.clone()),
                    ("messaging.operation.name", operation.to_owned()),
                    ("workers_outbox.outbox", outbox.clone()),
                ];
                if !error.is_empty() {
                    labels.push(("error.type", error.to_owned()));
                }
                labels
            };
            metrics::counter!(SENT_MESSAGES, &labels("send")).increment(1);
            metrics::histogram!(PROCESS_DURATION, &labels("process")).record(took.as_secs_f64());
        }
        let mut labels = vec![
            ("messaging.system", MESSAGING_SYSTEM.to_owned()),
            ("messaging.destination.name", topic),
            ("workers_outbox.outbox", outbox),
            (
                "workers_outbox.outcome",
                settled.outcome.as_str().to_owned(),
            ),
        ];
        if !error.is_empty() {
            labels.push(("error.type", error.to_owned()));
        }
        metrics::counter!(SETTLED_MESSAGES, &labels).increment(1);
        labels.truncate(3);
        if settled.outcome == Outcome::Delivered {
            if let Some(lateness) = settled.lateness {
                metrics::histogram!(LATENESS, &labels).record(lateness.as_secs_f64());
            }
            if let Some(age) = settled.age {
                metrics::histogram!(AGE, &labels).record(age.as_secs_f64());
            }
        }
        if settled.tripped {
            metrics::counter!(BREAKER_TRIPS, &labels).increment(1);
        }
    }

    fn backlog(&self, backlog: &Backlog<'_>) {
        let labels = [
            ("messaging.system", MESSAGING_SYSTEM.to_owned()),
            ("workers_outbox.outbox", backlog.outbox.to_owned()),
        ];
        #[allow(clippy::cast_precision_loss)] // capped at a thousand
        metrics::gauge!(BACKLOG, &labels).set(backlog.due as f64);
        metrics::gauge!(OLDEST_DUE_AGE, &labels)
            .set(backlog.oldest_due_age.unwrap_or_default().as_secs_f64());
    }
}
