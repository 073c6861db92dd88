//! The stored pause switch of a topic, for operators and for receivers
//! whose destination is gone (HTTP 410).

use serde::Serialize;

use super::Outbox;
use super::message::check_key;
use super::settle::clip;
use crate::error::Result;
use crate::sql::pause;
use crate::sql::paused::{paused_col, paused_table};
use crate::time::Timestamp;

/// A paused topic: why, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PausedTopic {
    /// The topic.
    pub topic: String,
    /// Why it was paused: the receiver's answer (for a
    /// [`Delivery::Gone`](crate::Delivery::Gone)) or the operator's words.
    pub reason: String,
    /// When it was paused.
    #[serde(rename = "paused_at_ms", serialize_with = "timestamp_millis")]
    pub paused_at: Timestamp,
}

/// A time as Unix milliseconds (JSON for operators).
pub(super) fn timestamp_millis<S: serde::Serializer>(
    at: &Timestamp,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.serialize_i64(at.as_unix_millis())
}

impl Outbox {
    /// Pauses `topic`: from the next claim on, no drain (cron, alarm or the
    /// attempt right after a response) delivers its messages or spends
    /// their attempts; they stay due, and new ones are still enqueued,
    /// until [`resume_topic`](Outbox::resume_topic). A run that claimed
    /// messages of the topic before the pause may still deliver them.
    /// `false` if the topic was paused already (its first reason stays).
    ///
    /// The pause is per topic: a topic that fans out to several receivers
    /// stops for all of them. And messages age while they wait: once one is
    /// older than the retry policy's
    /// [`defer_limit`](crate::RetryPolicy::defer_limit), its failures spend
    /// attempts even where they otherwise would not.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) for an empty or
    /// over-long topic; any database error.
    pub async fn pause_topic(&self, topic: &str, reason: &str) -> Result<bool> {
        check_key("topic", Some(topic))?;
        let reason = clip(reason);
        let statement = pause::pause(self.table(), self.dialect(), topic, &reason, self.now())?;
        Ok(self.inner.db.execute(&statement).await? > 0)
    }

    /// Resumes `topic`: its messages are claimed again, the overdue first,
    /// and those its receivers' failures held back for later are due at
    /// once (no attempt spent or refunded). `false` if it was not paused
    /// (the held messages are due at once all the same).
    ///
    /// # Errors
    /// As [`pause_topic`](Outbox::pause_topic).
    pub async fn resume_topic(&self, topic: &str) -> Result<bool> {
        check_key("topic", Some(topic))?;
        let now = self.now();
        let mut statements = vec![
            pause::resume(self.table(), self.dialect(), topic)?,
            crate::sql::settle::release_held_topic(self.table(), self.dialect(), topic, now)?,
        ];
        statements
            .extend(crate::sql::dialects::of(self.dialect()).resume_topic(self.table(), topic));
        let outcomes = self.inner.db.batch_atomic(&statements).await?;
        Ok(outcomes
            .first()
            .is_some_and(|resumed| resumed.rows_affected > 0))
    }

    /// Every paused topic, in name order, with its reason.
    ///
    /// # Errors
    /// Any database error; [`Error::MalformedRow`](crate::Error::MalformedRow)
    /// for a row that does not decode.
    pub async fn paused_topics(&self) -> Result<Vec<PausedTopic>> {
        let statement = pause::paused(self.table(), self.dialect())?;
        let rows = self.inner.db.query(&statement).await?;
        let table = paused_table(self.table());
        rows.iter()
            .map(|row| {
                let in_table = |error: crate::error::Error| error.in_row(&table, None);
                Ok(PausedTopic {
                    topic: row.get(paused_col::TOPIC).map_err(in_table)?,
                    reason: row.get(paused_col::REASON).map_err(in_table)?,
                    paused_at: row.get(paused_col::PAUSED_AT).map_err(in_table)?,
                })
            })
            .collect()
    }
}
