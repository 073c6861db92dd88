//! Signing a request.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::secret::Secret;
use super::{WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};
use crate::error::{Error, Result};
use crate::time::Timestamp;

/// The MAC of one signed content under one key.
pub(super) fn mac(key: &Secret, id: &str, timestamp: i64, body: &[u8]) -> Hmac<Sha256> {
    let mut mac = key.mac();
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    mac
}

/// Signs requests with one or more secrets (during a rotation, the new one
/// and the old one: the receiver accepts either).
#[derive(Debug, Clone)]
pub struct Signer {
    secrets: Vec<Secret>,
}

/// The three headers of a signed request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SignedHeaders {
    /// `webhook-id`.
    pub id: String,
    /// `webhook-timestamp`: Unix seconds.
    pub timestamp: i64,
    /// `webhook-signature`: `v1,<base64>` per secret, space-separated.
    pub signature: String,
}

impl SignedHeaders {
    /// The headers as (name, value) pairs.
    pub fn headers(&self) -> [(&'static str, String); 3] {
        [
            (WEBHOOK_ID, self.id.clone()),
            (WEBHOOK_TIMESTAMP, self.timestamp.to_string()),
            (WEBHOOK_SIGNATURE, self.signature.clone()),
        ]
    }
}

impl Signer {
    /// A signer with `secrets`, signing with each.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] without a secret, or for one shorter than
    /// [`Secret::MIN_SIGNING_BYTES`].
    pub fn new(secrets: Vec<Secret>) -> Result<Signer> {
        if secrets.is_empty() {
            return Err(Error::invalid("webhook secret", "no secret given"));
        }
        if let Some(position) = secrets
            .iter()
            .position(|secret| secret.len() < Secret::MIN_SIGNING_BYTES)
        {
            return Err(Error::invalid(
                "webhook secret",
                format!(
                    "secret {} has fewer than {} bytes: too short to sign with",
                    position + 1,
                    Secret::MIN_SIGNING_BYTES
                ),
            ));
        }
        Ok(Signer { secrets })
    }

    /// The headers that sign `body` as message `id`, sent at `at` (its
    /// whole seconds). The scheme's ids contain no `.` (it separates the
    /// signed parts); a verifier refuses one that does, so do not sign
    /// such an id (`HttpDeliverer` refuses to).
    pub fn sign(&self, id: &str, at: Timestamp, body: &[u8]) -> SignedHeaders {
        let timestamp = at.as_unix_millis().div_euclid(1000);
        let signature = self
            .secrets
            .iter()
            .map(|secret| {
                let tag = mac(secret, id, timestamp, body).finalize().into_bytes();
                format!("v1,{}", STANDARD.encode(tag))
            })
            .collect::<Vec<_>>()
            .join(" ");
        SignedHeaders {
            id: id.to_owned(),
            timestamp,
            signature,
        }
    }
}
