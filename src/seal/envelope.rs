//! The text form of a sealed value: `sealed:1:<kind>:<key id>:<base64>`.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::{Error, Result};

/// How every sealed value starts. No JSON text starts so, which is how a
/// clear payload written before sealing was turned on is told apart.
pub const SEALED_PREFIX: &str = "sealed:1:";

/// Where a data key's id starts in a value sealed under it (1-based, as
/// SQL's `substr` counts): right after `sealed:1:d:`.
pub(crate) const DATA_KEY_ID_AT: usize = SEALED_PREFIX.len() + 3;
/// How long a data key's id is: a ULID.
pub(crate) const DATA_KEY_ID_LEN: usize = 26;

/// What a sealed value is sealed under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A ring key: a value without a subject.
    Ring,
    /// A data key of its own, stored wrapped in the key table.
    Data,
}

impl Kind {
    fn tag(self) -> &'static str {
        match self {
            Kind::Ring => "r",
            Kind::Data => "d",
        }
    }
}

/// A sealed value, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Envelope<'a> {
    pub(crate) kind: Kind,
    pub(crate) key: &'a str,
    /// Nonce, ciphertext and tag.
    pub(crate) sealed: Vec<u8>,
}

impl<'a> Envelope<'a> {
    /// The envelope of `text`, or `None` if it is not a sealed value.
    ///
    /// # Errors
    /// [`Error::Unsealable`] for a value that starts as sealed but is not
    /// one: the stored text was damaged.
    pub(crate) fn parse(text: &'a str) -> Result<Option<Self>> {
        let Some(rest) = text.strip_prefix(SEALED_PREFIX) else {
            return Ok(None);
        };
        let damaged = |reason: &str| Error::Unsealable {
            key: String::new(),
            reason: format!("the sealed value is damaged: {reason}"),
        };
        let (kind, rest) = match rest.split_once(':') {
            Some(("r", rest)) => (Kind::Ring, rest),
            Some(("d", rest)) => (Kind::Data, rest),
            _ => return Err(damaged("unknown kind")),
        };
        // The body (base64) holds no ':'; the key id is what is before it.
        let Some((key, body)) = rest.rsplit_once(':').filter(|(key, _)| !key.is_empty()) else {
            return Err(damaged("no key id or no body"));
        };
        let sealed = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| damaged("the body is not base64"))?;
        Ok(Some(Envelope { kind, key, sealed }))
    }

    /// The envelope's text.
    pub(crate) fn text(kind: Kind, key: &str, sealed: &[u8]) -> String {
        format!(
            "{SEALED_PREFIX}{}:{key}:{}",
            kind.tag(),
            URL_SAFE_NO_PAD.encode(sealed)
        )
    }

    /// The associated data every ciphertext of `kind` under `key` carries.
    pub(crate) fn associated_data(kind: Kind, key: &str) -> String {
        format!("workers-outbox/sealed/1/{}/{key}", kind.tag())
    }
}

/// Whether `text` is a sealed value.
pub(crate) fn is_sealed(text: &str) -> bool {
    text.starts_with(SEALED_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_value_parses_back_and_clear_json_is_not_one() {
        let text = Envelope::text(Kind::Data, "01J0", &[1, 2, 3]);
        assert_eq!(text, "sealed:1:d:01J0:AQID");
        let envelope = Envelope::parse(&text).unwrap().unwrap();
        assert_eq!(envelope.kind, Kind::Data);
        assert_eq!(envelope.key, "01J0");
        assert_eq!(envelope.sealed, vec![1, 2, 3]);
        assert_eq!(Envelope::parse(r#"{"sealed":1}"#).unwrap(), None);
        assert!(!is_sealed(r#""sealed:1:r:k:AQID""#));
    }

    #[test]
    fn a_damaged_value_is_an_unsealable_error() {
        for text in [
            "sealed:1:x:k:AQID",
            "sealed:1:r::AQID",
            "sealed:1:r:k",
            "sealed:1:r:k:!!",
        ] {
            let error = Envelope::parse(text).unwrap_err();
            assert!(matches!(error, Error::Unsealable { .. }), "{text}: {error}");
        }
    }
}
