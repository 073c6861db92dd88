//! The per-run circuit breaker: which failures spend attempts, and which
//! topics to stop delivering for the rest of a run.

use std::collections::BTreeMap;

use super::limits::CircuitBreaker;
use crate::outbox::{Fate, LeaseHandle};
use crate::time::Timestamp;

/// A settle to make: the lease and what to do with its row.
pub(super) type Settle = (LeaseHandle, Fate);

/// One run's view of each topic's receiver.
pub(super) struct Breaker {
    limits: Option<CircuitBreaker>,
    topics: BTreeMap<String, Topic>,
}

enum Topic {
    /// Failures in a row so far: those held back until the streak is
    /// decided, and the count of suspects' failures (settled at once).
    Closed { held: Vec<Settle>, alone: u32 },
    /// Tripped: nothing more of this topic is delivered in this run.
    Open,
}

impl Breaker {
    pub(super) fn new(limits: Option<CircuitBreaker>) -> Self {
        Breaker {
            limits,
            topics: BTreeMap::new(),
        }
    }

    /// Whether `topic` has tripped in this run.
    pub(super) fn is_open(&self, topic: &str) -> bool {
        matches!(self.topics.get(topic), Some(Topic::Open))
    }

    /// The topics that tripped, in name order.
    pub(super) fn tripped(&self) -> Vec<String> {
        self.topics
            .iter()
            .filter(|(_, topic)| matches!(topic, Topic::Open))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// A retryable failure of a message of `topic`. Returns what to settle
    /// now: nothing while the streak is undecided, the whole streak handed
    /// back free of attempts once it trips.
    pub(super) fn failed(&mut self, topic: &str, settle: Settle) -> Vec<Settle> {
        if self.limits.is_none() {
            return vec![settle];
        }
        self.count_failure(topic, Some(settle))
    }

    /// A suspect of `topic` failed alone (its outcome is settled at once):
    /// it counts toward the streak, and may trip it. Returns the held
    /// failures to hand back if it did.
    pub(super) fn failed_alone(&mut self, topic: &str) -> Vec<Settle> {
        self.count_failure(topic, None)
    }

    fn count_failure(&mut self, topic: &str, settle: Option<Settle>) -> Vec<Settle> {
        let Some(limits) = self.limits else {
            return Vec::new();
        };
        let state = self
            .topics
            .entry(topic.to_owned())
            .or_insert_with(|| Topic::Closed {
                held: Vec::new(),
                alone: 0,
            });
        let Topic::Closed { held, alone } = state else {
            return settle
                .map(|(lease, fate)| (lease, hand_back(fate, limits)))
                .into_iter()
                .collect();
        };
        match settle {
            Some(settle) => held.push(settle),
            None => *alone += 1,
        }
        if (held.len() as u64 + u64::from(*alone)) < u64::from(limits.failures) {
            return Vec::new();
        }
        let streak = std::mem::take(held);
        *state = Topic::Open;
        streak
            .into_iter()
            .map(|(lease, fate)| (lease, hand_back(fate, limits)))
            .collect()
    }

    /// The receiver of `topic` answered (delivered, or refused for good): it
    /// works, so the failures held back were the messages' own and spend
    /// their attempts as reported.
    pub(super) fn answered(&mut self, topic: &str) -> Vec<Settle> {
        match self.topics.get_mut(topic) {
            Some(Topic::Closed { held, alone }) => {
                *alone = 0;
                std::mem::take(held)
            }
            _ => Vec::new(),
        }
    }

    /// A failure judged alone (a suspect's): handed back after the cooldown
    /// if the topic tripped, otherwise rescheduled without spending the
    /// attempt.
    pub(super) fn undecided(&self, topic: &str, fate: Fate) -> Fate {
        match self.limits {
            Some(limits) if self.is_open(topic) => hand_back(fate, limits),
            _ => undecided(fate),
        }
    }

    /// Held failures whose leases end before `cutoff`, to settle before
    /// they do. Their streak is undecided: nothing shows the messages at
    /// fault, so they spend no attempt.
    pub(super) fn take_expiring(&mut self, cutoff: Timestamp) -> Vec<Settle> {
        let mut expiring = Vec::new();
        for topic in self.topics.values_mut() {
            if let Topic::Closed { held, .. } = topic {
                let (soon, later): (Vec<Settle>, Vec<Settle>) = std::mem::take(held)
                    .into_iter()
                    .partition(|(lease, _)| lease.until() <= cutoff);
                *held = later;
                expiring.extend(
                    soon.into_iter()
                        .map(|(lease, fate)| (lease, undecided(fate))),
                );
            }
        }
        expiring
    }

    /// Every held failure, free of attempts: the run ends undecided.
    pub(super) fn take_all(&mut self) -> Vec<Settle> {
        self.take_expiring(Timestamp::MAX)
    }

    /// The earliest lease end among held failures.
    pub(super) fn earliest_lease_end(&self) -> Option<Timestamp> {
        self.topics
            .values()
            .filter_map(|topic| match topic {
                Topic::Closed { held, .. } => held.iter().map(|(lease, _)| lease.until()).min(),
                Topic::Open => None,
            })
            .min()
    }
}

/// No evidence either way: reschedule after the usual backoff without
/// spending the attempt.
fn undecided(fate: Fate) -> Fate {
    match fate {
        Fate::Reschedule {
            error, not_before, ..
        } => Fate::Reschedule {
            error,
            not_before,
            charged: false,
        },
        other => other,
    }
}

/// The receiver is failing as a whole: reschedule after the cooldown without
/// spending the attempt.
fn hand_back(fate: Fate, limits: CircuitBreaker) -> Fate {
    match fate {
        Fate::Reschedule {
            error, not_before, ..
        } => Fate::Reschedule {
            error: format!("{error} (circuit open: the topic's receiver failed repeatedly)"),
            not_before: Some(not_before.map_or(limits.cooldown, |wait| wait.max(limits.cooldown))),
            charged: false,
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::drain::Delivery;

    fn lease(id: &str, until: i64) -> LeaseHandle {
        LeaseHandle {
            id: id.into(),
            token: "t".into(),
            until: Timestamp::from_unix_millis(until).unwrap_or(Timestamp::EPOCH),
            attempt: 1,
            ordering_key: None,
            deferrals: 0,
            created_at: Timestamp::EPOCH,
        }
    }

    fn failure(id: &str) -> Settle {
        (lease(id, 1_000), Delivery::retry("503").into())
    }

    fn charged(settles: &[Settle]) -> Vec<bool> {
        settles
            .iter()
            .map(|(_, fate)| matches!(fate, Fate::Reschedule { charged: true, .. }))
            .collect()
    }

    fn breaker() -> Breaker {
        Breaker::new(Some(CircuitBreaker {
            failures: 3,
            cooldown: Duration::from_secs(60),
        }))
    }

    #[test]
    fn failures_before_an_answer_are_the_messages_own() {
        let mut breaker = breaker();
        assert!(breaker.failed("mail", failure("a")).is_empty());
        assert!(breaker.failed("mail", failure("b")).is_empty());
        assert_eq!(charged(&breaker.answered("mail")), [true, true]);
        assert!(!breaker.is_open("mail"));
    }

    #[test]
    fn a_streak_trips_the_topic_and_spends_nothing() {
        let mut breaker = breaker();
        breaker.failed("mail", failure("a"));
        breaker.failed("mail", failure("b"));
        let handed_back = breaker.failed("mail", failure("c"));
        assert_eq!(charged(&handed_back), [false, false, false]);
        assert!(handed_back.iter().all(|(_, fate)| matches!(
            fate,
            Fate::Reschedule { not_before: Some(wait), .. } if *wait == Duration::from_secs(60)
        )));
        assert!(breaker.is_open("mail") && !breaker.is_open("webhook"));
        assert_eq!(charged(&breaker.failed("mail", failure("d"))), [false]);
        assert_eq!(breaker.tripped(), ["mail"]);
    }

    #[test]
    fn an_undecided_streak_spends_nothing() {
        let mut breaker = breaker();
        breaker.failed("mail", failure("a"));
        breaker.failed(
            "webhook",
            (lease("b", 5_000), Delivery::retry("503").into()),
        );
        let expiring =
            breaker.take_expiring(Timestamp::from_unix_millis(2_000).unwrap_or(Timestamp::EPOCH));
        assert_eq!((expiring.len(), charged(&expiring)), (1, vec![false]));
        assert_eq!(charged(&breaker.take_all()), [false]);
        assert!(breaker.take_all().is_empty());
    }

    #[test]
    fn suspects_failing_alone_count_toward_the_streak() {
        let mut breaker = breaker();
        breaker.failed("mail", failure("a"));
        assert!(breaker.failed_alone("mail").is_empty());
        let handed_back = breaker.failed_alone("mail");
        assert!(breaker.is_open("mail"));
        assert_eq!(charged(&handed_back), [false]);
    }

    #[test]
    fn without_a_breaker_every_failure_settles_as_reported() {
        let mut off = Breaker::new(None);
        assert_eq!(charged(&off.failed("mail", failure("a"))), [true]);
    }
}
