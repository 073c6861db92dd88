//! Stored rows as callers see them: for dead-letter listings and exports.

use serde::Serialize;

use super::{col, state};
use crate::database::{Row, Statement};
use crate::error::{Error, Result};
use crate::time::Timestamp;

/// Where a stored message is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageState {
    /// Waiting for delivery (due now or later).
    Pending,
    /// Leased to a drainer whose lease has not expired.
    Leased,
    /// Queued behind an earlier message with the same ordering key.
    Waiting,
    /// Parked after a permanent failure or its last attempt.
    Dead,
}

/// A message as stored in the outbox.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StoredMessage {
    /// The message id.
    pub id: String,
    /// Where it is in its life.
    pub state: MessageState,
    /// Its topic.
    pub topic: String,
    /// Its payload's JSON text: opened, when it was sealed (see
    /// [`seal`](crate::seal)) and opens; else the sealed text as stored,
    /// and `unopened` says why.
    pub payload: String,
    /// Why `payload` is still sealed text: its key is not in the ring, or
    /// its data key is gone (its subject was erased). `None` for a payload
    /// that was clear or opened.
    pub unopened: Option<String>,
    /// The subject it is about.
    pub subject: Option<String>,
    /// Its dedup key.
    pub dedup_key: Option<String>,
    /// Its ordering key.
    pub ordering_key: Option<String>,
    /// Attempts spent so far: failed deliveries, and leases of the message
    /// delivered alone that expired without a settle.
    pub attempts: u32,
    /// Leases in a row that expired without a settle. Non-zero means the
    /// outcome of the latest delivery is **unknown**: it may have crashed its
    /// drainer, or succeeded with its settle lost. Check with the receiver
    /// before replaying such a dead message.
    pub unsettled_leases: u32,
    /// Failures that spent no attempt (receiver unavailable, circuit open).
    pub deferrals: u32,
    /// The latest failure, if any.
    pub last_error: Option<String>,
    /// Pending: when it is next due. Leased: when the lease ends. Dead: when
    /// it died. Waiting: the earliest it may be delivered.
    pub due_at: Timestamp,
    /// When it was enqueued.
    pub created_at: Timestamp,
}

impl super::Outbox {
    /// Runs `statement` (a `SELECT` of [`STORED_COLUMNS`](crate::sql::dead_letters::STORED_COLUMNS)) and decodes its rows.
    pub(crate) async fn stored_messages(&self, statement: Statement) -> Result<Vec<StoredMessage>> {
        let rows = self.inner.db.query(&statement).await?;
        let now = self.now();
        let mut messages = rows
            .iter()
            .map(|row| decode(row, self.table().as_str(), now))
            .collect::<Result<Vec<_>>>()?;
        self.open_stored(messages.iter_mut()).await?;
        Ok(messages)
    }
}

/// A row's state and due time, read from its `state`, `due_at` and
/// `lease_token`.
pub(crate) fn state_of(row: Row<'_>, now: Timestamp) -> Result<(MessageState, Timestamp)> {
    let due_at: Timestamp = row.get(col::DUE_AT)?;
    let stored_state: String = row.get(col::STATE)?;
    let leased = row.get::<Option<String>>(col::LEASE_TOKEN)?.is_some();
    let state = match stored_state.as_str() {
        state::DEAD => MessageState::Dead,
        state::WAITING => MessageState::Waiting,
        state::READY if leased && due_at > now => MessageState::Leased,
        state::READY => MessageState::Pending,
        other => {
            return Err(Error::MalformedRow {
                table: None,
                row: None,
                column: col::STATE.into(),
                reason: format!("unknown state {other:?}"),
            });
        }
    };
    Ok((state, due_at))
}

/// Decodes a row read with [`STORED_COLUMNS`](crate::sql::dead_letters::STORED_COLUMNS); errors name the table and row.
pub(crate) fn decode(row: Row<'_>, table: &str, now: Timestamp) -> Result<StoredMessage> {
    let id = row
        .get::<String>(col::ID)
        .map_err(|e| e.in_row(table, None))?;
    let decoded = (|| {
        let (state, due_at) = state_of(row, now)?;
        Ok(StoredMessage {
            id: id.clone(),
            state,
            topic: row.get(col::TOPIC)?,
            payload: row.get(col::PAYLOAD)?,
            unopened: None,
            subject: row.get(col::SUBJECT)?,
            dedup_key: row.get(col::DEDUP_KEY)?,
            ordering_key: row.get(col::ORDERING_KEY)?,
            attempts: row.get(col::ATTEMPTS)?,
            unsettled_leases: row.get(col::UNSETTLED_LEASES)?,
            deferrals: row.get(col::DEFERRALS)?,
            last_error: row.get(col::LAST_ERROR)?,
            due_at,
            created_at: row.get(col::CREATED_AT)?,
        })
    })();
    decoded.map_err(|e: Error| e.in_row(table, Some(&id)))
}
