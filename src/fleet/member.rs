//! A member's reporter: when its outbox's row is worth writing again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{Fleet, check_name};
use crate::error::Result;
use crate::outbox::{Outbox, OutboxSummary};
use crate::time::Timestamp;

/// One member of a [`Fleet`] (a Durable Object, by its name): reports its
/// outboxes' [`summary`](Outbox::summary) into the registry after each of
/// its drains ([`DrainerBuilder::fleet`](crate::drain::DrainerBuilder::fleet)),
/// or when [`report`](Self::report) is called (after a change made other
/// than by a drain: a purge, a replay, an erasure).
///
/// A report reads the summary (at most about `3 ×`
/// [`Outbox::SUMMARY_CAP`] `+ 2` rows of the member's own database) and
/// writes the outbox's row (one upsert into the registry) only if
/// - it never wrote it (since this instance was made: after an eviction it
///   writes once again);
/// - the dead letters, the last error, whether anything waits or whether
///   anything is due changed — at once;
/// - only the backlog or the oldest due message's time changed, and
///   [`every`](Self::every) passed since its last write;
/// - nothing changed, and an hour passed ([`HEARTBEAT`](Self::HEARTBEAT)).
///
/// A report held back, or one that failed, leaves the member
/// [owing](Self::owes) it: a Durable Object's `Drainer::run_alarm` (on
/// Workers) then sets the alarm no later than [`retry_in`](Self::retry_in)
/// from now, so it is written by a drain of its own even when nothing is
/// due. A drain writes reports; an object with
/// nothing to deliver runs none, so a row's report time is when it last
/// changed or drained, not a sign of life.
#[derive(Clone)]
pub struct FleetMember {
    fleet: Fleet,
    member: String,
    every: Duration,
    /// Per outbox (its table): what was last written, and whether a report
    /// is owed.
    outboxes: Arc<Mutex<BTreeMap<String, Reported>>>,
}

impl std::fmt::Debug for FleetMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetMember")
            .field("member", &self.member)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

/// What a member last wrote of one outbox, and whether it owes a report.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Reported {
    written: Option<Written>,
    owed: bool,
    /// Reports that failed in a row.
    failures: u32,
}

/// A summary as written, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Written {
    summary: OutboxSummary,
    at: Timestamp,
}

impl FleetMember {
    /// How long a row that did not change goes unwritten.
    pub const HEARTBEAT: Duration = Duration::from_secs(3600);

    /// The default of [`every`](Self::every).
    pub const DEFAULT_EVERY: Duration = Duration::from_secs(30);

    /// `member` (1 to [`MAX_NAME_BYTES`](super::MAX_NAME_BYTES) bytes, no
    /// NUL) of `fleet`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) for a bad name.
    pub fn new(fleet: Fleet, member: impl Into<String>) -> Result<Self> {
        let member = member.into();
        check_name("member", &member)?;
        Ok(FleetMember {
            fleet,
            member,
            every: Self::DEFAULT_EVERY,
            outboxes: Arc::default(),
        })
    }

    /// The least time between two writes whose only change is the
    /// backlog's count or the oldest due message's time (default 30 s), and
    /// how soon an owed report is tried again.
    #[must_use]
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    /// The member's name.
    pub fn member(&self) -> &str {
        &self.member
    }

    /// Whether a report of `outbox` was held back or failed since its last
    /// write: the registry's row is behind.
    pub fn owes(&self, outbox: &Outbox) -> bool {
        self.retry_in(outbox).is_some()
    }

    /// When to try an owed report of `outbox` again: after
    /// [`every`](Self::every), doubled for each report that failed in a
    /// row, at most an hour ([`HEARTBEAT`](Self::HEARTBEAT)), so a registry
    /// that cannot be written (a missing table) wakes an idle object
    /// seldom; `None` when nothing is owed.
    pub fn retry_in(&self, outbox: &Outbox) -> Option<Duration> {
        let outboxes = self.outboxes.lock().unwrap_or_else(PoisonError::into_inner);
        let reported = outboxes.get(outbox.table().as_str())?;
        reported.owed.then(|| {
            let doubled = self
                .every
                .saturating_mul(2_u32.saturating_pow(reported.failures.min(16)));
            doubled.min(Self::HEARTBEAT)
        })
    }

    /// Reads `outbox`'s summary and writes its row if it is worth writing
    /// (see [`FleetMember`]); whether it wrote.
    ///
    /// # Errors
    /// A database error of either database; the member then
    /// [owes](Self::owes) the report.
    pub async fn report(&self, outbox: &Outbox) -> Result<bool> {
        let name = outbox.table().as_str();
        let result = self.write_if_worth(outbox, name).await;
        let mut outboxes = self.outboxes.lock().unwrap_or_else(PoisonError::into_inner);
        let reported = outboxes.entry(name.to_owned()).or_default();
        match &result {
            Ok(Some(written)) => {
                *reported = Reported {
                    written: Some(written.clone()),
                    owed: false,
                    failures: 0,
                };
            }
            Ok(None) => {}
            Err(_) => {
                reported.owed = true;
                reported.failures = reported.failures.saturating_add(1);
            }
        }
        result.map(|written| written.is_some())
    }

    /// Writes `outbox`'s row if it is worth it; what it wrote. A summary
    /// held back marks the report owed.
    async fn write_if_worth(&self, outbox: &Outbox, name: &str) -> Result<Option<Written>> {
        let summary = outbox.summary().await?;
        let now = outbox.now();
        let worth = {
            let mut outboxes = self.outboxes.lock().unwrap_or_else(PoisonError::into_inner);
            let reported = outboxes.entry(name.to_owned()).or_default();
            let worth = worth_writing(reported.written.as_ref(), &summary, now, self.every);
            if !worth {
                reported.owed = reported
                    .written
                    .as_ref()
                    .is_some_and(|written| written.summary != summary);
            }
            worth
        };
        if !worth {
            return Ok(None);
        }
        self.fleet.report(&self.member, name, &summary, now).await?;
        Ok(Some(Written { summary, at: now }))
    }
}

/// Whether `summary`, read at `now`, is worth writing after `written`.
fn worth_writing(
    written: Option<&Written>,
    summary: &OutboxSummary,
    now: Timestamp,
    every: Duration,
) -> bool {
    let Some(written) = written else {
        return true;
    };
    let since = now.duration_since(written.at);
    let before = &written.summary;
    if before == summary {
        return since >= FleetMember::HEARTBEAT;
    }
    let telling = before.dead != summary.dead
        || before.last_error != summary.last_error
        || (before.backlog == 0) != (summary.backlog == 0)
        || before.oldest_due_at.is_some() != summary.oldest_due_at.is_some();
    telling || since >= every
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(backlog: u32, dead: u32, due: Option<i64>, error: Option<&str>) -> OutboxSummary {
        OutboxSummary {
            backlog,
            dead,
            oldest_due_at: due.map(|ms| Timestamp::from_unix_millis(ms).unwrap()),
            last_error: error.map(str::to_owned),
        }
    }

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_unix_millis(ms).unwrap()
    }

    fn written(summary: OutboxSummary, ms: i64) -> Written {
        Written {
            summary,
            at: at(ms),
        }
    }

    const EVERY: Duration = Duration::from_secs(30);

    #[test]
    fn the_first_report_is_written() {
        assert!(worth_writing(
            None,
            &summary(3, 0, None, None),
            at(0),
            EVERY
        ));
    }

    #[test]
    fn what_an_operator_acts_on_is_written_at_once() {
        let before = written(summary(5, 1, Some(900), Some("500")), 1_000);
        for changed in [
            summary(5, 2, Some(900), Some("500")),
            summary(5, 1, Some(900), Some("503")),
            summary(0, 1, None, Some("500")),
            summary(5, 1, None, Some("500")),
        ] {
            assert!(
                worth_writing(Some(&before), &changed, at(1_001), EVERY),
                "{changed:?}"
            );
        }
    }

    #[test]
    fn a_drifting_count_waits_for_its_interval() {
        let before = written(summary(5, 0, Some(900), None), 1_000);
        let drift = summary(4, 0, Some(950), None);
        assert!(!worth_writing(Some(&before), &drift, at(30_999), EVERY));
        assert!(worth_writing(Some(&before), &drift, at(31_000), EVERY));
    }

    #[test]
    fn an_unchanged_row_is_written_once_an_hour() {
        let same = summary(5, 0, Some(900), None);
        let before = written(same.clone(), 0);
        assert!(!worth_writing(Some(&before), &same, at(3_599_999), EVERY));
        assert!(worth_writing(Some(&before), &same, at(3_600_000), EVERY));
    }
}
