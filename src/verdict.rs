//! The verdict of one delivery attempt: what a deliverer reports and what a
//! settle turns into the row's fate. It lives below the outbox, which
//! settles by it, and the drain, which hands it on.

use std::time::Duration;

/// How a delivery attempt ended, as the deliverer reports it; settling a
/// lease with it decides the row's fate.
///
/// Pick the variant by whom the failure blames: the message (`Retry`,
/// `RetryAfter`, `Permanent`: attempts are spent) or the receiver as a whole
/// (`Unavailable`: no attempt is spent; `Gone`: its topic is paused until an
/// operator resumes it).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Delivery {
    /// Delivered: the row is deleted.
    Delivered,
    /// This message failed for now: spend an attempt and retry after the
    /// policy's backoff, or park the message as dead if this was its last
    /// attempt.
    Retry {
        /// Why the attempt failed (kept as `last_error`).
        error: String,
    },
    /// As [`Retry`](Delivery::Retry), and the receiver said when to come
    /// back: the wait is the longer of `delay` and the policy's backoff for
    /// this attempt, at most 24 h.
    RetryAfter {
        /// Why the attempt failed.
        error: String,
        /// The receiver's wait (e.g. HTTP `Retry-After`).
        delay: Duration,
    },
    /// The receiver is down, overloaded or throttling (HTTP 429, 503): not
    /// this message's fault. Rescheduled after the backoff (or `retry_after`,
    /// if longer) **without spending an attempt**; each such deferral grows
    /// the backoff. Once the message is older than
    /// [`RetryPolicy::defer_limit`](crate::retry::RetryPolicy::defer_limit) it spends
    /// attempts like [`Retry`](Delivery::Retry), so nothing waits forever.
    Unavailable {
        /// What the receiver said.
        error: String,
        /// The receiver's wait, if it gave one.
        retry_after: Option<Duration>,
    },
    /// Can never succeed (e.g. HTTP 400): park the message as dead.
    Permanent {
        /// Why (kept as `last_error`).
        error: String,
    },
    /// The destination no longer exists (HTTP 410 Gone): the message's
    /// **topic is paused** with `error` as the reason, and the message is
    /// handed back without spending an attempt. No drain delivers the topic
    /// until [`Outbox::resume_topic`](crate::Outbox::resume_topic); its
    /// messages wait, nothing is lost.
    Gone {
        /// Why (stored as the pause's reason).
        error: String,
    },
}

impl Delivery {
    /// A [`Delivery::Retry`].
    pub fn retry(error: impl Into<String>) -> Self {
        Delivery::Retry {
            error: error.into(),
        }
    }

    /// A [`Delivery::Permanent`].
    pub fn permanent(error: impl Into<String>) -> Self {
        Delivery::Permanent {
            error: error.into(),
        }
    }

    /// A [`Delivery::Unavailable`].
    pub fn unavailable(error: impl Into<String>, retry_after: Option<Duration>) -> Self {
        Delivery::Unavailable {
            error: error.into(),
            retry_after,
        }
    }

    /// A [`Delivery::Gone`].
    pub fn gone(error: impl Into<String>) -> Self {
        Delivery::Gone {
            error: error.into(),
        }
    }

    /// Whether this is a failure that may pass by itself (anything but
    /// `Delivered`, `Permanent` and `Gone`).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Delivery::Retry { .. } | Delivery::RetryAfter { .. } | Delivery::Unavailable { .. }
        )
    }

    /// The error's text (`None` for `Delivered`).
    pub fn error(&self) -> Option<&str> {
        match self {
            Delivery::Delivered => None,
            Delivery::Retry { error }
            | Delivery::RetryAfter { error, .. }
            | Delivery::Unavailable { error, .. }
            | Delivery::Permanent { error }
            | Delivery::Gone { error } => Some(error),
        }
    }

    /// The verdict's class, fit for a metric's label (`error.type`):
    /// `delivered`, `failed`, `throttled`, `unavailable`, `permanent` or
    /// `gone`. Never the error's text.
    pub fn class(&self) -> &'static str {
        match self {
            Delivery::Delivered => "delivered",
            Delivery::Retry { .. } => "failed",
            Delivery::RetryAfter { .. } => "throttled",
            Delivery::Unavailable { .. } => "unavailable",
            Delivery::Permanent { .. } => "permanent",
            Delivery::Gone { .. } => "gone",
        }
    }
}
