//! Verifying a request.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::Mac;

use super::headers::HeaderSource;
use super::secret::Secret;
use super::sign::mac;
use super::{WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};
use crate::error::{Error, Result};
use crate::time::{Clock, SystemClock, Timestamp};

/// Why a request did not verify. Nothing of it comes from the secrets.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Rejected {
    /// A header of the scheme is absent.
    MissingHeader(&'static str),
    /// A header is present but not in the scheme's form (an empty id or
    /// one with a `.`, a timestamp that is not a plain integer, a signature
    /// list with no `v1` entry).
    MalformedHeader(&'static str),
    /// No signature matches the body under any of the secrets: tampered
    /// with, or signed with another secret.
    BadSignature,
    /// Signed more than the tolerance before `now`: possibly a replay.
    TooOld {
        /// How far before now, in seconds.
        seconds: i64,
    },
    /// Signed more than the tolerance after `now`: a clock far ahead, or
    /// forged.
    TooNew {
        /// How far after now, in seconds.
        seconds: i64,
    },
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejected::MissingHeader(name) => write!(f, "the {name} header is missing"),
            Rejected::MalformedHeader(name) => write!(f, "the {name} header is malformed"),
            Rejected::BadSignature => f.write_str("no signature matches the body"),
            Rejected::TooOld { seconds } => {
                write!(f, "signed {seconds} s ago, outside the tolerance")
            }
            Rejected::TooNew { seconds } => {
                write!(f, "signed {seconds} s in the future, outside the tolerance")
            }
        }
    }
}

impl std::error::Error for Rejected {}

impl From<Rejected> for Error {
    fn from(rejected: Rejected) -> Self {
        Error::unauthenticated(rejected.to_string()).caused_by(rejected)
    }
}

/// A request that verified.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Verified {
    /// `webhook-id`: the message's id, the same on every retry. Use it as
    /// the idempotency key (`Inbox::process_webhook` does).
    pub id: String,
    /// When it was signed, in Unix seconds.
    pub timestamp: i64,
    /// Which of the verifier's secrets matched: its position in the list
    /// given to [`Verifier::new`] (0 for the first). During a rotation, once
    /// no request has matched the old secret's position for longer than
    /// senders retry, the old secret can go.
    pub secret: usize,
}

/// Verifies signed requests against one or more secrets (during a
/// rotation, the new one and the old one).
#[derive(Clone)]
pub struct Verifier {
    secrets: Vec<Secret>,
    tolerance: Duration,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for Verifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Verifier")
            .field("secrets", &self.secrets.len())
            .field("tolerance", &self.tolerance)
            .finish_non_exhaustive()
    }
}

impl Verifier {
    /// How far a request's timestamp may be from now, either way, by
    /// default: 5 minutes, as the scheme's reference libraries use.
    pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(5 * 60);

    /// A verifier accepting a signature by any of `secrets`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] without a secret.
    pub fn new(secrets: Vec<Secret>) -> Result<Verifier> {
        if secrets.is_empty() {
            return Err(Error::invalid("webhook secret", "no secret given"));
        }
        Ok(Verifier {
            secrets,
            tolerance: Self::DEFAULT_TOLERANCE,
            clock: Arc::new(SystemClock),
        })
    }

    /// Reads the time from `clock` (default: the system's).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// How far a timestamp may be from now (default:
    /// [`DEFAULT_TOLERANCE`](Self::DEFAULT_TOLERANCE)).
    #[must_use]
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// Checks the request's headers and `body` (the raw bytes received)
    /// now, by the verifier's [clock](Self::clock). Signatures are compared
    /// in constant time; any one matching `v1` signature under any secret
    /// verifies.
    ///
    /// # Errors
    /// [`Rejected`], saying which check failed.
    pub fn verify(
        &self,
        headers: &dyn HeaderSource,
        body: &[u8],
    ) -> std::result::Result<Verified, Rejected> {
        self.verify_at(headers, body, self.clock.now())
    }

    /// [`verify`](Self::verify) at `now`.
    ///
    /// # Errors
    /// [`Rejected`], saying which check failed.
    pub fn verify_at(
        &self,
        headers: &dyn HeaderSource,
        body: &[u8],
        now: Timestamp,
    ) -> std::result::Result<Verified, Rejected> {
        let id = required(headers, WEBHOOK_ID)?;
        // A `.` in the id would let signed bytes shift between the parts.
        if id.is_empty() || id.contains('.') {
            return Err(Rejected::MalformedHeader(WEBHOOK_ID));
        }
        // Only the canonical form (no sign, no leading zero): the signed text
        // is exactly the header's.
        let text = required(headers, WEBHOOK_TIMESTAMP)?;
        let text = text.trim();
        let timestamp: i64 = text
            .parse()
            .ok()
            .filter(|parsed: &i64| parsed.to_string() == text)
            .ok_or(Rejected::MalformedHeader(WEBHOOK_TIMESTAMP))?;
        let signatures = required(headers, WEBHOOK_SIGNATURE)?;

        let now = now.as_unix_millis().div_euclid(1000);
        let tolerance = i64::try_from(self.tolerance.as_secs()).unwrap_or(i64::MAX);
        let age = now.saturating_sub(timestamp);
        if age > tolerance {
            return Err(Rejected::TooOld { seconds: age });
        }
        if -age > tolerance {
            return Err(Rejected::TooNew {
                seconds: age.saturating_neg(),
            });
        }

        let tags: Vec<Vec<u8>> = signatures
            .split(' ')
            .filter_map(|entry| entry.split_once(','))
            .filter(|(version, _)| *version == "v1")
            .filter_map(|(_, tag)| STANDARD.decode(tag).ok())
            .collect();
        if tags.is_empty() {
            return Err(Rejected::MalformedHeader(WEBHOOK_SIGNATURE));
        }
        let matched = self.secrets.iter().position(|secret| {
            let expected = mac(secret, &id, timestamp, body);
            tags.iter()
                .any(|tag| expected.clone().verify_slice(tag).is_ok())
        });
        match matched {
            Some(secret) => Ok(Verified {
                id,
                timestamp,
                secret,
            }),
            None => Err(Rejected::BadSignature),
        }
    }
}

fn required(
    headers: &dyn HeaderSource,
    name: &'static str,
) -> std::result::Result<String, Rejected> {
    headers.header(name).ok_or(Rejected::MissingHeader(name))
}
