//! Counts for dashboards and alerts.

use std::time::Duration;

use serde::Serialize;

use super::Outbox;
use crate::database::{Row, Rows, Statement};
use crate::error::{Error, Result};
use crate::sql::fleet::{self, summary_col};
use crate::sql::stats::{self as sql_stats, stats_col};
use crate::time::Timestamp;

/// The outbox at a glance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct OutboxStats {
    /// Messages awaiting delivery and not in flight: due, scheduled for
    /// later, or waiting behind their ordering key.
    pub pending: u64,
    /// Of those, the ones deliverable now (including expired leases).
    pub due: u64,
    /// Messages leased to a drainer right now.
    pub leased: u64,
    /// Parked messages.
    pub dead: u64,
    /// How far behind schedule the most overdue message is; `None` when
    /// nothing is due. Alert on this: it grows when drains fall behind.
    #[serde(rename = "oldest_due_age_ms", serialize_with = "age_millis")]
    pub oldest_due_age: Option<Duration>,
}

/// An outbox at a glance, read in bounded reads by [`Outbox::summary`]:
/// what a fleet view lists for each member.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct OutboxSummary {
    /// Messages not dead (due, scheduled, leased or waiting), counted up to
    /// [`Outbox::SUMMARY_CAP`] `+ 1`: more reads as "more than the cap".
    pub backlog: u32,
    /// Dead letters, counted up to [`Outbox::SUMMARY_CAP`] `+ 1`.
    pub dead: u32,
    /// When the most overdue message not leased fell due; `None` when
    /// nothing is due.
    pub oldest_due_at: Option<Timestamp>,
    /// The error of the first message in line (of the first
    /// [`Outbox::SUMMARY_CAP`]) that failed before, else the latest dead
    /// letter's, cut to [`Outbox::SUMMARY_ERROR_CHARS`] characters.
    pub last_error: Option<String>,
}

/// An optional age as whole milliseconds (JSON for operators).
pub(super) fn age_millis<S: serde::Serializer>(
    age: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match age {
        Some(age) => serializer.serialize_u64(u64::try_from(age.as_millis()).unwrap_or(u64::MAX)),
        None => serializer.serialize_none(),
    }
}

impl Outbox {
    /// Counts by state, in one query (it reads the whole table).
    ///
    /// # Errors
    /// Database errors; [`Error::MalformedRow`] if the counts are not
    /// integers.
    pub async fn stats(&self) -> Result<OutboxStats> {
        let statement =
            sql_stats::stats(self.table(), self.dialect(), self.now().as_unix_millis())?;
        let rows = self.inner.db.query(&statement).await?;
        let row = aggregate_row(&rows)?;
        let in_table = |error: Error| error.in_row(self.table().as_str(), None);
        let oldest: Option<Timestamp> = row.get(stats_col::OLDEST_DUE_AT).map_err(in_table)?;
        Ok(OutboxStats {
            pending: row.get(stats_col::PENDING).map_err(in_table)?,
            due: row.get(stats_col::DUE).map_err(in_table)?,
            leased: row.get(stats_col::LEASED).map_err(in_table)?,
            dead: row.get(stats_col::DEAD).map_err(in_table)?,
            oldest_due_age: oldest.map(|at| self.now().duration_since(at)),
        })
    }

    /// How far [`summary`](Outbox::summary) counts.
    pub const SUMMARY_CAP: u32 = 100;

    /// How much of an error [`summary`](Outbox::summary) keeps.
    pub const SUMMARY_ERROR_CHARS: usize = 300;

    /// The outbox at a glance in one query that reads at most about
    /// `3 × SUMMARY_CAP + 2` rows, each by a range of the primary key,
    /// however large the table (unlike [`stats`](Outbox::stats)).
    ///
    /// # Errors
    /// A database error; [`Error::MalformedRow`] if a value read is not of
    /// its type.
    pub async fn summary(&self) -> Result<OutboxSummary> {
        let statement =
            fleet::summary(self.table(), self.dialect(), self.now(), Self::SUMMARY_CAP)?;
        let rows = self.inner.db.query(&statement).await?;
        let row = aggregate_row(&rows)?;
        let in_table = |error: Error| error.in_row(self.table().as_str(), None);
        let pending: Option<String> = row.get(summary_col::PENDING_ERROR).map_err(in_table)?;
        let dead: Option<String> = row.get(summary_col::DEAD_ERROR).map_err(in_table)?;
        Ok(OutboxSummary {
            backlog: row.get(summary_col::BACKLOG).map_err(in_table)?,
            dead: row.get(summary_col::DEAD).map_err(in_table)?,
            oldest_due_at: row.get(summary_col::OLDEST_DUE_AT).map_err(in_table)?,
            last_error: pending
                .or(dead)
                .map(|error| error.chars().take(Self::SUMMARY_ERROR_CHARS).collect()),
        })
    }

    /// How many messages are due now, counting no further than `at_most`:
    /// a bounded read of the primary key (unlike [`stats`](Outbox::stats),
    /// which reads every row), cheap enough for every cron run whatever the
    /// backlog.
    ///
    /// # Errors
    /// A database error; [`Error::MalformedRow`] if the count is not an
    /// integer.
    pub async fn count_due(&self, at_most: u32) -> Result<u64> {
        // Built apart: a sea-query statement is not `Send`, and must not
        // live across the await.
        let statement = self.backlog_statement(u64::from(at_most))?;
        let rows = self.inner.db.query(&statement).await?;
        Ok(self.read_backlog(&rows)?.0)
    }

    /// A drain's backlog sample: messages due now (at most `at_most`) and
    /// when the most overdue of them fell due, reading at most `at_most`
    /// rows of the primary key.
    pub(crate) fn backlog_statement(&self, at_most: u64) -> Result<Statement> {
        sql_stats::backlog(
            self.table(),
            self.dialect(),
            self.now().as_unix_millis(),
            at_most,
        )
    }

    /// Reads [`backlog_statement`](Outbox::backlog_statement)'s row: the
    /// count, and how overdue the oldest due message is.
    ///
    /// # Errors
    /// [`Error::MalformedRow`] if the row is missing or not integers.
    pub(crate) fn read_backlog(&self, rows: &Rows) -> Result<(u64, Option<Duration>)> {
        let row = aggregate_row(rows)?;
        let in_table = |error: Error| error.in_row(self.table().as_str(), None);
        let due: u64 = row.get(stats_col::DUE).map_err(in_table)?;
        let oldest: Option<Timestamp> = row.get(stats_col::OLDEST_DUE_AT).map_err(in_table)?;
        Ok((due, oldest.map(|at| self.now().duration_since(at))))
    }
}

/// The one row an aggregate query returns.
fn aggregate_row(rows: &Rows) -> Result<Row<'_>> {
    rows.first()
        .ok_or_else(|| Error::database("an aggregate query returned no row"))
}
