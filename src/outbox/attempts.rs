//! The attempt log: what receivers answered, read back per message and per
//! topic (an endpoint's deliveries).

use serde::Serialize;

use super::Outbox;
use super::claim::LeaseHandle;
use crate::database::{Row, Statement};
use crate::drain::AttemptRecord;
use crate::error::Result;
use crate::sql::attempts::{self, LoggedRow, attempt_col, attempts_table};
use crate::time::Timestamp;
use crate::verdict::Delivery;

/// One logged attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct LoggedAttempt {
    /// The message attempted.
    pub message_id: String,
    /// Its topic (an endpoint's id, for an endpoint's delivery).
    pub topic: String,
    /// The event it delivered, for an endpoint's delivery.
    pub event_id: Option<String>,
    /// Which attempt it was (1 for the first).
    pub attempt: u32,
    /// When it started.
    #[serde(rename = "at_ms", serialize_with = "super::pause::timestamp_millis")]
    pub at: Timestamp,
    /// The receiver's status, if it answered.
    pub status: Option<u16>,
    /// How long it took, in ms.
    pub duration_ms: u64,
    /// The verdict's class (`delivered`, `failed`, `throttled`,
    /// `unavailable`, `permanent`, `gone`).
    pub outcome: String,
    /// The verdict's error, if it failed.
    pub error: Option<String>,
    /// The response headers kept.
    pub headers: Vec<(String, String)>,
    /// The start of the response body.
    pub body: String,
}

impl Outbox {
    /// How many attempts a message keeps in the log: a later one replaces
    /// the oldest.
    pub const ATTEMPTS_KEPT_PER_MESSAGE: u32 = 10;

    /// How many expired attempts one sweep deletes at most.
    pub(crate) const ATTEMPTS_PRUNED_PER_SWEEP: u32 = 500;

    /// The logged attempts of message `id`, oldest first (at most
    /// [`ATTEMPTS_KEPT_PER_MESSAGE`](Self::ATTEMPTS_KEPT_PER_MESSAGE)).
    ///
    /// # Errors
    /// Database errors; [`Error::MalformedRow`](crate::Error::MalformedRow).
    pub async fn attempts_of(&self, id: &str) -> Result<Vec<LoggedAttempt>> {
        let statement = attempts::of_message(self.table(), self.dialect(), id)?;
        self.logged_attempts(statement).await
    }

    /// The `limit` latest logged attempts of `topic`, newest first.
    pub(crate) async fn attempts_of_topic(
        &self,
        topic: &str,
        limit: u32,
    ) -> Result<Vec<LoggedAttempt>> {
        let statement = attempts::of_topic(self.table(), self.dialect(), topic, limit)?;
        self.logged_attempts(statement).await
    }

    /// The logged attempts of `subject`'s messages, oldest first.
    pub(crate) fn attempts_of_subject_statement(&self, subject: &str) -> Result<Statement> {
        let forms = self.subject_forms(subject);
        attempts::of_subject(
            self.table(),
            self.dialect(),
            &crate::erasure::as_strs(&forms),
        )
    }

    pub(crate) async fn logged_attempts(&self, statement: Statement) -> Result<Vec<LoggedAttempt>> {
        let rows = self.inner.db.query(&statement).await?;
        let table = attempts_table(self.table());
        rows.iter()
            .map(|row| decode(&row).map_err(|error| error.in_row(&table, None)))
            .collect()
    }

    /// `record`, the answer to the attempt `lease` made that ended at
    /// `ended` with `verdict`, as an entry of
    /// [`attempt_log_statement`](Outbox::attempt_log_statement).
    ///
    /// # Errors
    /// If its headers do not serialize.
    pub(crate) fn attempt_log_entry(
        &self,
        lease: &LeaseHandle,
        record: &AttemptRecord,
        verdict: &Delivery,
        ended: Timestamp,
    ) -> Result<serde_json::Value> {
        let headers: serde_json::Map<String, serde_json::Value> = record
            .headers
            .iter()
            .map(|(name, value)| {
                let text = |text: &str| text.replace('\0', "\u{FFFD}");
                (text(name), serde_json::Value::String(text(value)))
            })
            .collect();
        let headers = crate::sql::json_text(&headers, "attempt headers")?;
        let body = AttemptRecord::default().body(&record.body).body;
        let error = verdict.error().map(super::settle::clip);
        let spent = lease
            .attempt
            .saturating_sub(1)
            .saturating_add(lease.deferrals);
        let row = LoggedRow {
            slot: spent % Self::ATTEMPTS_KEPT_PER_MESSAGE,
            attempt: lease.attempt,
            at: ended.saturating_sub(record.duration),
            status: record.status,
            duration_ms: i64::try_from(record.duration.as_millis()).unwrap_or(i64::MAX),
            outcome: verdict.class(),
            error: error.as_deref(),
            headers: &headers,
            body: &body,
        };
        Ok(attempts::entry(&lease.fence(), &row))
    }

    /// Logs the attempts `entries`, each while its lease holds, into its
    /// message's next slot: one statement for them all, or one per
    /// [`ATTEMPT_LOG_BYTES`](Self::ATTEMPT_LOG_BYTES) of entries (a bound
    /// text stays well within D1's limits, however large the bodies).
    ///
    /// # Errors
    /// If a statement cannot be built.
    pub(crate) fn attempt_log_statements(
        &self,
        entries: Vec<serde_json::Value>,
    ) -> Result<Vec<Statement>> {
        let mut statements = Vec::new();
        let mut chunk: Vec<String> = Vec::new();
        let mut bytes = 0;
        let flush = |chunk: &mut Vec<String>, statements: &mut Vec<Statement>| -> Result<()> {
            if !chunk.is_empty() {
                let entries = format!("[{}]", chunk.join(","));
                statements.push(attempts::log(self.table(), self.dialect(), &entries)?);
                chunk.clear();
            }
            Ok(())
        };
        for entry in entries {
            let text = entry.to_string();
            if bytes + text.len() > Self::ATTEMPT_LOG_BYTES {
                flush(&mut chunk, &mut statements)?;
                bytes = 0;
            }
            bytes += text.len() + 1;
            chunk.push(text);
        }
        flush(&mut chunk, &mut statements)?;
        Ok(statements)
    }

    /// The most bytes of attempt log entries one statement binds.
    pub(crate) const ATTEMPT_LOG_BYTES: usize = 256 * 1024;
}

fn decode(row: &Row<'_>) -> Result<LoggedAttempt> {
    let headers: String = row.get(attempt_col::HEADERS)?;
    let headers: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&headers)
        .map_err(|error| crate::error::Error::MalformedRow {
            table: None,
            row: None,
            column: attempt_col::HEADERS.into(),
            reason: error.to_string(),
        })?;
    let status: Option<i64> = row.get(attempt_col::STATUS)?;
    Ok(LoggedAttempt {
        message_id: row.get(attempt_col::MESSAGE_ID)?,
        topic: row.get(attempt_col::TOPIC)?,
        event_id: row.get(attempt_col::EVENT_ID)?,
        attempt: row.get(attempt_col::ATTEMPT)?,
        at: row.get(attempt_col::AT)?,
        status: status.and_then(|status| u16::try_from(status).ok()),
        duration_ms: row.get(attempt_col::DURATION_MS)?,
        outcome: row.get(attempt_col::OUTCOME)?,
        error: row.get(attempt_col::ERROR)?,
        headers: headers
            .into_iter()
            .map(|(name, value)| (name, value.as_str().unwrap_or_default().to_owned()))
            .collect(),
        body: row.get(attempt_col::BODY)?,
    })
}
