//! The per-run circuit breaker: which failures spend attempts, and which
//! receivers to stop delivering to for the rest of a run. A receiver is a
//! topic, or `topic @ destination` where the deliverer names destinations;
//! below, "topic" means the receiver.
//!
//! # The rule
//! A retryable failure spends its attempt, as its verdict says, when the
//! receiver is shown to work (it answers another message of the topic) or
//! when its message is the only one of its topic failing since the receiver
//! last answered; when several messages fail in turn with no answer between,
//! the receiver is at fault, and they spend nothing:
//! - `failures` distinct messages of a topic failing in a row trip the topic
//!   for the rest of the run: the streak and the topic's other messages are
//!   handed back for the cooldown, free;
//! - a shorter streak is held back (not settled) while it may still trip,
//!   and settled once the receiver answers another message (spent: the
//!   failures were the messages' own), or when a lease nears its end, a
//!   suspect group is about to be delivered or has ended, or the run ends: then each failure is
//!   free if the streak holds several messages, in this run or in the streak
//!   the outbox remembers from earlier runs (`<table>_topics`), and spent if
//!   its message is all that failed — a message failing alone (the only one
//!   due, the head of an ordering key, a Durable Object with one customer's
//!   webhooks) dies after the policy's attempts, at the policy's pace.
//!
//! The memory is read with a run's first claim and written with its calls
//! from then on; a run that has not read it (an attempt right after a
//! response) judges no failure the message's own, and writes nothing.

use std::collections::{BTreeMap, BTreeSet};

use super::limits::CircuitBreaker;
use crate::outbox::{Fate, LeaseHandle, Streak, StreakWrite};
use crate::time::Timestamp;

/// A settle to make: the lease and what to do with its row.
pub(super) type Settle = (LeaseHandle, Fate);

/// One run's view of each topic's receiver.
pub(super) struct Breaker {
    limits: Option<CircuitBreaker>,
    topics: BTreeMap<String, Topic>,
    /// The streaks the outbox remembered when the run first claimed (those
    /// the run has seen answered since are gone); `None` until read, and
    /// then no failure is judged the message's own.
    remembered: Option<BTreeMap<String, Streak>>,
    /// What to write to the outbox's memory with the next call.
    writes: BTreeMap<String, StreakWrite>,
    /// Topics whose streak this run wrote (or will write).
    recorded: BTreeSet<String>,
}

enum Topic {
    /// The current streak: the distinct messages that failed in a row, and
    /// those of their settles held back.
    Closed {
        held: Vec<Settle>,
        failed: BTreeSet<String>,
    },
    /// Tripped: nothing more of this topic is delivered in this run.
    Open,
    /// Paused (its destination is gone): nothing more of this topic is
    /// delivered until an operator resumes it.
    Paused,
}

impl Breaker {
    pub(super) fn new(limits: Option<CircuitBreaker>) -> Self {
        Breaker {
            limits,
            topics: BTreeMap::new(),
            remembered: None,
            writes: BTreeMap::new(),
            recorded: BTreeSet::new(),
        }
    }

    /// Takes in the streaks the outbox remembers from earlier runs.
    pub(super) fn remember(&mut self, streaks: BTreeMap<String, Streak>) {
        self.remembered = Some(streaks);
    }

    /// The receivers whose remembered streak ends with the next call: they
    /// answer again.
    pub(super) fn ended_streaks(&self) -> impl Iterator<Item = &str> {
        self.writes
            .iter()
            .filter(|(_, write)| **write == StreakWrite::Ended)
            .map(|(receiver, _)| receiver.as_str())
    }

    /// The changes to the remembered streaks since the last call, by topic.
    pub(super) fn take_writes(&mut self) -> BTreeMap<String, StreakWrite> {
        std::mem::take(&mut self.writes)
    }

    /// Whether `id` is the only message of `topic` that failed since its
    /// receiver last answered, in this run and in the remembered streak
    /// (unknown before the run's first claim read it: an attempt after a
    /// response never judges a failure the message's own).
    fn fails_alone(&self, topic: &str, id: &str) -> bool {
        let in_run = match self.topics.get(topic) {
            Some(Topic::Closed { failed, .. }) => failed.iter().all(|failed| failed == id),
            Some(Topic::Open | Topic::Paused) => false,
            None => true,
        };
        in_run
            && self
                .remembered
                .as_ref()
                .is_some_and(|streaks| streaks.get(topic).is_none_or(|streak| streak.only(id)))
    }

    /// A failure settled before its streak tripped: spent if its message
    /// fails alone, free otherwise.
    fn as_judged(&self, topic: &str, (lease, fate): Settle) -> Settle {
        if self.fails_alone(topic, &lease.id) {
            (lease, fate)
        } else {
            (lease, unspent(fate))
        }
    }

    fn record_failure(&mut self, topic: &str, (id, error): (&str, &str), several: bool) {
        if self.remembered.is_none() {
            return;
        }
        self.recorded.insert(topic.to_owned());
        let after_end = matches!(
            self.writes.get(topic),
            Some(
                StreakWrite::Ended
                    | StreakWrite::Failed {
                        after_end: true,
                        ..
                    }
            )
        );
        self.writes.insert(
            topic.to_owned(),
            StreakWrite::Failed {
                after_end,
                failing_id: id.to_owned(),
                several,
                error: error.to_owned(),
            },
        );
    }

    /// Whether `topic` has tripped in this run.
    pub(super) fn is_open(&self, topic: &str) -> bool {
        matches!(self.topics.get(topic), Some(Topic::Open))
    }

    /// The destination of `topic` is gone, and the topic paused: its held
    /// failures spend nothing, and nothing more of it is delivered.
    pub(super) fn paused(&mut self, topic: &str) -> Vec<Settle> {
        match self.topics.insert(topic.to_owned(), Topic::Paused) {
            Some(Topic::Closed { held, .. }) => held
                .into_iter()
                .map(|(lease, fate)| (lease, unspent(fate)))
                .collect(),
            _ => Vec::new(),
        }
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
    /// now: nothing while the streak is short, the whole streak handed back
    /// free of attempts once it trips.
    pub(super) fn failed(&mut self, topic: &str, settle: Settle) -> Vec<Settle> {
        let Some(limits) = self.limits else {
            return vec![settle];
        };
        let failing = settle.0.id.clone();
        let error = error_of(&settle.1).to_owned();
        let state = self
            .topics
            .entry(topic.to_owned())
            .or_insert_with(|| Topic::Closed {
                held: Vec::new(),
                failed: BTreeSet::new(),
            });
        let Topic::Closed { failed, .. } = state else {
            self.record_failure(topic, (&failing, &error), true);
            return vec![hand_back(settle, limits)];
        };
        failed.insert(failing.clone());
        let several = failed.len() > 1;
        let trips = failed.len() as u64 >= u64::from(limits.failures);
        self.record_failure(topic, (&failing, &error), several);
        if trips {
            let mut streak = match self.topics.insert(topic.to_owned(), Topic::Open) {
                Some(Topic::Closed { held, .. }) => held,
                _ => Vec::new(),
            };
            streak.push(settle);
            return streak
                .into_iter()
                .map(|settle| hand_back(settle, limits))
                .collect();
        }
        match self.topics.get_mut(topic) {
            Some(Topic::Closed { held, .. }) => {
                held.push(settle);
                Vec::new()
            }
            _ => vec![settle],
        }
    }

    /// The receiver of `topic` answered (delivered, or refused for good): it
    /// works, so the failures held back were the messages' own and spend
    /// their attempts as reported.
    pub(super) fn answered(&mut self, topic: &str) -> Vec<Settle> {
        if self.limits.is_none() {
            return Vec::new();
        }
        // Ends the remembered streak, if there is one to end.
        if let Some(streaks) = &mut self.remembered
            && (streaks.remove(topic).is_some() || self.recorded.remove(topic))
        {
            self.writes.insert(topic.to_owned(), StreakWrite::Ended);
        }
        match self.topics.get_mut(topic) {
            Some(Topic::Closed { held, failed }) => {
                failed.clear();
                std::mem::take(held)
            }
            _ => Vec::new(),
        }
    }

    /// Held failures whose leases end before `cutoff`, to settle before they
    /// do: their streak did not trip, so each is judged by whether its
    /// message fails alone.
    pub(super) fn take_expiring(&mut self, cutoff: Timestamp) -> Vec<Settle> {
        let mut expiring = Vec::new();
        for (name, topic) in &mut self.topics {
            if let Topic::Closed { held, .. } = topic {
                let (soon, later): (Vec<Settle>, Vec<Settle>) = std::mem::take(held)
                    .into_iter()
                    .partition(|(lease, _)| lease.until() <= cutoff);
                *held = later;
                expiring.extend(soon.into_iter().map(|settle| (name.clone(), settle)));
            }
        }
        expiring
            .into_iter()
            .map(|(topic, settle)| self.as_judged(&topic, settle))
            .collect()
    }

    /// Every held failure, judged: the run ends, or a suspect group is about to be
    /// delivered and may crash the drainer (the held outcomes must land
    /// first). The streaks go on counting.
    pub(super) fn take_all(&mut self) -> Vec<Settle> {
        self.take_expiring(Timestamp::MAX)
    }

    /// The earliest lease end among held failures.
    pub(super) fn earliest_lease_end(&self) -> Option<Timestamp> {
        self.topics
            .values()
            .filter_map(|topic| match topic {
                Topic::Closed { held, .. } => held.iter().map(|(lease, _)| lease.until()).min(),
                Topic::Open | Topic::Paused => None,
            })
            .min()
    }
}

/// Not the message's fault: reschedule after the usual backoff without
/// spending the attempt.
fn unspent(fate: Fate) -> Fate {
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
fn hand_back((lease, fate): Settle, limits: CircuitBreaker) -> Settle {
    let fate = match fate {
        Fate::Reschedule {
            error, not_before, ..
        } => Fate::Reschedule {
            error: format!("{error} (circuit open: the topic's receiver failed repeatedly)"),
            not_before: Some(not_before.map_or(limits.cooldown, |wait| wait.max(limits.cooldown))),
            charged: false,
        },
        other => other,
    };
    (lease, fate)
}

#[cfg(test)]
mod tests;

/// What a failure said.
fn error_of(fate: &Fate) -> &str {
    match fate {
        Fate::Reschedule { error, .. }
        | Fate::Bury { error }
        | Fate::Pause { reason: error }
        | Fate::Hold { error, .. } => error,
        Fate::Complete | Fate::Release { .. } => "",
    }
}
