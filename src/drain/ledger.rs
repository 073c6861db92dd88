//! The run's ledger: what it knows of each message it took up, and what it
//! reports. It counts into the [`DrainReport`], tells the telemetry sinks how
//! each settle ended, and logs one line per message parked as dead. It
//! decides nothing and sends nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::parts::Attempt;
use super::report::{DeadReason, DrainReport, dead_letter_line};
use crate::outbox::{Claim, ClaimedMessage, DeathCause, LeaseHandle, Observed, SettleReport};
use crate::telemetry::{Outcome as Told, Settled, Sinks};
use crate::time::Timestamp;
use crate::verdict::Delivery;

/// What the ledger keeps of a message the run took up.
struct Taken {
    topic: String,
    destination: Option<String>,
    /// Whose failures it counts toward: its topic, or `topic @ destination`
    /// (a destination named as its topic is its topic).
    receiver: String,
    /// When its delivery started, and what the run saw of it (for the
    /// rollups, with its settle).
    started: Option<Timestamp>,
    observed: Observed,
    /// What the settle in flight counts, kept for telemetry.
    settling: Observed,
    /// When it was due, and enqueued (for lateness and age).
    became_due: Option<Timestamp>,
    created_at: Timestamp,
    /// The class of what last went wrong with it (`error.type`).
    error_type: Option<&'static str>,
    /// Its leases in settles not read yet: it is forgotten when the last
    /// is (a message taken again meanwhile starts again from 0).
    settles_in_flight: u32,
}

/// One run's record of its messages, and its report.
pub(super) struct Ledger<'a> {
    outbox: &'a str,
    telemetry: &'a Sinks,
    pub(super) report: DrainReport,
    /// Each message taken up and not seen settled, by id.
    taken: HashMap<String, Taken>,
    /// Rows buried because they do not decode: their ids, and topics as far
    /// as they decoded (`""` if not at all).
    malformed: BTreeMap<String, String>,
}

impl<'a> Ledger<'a> {
    pub(super) fn new(outbox: &'a str, telemetry: &'a Sinks) -> Self {
        Ledger {
            outbox,
            telemetry,
            report: DrainReport::new(outbox),
            taken: HashMap::new(),
            malformed: BTreeMap::new(),
        }
    }

    /// The run took up `message`, going to `destination` (as the deliverer
    /// names it).
    pub(super) fn record_taken(&mut self, message: &ClaimedMessage, destination: Option<String>) {
        let receiver = match &destination {
            Some(destination) if *destination != message.topic => {
                // A resume finds the topic's held rows by this form
                // (`sql::settle::release_held_topic`).
                format!("{} @ {destination}", message.topic)
            }
            _ => message.topic.clone(),
        };
        self.taken.insert(
            message.id.clone(),
            Taken {
                topic: message.topic.clone(),
                destination,
                receiver,
                started: None,
                observed: Observed::default(),
                settling: Observed::default(),
                became_due: message.lease().became_due,
                created_at: message.created_at,
                error_type: None,
                settles_in_flight: 0,
            },
        );
        *self.report.topics.entry(message.topic.clone()).or_default() += 1;
    }

    /// Whose failures `message` counts toward: its topic's receiver, per
    /// destination when the deliverer names one (`topic @ destination`).
    pub(super) fn receiver<'m>(&'m self, message: &'m ClaimedMessage) -> &'m str {
        self.taken
            .get(&message.id)
            .map_or(message.topic.as_str(), |taken| taken.receiver.as_str())
    }

    /// The receiver of the message `id` the run took up.
    pub(super) fn receiver_of(&self, id: &str) -> Option<&str> {
        self.taken.get(id).map(|taken| taken.receiver.as_str())
    }

    /// Where `message` goes, as the deliverer named it when the run took it.
    pub(super) fn destination(&self, message: &ClaimedMessage) -> Option<&str> {
        self.taken.get(&message.id)?.destination.as_deref()
    }

    /// Records why message `id` was not delivered (`error.type`).
    pub(super) fn record_error_type(&mut self, id: &str, error_type: &'static str) {
        if let Some(taken) = self.taken.get_mut(id) {
            taken.error_type = Some(error_type);
        }
    }

    /// Records the class of a failed attempt of `message`.
    pub(super) fn record_attempt_class(&mut self, message: &ClaimedMessage, attempt: &Attempt) {
        let class = match attempt {
            Attempt::Answered(Delivery::Delivered, _) => return,
            Attempt::Answered(delivery, _) => delivery.class(),
            Attempt::TimedOut => "timeout",
            Attempt::TooLate => "no_time",
        };
        self.record_error_type(&message.id, class);
    }

    /// A delivery of `message` started at `now`.
    pub(super) fn record_started(&mut self, message: &ClaimedMessage, now: Timestamp) {
        if let Some(taken) = self.taken.get_mut(&message.id) {
            taken.started = Some(now);
        }
    }

    /// A delivery of `message` ended at `now`: how long it took (unless it
    /// never started: too late).
    pub(super) fn record_ended(
        &mut self,
        message: &ClaimedMessage,
        now: Timestamp,
        attempt: &Attempt,
    ) {
        if let Some(taken) = self.taken.get_mut(&message.id)
            && let Some(started) = taken.started.take()
            && !matches!(attempt, Attempt::TooLate)
        {
            taken.observed.duration = Some(now.duration_since(started));
        }
    }

    /// `id` was delivered as a suspect, in a group of its own kind.
    pub(super) fn record_alone(&mut self, id: &str) {
        if let Some(taken) = self.taken.get_mut(id) {
            taken.observed.alone = true;
        }
    }

    /// The failure of `id` tripped its receiver's breaker.
    pub(super) fn record_tripped(&mut self, id: &str) {
        if let Some(taken) = self.taken.get_mut(id) {
            taken.observed.tripped = true;
        }
    }

    /// What the run saw of the message `lease` holds, for its settle's
    /// rollups.
    pub(super) fn observed(&self, lease: &LeaseHandle) -> Observed {
        self.taken
            .get(&lease.id)
            .map_or_else(Observed::default, |taken| taken.observed)
    }

    /// These leases go into a settle call: what was observed now counts
    /// with it.
    pub(super) fn record_settling<'l>(
        &mut self,
        leases: impl IntoIterator<Item = &'l LeaseHandle>,
    ) {
        for lease in leases {
            if let Some(taken) = self.taken.get_mut(&lease.id) {
                taken.settling = std::mem::take(&mut taken.observed);
                taken.settles_in_flight += 1;
            }
        }
    }

    /// A claim came back: counts it, and reports the rows it parked as dead
    /// (attempts exhausted by leases that ended unsettled).
    pub(super) fn record_claim(&mut self, claim: &Claim) {
        let touched = u32::try_from(claim.len()).unwrap_or(u32::MAX);
        self.report.batches += 1;
        self.report.claimed += touched;
        self.report.dead += u32::try_from(claim.exhausted.len()).unwrap_or(u32::MAX);
        self.report.malformed += u32::try_from(claim.malformed.len()).unwrap_or(u32::MAX);
        for (id, topic) in claim.exhausted.iter().zip(&claim.exhausted_topics) {
            let reason = DeadReason::UnsettledLeases;
            log::warn!("{}", dead_letter_line(self.outbox, id, Some(topic), reason));
            self.telemetry.settled(&Settled {
                outbox: self.outbox,
                topic,
                id,
                outcome: Told::Dead,
                error_type: Some("attempts_exhausted"),
                duration: None,
                lateness: None,
                age: None,
                alone: false,
                tripped: false,
            });
        }
    }

    /// A claimed row that does not decode, buried by the run.
    pub(super) fn record_malformed(&mut self, lease: &LeaseHandle) {
        self.malformed.insert(lease.id.clone(), lease.topic.clone());
    }

    /// Counts what a settle did at `now`, tells the sinks, and logs a line
    /// per message it parked as dead.
    pub(super) fn record_settled(&mut self, mut settled: SettleReport, now: Timestamp) {
        let told = std::mem::take(&mut settled.told);
        self.tell_settled(&told, now);
        for (id, cause) in std::mem::take(&mut settled.died) {
            let reason = match cause {
                _ if self.malformed.remove(&id).is_some() => DeadReason::Malformed,
                DeathCause::Buried => DeadReason::Permanent,
                DeathCause::AttemptsExhausted => DeadReason::AttemptsExhausted,
            };
            let topic = self.taken.get(&id).map(|taken| taken.topic.as_str());
            log::warn!("{}", dead_letter_line(self.outbox, &id, topic, reason));
        }
        for (id, _) in &told {
            if let Some(taken) = self.taken.get_mut(id)
                && taken.settles_in_flight > 0
            {
                taken.settles_in_flight -= 1;
                if taken.settles_in_flight == 0 {
                    self.taken.remove(id);
                }
            }
        }
        self.report.tally(settled);
    }

    /// Tells the sinks how each lease of a settle ended. A message given
    /// back under two leases (a suspect's re-lease whose call failed) is
    /// told once, by the lease that held.
    fn tell_settled(&self, told: &[(String, Told)], now: Timestamp) {
        if self.telemetry.is_empty() {
            return;
        }
        let applied: BTreeSet<&str> = told
            .iter()
            .filter(|(_, told)| *told != Told::LeaseLost)
            .map(|(id, _)| id.as_str())
            .collect();
        for (id, told) in told {
            if *told != Told::LeaseLost || !applied.contains(id.as_str()) {
                self.tell_one(id, *told, now);
            }
        }
    }

    fn tell_one(&self, id: &str, told: Told, now: Timestamp) {
        let Some(taken) = self.taken.get(id) else {
            if let Some(topic) = self.malformed.get(id) {
                self.telemetry.settled(&Settled {
                    outbox: self.outbox,
                    topic: if topic.is_empty() { "(unknown)" } else { topic },
                    id,
                    outcome: told,
                    error_type: Some("malformed"),
                    duration: None,
                    lateness: None,
                    age: None,
                    alone: false,
                    tripped: false,
                });
            }
            return;
        };
        let delivered = told == Told::Delivered;
        self.telemetry.settled(&Settled {
            outbox: self.outbox,
            topic: &taken.topic,
            id,
            outcome: told,
            error_type: taken.error_type.filter(|_| !delivered),
            duration: taken.settling.duration,
            lateness: taken
                .became_due
                .filter(|_| delivered)
                .map(|due| now.duration_since(due)),
            age: delivered.then(|| now.duration_since(taken.created_at)),
            alone: taken.settling.alone,
            tripped: taken.settling.tripped,
        });
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex, PoisonError};
    use std::time::Duration;

    use super::*;
    use crate::telemetry::Telemetry;

    /// What a sink is told of one settle: id, outcome, error type, alone.
    type OneTold = (String, Told, Option<&'static str>, bool);

    /// A sink that keeps what it is told.
    #[derive(Default)]
    struct Heard(Mutex<Vec<OneTold>>);

    impl Telemetry for Heard {
        fn settled(&self, settled: &Settled<'_>) {
            self.0.lock().unwrap_or_else(PoisonError::into_inner).push((
                settled.id.to_owned(),
                settled.outcome,
                settled.error_type,
                settled.alone,
            ));
        }
    }

    fn at(millis: i64) -> Timestamp {
        Timestamp::from_unix_millis(millis).unwrap_or(Timestamp::EPOCH)
    }

    fn message(id: &str) -> ClaimedMessage {
        ClaimedMessage::leased_for_test(id, "mail", at(60_000), 0)
    }

    fn sinks(heard: &Arc<Heard>) -> Sinks {
        let mut sinks = Sinks::default();
        sinks.add(heard.clone());
        sinks
    }

    #[test]
    fn a_receiver_is_the_topic_or_the_topic_at_its_destination() {
        let sinks = Sinks::default();
        let mut ledger = Ledger::new("outbox", &sinks);
        let (a, b) = (message("a"), message("b"));
        ledger.record_taken(&a, None);
        ledger.record_taken(&b, Some("api.example:443".into()));
        assert_eq!(ledger.receiver(&a), "mail");
        assert_eq!(ledger.receiver(&b), "mail @ api.example:443");
        // An endpoint's deliveries name their topic as their destination.
        let c = ClaimedMessage::leased_for_test("c", "ep_1", at(60_000), 0);
        ledger.record_taken(&c, Some("ep_1".into()));
        assert_eq!(ledger.receiver(&c), "ep_1");
        assert_eq!(ledger.destination(&b), Some("api.example:443"));
        assert_eq!(ledger.report.topics.get("mail"), Some(&2));
    }

    #[test]
    fn a_settle_is_told_with_what_the_run_saw_and_the_message_is_then_forgotten() {
        let heard = Arc::new(Heard::default());
        let sinks = sinks(&heard);
        let mut ledger = Ledger::new("outbox", &sinks);
        let (a, b) = (message("a"), message("b"));
        ledger.record_taken(&a, None);
        ledger.record_taken(&b, None);
        ledger.record_started(&a, at(2_000));
        let timed_out = Attempt::TimedOut;
        ledger.record_ended(&a, at(2_500), &timed_out);
        ledger.record_attempt_class(&a, &timed_out);
        ledger.record_alone("a");
        assert_eq!(
            ledger.observed(a.lease()).duration,
            Some(Duration::from_millis(500))
        );
        ledger.record_settling([a.lease(), b.lease()]);
        let settled = SettleReport {
            retried: 1,
            completed: 1,
            told: vec![("a".into(), Told::Retried), ("b".into(), Told::Delivered)],
            ..SettleReport::default()
        };
        ledger.record_settled(settled, at(3_000));
        assert_eq!(
            *heard.0.lock().unwrap_or_else(PoisonError::into_inner),
            [
                ("a".into(), Told::Retried, Some("timeout"), true),
                ("b".into(), Told::Delivered, None, false)
            ]
        );
        assert_eq!((ledger.report.retried, ledger.report.delivered), (1, 1));
        assert!(ledger.taken.is_empty(), "both were forgotten");
    }

    #[test]
    fn a_lease_lost_beside_one_that_held_is_told_once() {
        let heard = Arc::new(Heard::default());
        let sinks = sinks(&heard);
        let mut ledger = Ledger::new("outbox", &sinks);
        let a = message("a");
        ledger.record_taken(&a, None);
        ledger.record_settling([a.lease(), a.lease()]);
        let settled = SettleReport {
            released: 1,
            told: vec![
                ("a".into(), Told::LeaseLost),
                ("a".into(), Told::HandedBack),
            ],
            ..SettleReport::default()
        };
        ledger.record_settled(settled, at(3_000));
        let heard = heard.0.lock().unwrap_or_else(PoisonError::into_inner);
        assert_eq!(heard.len(), 1);
        assert_eq!(heard[0].1, Told::HandedBack);
    }

    #[test]
    fn a_message_settled_twice_is_remembered_until_the_second_settle_is_read() {
        let sinks = Sinks::default();
        let mut ledger = Ledger::new("outbox", &sinks);
        let a = message("a");
        ledger.record_taken(&a, None);
        ledger.record_settling([a.lease()]);
        ledger.record_settling([a.lease()]);
        let once = || SettleReport {
            told: vec![("a".into(), Told::HandedBack)],
            ..SettleReport::default()
        };
        ledger.record_settled(once(), at(3_000));
        assert_eq!(ledger.receiver(&a), "mail");
        ledger.record_settled(once(), at(3_000));
        assert!(ledger.taken.is_empty());
    }
}
