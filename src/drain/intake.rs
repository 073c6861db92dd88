//! Intake: what the run has claimed and not started, how much to claim
//! next, and when claims are over. Ready messages wait in claim order;
//! suspects (rows whose last lease ended unsettled) wait apart, to be
//! delivered in groups with nothing else in flight (see [`suspect_group`]).

use std::collections::VecDeque;

use super::limits::DrainLimits;
use super::report::StopReason;
use crate::database::Statement;
use crate::outbox::ClaimedMessage;

/// The largest group of suspects delivered together: a suspect whose lease
/// ended unsettled once goes in a group of up to this many.
pub(super) const FIRST_SUSPECT_GROUP: u32 = 64;

/// How many suspects with `unsettled` leases ended unsettled go in one
/// group: [`FIRST_SUSPECT_GROUP`], halved for each further unsettled lease,
/// down to 1 (alone: its attempt is then spent up front).
///
/// When a run crashes, every row it held unsettled comes back with one more
/// unsettled lease, so a crashed group is split in halves: among `n`
/// suspects, `k` poison messages are found in O(k log n) crashes, and
/// innocent messages spend no attempt on them (only a suspect whose group
/// is down to 1 spends one up front, and only a poison message crashes
/// alone).
pub(super) fn suspect_group(unsettled: u32) -> usize {
    let halvings = unsettled.saturating_sub(1).min(31);
    (FIRST_SUSPECT_GROUP >> halvings).max(1) as usize
}

/// What the run knows when it sizes a claim.
#[derive(Debug, Clone, Copy)]
pub(super) struct ClaimRoom {
    /// Rows claimed so far.
    pub(super) claimed: u32,
    /// Whether a call other than the last settle fits the query budget.
    pub(super) can_afford_call: bool,
    /// Whether a delivery starting now could still end, and be settled,
    /// before the deadline.
    pub(super) has_time: bool,
    /// Whether every ready message waits for its destination's limits.
    pub(super) ready_all_wait: bool,
}

/// Claimed messages not started, and the state of claiming.
pub(super) struct Intake {
    ready: VecDeque<ClaimedMessage>,
    suspects: VecDeque<ClaimedMessage>,
    /// The suspect group being delivered: its members not started yet,
    /// under the group's own leases.
    group: VecDeque<ClaimedMessage>,
    /// Its members not finished yet (waiting or in flight).
    group_left: usize,
    /// Why no more claims are made, once that is decided.
    over: Option<StopReason>,
    /// Whether a call has read the topic streaks the outbox remembers.
    pub(super) streaks_read: bool,
    /// Whether a call has sampled the backlog (for telemetry).
    pub(super) backlog_sampled: bool,
    /// Housekeeping to send before the run's first claim, in the same call.
    sweep: Option<Vec<Statement>>,
    /// Whether the run claims at all (not one that only delivers what it
    /// was handed).
    may_claim: bool,
}

impl Intake {
    /// An intake that may claim, or only delivers what it is handed.
    pub(super) fn new(may_claim: bool, sweep: Option<Vec<Statement>>) -> Self {
        Intake {
            ready: VecDeque::new(),
            suspects: VecDeque::new(),
            group: VecDeque::new(),
            group_left: 0,
            over: (!may_claim).then_some(StopReason::Drained),
            streaks_read: false,
            backlog_sampled: false,
            sweep,
            may_claim,
        }
    }

    /// Queues claimed messages; suspects apart when they are to be isolated.
    pub(super) fn queue(&mut self, messages: Vec<ClaimedMessage>, isolate_suspects: bool) {
        for message in messages {
            if isolate_suspects && message.is_suspect() {
                self.suspects.push_back(message);
            } else {
                self.ready.push_back(message);
            }
        }
    }

    /// The messages that may start now, in order: the suspect group's
    /// while one is being delivered (nothing else starts beside it), the
    /// ready ones otherwise.
    pub(super) fn startable(&self) -> impl Iterator<Item = &ClaimedMessage> {
        self.startable_queue().iter()
    }

    fn startable_queue(&self) -> &VecDeque<ClaimedMessage> {
        if self.group_active() {
            &self.group
        } else {
            &self.ready
        }
    }

    pub(super) fn has_startable(&self) -> bool {
        !self.startable_queue().is_empty()
    }

    /// Ready messages, in claim order.
    pub(super) fn ready(&self) -> impl Iterator<Item = &ClaimedMessage> {
        self.ready.iter()
    }

    /// Whether a suspect group is to be leased now: suspects wait, no group
    /// is being delivered, and no ready message waits (for its destination)
    /// to be started first, before its lease runs out behind the group.
    pub(super) fn group_due(&self) -> bool {
        !self.suspects.is_empty() && !self.group_active() && self.ready.is_empty()
    }

    /// Takes the startable message at `index` (in [`startable`](Intake::startable)'s order).
    pub(super) fn take_startable(&mut self, index: usize) -> Option<ClaimedMessage> {
        if self.group_active() {
            self.group.remove(index)
        } else {
            self.ready.remove(index)
        }
    }

    /// Puts a message taken by [`take_startable`](Intake::take_startable)
    /// back first.
    pub(super) fn put_back(&mut self, message: ClaimedMessage) {
        if self.group_active() {
            self.group.push_front(message);
        } else {
            self.ready.push_front(message);
        }
    }

    /// Whether a suspect group is being delivered.
    pub(super) fn group_active(&self) -> bool {
        self.group_left > 0
    }

    /// The group's members, re-leased for it, are to be delivered.
    pub(super) fn begin_group(&mut self, members: Vec<ClaimedMessage>) {
        self.group_left = members.len();
        self.group = members.into();
    }

    /// A member of the group finished (delivered, or given back); `true`
    /// when it was the last.
    pub(super) fn group_member_done(&mut self) -> bool {
        self.group_left = self.group_left.saturating_sub(1);
        self.group_left == 0
    }

    /// The next group of suspects: those with the fewest unsettled leases
    /// (the least suspect go first, so a crash costs the others nothing),
    /// in claim order, up to their [`suspect_group`].
    pub(super) fn take_suspect_group(&mut self) -> Vec<ClaimedMessage> {
        let least = self
            .suspects
            .iter()
            .enumerate()
            .min_by_key(|(index, message)| (message.unsettled_leases(), *index))
            .map(|(index, _)| index);
        let Some(first) = least.and_then(|index| self.suspects.remove(index)) else {
            return Vec::new();
        };
        let unsettled = first.unsettled_leases();
        let size = suspect_group(unsettled);
        let mut group = vec![first];
        let mut index = 0;
        while group.len() < size && index < self.suspects.len() {
            if self.suspects[index].unsettled_leases() == unsettled {
                group.extend(self.suspects.remove(index));
            } else {
                index += 1;
            }
        }
        group
    }

    /// The suspects not in the group being leased: they go back to the
    /// table, to be claimed again once it is done.
    pub(super) fn take_other_suspects(&mut self) -> Vec<ClaimedMessage> {
        std::mem::take(&mut self.suspects).into()
    }

    /// Every message not started, for the run's last settle.
    pub(super) fn take_all(&mut self) -> Vec<ClaimedMessage> {
        let mut all: Vec<ClaimedMessage> = std::mem::take(&mut self.group).into();
        self.group_left = 0;
        all.extend(std::mem::take(&mut self.ready));
        all.extend(std::mem::take(&mut self.suspects));
        all
    }

    /// How many rows to claim now, if a claim is due: when nothing is left
    /// to start (or every ready message waits for its destination, with
    /// less than a batch waiting) and no suspect waits. Records why claims
    /// end when a limit stops them.
    pub(super) fn claim_size(&mut self, room: ClaimRoom, limits: &DrainLimits) -> Option<u32> {
        let ready_waits = self.ready.is_empty()
            || (self.ready.len() < limits.batch_size as usize && room.ready_all_wait);
        if self.over.is_some() || !ready_waits || !self.suspects.is_empty() || self.group_active() {
            return None;
        }
        let stop = if room.claimed >= limits.max_messages {
            Some(StopReason::MessageCap)
        } else if !room.can_afford_call {
            Some(StopReason::QueryBudget)
        } else if !room.has_time {
            Some(StopReason::Deadline)
        } else {
            None
        };
        if let Some(stop) = stop {
            self.over = Some(stop);
            return None;
        }
        Some(limits.batch_size.min(limits.max_messages - room.claimed))
    }

    /// A claim asked for `wanted` rows and leased `touched`: claims are
    /// over when it found fewer, or when every message it brought is
    /// refused by an open breaker or a pause (claiming on would only hand
    /// back more of them).
    pub(super) fn claimed(&mut self, touched: u32, wanted: u32, all_refused: bool) {
        if touched < wanted {
            self.over = Some(StopReason::Drained);
        } else if all_refused {
            self.over = Some(StopReason::CircuitOpen);
        }
    }

    /// Claims ended because nothing was left due: rows released since (a
    /// receiver answers again) are due now, so claiming goes on.
    pub(super) fn reopen_claims(&mut self) {
        if self.over == Some(StopReason::Drained) && self.may_claim {
            self.over = None;
        }
    }

    /// Claims are over for `reason` (a database error is kept over any
    /// other reason).
    pub(super) fn stop(&mut self, reason: StopReason) {
        if !matches!(self.over, Some(StopReason::DatabaseError(_))) {
            self.over = Some(reason);
        }
    }

    /// Why claims ended (drained, if nothing stopped them).
    pub(super) fn stop_reason(&mut self) -> StopReason {
        self.over.take().unwrap_or(StopReason::Drained)
    }

    /// The housekeeping to send with the next claim, once.
    pub(super) fn take_sweep(&mut self) -> Option<Vec<Statement>> {
        self.sweep.take()
    }

    /// A sweep that a retry left out: sent with the next claim.
    pub(super) fn sweep_again(&mut self, sweep: Vec<Statement>) {
        self.sweep = Some(sweep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::ClaimedMessage;
    use crate::time::Timestamp;

    fn message(id: &str, unsettled: u32) -> ClaimedMessage {
        let until = Timestamp::from_unix_millis(60_000).unwrap_or(Timestamp::EPOCH);
        ClaimedMessage::leased_for_test(id, "mail", until, unsettled)
    }

    fn room() -> ClaimRoom {
        ClaimRoom {
            claimed: 0,
            can_afford_call: true,
            has_time: true,
            ready_all_wait: false,
        }
    }

    fn limits() -> DrainLimits {
        DrainLimits {
            batch_size: 10,
            max_messages: 25,
            ..DrainLimits::scheduled()
        }
    }

    #[test]
    fn groups_halve_with_each_unsettled_lease() {
        let sizes: Vec<usize> = (1..=8).map(suspect_group).collect();
        assert_eq!(sizes, [64, 32, 16, 8, 4, 2, 1, 1]);
        assert_eq!(suspect_group(0), 64);
        assert_eq!(suspect_group(u32::MAX), 1);
    }

    #[test]
    fn suspects_go_apart_and_in_groups_of_their_kind() {
        let mut intake = Intake::new(true, None);
        let mut messages = vec![message("r", 0)];
        messages.extend((0..3).map(|n| message(&format!("b{n}"), 6)));
        messages.extend((0..70).map(|n| message(&format!("a{n}"), 1)));
        intake.queue(messages, true);
        assert_eq!(intake.ready().count(), 1);
        assert!(!intake.group_due(), "the ready message starts first");
        assert_eq!(intake.take_startable(0).map(|m| m.id).as_deref(), Some("r"));
        assert!(intake.group_due());
        let least_suspect = intake.take_suspect_group();
        assert_eq!(least_suspect.len(), 64, "the least suspect go first");
        assert_eq!(least_suspect[0].id, "a0");
        let rest = intake.take_suspect_group();
        assert_eq!(rest.len(), 6, "the other 6 suspects of 1 unsettled lease");
        assert_eq!(intake.take_suspect_group().len(), 2, "pairs after 6");
        assert_eq!(intake.take_suspect_group().len(), 1);
        assert!(!intake.group_due());
    }

    #[test]
    fn a_batch_deliverer_that_does_not_isolate_takes_suspects_as_ready() {
        let mut intake = Intake::new(true, None);
        intake.queue(vec![message("a", 3)], false);
        assert!(intake.has_startable() && !intake.group_due());
    }

    #[test]
    fn a_group_being_delivered_is_all_that_starts_and_ends_with_its_last_member() {
        let mut intake = Intake::new(true, None);
        intake.queue(
            vec![message("r", 0), message("s1", 1), message("s2", 1)],
            true,
        );
        let group = intake.take_suspect_group();
        intake.begin_group(group);
        assert!(intake.group_active() && !intake.group_due());
        let ids: Vec<&str> = intake.startable().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["s1", "s2"]);
        assert_eq!(
            intake.claim_size(room(), &limits()),
            None,
            "no claim beside a group"
        );
        let first = intake.take_startable(0).map(|m| m.id);
        assert_eq!(first.as_deref(), Some("s1"));
        assert!(!intake.group_member_done());
        assert_eq!(
            intake.take_startable(0).map(|m| m.id).as_deref(),
            Some("s2")
        );
        assert!(intake.group_member_done(), "the last member");
        let next: Vec<&str> = intake.startable().map(|m| m.id.as_str()).collect();
        assert_eq!(next, ["r"]);
    }

    #[test]
    fn a_claim_is_sized_by_the_cap_and_waits_for_suspects_and_ready_messages() {
        let mut intake = Intake::new(true, None);
        assert_eq!(intake.claim_size(room(), &limits()), Some(10));
        let near_cap = ClaimRoom {
            claimed: 20,
            ..room()
        };
        assert_eq!(intake.claim_size(near_cap, &limits()), Some(5));
        intake.queue(vec![message("a", 0)], true);
        assert_eq!(intake.claim_size(room(), &limits()), None, "one is ready");
        let waiting = ClaimRoom {
            ready_all_wait: true,
            ..room()
        };
        assert_eq!(intake.claim_size(waiting, &limits()), Some(10));
        intake.queue(vec![message("s", 1)], true);
        assert_eq!(
            intake.claim_size(waiting, &limits()),
            None,
            "a suspect waits"
        );
    }

    #[test]
    fn limits_end_claims_with_their_reason() {
        for (room, reason) in [
            (
                ClaimRoom {
                    claimed: 25,
                    ..room()
                },
                StopReason::MessageCap,
            ),
            (
                ClaimRoom {
                    can_afford_call: false,
                    ..room()
                },
                StopReason::QueryBudget,
            ),
            (
                ClaimRoom {
                    has_time: false,
                    ..room()
                },
                StopReason::Deadline,
            ),
        ] {
            let mut intake = Intake::new(true, None);
            assert_eq!(intake.claim_size(room, &limits()), None);
            assert_eq!(
                intake.claim_size(self::room(), &limits()),
                None,
                "over for good"
            );
            assert_eq!(intake.stop_reason(), reason);
        }
    }

    #[test]
    fn a_release_reopens_drained_claims_only() {
        let mut intake = Intake::new(true, None);
        intake.claimed(3, 10, false);
        assert_eq!(intake.claim_size(room(), &limits()), None);
        intake.reopen_claims();
        assert_eq!(intake.claim_size(room(), &limits()), Some(10));
        let capped = ClaimRoom {
            claimed: 25,
            ..room()
        };
        assert_eq!(intake.claim_size(capped, &limits()), None);
        intake.reopen_claims();
        assert_eq!(
            intake.stop_reason(),
            StopReason::MessageCap,
            "a limit holds"
        );
        let mut handed = Intake::new(false, None);
        handed.reopen_claims();
        assert_eq!(handed.claim_size(room(), &limits()), None);
    }

    #[test]
    fn a_short_claim_drains_and_a_refused_one_opens_the_circuit() {
        let mut intake = Intake::new(true, None);
        intake.claimed(10, 10, false);
        assert_eq!(intake.claim_size(room(), &limits()), Some(10));
        intake.claimed(3, 10, false);
        assert_eq!(intake.stop_reason(), StopReason::Drained);
        let mut intake = Intake::new(true, None);
        intake.claimed(10, 10, true);
        assert_eq!(intake.stop_reason(), StopReason::CircuitOpen);
        let mut handed = Intake::new(false, None);
        assert_eq!(
            handed.claim_size(room(), &limits()),
            None,
            "handed messages only"
        );
    }
}
