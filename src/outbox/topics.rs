//! What the outbox remembers of each topic across drains: the streak of
//! retryable failures since the topic's receiver last answered, in the table
//! `<table>_topics`. Drains read it to tell one message failing again and
//! again (its own fault: attempts are spent) from several messages failing
//! in turn (the receiver's: they spend none), when a run alone cannot tell.

use std::collections::BTreeMap;
use std::time::Duration;

use super::Outbox;
use super::operational::{RECEIVER_FAILING, RECEIVER_RECOVERED};
use crate::database::{Rows, Statement};
use crate::error::Result;
use crate::sql::events::{self, EventRow};
use crate::sql::streaks::{self, streak_col as col};
use crate::time::Timestamp;

/// A streak is forgotten this long after its last failure.
pub(crate) const STREAK_MEMORY: Duration = Duration::from_secs(24 * 3600);

/// A topic's failures since its receiver last answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Streak {
    /// The message that failed last.
    pub(crate) failing_id: String,
    /// Whether another message failed in the streak too.
    pub(crate) several: bool,
    /// Older than [`STREAK_MEMORY`], kept only because its operator was
    /// told of it: its answer ends it, but it judges no failure.
    pub(crate) stale: bool,
}

/// A change to a topic's remembered streak, as a drain decides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StreakWrite {
    /// The receiver answered: the streak ends.
    Ended,
    /// `failing_id` failed (with others of the run, if `several`), after
    /// the streak ended if `after_end`.
    Failed {
        after_end: bool,
        failing_id: String,
        several: bool,
        /// What the last failure said.
        error: String,
    },
}

impl Streak {
    /// Whether `id` is the only message that failed in the streak (or
    /// the streak is stale: as if there were none).
    pub(crate) fn only(&self, id: &str) -> bool {
        self.stale || (!self.several && self.failing_id == id)
    }
}

impl Outbox {
    /// The table of topic streaks.
    fn topics_table(&self) -> String {
        streaks::streaks_table(self.table())
    }

    /// Reads every remembered streak (one row per topic failing now).
    pub(crate) fn streaks_statement(&self) -> Result<Statement> {
        streaks::read(self.table(), self.dialect())
    }

    /// The streaks `rows` of [`streaks_statement`](Outbox::streaks_statement)
    /// hold, those older than [`STREAK_MEMORY`] left out unless their
    /// operator was told of them (kept stale, for their answer to end).
    ///
    /// # Errors
    /// [`Error::MalformedRow`](crate::error::Error::MalformedRow) for a row that
    /// does not decode.
    pub(crate) fn read_streaks(&self, rows: &Rows) -> Result<BTreeMap<String, Streak>> {
        let forget_before = self.now().saturating_sub(STREAK_MEMORY);
        let mut streaks = BTreeMap::new();
        for row in rows.iter() {
            let in_table = |error: crate::error::Error| error.in_row(&self.topics_table(), None);
            let failed_at: Timestamp = row.get(col::FAILED_AT).map_err(in_table)?;
            let several: i64 = row.get(col::SEVERAL).map_err(in_table)?;
            let told: i64 = row.get(col::TOLD).map_err(in_table)?;
            let stale = failed_at < forget_before;
            let streak = Streak {
                failing_id: row.get(col::FAILING_ID).map_err(in_table)?,
                several: several != 0,
                stale,
            };
            if !stale || told != 0 {
                streaks.insert(row.get(col::TOPIC).map_err(in_table)?, streak);
            }
        }
        Ok(streaks)
    }

    /// The statements of `writes`, by topic, in order, with the
    /// operational events they cause.
    ///
    /// # Errors
    /// If a statement cannot be built.
    pub(crate) fn streak_statements(
        &self,
        writes: &BTreeMap<String, StreakWrite>,
    ) -> Result<Vec<Statement>> {
        let mut statements = Vec::new();
        for (topic, write) in writes {
            match write {
                StreakWrite::Ended => statements.extend(self.streak_ended_statements(topic)?),
                StreakWrite::Failed {
                    after_end,
                    failing_id,
                    several,
                    error,
                } => {
                    if *after_end {
                        statements.extend(self.streak_ended_statements(topic)?);
                    }
                    statements.push(self.streak_failed_statement(topic, failing_id, *several)?);
                    statements.extend(self.report_failing(topic, error)?);
                }
            }
        }
        Ok(statements)
    }

    /// Ends `topic`'s streak: its receiver answered. The operator, if told
    /// it was failing, is told it answers again.
    pub(crate) fn streak_ended_statements(&self, topic: &str) -> Result<Vec<Statement>> {
        let mut statements = Vec::new();
        if let Some(event) = self.receiver_event(RECEIVER_RECOVERED, topic, "")? {
            let row = event.row(RECEIVER_RECOVERED);
            statements.push(streaks::keep_if_told(
                self.table(),
                self.dialect(),
                topic,
                &row,
            )?);
            statements.push(events::fan_out_if_kept(self.table(), self.dialect(), &row)?);
        }
        statements.push(streaks::ended(self.table(), self.dialect(), topic)?);
        Ok(statements)
    }

    /// Records that `failing_id` of `topic` failed (with others of the run's
    /// streak, if `several`). Merged with the stored streak: a different
    /// message failing makes it several; one older than [`STREAK_MEMORY`]
    /// starts over. Safe to send again.
    pub(crate) fn streak_failed_statement(
        &self,
        topic: &str,
        failing_id: &str,
        several: bool,
    ) -> Result<Statement> {
        let now = self.now();
        let failure = streaks::Failure {
            topic,
            failing_id,
            several,
            at: now,
            forget_before: now.saturating_sub(STREAK_MEMORY),
        };
        streaks::failed(self.table(), self.dialect(), &failure)
    }

    /// Tells the operator that `topic`'s receiver has failed longer than
    /// the outbox's [`receiver_failing_after`](super::OutboxBuilder::receiver_failing_after),
    /// once per streak: sent after the streak's write.
    fn report_failing(&self, topic: &str, error: &str) -> Result<Vec<Statement>> {
        let Some(event) = self.receiver_event(RECEIVER_FAILING, topic, error)? else {
            return Ok(Vec::new());
        };
        let Some(operator) = self.operational_owner() else {
            return Ok(Vec::new());
        };
        let row = event.row(RECEIVER_FAILING);
        let began_by = event.at.saturating_sub(self.inner.receiver_failing_after);
        let (table, dialect) = (self.table(), self.dialect());
        Ok(vec![
            streaks::keep_if_failing(
                table,
                dialect,
                (topic, operator),
                &row,
                &event.payload_head,
                began_by,
            )?,
            events::fan_out_if_kept(table, dialect, &row)?,
            streaks::mark_told(table, dialect, topic, &event.id)?,
        ])
    }

    /// An operational event about `receiver`, if the outbox has an
    /// operator: its id, owner and payload (`recovered`: whole; `failing`:
    /// the head the streak's figures complete).
    fn receiver_event(
        &self,
        event_type: &'static str,
        receiver: &str,
        error: &str,
    ) -> Result<Option<ReceiverEvent<'_>>> {
        let Some(owner) = self.operational_owner() else {
            return Ok(None);
        };
        let now = self.now();
        let mut payload = serde_json::json!({
            "type": event_type,
            "receiver": receiver,
            "at_ms": now.as_unix_millis(),
        });
        if event_type == RECEIVER_FAILING {
            payload["error"] = super::settle::clip(error).into();
        }
        let mut text = crate::sql::json_text(&payload, "operational event")?;
        if event_type == RECEIVER_FAILING {
            text.pop();
        }
        Ok(Some(ReceiverEvent {
            id: format!(
                "{}{}",
                super::operational::EVENT_ID_PREFIX,
                self.new_ulid(now)
            ),
            owner,
            payload_head: text,
            at: now,
        }))
    }
}

/// An operational event about a receiver, before it is written.
struct ReceiverEvent<'a> {
    id: String,
    owner: &'a str,
    /// The payload's JSON text (for a failing receiver, without its
    /// closing brace: the streak's figures follow).
    payload_head: String,
    at: Timestamp,
}

impl ReceiverEvent<'_> {
    fn row(&self, event_type: &'static str) -> EventRow<'_> {
        EventRow {
            id: &self.id,
            owner: self.owner,
            event_type,
            payload: &self.payload_head,
            filtered: &self.payload_head,
            subject: None,
            ordering_key: None,
            at: self.at,
        }
    }
}
