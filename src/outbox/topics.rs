//! What the outbox remembers of each topic across drains: the streak of
//! retryable failures since the topic's receiver last answered, in the table
//! `<table>_topics`. Drains read it to tell one message failing again and
//! again (its own fault: attempts are spent) from several messages failing
//! in turn (the receiver's: they spend none), when a run alone cannot tell.

use std::collections::BTreeMap;
use std::time::Duration;

use sea_query::{Expr, ExprTrait, OnConflict, Query};

use super::Outbox;
use crate::database::{Rows, Statement, query_error};
use crate::error::Result;
use crate::time::Timestamp;

/// A streak is forgotten this long after its last failure.
pub(crate) const STREAK_MEMORY: Duration = Duration::from_secs(24 * 3600);

mod col {
    pub(super) const TOPIC: &str = "topic";
    pub(super) const FAILING_ID: &str = "failing_id";
    pub(super) const SEVERAL: &str = "several";
    pub(super) const FAILED_AT: &str = "failed_at";
}

/// A topic's failures since its receiver last answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Streak {
    /// The message that failed last.
    pub(crate) failing_id: String,
    /// Whether another message failed in the streak too.
    pub(crate) several: bool,
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
    },
}

impl Streak {
    /// Whether `id` is the only message that failed in the streak.
    pub(crate) fn only(&self, id: &str) -> bool {
        !self.several && self.failing_id == id
    }
}

impl Outbox {
    /// The table of topic streaks.
    fn topics_table(&self) -> String {
        format!("{}_topics", self.inner.table.as_str())
    }

    /// Reads every remembered streak (one row per topic failing now).
    pub(crate) fn streaks_statement(&self) -> Result<Statement> {
        let mut select = Query::select();
        select
            .columns([col::TOPIC, col::FAILING_ID, col::SEVERAL, col::FAILED_AT])
            .from(self.topics_table());
        self.render(&select)
    }

    /// The streaks `rows` of [`streaks_statement`](Outbox::streaks_statement)
    /// hold, those older than [`STREAK_MEMORY`] left out.
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
            let streak = Streak {
                failing_id: row.get(col::FAILING_ID).map_err(in_table)?,
                several: several != 0,
            };
            if failed_at >= forget_before {
                streaks.insert(row.get(col::TOPIC).map_err(in_table)?, streak);
            }
        }
        Ok(streaks)
    }

    /// The statements of `writes`, by topic, in order.
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
                StreakWrite::Ended => statements.push(self.streak_ended_statement(topic)?),
                StreakWrite::Failed {
                    after_end,
                    failing_id,
                    several,
                } => {
                    if *after_end {
                        statements.push(self.streak_ended_statement(topic)?);
                    }
                    statements.push(self.streak_failed_statement(topic, failing_id, *several)?);
                }
            }
        }
        Ok(statements)
    }

    /// Ends `topic`'s streak: its receiver answered.
    pub(crate) fn streak_ended_statement(&self, topic: &str) -> Result<Statement> {
        let mut delete = Query::delete();
        delete
            .from_table(self.topics_table())
            .and_where(Expr::col(col::TOPIC).eq(topic));
        self.render(&delete)
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
        let forget_before = now.saturating_sub(STREAK_MEMORY).as_unix_millis();
        let table = self.topics_table();
        let stored = |column: &'static str| Expr::col((table.clone(), column));
        let merged: Expr = Expr::case(stored(col::FAILED_AT).lt(forget_before), i64::from(several))
            .case(stored(col::FAILING_ID).ne(failing_id), 1)
            .case(Expr::val(i64::from(several)).eq(1), 1)
            .finally(stored(col::SEVERAL))
            .into();
        let mut insert = Query::insert();
        insert
            .into_table(table.clone())
            .columns([col::TOPIC, col::FAILING_ID, col::SEVERAL, col::FAILED_AT])
            .values([
                topic.into(),
                failing_id.into(),
                i64::from(several).into(),
                now.as_unix_millis().into(),
            ])
            .map_err(query_error)?;
        insert.on_conflict(
            OnConflict::column(col::TOPIC)
                .value(col::SEVERAL, merged)
                .value(col::FAILING_ID, failing_id)
                .value(col::FAILED_AT, now.as_unix_millis())
                .to_owned(),
        );
        self.render(&insert)
    }
}
