//! What a drain did, for logs and for callers.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::error::Error;
use crate::outbox::SettleReport;

/// Why a drain stopped.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "reason", content = "error")]
pub enum StopReason {
    /// No due message was left.
    Drained,
    /// Another call would have left no query for the last settle.
    QueryBudget,
    /// Another batch might not have finished before the deadline.
    Deadline,
    /// The message cap was reached.
    MessageCap,
    /// Every message of the last claim belonged to a topic whose circuit
    /// opened in this run; the next run probes again.
    CircuitOpen,
    /// The database failed; leased messages come back when their leases
    /// expire.
    #[serde(serialize_with = "error_text")]
    DatabaseError(Error),
}

fn error_text<S: serde::Serializer>(error: &Error, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(error)
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Drained => f.write_str("nothing left due"),
            StopReason::QueryBudget => f.write_str("query budget reached"),
            StopReason::Deadline => f.write_str("deadline reached"),
            StopReason::MessageCap => f.write_str("message cap reached"),
            StopReason::CircuitOpen => f.write_str("every due topic's circuit is open"),
            StopReason::DatabaseError(error) => write!(f, "database error: {error}"),
        }
    }
}

/// Counts of one drain (or one immediate delivery).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DrainReport {
    /// The outbox drained (its table).
    pub outbox: String,
    /// Messages the run took up (claimed or handed to it), per topic.
    pub topics: BTreeMap<String, u32>,
    /// Rows leased.
    pub claimed: u32,
    /// Messages delivered and deleted.
    pub delivered: u32,
    /// Messages rescheduled after a failure that spent an attempt.
    pub retried: u32,
    /// Messages rescheduled without spending an attempt: the receiver was
    /// unavailable or throttling, its topic's circuit opened, several of its
    /// topic's messages failed in turn (see
    /// [`CircuitBreaker`](super::CircuitBreaker)), or the run could not
    /// judge the failure (an attempt right after a response).
    pub deferred: u32,
    /// Messages parked as dead (permanent failure, last attempt, or
    /// undecodable).
    pub dead: u32,
    /// Settles refused because the lease had passed to someone else (after
    /// a retried settle, possibly our own first try).
    pub lease_lost: u32,
    /// Messages given back unattempted (no time left, a topic paused in the
    /// run, or handed back by the circuit breaker); no attempt spent.
    pub released: u32,
    /// Messages of a topic whose circuit opened, given back unattempted to
    /// be due again after the cooldown (counted when handed back; the
    /// settle also counts them in `released`).
    pub handed_back: u32,
    /// Deliveries that hit the delivery timeout.
    pub timed_out: u32,
    /// Deliveries not started because, when their turn came, the lease (or
    /// the deadline) no longer left the delivery timeout and the settle
    /// margin (the thread was blocked, the isolate paused): given back
    /// unattempted, no attempt spent (the settle also counts them in
    /// `released`).
    pub too_late_to_start: u32,
    /// Suspects (a lease expired unsettled) delivered in suspect groups, with nothing else in flight.
    pub suspects: u32,
    /// Claimed rows that could not be decoded (counted in `dead` once
    /// parked).
    pub malformed: u32,
    /// Claims made.
    pub batches: u32,
    /// Database calls made (claims, settles and their retries; each one
    /// round trip).
    pub queries: u32,
    /// Settle calls sent again after a transient error.
    pub settle_retries: u32,
    /// Receivers whose circuit opened in this run: topics, or
    /// `topic @ destination` where the deliverer names destinations.
    pub tripped: Vec<String>,
    /// Topics this run paused because their destination is gone
    /// ([`Delivery::Gone`](crate::Delivery::Gone), an HTTP 410); their
    /// messages were given back (counted in `released`), no attempt spent.
    pub paused: Vec<String>,
    /// Wall-clock time taken, in milliseconds.
    #[serde(rename = "elapsed_ms", serialize_with = "as_millis")]
    pub elapsed: Duration,
    /// Why it stopped.
    pub stopped: StopReason,
}

fn as_millis<S: serde::Serializer>(elapsed: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_u64(u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX))
}

impl DrainReport {
    pub(crate) fn new(outbox: &str) -> Self {
        DrainReport {
            outbox: outbox.to_owned(),
            topics: BTreeMap::new(),
            claimed: 0,
            delivered: 0,
            retried: 0,
            deferred: 0,
            dead: 0,
            lease_lost: 0,
            released: 0,
            handed_back: 0,
            timed_out: 0,
            too_late_to_start: 0,
            suspects: 0,
            malformed: 0,
            batches: 0,
            queries: 0,
            settle_retries: 0,
            tripped: Vec::new(),
            paused: Vec::new(),
            elapsed: Duration::ZERO,
            stopped: StopReason::Drained,
        }
    }

    pub(crate) fn tally(&mut self, settled: SettleReport) {
        self.delivered += settled.completed;
        self.retried += settled.retried;
        self.deferred += settled.deferred;
        self.dead += settled.dead;
        self.released += settled.released + settled.paused;
        self.lease_lost += u32::try_from(settled.lease_lost.len()).unwrap_or(u32::MAX);
    }
}

impl DrainReport {
    /// The report as one JSON object, the line a drain logs: `event` is
    /// `"outbox.drain"`, `message` the [`Display`](fmt::Display) line, and
    /// every count and name is a field of its own, for a log search
    /// (Workers Logs indexes JSON fields). It holds counts, the outbox's
    /// and topics' names and the stop reason: never a payload, an address
    /// or a secret.
    pub fn log_line(&self) -> String {
        #[derive(Serialize)]
        struct Line<'a> {
            event: &'static str,
            message: String,
            #[serde(flatten)]
            report: &'a DrainReport,
        }
        let line = Line {
            event: "outbox.drain",
            message: self.to_string(),
            report: self,
        };
        serde_json::to_string(&line).unwrap_or_else(|_| self.to_string())
    }
}

/// Why a drain parked a message as dead, in its dead letter line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum DeadReason {
    /// The receiver said it can never succeed.
    Permanent,
    /// Its last attempt failed.
    AttemptsExhausted,
    /// Its leases expired unsettled until its attempts were spent (it may
    /// crash its drainer).
    UnsettledLeases,
    /// Its row could not be decoded.
    Malformed,
}

/// One dead letter as a JSON log line: `event` `"outbox.dead"`, the outbox,
/// the message's id and topic, and the class of reason. Never its payload
/// or its last error (a receiver's answer may quote either).
pub(crate) fn dead_letter_line(
    outbox: &str,
    id: &str,
    topic: Option<&str>,
    reason: DeadReason,
) -> String {
    serde_json::json!({
        "event": "outbox.dead",
        "message": format!("outbox {outbox}: message {id} is dead ({})", reason.text()),
        "outbox": outbox,
        "id": id,
        "topic": topic,
        "reason": reason,
    })
    .to_string()
}

impl DeadReason {
    fn text(self) -> &'static str {
        match self {
            DeadReason::Permanent => "a permanent failure",
            DeadReason::AttemptsExhausted => "its last attempt failed",
            DeadReason::UnsettledLeases => {
                "its leases expired unsettled until its attempts ran out"
            }
            DeadReason::Malformed => "its row does not decode",
        }
    }
}

/// One line, for `wrangler tail` and other logs.
impl fmt::Display for DrainReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "outbox drain of {} [{}]: {} claimed, {} delivered, {} retried, {} deferred, {} timed out, \
             {} too late to start, {} dead, {} lease lost, {} released ({} handed back), {} suspects alone, \
             {} malformed; {} batches, {} queries ({} settle retries), {} ms; circuit open: [{}]; paused: [{}]; stopped: {}",
            self.outbox,
            self.topics
                .iter()
                .map(|(topic, n)| format!("{topic} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.claimed,
            self.delivered,
            self.retried,
            self.deferred,
            self.timed_out,
            self.too_late_to_start,
            self.dead,
            self.lease_lost,
            self.released,
            self.handed_back,
            self.suspects,
            self.malformed,
            self.batches,
            self.queries,
            self.settle_retries,
            self.elapsed.as_millis(),
            self.tripped.join(", "),
            self.paused.join(", "),
            self.stopped
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_line_is_json_with_every_count_as_a_field() {
        let report = DrainReport {
            delivered: 5,
            dead: 1,
            tripped: vec!["mail @ api.example:443".into()],
            topics: BTreeMap::from([("mail".into(), 6)]),
            ..DrainReport::new("outbox")
        };
        let line: serde_json::Value = serde_json::from_str(&report.log_line()).unwrap_or_default();
        assert_eq!(line["event"], "outbox.drain");
        assert_eq!(line["outbox"], "outbox");
        assert_eq!(line["delivered"], 5);
        assert_eq!(line["dead"], 1);
        assert_eq!(line["topics"]["mail"], 6);
        assert_eq!(line["tripped"][0], "mail @ api.example:443");
        assert_eq!(line["stopped"]["reason"], "drained");
        assert_eq!(line["message"], report.to_string());
    }

    #[test]
    fn a_dead_letter_line_names_the_message_and_its_reason_class() {
        let line = dead_letter_line("outbox", "01H", Some("mail"), DeadReason::AttemptsExhausted);
        let line: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        assert_eq!(line["event"], "outbox.dead");
        assert_eq!(
            (&line["id"], &line["topic"], &line["reason"]),
            (&"01H".into(), &"mail".into(), &"attempts_exhausted".into())
        );
    }

    #[test]
    fn the_log_line_puts_each_figure_in_its_place() {
        let report = DrainReport {
            claimed: 7,
            delivered: 5,
            deferred: 2,
            queries: 3,
            elapsed: Duration::from_millis(42),
            tripped: vec!["mail".into(), "webhook".into()],
            topics: BTreeMap::from([("mail".into(), 6), ("webhook".into(), 1)]),
            ..DrainReport::new("account_events")
        };
        assert_eq!(
            report.to_string(),
            "outbox drain of account_events [mail 6, webhook 1]: 7 claimed, 5 delivered, 0 retried, 2 deferred, 0 timed out, \
             0 too late to start, 0 dead, 0 lease lost, 0 released (0 handed back), 0 suspects alone, 0 malformed; 0 batches, \
             3 queries (0 settle retries), 42 ms; circuit open: [mail, webhook]; paused: []; stopped: nothing left due"
        );
    }
}
