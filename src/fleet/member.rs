//! A member's reporter: when its outbox's row is worth writing again.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{Fleet, check_name};
use crate::error::Result;
use crate::outbox::{Outbox, OutboxSummary};
use crate::time::Timestamp;

/// One member of a [`Fleet`] (a Durable Object, by its name): reports its
/// outbox's [`summary`](Outbox::summary) into the registry after each of
/// its drains ([`DrainerBuilder::fleet`](crate::drain::DrainerBuilder::fleet)),
/// or when [`report`](Self::report) is called.
///
/// A report reads the summary (at most about `3 ×`
/// [`Outbox::SUMMARY_CAP`] `+ 2` rows of the member's own database) and
/// writes the member's row (one upsert into the registry) only if
/// - it never wrote (since this instance was made: after an eviction it
///   writes once again);
/// - the dead letters, the last error, whether anything waits or whether
///   anything is due changed — at once;
/// - only the backlog or the oldest due message's time changed, and
///   [`every`](Self::every) passed since its last write;
/// - nothing changed, and an hour passed ([`HEARTBEAT`](Self::HEARTBEAT)):
///   the row's report time says the member is alive.
///
/// A drain that leaves a backlog runs again when it is due, so a count held
/// back is written by a later drain.
#[derive(Clone)]
pub struct FleetMember {
    fleet: Fleet,
    member: String,
    every: Duration,
    written: Arc<Mutex<Option<Written>>>,
}

impl std::fmt::Debug for FleetMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetMember")
            .field("member", &self.member)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

/// What a member last wrote, and when.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Written {
    outbox: String,
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
            written: Arc::new(Mutex::new(None)),
        })
    }

    /// The least time between two writes whose only change is the
    /// backlog's count or the oldest due message's time (default 30 s).
    #[must_use]
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every;
        self
    }

    /// The member's name.
    pub fn member(&self) -> &str {
        &self.member
    }

    /// Reads `outbox`'s summary and writes the member's row if it is worth
    /// writing (see [`FleetMember`]); whether it wrote.
    ///
    /// # Errors
    /// A database error of either database; the row is then written by a
    /// later report.
    pub async fn report(&self, outbox: &Outbox) -> Result<bool> {
        let summary = outbox.summary().await?;
        let now = outbox.now();
        let name = outbox.table().as_str();
        let due = {
            let written = self.written.lock().unwrap_or_else(PoisonError::into_inner);
            worth_writing(written.as_ref(), name, &summary, now, self.every)
        };
        if !due {
            return Ok(false);
        }
        self.fleet.report(&self.member, name, &summary, now).await?;
        *self.written.lock().unwrap_or_else(PoisonError::into_inner) = Some(Written {
            outbox: name.to_owned(),
            summary,
            at: now,
        });
        Ok(true)
    }
}

/// Whether `summary` of `outbox`, read at `now`, is worth writing after
/// `written`.
fn worth_writing(
    written: Option<&Written>,
    outbox: &str,
    summary: &OutboxSummary,
    now: Timestamp,
    every: Duration,
) -> bool {
    let Some(written) = written.filter(|written| written.outbox == outbox) else {
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
            outbox: "outbox".into(),
            summary,
            at: at(ms),
        }
    }

    const EVERY: Duration = Duration::from_secs(30);

    #[test]
    fn the_first_report_and_another_outboxs_are_written() {
        let now = summary(3, 0, None, None);
        assert!(worth_writing(None, "outbox", &now, at(0), EVERY));
        let before = written(now.clone(), 0);
        assert!(worth_writing(Some(&before), "other", &now, at(1), EVERY));
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
                worth_writing(Some(&before), "outbox", &changed, at(1_001), EVERY),
                "{changed:?}"
            );
        }
    }

    #[test]
    fn a_drifting_count_waits_for_its_interval() {
        let before = written(summary(5, 0, Some(900), None), 1_000);
        let drift = summary(4, 0, Some(950), None);
        assert!(!worth_writing(
            Some(&before),
            "outbox",
            &drift,
            at(30_999),
            EVERY
        ));
        assert!(worth_writing(
            Some(&before),
            "outbox",
            &drift,
            at(31_000),
            EVERY
        ));
    }

    #[test]
    fn an_unchanged_row_is_written_once_an_hour() {
        let same = summary(5, 0, Some(900), None);
        let before = written(same.clone(), 0);
        assert!(!worth_writing(
            Some(&before),
            "outbox",
            &same,
            at(3_599_999),
            EVERY
        ));
        assert!(worth_writing(
            Some(&before),
            "outbox",
            &same,
            at(3_600_000),
            EVERY
        ));
    }
}
