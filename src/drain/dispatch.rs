//! Dispatch: the one admission gate every delivery passes, what is in
//! flight, and how an attempt becomes the settles it causes.
//!
//! # The admission rule
//! Asked of every message the moment its delivery would start (a ready
//! message, a suspect, a member of a batch call), in this order:
//!
//! | the message's | answer | its row |
//! | --- | --- | --- |
//! | topic is paused (a `Gone` in this run) | release, `paused` | due now: claims skip a paused topic, and `resume_topic` finds it due |
//! | receiver's breaker is open | hand back, `circuit_open` | due after the breaker's cooldown |
//! | run failed, or no time (or budget) left to deliver and settle it | release, `no_time` | due now |
//! | destination's rate cannot take it within [`WAIT_IN_RUN`] | release, `rate_limited` | due when the slot booked for it comes |
//! | destination is at its limit | wait | stays queued in the run |
//! | otherwise | admit | delivered now |
//!
//! No answer spends an attempt. A destination's slow rate (an endpoint's
//! own, say) thus holds back only its own messages: past a short wait they
//! go back to the table due when their turn comes, and claims go on to the
//! other destinations' messages. A paused topic's message is released due
//! now, not handed back for the cooldown: the pause is stored by the same
//! settle (claims skip the topic until it is resumed), and once an operator
//! resumes the topic its messages are due at once, as
//! [`Outbox::resume_topic`](crate::outbox::Outbox::resume_topic) promises.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::breaker::{Breaker, Settle};
use super::destinations::{DestinationLimits, Destinations};
use super::limits::CircuitBreaker;
use super::parts::Attempt;
use crate::outbox::Fate;
use crate::time::Timestamp;
use crate::verdict::Delivery;

/// The longest a message waits in the run for its destination's rate; one
/// that would wait longer goes back to the table, due at the slot booked
/// for it.
pub(super) const WAIT_IN_RUN: Duration = Duration::from_secs(2);

/// The gate's answer for one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Admission {
    /// Deliver it now.
    Admit,
    /// Not yet: its destination is at its limit; it stays queued.
    Wait,
    /// Not soon: behind the others waiting for it, its destination's rate
    /// cannot take it within [`WAIT_IN_RUN`]; give it back due at a slot
    /// booked for it, no attempt spent.
    Later,
    /// Give it back due after the breaker's cooldown, no attempt spent;
    /// the `error.type` says why.
    HandBack(&'static str),
    /// Give it back due now, no attempt spent; the `error.type` says why.
    Release(&'static str),
}

/// What the gate is asked about one message.
#[derive(Debug, Clone, Copy)]
pub(super) struct Candidate<'m> {
    pub(super) topic: &'m str,
    pub(super) receiver: &'m str,
    pub(super) destination: Option<&'m str>,
    /// How many messages of the run wait for its destination before it.
    pub(super) ahead: u32,
    /// Whether a delivery starting now can time out and be settled in time
    /// (and, for a suspect, its re-lease fits the query budget).
    pub(super) has_room: bool,
}

/// What one verdict causes.
pub(super) struct Routed {
    /// The settles to make (the verdict's own, and any it decided).
    pub(super) settles: Vec<Settle>,
    /// The verdict tripped its receiver's breaker.
    pub(super) tripped: bool,
}

/// One run's dispatch state: receivers' breakers, topics paused in the run,
/// destinations' use, and the lease ends of deliveries in flight.
pub(super) struct Dispatch {
    breaker: Breaker,
    breaker_limits: Option<CircuitBreaker>,
    destinations: Destinations,
    paused: BTreeSet<String>,
    /// Lease ends of the deliveries in flight, with how many share each.
    running: BTreeMap<Timestamp, usize>,
    /// Receivers that failed and answer again in this run: the messages
    /// their failures held back are released with each call, until they
    /// fail again.
    recovered: BTreeSet<String>,
    /// A call failed for good: nothing new starts.
    failed: bool,
}

impl Dispatch {
    pub(super) fn new(
        breaker: Option<CircuitBreaker>,
        destinations: Option<DestinationLimits>,
    ) -> Self {
        Dispatch {
            breaker: Breaker::new(breaker),
            breaker_limits: breaker,
            destinations: Destinations::new(destinations),
            paused: BTreeSet::new(),
            running: BTreeMap::new(),
            recovered: BTreeSet::new(),
            failed: false,
        }
    }

    /// The admission gate (see the module's table).
    pub(super) fn admit(&self, candidate: Candidate<'_>, now: Timestamp) -> Admission {
        if self.paused.contains(candidate.topic) {
            Admission::Release("paused")
        } else if self.breaker.is_open(candidate.receiver) {
            Admission::HandBack("circuit_open")
        } else if self.failed || !candidate.has_room {
            Admission::Release("no_time")
        } else {
            match self
                .destinations
                .wait(candidate.destination, now, candidate.ahead)
            {
                None => Admission::Admit,
                Some(Some(at)) if at.duration_since(now) > WAIT_IN_RUN => Admission::Later,
                Some(_) => Admission::Wait,
            }
        }
    }

    /// A call failed for good: nothing new starts.
    pub(super) fn fail(&mut self) {
        self.failed = true;
    }

    /// When a handed-back message is due again.
    pub(super) fn hand_back_until(&self, now: Timestamp) -> Timestamp {
        let cooldown = self
            .breaker_limits
            .map(|breaker| breaker.cooldown)
            .unwrap_or_default();
        now.checked_add(cooldown).unwrap_or(Timestamp::MAX)
    }

    /// Whether the run limits destinations at all.
    pub(super) fn limits_destinations(&self) -> bool {
        self.destinations.limits_any()
    }

    /// Books a start at `destination` for a message given back to wait for
    /// it (see `Destinations::book`): when it is.
    pub(super) fn book(
        &mut self,
        destination: Option<&str>,
        now: Timestamp,
        ahead: u32,
    ) -> Timestamp {
        destination.map_or(now, |destination| {
            self.destinations.book(destination, now, ahead)
        })
    }

    /// `destination` sets its own rate (see `Destinations::own_rate`).
    pub(super) fn own_rate(&mut self, destination: &str, per_second: Option<u32>) {
        self.destinations.own_rate(destination, per_second);
    }

    /// When a request to `destination` may start, if not now (see
    /// `Destinations::wait`).
    pub(super) fn destination_wait(
        &self,
        destination: Option<&str>,
        now: Timestamp,
    ) -> Option<Option<Timestamp>> {
        self.destinations.wait(destination, now, 0)
    }

    /// A delivery to `destination` under a lease ending at `lease_end`
    /// starts at `now`.
    pub(super) fn started(
        &mut self,
        destination: Option<&str>,
        lease_end: Timestamp,
        now: Timestamp,
    ) {
        self.destinations.start(destination, now);
        *self.running.entry(lease_end).or_default() += 1;
    }

    /// A delivery started by [`started`](Dispatch::started) ended.
    pub(super) fn ended(&mut self, destination: Option<&str>, lease_end: Timestamp) {
        self.destinations.finish(destination);
        if let Some(count) = self.running.get_mut(&lease_end) {
            *count -= 1;
            if *count == 0 {
                self.running.remove(&lease_end);
            }
        }
    }

    /// The earliest lease end among deliveries in flight and failures the
    /// breaker holds back.
    pub(super) fn earliest_lease_end(&self) -> Option<Timestamp> {
        let running = self.running.keys().next().copied();
        [running, self.breaker.earliest_lease_end()]
            .into_iter()
            .flatten()
            .min()
    }

    /// The breaker, for what only it knows (held failures, streaks).
    pub(super) fn breaker(&mut self) -> &mut Breaker {
        &mut self.breaker
    }

    /// The earliest lease end among failures the breaker holds back.
    pub(super) fn held_lease_end(&self) -> Option<Timestamp> {
        self.breaker.earliest_lease_end()
    }

    /// `receiver` failed and answers again (its remembered streak ended).
    pub(super) fn recovered(&mut self, receiver: &str) {
        self.recovered.insert(receiver.to_owned());
    }

    /// The receivers whose held messages are being released.
    pub(super) fn recovering(&self) -> impl Iterator<Item = &str> {
        self.recovered.iter().map(String::as_str)
    }

    /// Receivers whose breaker tripped, and topics paused, in this run.
    pub(super) fn tripped_and_paused(&self) -> (Vec<String>, Vec<String>) {
        (
            self.breaker.tripped(),
            self.paused.iter().cloned().collect(),
        )
    }

    /// Routes the verdict on `settle`'s message (of `topic`, counting toward
    /// `receiver`) through the pause and the breaker: a `Gone` pauses the
    /// topic (its held failures spend nothing); a retryable failure counts
    /// toward the receiver's streak (held back while the streak is short);
    /// an answer decides the streak.
    pub(super) fn route(
        &mut self,
        topic: &str,
        receiver: &str,
        retryable: bool,
        settle: Settle,
    ) -> Routed {
        if matches!(settle.1, Fate::Pause { .. }) {
            self.paused.insert(topic.to_owned());
            let mut settles = self.breaker.paused(receiver);
            settles.push(settle);
            return Routed {
                settles,
                tripped: false,
            };
        }
        let was_open = self.breaker.is_open(receiver);
        if retryable {
            // Failing again: what it holds back waits for its backoff.
            self.recovered.remove(receiver);
        }
        let settles = if retryable {
            self.breaker.failed(receiver, settle)
        } else {
            let mut settles = self.breaker.answered(receiver);
            settles.push(settle);
            settles
        };
        Routed {
            settles,
            tripped: !was_open && self.breaker.is_open(receiver),
        }
    }
}

/// The one reading of an attempt: its verdict, or `None` if it never
/// started (its lease left too little time when its turn came). A timed-out
/// call blames its message unless it was a batch call whose messages wait
/// for their receiver's streak (`blame_timeout` false): a slow batch
/// endpoint is not any one message's fault.
pub(super) fn verdict_of(
    attempt: Attempt,
    blame_timeout: bool,
    timeout: std::time::Duration,
) -> Option<Delivery> {
    match attempt {
        Attempt::Answered(delivery, _) => Some(delivery),
        Attempt::TimedOut => {
            let error = format!("delivery timed out after {} ms", timeout.as_millis());
            Some(if blame_timeout {
                Delivery::retry(error)
            } else {
                Delivery::unavailable(error, None)
            })
        }
        Attempt::TooLate => None,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::outbox::ClaimedMessage;

    fn at(millis: i64) -> Timestamp {
        Timestamp::from_unix_millis(millis).unwrap_or(Timestamp::EPOCH)
    }

    fn candidate(receiver: &str) -> Candidate<'_> {
        Candidate {
            topic: "mail",
            receiver,
            destination: Some("api.example:443"),
            ahead: 0,
            has_room: true,
        }
    }

    fn failure(id: &str) -> Settle {
        let message = ClaimedMessage::leased_for_test(id, "mail", at(60_000), 0);
        (message.lease().clone(), Delivery::retry("500").into())
    }

    fn dispatch() -> Dispatch {
        let mut dispatch = Dispatch::new(
            Some(CircuitBreaker {
                failures: 2,
                cooldown: Duration::from_secs(60),
            }),
            Some(DestinationLimits {
                in_flight: 1,
                per_second: None,
                burst: 1,
            }),
        );
        dispatch.breaker().remember(BTreeMap::new());
        dispatch
    }

    #[test]
    fn a_free_receiver_with_room_is_admitted() {
        assert_eq!(dispatch().admit(candidate("mail"), at(0)), Admission::Admit);
    }

    #[test]
    fn a_busy_destination_waits_and_frees_when_its_delivery_ends() {
        let mut dispatch = dispatch();
        dispatch.started(Some("api.example:443"), at(60_000), at(0));
        assert_eq!(dispatch.admit(candidate("mail"), at(0)), Admission::Wait);
        assert_eq!(dispatch.earliest_lease_end(), Some(at(60_000)));
        dispatch.ended(Some("api.example:443"), at(60_000));
        assert_eq!(dispatch.admit(candidate("mail"), at(0)), Admission::Admit);
        assert_eq!(dispatch.earliest_lease_end(), None);
    }

    #[test]
    fn past_a_short_wait_for_its_rate_a_message_is_given_back_for_later() {
        let mut dispatch = Dispatch::new(None, None);
        dispatch.own_rate("api.example:443", Some(1));
        dispatch.started(Some("api.example:443"), at(60_000), at(0));
        dispatch.ended(Some("api.example:443"), at(60_000));
        let behind = |ahead| Candidate {
            ahead,
            ..candidate("mail")
        };
        assert_eq!(dispatch.admit(behind(0), at(0)), Admission::Wait, "1 s");
        assert_eq!(dispatch.admit(behind(1), at(0)), Admission::Wait, "2 s");
        assert_eq!(dispatch.admit(behind(2), at(0)), Admission::Later, "3 s");
        assert_eq!(dispatch.book(Some("api.example:443"), at(0), 2), at(4_000));
        assert_eq!(dispatch.book(None, at(0), 0), at(0));
    }

    #[test]
    fn no_room_releases_before_a_busy_destination_waits() {
        let mut dispatch = dispatch();
        dispatch.started(Some("api.example:443"), at(60_000), at(0));
        let late = Candidate {
            has_room: false,
            ..candidate("mail")
        };
        assert_eq!(dispatch.admit(late, at(0)), Admission::Release("no_time"));
        dispatch.fail();
        assert_eq!(
            dispatch.admit(candidate("other"), at(0)),
            Admission::Release("no_time")
        );
    }

    #[test]
    fn an_open_breaker_hands_back_for_the_cooldown() {
        let mut dispatch = dispatch();
        let first = dispatch.route("mail", "mail", true, failure("a"));
        assert!(first.settles.is_empty() && !first.tripped, "held back");
        let second = dispatch.route("mail", "mail", true, failure("b"));
        assert!(second.tripped);
        assert_eq!(second.settles.len(), 2, "the streak, handed back");
        assert_eq!(
            dispatch.admit(candidate("mail"), at(0)),
            Admission::HandBack("circuit_open")
        );
        assert_eq!(dispatch.hand_back_until(at(0)), at(60_000));
        assert_eq!(dispatch.admit(candidate("other"), at(0)), Admission::Admit);
    }

    #[test]
    fn a_paused_topic_releases_due_now_whatever_else_holds() {
        let mut dispatch = dispatch();
        let held = dispatch.route("mail", "mail", true, failure("a"));
        assert!(held.settles.is_empty());
        let message = ClaimedMessage::leased_for_test("g", "mail", at(60_000), 0);
        let gone: Fate = Delivery::gone("410 Gone").into();
        let routed = dispatch.route("mail", "mail", false, (message.lease().clone(), gone));
        // The held failure spends nothing, and the gone one pauses.
        assert_eq!(routed.settles.len(), 2);
        assert!(matches!(
            routed.settles[0].1,
            Fate::Reschedule { charged: false, .. }
        ));
        let suspect = Candidate {
            has_room: false,
            ..candidate("mail")
        };
        assert_eq!(dispatch.admit(suspect, at(0)), Admission::Release("paused"));
        assert_eq!(dispatch.tripped_and_paused().1, ["mail"]);
    }

    #[test]
    fn an_answer_after_failures_spends_their_attempts() {
        let mut dispatch = dispatch();
        dispatch.route("mail", "mail", true, failure("a"));
        let message = ClaimedMessage::leased_for_test("b", "mail", at(60_000), 0);
        let routed = dispatch.route(
            "mail",
            "mail",
            false,
            (message.lease().clone(), Fate::Complete),
        );
        assert_eq!(routed.settles.len(), 2);
        assert!(matches!(
            routed.settles[0].1,
            Fate::Reschedule { charged: true, .. }
        ));
    }

    #[test]
    fn a_timeout_blames_its_message_unless_the_batch_waits_for_its_receiver() {
        let timeout = Duration::from_secs(16);
        let blamed = verdict_of(Attempt::TimedOut, true, timeout);
        assert!(matches!(blamed, Some(Delivery::Retry { .. })));
        let unblamed = verdict_of(Attempt::TimedOut, false, timeout);
        assert!(matches!(unblamed, Some(Delivery::Unavailable { .. })));
        assert!(verdict_of(Attempt::TooLate, true, timeout).is_none());
    }
}
