//! A signing secret: the key's bytes in base64, with or without `whsec_`.

use std::fmt;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit};
use sha2::Sha256;

use crate::error::{Error, Result};

/// A webhook signing key, keyed into its HMAC once. Never shown: `Debug`
/// prints `Secret(…)`, no error quotes it, and it has no equality (which
/// would compare keys in variable time).
#[derive(Clone)]
pub struct Secret {
    mac: Hmac<Sha256>,
    len: usize,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

impl Secret {
    /// The prefix of a secret's text.
    pub const PREFIX: &'static str = "whsec_";

    /// Parses `whsec_<base64>`, or the bare base64 (as the scheme's
    /// reference libraries and Svix accept); surrounding whitespace ignored.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the text (after any `whsec_`) is not
    /// base64, or the key is empty. The error never quotes the text.
    pub fn parse(text: &str) -> Result<Secret> {
        let text = text.trim();
        let encoded = text.strip_prefix(Self::PREFIX).unwrap_or(text);
        let key = STANDARD.decode(encoded).map_err(|_| {
            Error::invalid(
                "webhook secret",
                "it is not base64 (with or without the whsec_ prefix)",
            )
        })?;
        Secret::from_bytes(key)
    }

    /// The fewest key bytes a [`Signer`](super::Signer) signs with, as the
    /// scheme asks of symmetric secrets (a verifier accepts shorter keys,
    /// which other senders may use).
    pub const MIN_SIGNING_BYTES: usize = 24;

    /// A secret of raw key bytes.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty key.
    pub fn from_bytes(key: impl Into<Vec<u8>>) -> Result<Secret> {
        let key = key.into();
        if key.is_empty() {
            return Err(Error::invalid("webhook secret", "the key is empty"));
        }
        let mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key)
            .map_err(|_| Error::invalid("webhook secret", "HMAC refused the key's length"))?;
        Ok(Secret {
            mac,
            len: key.len(),
        })
    }

    /// How many bytes the key has.
    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The HMAC, keyed, with nothing fed yet.
    pub(super) fn mac(&self) -> Hmac<Sha256> {
        self.mac.clone()
    }
}

/// Parses a list of secrets separated by whitespace (or commas), as one
/// Worker secret or environment variable holds them during a rotation: the
/// new secret and the old one.
///
/// # Errors
/// [`Error::InvalidInput`] for an empty list, or naming the position of a
/// secret that does not parse (never its text).
pub fn secrets(text: &str) -> Result<Vec<Secret>> {
    let secrets = text
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|part| !part.is_empty())
        .enumerate()
        .map(|(index, part)| {
            Secret::parse(part).map_err(|error| match error {
                Error::InvalidInput { reason, .. } => Error::invalid(
                    "webhook secret",
                    format!("secret {} of the list: {reason}", index + 1),
                ),
                other => other,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    if secrets.is_empty() {
        return Err(Error::invalid("webhook secret", "no secret given"));
    }
    Ok(secrets)
}
