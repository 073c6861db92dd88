//! The crate's one error type, and what a caller should do about each error.

use std::fmt;
use std::sync::Arc;

/// Words of the error a batch fails with when its check of a listed delete
/// (`sql::differences::Differences::complete_listed`) finds the delete was not exact: SQLite
/// raises it as an invalid JSON path and Postgres as an invalid integer,
/// which each adapter keeps in
/// [`Error::Database`]'s message.
pub(crate) const SETTLE_NOT_EXACT: &str = "workers-outbox: a listed delete was not exact";

/// Everything that can go wrong in this crate, in the caller's terms.
///
/// Every variant answers one question through [`Error::retry_advice`]: can trying the
/// same thing again help? Adapters convert their own errors into this one,
/// keeping the original as the `source()` where it can cross threads.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was rejected before anything was written: a bad table
    /// name, an empty topic, an oversized payload, a batch size out of range,
    /// a time outside [`Timestamp`](crate::time::Timestamp)'s range, a value a
    /// database cannot represent exactly.
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// The argument that was rejected, e.g. `"table name"`.
        what: &'static str,
        /// Why it was rejected.
        reason: String,
    },

    /// The row named by an id does not exist (or is not in the state the
    /// operation needs, e.g. replaying a message that is not dead).
    #[error("{what} {id:?} not found")]
    NotFound {
        /// What was looked up, e.g. `"dead message"`.
        what: &'static str,
        /// The id that was looked up.
        id: String,
    },

    /// A settle was refused because the caller's lease no longer holds: the
    /// message was leased again by another drainer, settled, replayed or
    /// erased. Nothing was changed.
    #[error("lease lost on message {id}: it was leased again or settled by someone else")]
    LeaseLost {
        /// The message whose lease was lost.
        id: String,
    },

    /// A uniqueness constraint refused a write; the whole batch it was part
    /// of was rolled back.
    #[error("unique constraint failed: {constraint}")]
    Conflict {
        /// The constraint as the database names it, e.g. `inbox.key`.
        constraint: String,
    },

    /// The batch would have written a row carrying a subject whose erasure
    /// committed (within [`ERASURE_MEMORY`](crate::subject::ERASURE_MEMORY)):
    /// it was rolled back whole, and writing it again fails the same way.
    #[error("{}", erased_message(.subjects))]
    SubjectErased {
        /// The erased subjects among those the batch's messages and inbox
        /// keys carried (all of them if that could not be read back; none
        /// if the refused row came from a statement of the caller's).
        subjects: Vec<String>,
    },

    /// A stored row could not be decoded: a missing column, a NULL where a
    /// value is required, a value of the wrong type or out of range.
    #[error("malformed row{}{}: column {column}: {reason}", row_suffix(.row), table_suffix(.table))]
    MalformedRow {
        /// The table the row was read from, when known.
        table: Option<String>,
        /// The row's id, when it could be read.
        row: Option<String>,
        /// The column that failed to decode.
        column: String,
        /// What was wrong with it.
        reason: String,
    },

    /// The database could not be reached or refused the work for now
    /// (network loss, restart, overload, timeout). See [`Error::retry_advice`].
    #[error("database unavailable ({advice}): {message}")]
    Unavailable {
        /// What the database said.
        message: String,
        /// Whether to retry at once or only after backing off.
        advice: RetryAdvice,
        /// The adapter's own error, when it has one (its `source()`).
        #[source]
        cause: Option<Cause>,
    },

    /// Any other database failure: bad SQL, a missing table, a constraint
    /// other than uniqueness. Retrying the same statement fails the same way.
    #[error("database error: {message}")]
    Database {
        /// What the database said.
        message: String,
        /// The adapter's (or runtime's) own error, when it has one (its
        /// `source()`: a `rusqlite::Error`, a `tokio_postgres::Error`; none
        /// for D1's and a Durable Object's JavaScript errors, whose text is
        /// the message).
        #[source]
        cause: Option<Cause>,
    },

    /// A signed request did not verify (see the `webhook` module): its
    /// `source()` is the `webhook::Rejected` saying which check failed.
    /// Sending it again fails the same way.
    #[error("unauthenticated: {reason}")]
    Unauthenticated {
        /// Which check failed; never a secret.
        reason: String,
        /// The typed reason.
        #[source]
        cause: Option<Cause>,
    },

    /// A sealed value (see [`seal`](crate::seal)) could not be opened: the
    /// ring holds no key of its id, the key under that id is another one,
    /// its data key is gone (its subject was erased), or the stored text was
    /// damaged. A message in this state is held, not dead: it waits, no
    /// attempt spent, until a ring that opens it is deployed.
    #[error("sealed value under key {key:?} cannot be opened: {reason}")]
    Unsealable {
        /// The id of the key it names (empty if the value was damaged).
        key: String,
        /// Why; never key material.
        reason: String,
    },

    /// The library broke one of its own invariants: a bug in
    /// workers-outbox, whatever the input. Please report it.
    #[error("internal error in workers-outbox (a bug, please report it): {message}")]
    Internal {
        /// What was found broken.
        message: String,
    },
}

fn erased_message(subjects: &[String]) -> String {
    match subjects {
        [] => "a subject of the batch was erased: nothing of the batch was written".to_owned(),
        [subject] => format!("subject {subject:?} was erased: nothing of it is written again"),
        _ => format!("subjects {subjects:?} were erased: nothing of the batch was written"),
    }
}

fn row_suffix(row: &Option<String>) -> String {
    row.as_ref()
        .map(|id| format!(" {id:?}"))
        .unwrap_or_default()
}

fn table_suffix(table: &Option<String>) -> String {
    table
        .as_ref()
        .map(|table| format!(" in {table}"))
        .unwrap_or_default()
}

/// Whether, and how soon, retrying the failed operation can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetryAdvice {
    /// Retrying the same input fails the same way.
    Never,
    /// A transient fault: retrying now is reasonable.
    Now,
    /// The database is overloaded or timed out: retry only after a backoff.
    AfterBackoff,
}

impl fmt::Display for RetryAdvice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RetryAdvice::Never => "do not retry",
            RetryAdvice::Now => "retry now",
            RetryAdvice::AfterBackoff => "retry after backoff",
        })
    }
}

impl Error {
    /// Whether, and how soon, retrying can help.
    pub fn retry_advice(&self) -> RetryAdvice {
        match self {
            Error::Unavailable { advice, .. } => *advice,
            Error::InvalidInput { .. }
            | Error::NotFound { .. }
            | Error::LeaseLost { .. }
            | Error::Conflict { .. }
            | Error::SubjectErased { .. }
            | Error::Unauthenticated { .. }
            | Error::MalformedRow { .. }
            | Error::Unsealable { .. }
            | Error::Database { .. }
            | Error::Internal { .. } => RetryAdvice::Never,
        }
    }

    /// The HTTP status that describes this error to a client of yours: the
    /// caller's fault (400 bad input, 401 a webhook that does not verify,
    /// 404 not found, 409 conflict or lost lease, 422 an erased subject), a
    /// passing fault worth retrying (503), or the server's (500).
    ///
    /// Never 410: to a Standard Webhooks sender 410 means the endpoint is
    /// gone (this crate's `HttpDeliverer` pauses the topic). A webhook
    /// receiver should answer a message it drops on purpose, such as one
    /// about an erased subject, with a 2xx.
    pub fn http_status(&self) -> u16 {
        match self {
            Error::InvalidInput { .. } => 400,
            Error::Unauthenticated { .. } => 401,
            Error::NotFound { .. } => 404,
            Error::Conflict { .. } | Error::LeaseLost { .. } => 409,
            Error::SubjectErased { .. } => 422,
            Error::Unavailable { .. } => 503,
            Error::MalformedRow { .. }
            | Error::Unsealable { .. }
            | Error::Database { .. }
            | Error::Internal { .. } => 500,
        }
    }

    /// Whether this is the failure of a batch whose check of a listed
    /// delete found a row of the list not deleted (its lease lost) or one
    /// too many: the batch changed nothing, and the settle is sent again in
    /// its exact form (see `sql::differences::Differences::complete_listed`).
    pub(crate) fn is_settle_not_exact(&self) -> bool {
        matches!(self, Error::Database { message, .. } if message.contains(SETTLE_NOT_EXACT))
    }

    /// Shorthand for `self.retry_advice() != RetryAdvice::Never`.
    pub fn is_retryable(&self) -> bool {
        self.retry_advice() != RetryAdvice::Never
    }

    /// An [`Error::Database`] saying `message`, without a cause.
    pub fn database(message: impl Into<String>) -> Self {
        Error::Database {
            message: message.into(),
            cause: None,
        }
    }

    /// An [`Error::Unavailable`] saying `message`, without a cause.
    pub fn unavailable(message: impl Into<String>, advice: RetryAdvice) -> Self {
        Error::Unavailable {
            message: message.into(),
            advice,
            cause: None,
        }
    }

    /// The same error, its `source()` being `cause` (for
    /// [`Error::Database`], [`Error::Unavailable`] and
    /// [`Error::Unauthenticated`]; others are
    /// unchanged).
    #[must_use]
    pub fn caused_by(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        if let Error::Database { cause: slot, .. }
        | Error::Unavailable { cause: slot, .. }
        | Error::Unauthenticated { cause: slot, .. } = &mut self
        {
            *slot = Some(Cause(Arc::new(cause)));
        }
        self
    }

    pub(crate) fn unauthenticated(reason: impl Into<String>) -> Self {
        Error::Unauthenticated {
            reason: reason.into(),
            cause: None,
        }
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Error::Internal {
            message: message.into(),
        }
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidInput {
            what,
            reason: reason.into(),
        }
    }

    /// Places a [`Error::MalformedRow`] in its table and row; other errors
    /// pass through unchanged.
    pub(crate) fn in_row(self, in_table: &str, row_id: Option<&str>) -> Self {
        match self {
            Error::MalformedRow {
                table,
                row,
                column,
                reason,
            } => Error::MalformedRow {
                table: table.or_else(|| Some(in_table.to_owned())),
                row: row.or_else(|| row_id.map(str::to_owned)),
                column,
                reason,
            },
            other => other,
        }
    }
}

/// The error a database or runtime reported, kept as the `source()` of the
/// crate's [`Error`] (shared, so that `Error` stays `Clone`): downcast it to
/// the adapter's type, e.g. `rusqlite::Error` or `tokio_postgres::Error`.
/// Two errors that differ only in their causes are equal.
#[derive(Clone)]
pub struct Cause(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl std::ops::Deref for Cause {
    type Target = dyn std::error::Error + Send + Sync + 'static;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl PartialEq for Cause {
    fn eq(&self, _: &Cause) -> bool {
        true
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// In a Worker's handler, `?` turns the crate's error into the runtime's
/// (its text kept: the status a response should carry is
/// [`Error::http_status`], for handlers that answer themselves).
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
impl From<Error> for worker::Error {
    fn from(error: Error) -> Self {
        worker::Error::RustError(error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unavailable_errors_are_retryable() {
        let transient = Error::unavailable("Network connection lost.", RetryAdvice::Now);
        assert_eq!(transient.retry_advice(), RetryAdvice::Now);
        assert!(transient.is_retryable());
        let permanent = Error::database("no such table: x");
        assert_eq!(permanent.retry_advice(), RetryAdvice::Never);
        assert!(!Error::LeaseLost { id: "m".into() }.is_retryable());
    }

    #[test]
    fn http_statuses_say_whose_fault_it_is() {
        assert_eq!(Error::invalid("x", "y").http_status(), 400);
        assert_eq!(Error::LeaseLost { id: "m".into() }.http_status(), 409);
        let down = Error::unavailable("overloaded", RetryAdvice::AfterBackoff);
        assert_eq!(down.http_status(), 503);
        let erased = Error::SubjectErased {
            subjects: vec!["acct-1".into()],
        };
        assert_eq!(erased.http_status(), 422);
        assert!(!erased.is_retryable());
        assert_eq!(
            erased.to_string(),
            "subject \"acct-1\" was erased: nothing of it is written again"
        );
        assert_eq!(Error::database("x").http_status(), 500);
        let bug = Error::internal("an outcome is missing");
        assert_eq!(bug.http_status(), 500);
        assert!(!bug.is_retryable());
        assert!(bug.to_string().contains("a bug"));
    }

    #[test]
    fn malformed_row_names_the_row_when_known() {
        let error = Error::MalformedRow {
            table: Some("outbox".into()),
            row: Some("01J".into()),
            column: "payload".into(),
            reason: "NULL where text is required".into(),
        };
        assert_eq!(
            error.to_string(),
            "malformed row \"01J\" in outbox: column payload: NULL where text is required"
        );
    }
}
