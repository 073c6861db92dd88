//! The settle buffer: outcomes wait here for the next database call, and
//! the buffer says when they may wait no longer.
//!
//! # When outcomes are settled
//! - with the next claim, whenever one is sent (they ride along for free);
//! - once a batch's worth waits;
//! - `flush_interval` after the first of them finished (a crash loses at
//!   most that much);
//! - `settle_margin` before the earliest of their leases ends;
//! - at once after a suspect group, whose next group may crash the run.

use super::breaker::Settle;
use super::limits::DrainLimits;
use crate::outbox::{Fate, LeaseHandle};
use crate::time::Timestamp;

/// Outcomes waiting for a settle call.
#[derive(Default)]
pub(super) struct Outcomes {
    waiting: Vec<Settle>,
    /// When the oldest waiting outcome was added.
    first_at: Option<Timestamp>,
    /// Settle at the next chance, whatever the timing (a suspect group's
    /// outcomes).
    at_once: bool,
    /// Attempt log entries, written before the next settle (never a call
    /// of their own).
    logged: Vec<serde_json::Value>,
}

impl Outcomes {
    /// Adds `fate` for `lease`, decided at `now`.
    pub(super) fn add(&mut self, lease: LeaseHandle, fate: Fate, now: Timestamp) {
        self.waiting.push((lease, fate));
        self.first_at.get_or_insert(now);
    }

    /// Adds every settle of `settles`, decided at `now`.
    pub(super) fn add_all(&mut self, settles: Vec<Settle>, now: Timestamp) {
        for (lease, fate) in settles {
            self.add(lease, fate, now);
        }
    }

    /// Keeps an attempt log entry for the next settle.
    pub(super) fn log(&mut self, entry: serde_json::Value) {
        self.logged.push(entry);
    }

    /// Takes the attempt log entries, for a settle's call (written before
    /// it: each is fenced by a lease the settle may end).
    pub(super) fn take_logged(&mut self) -> Vec<serde_json::Value> {
        std::mem::take(&mut self.logged)
    }

    /// The waiting outcomes go with the next call, whenever it is.
    pub(super) fn settle_at_once(&mut self) {
        self.at_once = true;
    }

    pub(super) fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The earliest lease end among the waiting outcomes.
    pub(super) fn earliest_lease_end(&self) -> Option<Timestamp> {
        self.waiting.iter().map(|(lease, _)| lease.until()).min()
    }

    /// When the waiting outcomes must be settled: after the flush interval,
    /// and a settle margin before any of their leases ends.
    pub(super) fn flush_at(&self, limits: &DrainLimits) -> Option<Timestamp> {
        if self.waiting.is_empty() {
            return None;
        }
        let interval = self.first_at.map(|first| {
            first
                .checked_add(limits.flush_interval)
                .unwrap_or(Timestamp::MAX)
        });
        let lease_end = self
            .earliest_lease_end()
            .map(|end| end.saturating_sub(limits.settle_margin));
        [interval, lease_end].into_iter().flatten().min()
    }

    /// Whether the waiting outcomes must be settled by a call of their own
    /// now (no claim is going to carry them).
    pub(super) fn due(&self, now: Timestamp, limits: &DrainLimits) -> bool {
        !self.waiting.is_empty()
            && (self.at_once
                || self.waiting.len() >= limits.batch_size as usize
                || self.flush_at(limits).is_some_and(|at| at <= now))
    }

    /// Takes every waiting outcome, for a call.
    pub(super) fn take(&mut self) -> Vec<Settle> {
        self.first_at = None;
        self.at_once = false;
        std::mem::take(&mut self.waiting)
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

    fn lease(id: &str, until: i64) -> LeaseHandle {
        ClaimedMessage::leased_for_test(id, "mail", at(until), 0)
            .lease()
            .clone()
    }

    fn limits() -> DrainLimits {
        DrainLimits {
            batch_size: 3,
            flush_interval: Duration::from_secs(1),
            settle_margin: Duration::from_secs(5),
            ..DrainLimits::scheduled()
        }
    }

    #[test]
    fn nothing_waiting_is_never_due() {
        let outcomes = Outcomes::default();
        assert_eq!(outcomes.flush_at(&limits()), None);
        assert!(!outcomes.due(Timestamp::MAX, &limits()));
    }

    #[test]
    fn outcomes_wait_one_flush_interval_from_the_first() {
        let mut outcomes = Outcomes::default();
        outcomes.add(lease("a", 60_000), Fate::Complete, at(1_000));
        outcomes.add(lease("b", 60_000), Fate::Complete, at(1_500));
        assert_eq!(outcomes.flush_at(&limits()), Some(at(2_000)));
        assert!(!outcomes.due(at(1_999), &limits()));
        assert!(outcomes.due(at(2_000), &limits()));
    }

    #[test]
    fn outcomes_are_settled_a_margin_before_their_leases_end() {
        let mut outcomes = Outcomes::default();
        outcomes.add(lease("a", 6_000), Fate::Complete, at(1_000));
        // 6 s less the 5 s margin comes before the 1 s interval ends.
        assert_eq!(outcomes.flush_at(&limits()), Some(at(1_000)));
        assert!(outcomes.due(at(1_000), &limits()));
    }

    #[test]
    fn a_batch_or_a_suspect_group_is_settled_at_once() {
        let mut outcomes = Outcomes::default();
        for id in ["a", "b"] {
            outcomes.add(lease(id, 60_000), Fate::Complete, at(1_000));
        }
        assert!(!outcomes.due(at(1_000), &limits()));
        outcomes.add(lease("c", 60_000), Fate::Complete, at(1_000));
        assert!(outcomes.due(at(1_000), &limits()), "a batch's worth");
        assert_eq!(outcomes.take().len(), 3);

        outcomes.add(lease("d", 60_000), Fate::Complete, at(1_000));
        outcomes.settle_at_once();
        assert!(outcomes.due(at(1_000), &limits()));
        assert_eq!(outcomes.take().len(), 1);
        outcomes.add(lease("e", 60_000), Fate::Complete, at(1_000));
        assert!(!outcomes.due(at(1_000), &limits()), "taking resets it");
    }
}
