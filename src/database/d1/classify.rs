//! D1's error messages, sorted into what a caller should do about them.
//!
//! D1 reports failures as JavaScript `Error`s whose text carries the cause
//! (Cloudflare's "List of D1_ERRORs"). The text is all there is to go on.

use crate::error::{Error, RetryAdvice};

/// Faults Cloudflare documents as transient: the same call can succeed now.
const RETRY_NOW: &[&str] = &[
    "Network connection lost",
    "reset because its code was updated",
    "storage caused object to be reset",
    "Internal error in D1 DB storage caused object to be reset",
    "Cannot resolve D1 DB due to transient issue on remote node",
    "Durable Object reset because its code was updated",
    "client disconnected",
];

/// Overload and timeouts: retrying helps only after backing off.
const RETRY_AFTER_BACKOFF: &[&str] = &[
    "D1 DB is overloaded",
    "Requests queued for too long",
    "Too many requests queued",
    "exceeded timeout",
    "exceeded its CPU time limit",
    "exceeded its memory limit",
    "database is locked",
    "SQLITE_BUSY",
];

const UNIQUE_FAILED: &str = "UNIQUE constraint failed: ";

/// A `worker` error (a binding missing, a JavaScript exception, a D1 call
/// that failed) as the crate's [`Error`], classified by its text as D1's
/// are, so `?` works in a Worker's handlers and a transient fault stays
/// retryable. The JavaScript value itself cannot cross threads, so it is not
/// the `source()`.
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
impl From<worker::Error> for Error {
    fn from(error: worker::Error) -> Self {
        classify_message(&format!("Workers runtime: {error}"))
    }
}

/// Maps a D1 (or SQLite) error message to the crate's [`Error`].
///
/// Documented transient faults become [`Error::Unavailable`] with
/// [`RetryAdvice::Now`]; overload and timeouts become `Unavailable` with
/// [`RetryAdvice::AfterBackoff`]; uniqueness violations become [`Error::Conflict`]
/// naming the constraint (`table.column`); type errors in bound values become
/// [`Error::InvalidInput`]; anything else is a permanent [`Error::Database`].
pub(crate) fn classify_message(message: &str) -> Error {
    if let Some(at) = message.find(UNIQUE_FAILED) {
        let rest = &message[at + UNIQUE_FAILED.len()..];
        let constraint = rest
            .split(|c: char| c == ':' || c.is_whitespace())
            .next()
            .unwrap_or_default()
            .trim_end_matches(',');
        return Error::Conflict {
            constraint: constraint.to_owned(),
        };
    }
    let advice = if RETRY_NOW.iter().any(|needle| message.contains(needle)) {
        Some(RetryAdvice::Now)
    } else if RETRY_AFTER_BACKOFF
        .iter()
        .any(|needle| message.contains(needle))
    {
        Some(RetryAdvice::AfterBackoff)
    } else {
        None
    };
    match advice {
        Some(advice) => Error::unavailable(message, advice),
        None if message.contains("D1_TYPE_ERROR") => Error::InvalidInput {
            what: "value",
            reason: message.to_owned(),
        },
        None => Error::database(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every message in Cloudflare's list of D1 errors, with its class.
    pub(crate) const DOCUMENTED: &[(&str, RetryAdvice)] = &[
        (
            "D1_ERROR: D1 DB reset because its code was updated.",
            RetryAdvice::Now,
        ),
        (
            "D1_ERROR: Internal error while starting up D1 DB storage caused object to be reset.",
            RetryAdvice::Now,
        ),
        ("D1_ERROR: Network connection lost.", RetryAdvice::Now),
        (
            "D1_ERROR: Internal error in D1 DB storage caused object to be reset.",
            RetryAdvice::Now,
        ),
        (
            "D1_ERROR: Cannot resolve D1 DB due to transient issue on remote node.",
            RetryAdvice::Now,
        ),
        (
            "D1_ERROR: Can't read from request stream because client disconnected.",
            RetryAdvice::Now,
        ),
        (
            "D1_ERROR: D1 DB storage operation exceeded timeout which caused object to be reset.",
            RetryAdvice::AfterBackoff,
        ),
        (
            "D1_ERROR: D1 DB is overloaded. Requests queued for too long.",
            RetryAdvice::AfterBackoff,
        ),
        (
            "D1_ERROR: D1 DB is overloaded. Too many requests queued.",
            RetryAdvice::AfterBackoff,
        ),
        (
            "D1_ERROR: D1 DB's isolate exceeded its memory limit and was reset.",
            RetryAdvice::AfterBackoff,
        ),
        (
            "D1_ERROR: D1 DB exceeded its CPU time limit and was reset.",
            RetryAdvice::AfterBackoff,
        ),
        (
            "D1_ERROR: no such table: outbox: SQLITE_ERROR",
            RetryAdvice::Never,
        ),
        (
            "D1_EXEC_ERROR: Error in line 1: INSERTZ INTO t: sql error: near \"INSERTZ\": syntax error",
            RetryAdvice::Never,
        ),
        ("D1_COLUMN_NOTFOUND: Column not found", RetryAdvice::Never),
        (
            "D1_TYPE_ERROR: Type 'bigint' not supported for value '1'",
            RetryAdvice::Never,
        ),
    ];

    #[test]
    fn documented_messages_map_to_their_class() {
        for (message, expected) in DOCUMENTED {
            assert_eq!(
                classify_message(message).retry_advice(),
                *expected,
                "{message}"
            );
        }
    }

    #[test]
    fn unique_violations_name_their_constraint() {
        let error =
            classify_message("D1_ERROR: UNIQUE constraint failed: inbox.key: SQLITE_CONSTRAINT");
        assert_eq!(
            error,
            Error::Conflict {
                constraint: "inbox.key".into()
            }
        );
        let sqlite = classify_message("UNIQUE constraint failed: outbox.dedup_key");
        assert_eq!(
            sqlite,
            Error::Conflict {
                constraint: "outbox.dedup_key".into()
            }
        );
    }

    #[test]
    fn type_errors_are_invalid_input() {
        assert!(matches!(
            classify_message("D1_TYPE_ERROR: Type 'undefined' not supported"),
            Error::InvalidInput { what: "value", .. }
        ));
    }
}
