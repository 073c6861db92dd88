//! The key ring: AES-256-GCM keys by id (the first seals, all open) and
//! the HMAC-SHA256 key of keyed hashes.

use std::fmt;
use std::sync::Arc;

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Key, Nonce};
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::envelope::{Envelope, Kind};
use crate::error::{Error, Result};

const KEY_BYTES: usize = 32;
const NONCE_BYTES: usize = 12;
/// What a keyed hash starts with, so a stored one is known for what it is.
const HASH_PREFIX: &str = "h1:";

/// AES-256-GCM keys by id, and the key of keyed hashes. Cheap to clone.
///
/// The first key seals; every key opens what it sealed. Key ids are 1 to
/// 32 letters, digits, `-` or `_`, and are stored beside every value, so
/// they must not be secret. Keys never appear in `Debug` output or errors.
#[derive(Clone)]
pub struct KeyRing {
    inner: Arc<Ring>,
}

struct Ring {
    keys: Vec<(String, Aes256Gcm)>,
    /// HMAC-SHA256 keyed with the hash key, its pads hashed once: each
    /// hash clones it.
    hasher: Hmac<Sha256>,
}

impl fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyRing")
            .field("keys", &self.key_ids().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// Rings are equal when they are clones of one built ring.
impl PartialEq for KeyRing {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for KeyRing {}

/// Builds a [`KeyRing`]: the hash key, then the keys, the sealing one first.
/// Its `Debug` shows key ids only.
#[derive(Default)]
#[must_use = "a ring builder does nothing until built"]
pub struct RingBuilder {
    keys: Vec<(String, [u8; KEY_BYTES])>,
    hash_key: Option<Vec<u8>>,
    error: Option<Error>,
}

impl fmt::Debug for RingBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RingBuilder")
            .field(
                "keys",
                &self.keys.iter().map(|(id, _)| id).collect::<Vec<_>>(),
            )
            .field("hash_key", &self.hash_key.as_ref().map(|_| "…"))
            .field("error", &self.error)
            .finish()
    }
}

impl RingBuilder {
    /// Adds the key `id`: the first added seals, later ones only open.
    /// `key` is 32 bytes.
    pub fn key(mut self, id: &str, key: &[u8]) -> Self {
        if self.error.is_some() {
            return self;
        }
        let checked = check_key_id(id).and_then(|()| {
            <[u8; KEY_BYTES]>::try_from(key).map_err(|_| {
                Error::invalid(
                    "sealing key",
                    format!("key {id:?} must be 32 bytes, not {}", key.len()),
                )
            })
        });
        match checked {
            Ok(_) if self.keys.iter().any(|(known, _)| known == id) => {
                self.error = Some(Error::invalid(
                    "sealing key",
                    format!("key id {id:?} is given twice"),
                ));
            }
            Ok(bytes) => self.keys.push((id.to_owned(), bytes)),
            Err(error) => self.error = Some(error),
        }
        self
    }

    /// The key of keyed hashes (HMAC-SHA256), at least 32 bytes. Keep it
    /// for as long as hashed values made with it are kept.
    pub fn hash_key(mut self, key: &[u8]) -> Self {
        if key.len() < KEY_BYTES {
            self.error.get_or_insert(Error::invalid(
                "hash key",
                format!("must be at least 32 bytes, not {}", key.len()),
            ));
        } else {
            self.hash_key = Some(key.to_vec());
        }
        self
    }

    /// The ring.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad key or id, a repeated id, no key,
    /// or no hash key.
    pub fn build(self) -> Result<KeyRing> {
        if let Some(error) = self.error {
            return Err(error);
        }
        if self.keys.is_empty() {
            return Err(Error::invalid("key ring", "a ring needs at least one key"));
        }
        let Some(hash_key) = self.hash_key else {
            return Err(Error::invalid("key ring", "a ring needs a hash key"));
        };
        let hasher = <Hmac<Sha256>>::new_from_slice(&hash_key)
            .map_err(|_| Error::invalid("hash key", "HMAC refused it"))?;
        let keys = self
            .keys
            .into_iter()
            .map(|(id, bytes)| (id, Aes256Gcm::new(&Key::<Aes256Gcm>::from(bytes))))
            .collect();
        Ok(KeyRing {
            inner: Arc::new(Ring { keys, hasher }),
        })
    }
}

impl KeyRing {
    /// A builder.
    pub fn builder() -> RingBuilder {
        RingBuilder::default()
    }

    /// A ring from two secrets' text, as Workers secrets hold them: `keys`
    /// is `id:base64` entries separated by commas or whitespace, the sealing
    /// key first; `hash_key` is base64. Standard or URL-safe base64, padded
    /// or not.
    ///
    /// # Errors
    /// As [`RingBuilder::build`], and for text that does not parse. The
    /// error names the entry's id or position, never key material.
    pub fn from_secrets(keys: &str, hash_key: &str) -> Result<Self> {
        let mut builder = KeyRing::builder().hash_key(&decode_secret(hash_key.trim(), "hash key")?);
        for (position, entry) in keys
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|entry| !entry.is_empty())
            .enumerate()
        {
            let Some((id, key)) = entry.split_once(':') else {
                return Err(Error::invalid(
                    "sealing keys",
                    format!("entry {} is not id:base64", position + 1),
                ));
            };
            builder = builder.key(id, &decode_secret(key, "sealing key")?);
        }
        builder.build()
    }

    /// A random 32-byte key, base64: what to put in a secret.
    ///
    /// # Errors
    /// [`Error::Internal`] if the platform has no randomness.
    pub fn generate_key() -> Result<String> {
        Ok(STANDARD.encode(random::<KEY_BYTES>()?))
    }

    /// The ids of the ring's keys, the sealing one first.
    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.inner.keys.iter().map(|(id, _)| id.as_str())
    }

    /// The id of the key that seals.
    pub fn sealing_key_id(&self) -> &str {
        &self.inner.keys[0].0
    }

    fn cipher(&self, id: &str) -> Result<&Aes256Gcm> {
        self.inner
            .keys
            .iter()
            .find(|(known, _)| known == id)
            .map(|(_, cipher)| cipher)
            .ok_or_else(|| Error::Unsealable {
                key: id.to_owned(),
                reason: format!(
                    "the key ring holds no key {id:?} (it holds {:?})",
                    self.key_ids().collect::<Vec<_>>()
                ),
            })
    }

    /// `value`'s keyed hash, `h1:` and 43 characters of URL-safe base64:
    /// equal values hash alike, and nobody without the hash key can tell
    /// which value a hash stands for. A value that is already such a hash
    /// is kept as it is.
    pub fn hash(&self, value: &str) -> String {
        if is_hash(value) {
            return value.to_owned();
        }
        let mut mac = self.inner.hasher.clone();
        mac.update(value.as_bytes());
        format!(
            "{HASH_PREFIX}{}",
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        )
    }

    /// `plain` sealed under the sealing key.
    ///
    /// # Errors
    /// [`Error::Internal`] if the platform has no randomness.
    pub(crate) fn seal(&self, plain: &str) -> Result<String> {
        let (id, cipher) = &self.inner.keys[0];
        seal_with(cipher, Kind::Ring, id, plain)
    }

    /// Opens `text`: a clear value is returned as it is; a value sealed
    /// under a data key needs that key's row (`wrapped`).
    ///
    /// # Errors
    /// [`Error::Unsealable`] if a key is missing or wrong, or the value
    /// was damaged.
    pub(crate) fn open(&self, text: &str, wrapped: Option<&WrappedKey>) -> Result<String> {
        let Some(envelope) = Envelope::parse(text)? else {
            return Ok(text.to_owned());
        };
        match envelope.kind {
            Kind::Ring => open_with(self.cipher(envelope.key)?, &envelope),
            Kind::Data => {
                let wrapped = wrapped
                    .filter(|wrapped| wrapped.id == envelope.key)
                    .ok_or_else(|| Error::Unsealable {
                        key: envelope.key.to_owned(),
                        reason: "its data key is gone: the subject was erased, or the row \
                                 comes from a copy older than its key"
                            .to_owned(),
                    })?;
                open_with(&self.unwrap(wrapped)?, &envelope)
            }
        }
    }

    /// A new data key of id `id` (unique in its table) for a row of
    /// `subject` (its keyed hash).
    ///
    /// # Errors
    /// [`Error::Internal`] if the platform has no randomness.
    pub(crate) fn new_data_key(&self, id: &str, subject: &str) -> Result<DataKey> {
        // One draw: the key, the wrap's nonce and the one seal's nonce.
        let drawn = random::<{ KEY_BYTES + 2 * NONCE_BYTES }>()?;
        let (bytes, nonces) = drawn.split_at(KEY_BYTES);
        let (wrap_nonce, seal_nonce) = nonces.split_at(NONCE_BYTES);
        let bytes =
            <[u8; KEY_BYTES]>::try_from(bytes).map_err(|_| Error::internal("key length"))?;
        let nonce = |part: &[u8]| {
            <[u8; NONCE_BYTES]>::try_from(part).map_err(|_| Error::internal("nonce length"))
        };
        let (ring_key, cipher) = &self.inner.keys[0];
        let mut wrapped = WrappedKey {
            id: id.to_owned(),
            subject: subject.to_owned(),
            ring_key: ring_key.clone(),
            wrapped: String::new(),
        };
        let sealed = seal_bytes_under(
            cipher,
            &wrap_associated_data(&wrapped),
            &bytes,
            nonce(wrap_nonce)?,
        )?;
        wrapped.wrapped = URL_SAFE_NO_PAD.encode(sealed);
        Ok(DataKey {
            cipher: Aes256Gcm::new(&Key::<Aes256Gcm>::from(bytes)),
            nonce: nonce(seal_nonce)?,
            wrapped,
        })
    }

    /// The cipher of the data key `wrapped`.
    fn unwrap(&self, wrapped: &WrappedKey) -> Result<Aes256Gcm> {
        let bytes = self.unwrap_bytes(wrapped)?;
        Ok(Aes256Gcm::new(&Key::<Aes256Gcm>::from(bytes)))
    }

    fn unwrap_bytes(&self, wrapped: &WrappedKey) -> Result<[u8; KEY_BYTES]> {
        let cipher = self.cipher(&wrapped.ring_key)?;
        let unopenable = |reason: &str| Error::Unsealable {
            key: wrapped.ring_key.clone(),
            reason: format!("data key {:?} does not open: {reason}", wrapped.id),
        };
        let sealed = URL_SAFE_NO_PAD
            .decode(&wrapped.wrapped)
            .map_err(|_| unopenable("it is not base64"))?;
        let bytes = open_bytes(cipher, &wrap_associated_data(wrapped), &sealed)
            .map_err(|()| unopenable("wrong ring key, or a damaged row"))?;
        <[u8; KEY_BYTES]>::try_from(bytes.as_slice()).map_err(|_| unopenable("not 32 bytes"))
    }

    /// `wrapped` wrapped again under the sealing key, or `None` if it is
    /// under it already.
    ///
    /// # Errors
    /// As [`open`](KeyRing::open), for a key it cannot unwrap.
    pub(crate) fn rewrap(&self, wrapped: &WrappedKey) -> Result<Option<WrappedKey>> {
        if wrapped.ring_key == self.sealing_key_id() {
            return Ok(None);
        }
        let bytes = self.unwrap_bytes(wrapped)?;
        let (ring_key, cipher) = &self.inner.keys[0];
        let mut new = WrappedKey {
            ring_key: ring_key.clone(),
            wrapped: String::new(),
            ..wrapped.clone()
        };
        let sealed = seal_bytes(cipher, &wrap_associated_data(&new), &bytes)?;
        new.wrapped = URL_SAFE_NO_PAD.encode(sealed);
        Ok(Some(new))
    }

    /// `text` sealed again under the sealing key, if it is a value sealed
    /// under an older ring key; `None` for anything else (clear values, data
    /// keys' values, values under the sealing key).
    ///
    /// # Errors
    /// As [`open`](KeyRing::open).
    pub(crate) fn reseal(&self, text: &str) -> Result<Option<String>> {
        match Envelope::parse(text)? {
            Some(envelope)
                if envelope.kind == Kind::Ring && envelope.key != self.sealing_key_id() =>
            {
                let plain = open_with(self.cipher(envelope.key)?, &envelope)?;
                self.seal(&plain).map(Some)
            }
            _ => Ok(None),
        }
    }
}

/// A data key of one row, and its wrapped form for the key table. It seals
/// once (its nonce was drawn with it): [`seal`](DataKey::seal) takes it.
pub(crate) struct DataKey {
    cipher: Aes256Gcm,
    nonce: [u8; NONCE_BYTES],
    pub(crate) wrapped: WrappedKey,
}

impl fmt::Debug for DataKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataKey")
            .field("wrapped", &self.wrapped)
            .finish_non_exhaustive()
    }
}

impl DataKey {
    /// `plain` sealed under this key, which is spent.
    ///
    /// # Errors
    /// [`Error::Internal`] if AES-GCM refuses (it does not for a payload).
    pub(crate) fn seal(self, plain: &str) -> Result<String> {
        let id = &self.wrapped.id;
        let sealed = seal_bytes_under(
            &self.cipher,
            &Envelope::associated_data(Kind::Data, id),
            plain.as_bytes(),
            self.nonce,
        )?;
        Ok(Envelope::text(Kind::Data, id, &sealed))
    }
}

/// A data key as the key table stores it: wrapped by ring key `ring_key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WrappedKey {
    /// The data key's id (a ULID of its own, named by what it seals).
    pub(crate) id: String,
    /// The keyed hash of the subject of the row it seals.
    pub(crate) subject: String,
    pub(crate) ring_key: String,
    /// Nonce, ciphertext and tag, URL-safe base64.
    pub(crate) wrapped: String,
}

/// Whether `value` is a keyed hash.
pub(crate) fn is_hash(value: &str) -> bool {
    value.len() == HASH_PREFIX.len() + 43
        && value.strip_prefix(HASH_PREFIX).is_some_and(|digest| {
            digest
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// A wrapped data key's associated data: its id, its subject's keyed hash
/// and the ring key wrapping it, so a key row moved to another subject or
/// id does not unwrap.
fn wrap_associated_data(key: &WrappedKey) -> String {
    format!(
        "workers-outbox/data-key/2/{}/{}/{}",
        key.ring_key, key.subject, key.id
    )
}

fn seal_with(cipher: &Aes256Gcm, kind: Kind, key: &str, plain: &str) -> Result<String> {
    let sealed = seal_bytes(
        cipher,
        &Envelope::associated_data(kind, key),
        plain.as_bytes(),
    )?;
    Ok(Envelope::text(kind, key, &sealed))
}

fn open_with(cipher: &Aes256Gcm, envelope: &Envelope<'_>) -> Result<String> {
    let unopenable = |reason: &str| Error::Unsealable {
        key: envelope.key.to_owned(),
        reason: reason.to_owned(),
    };
    let plain = open_bytes(
        cipher,
        &Envelope::associated_data(envelope.kind, envelope.key),
        &envelope.sealed,
    )
    .map_err(|()| unopenable("it does not open: a wrong key under this id, or a damaged value"))?;
    String::from_utf8(plain).map_err(|_| unopenable("it opened to bytes that are not UTF-8"))
}

fn seal_bytes(cipher: &Aes256Gcm, aad: &str, plain: &[u8]) -> Result<Vec<u8>> {
    seal_bytes_under(cipher, aad, plain, random::<NONCE_BYTES>()?)
}

/// `plain` sealed under `nonce`, which must never seal anything else under
/// this key.
fn seal_bytes_under(
    cipher: &Aes256Gcm,
    aad: &str,
    plain: &[u8],
    nonce: [u8; NONCE_BYTES],
) -> Result<Vec<u8>> {
    let sealed = cipher
        .encrypt(
            &Nonce::from(nonce),
            Payload {
                msg: plain,
                aad: aad.as_bytes(),
            },
        )
        .map_err(|_| Error::internal("AES-GCM refused to seal"))?;
    let mut out = Vec::with_capacity(NONCE_BYTES + sealed.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&sealed);
    Ok(out)
}

fn open_bytes(cipher: &Aes256Gcm, aad: &str, sealed: &[u8]) -> std::result::Result<Vec<u8>, ()> {
    if sealed.len() < NONCE_BYTES + 16 {
        return Err(());
    }
    let (nonce, body) = sealed.split_at(NONCE_BYTES);
    let nonce = <[u8; NONCE_BYTES]>::try_from(nonce).map_err(|_| ())?;
    cipher
        .decrypt(
            &Nonce::from(nonce),
            Payload {
                msg: body,
                aad: aad.as_bytes(),
            },
        )
        .map_err(|_| ())
}

fn random<const N: usize>() -> Result<[u8; N]> {
    let mut bytes = [0; N];
    getrandom::fill(&mut bytes)
        .map_err(|error| Error::internal(format!("the platform has no randomness: {error}")))?;
    Ok(bytes)
}

fn check_key_id(id: &str) -> Result<()> {
    let fits = (1..=32).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if fits {
        Ok(())
    } else {
        // Not echoed: a secret written the wrong way round puts key text here.
        Err(Error::invalid(
            "sealing key",
            format!(
                "a key id ({} characters) must be 1 to 32 letters, digits, - or _",
                id.len()
            ),
        ))
    }
}

fn decode_secret(text: &str, what: &'static str) -> Result<Vec<u8>> {
    [&STANDARD, &STANDARD_NO_PAD, &URL_SAFE, &URL_SAFE_NO_PAD]
        .iter()
        .find_map(|engine| engine.decode(text).ok())
        .ok_or_else(|| Error::invalid(what, "not base64"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(ids: &[&str]) -> KeyRing {
        let mut builder = KeyRing::builder().hash_key(&[7; 32]);
        for id in ids {
            let byte = id.bytes().next().unwrap_or(0);
            builder = builder.key(id, &[byte; 32]);
        }
        builder.build().unwrap()
    }

    #[test]
    fn a_ring_sealed_value_opens_and_hides_its_text() {
        let ring = ring(&["a"]);
        let sealed = ring.seal(r#"{"email":"ada@example.com"}"#).unwrap();
        assert!(sealed.starts_with("sealed:1:r:a:"), "{sealed}");
        assert!(!sealed.contains("ada"));
        assert_ne!(sealed, ring.seal(r#"{"email":"ada@example.com"}"#).unwrap());
        assert_eq!(
            ring.open(&sealed, None).unwrap(),
            r#"{"email":"ada@example.com"}"#
        );
        assert_eq!(ring.open("{}", None).unwrap(), "{}");
    }

    #[test]
    fn rotation_keeps_old_values_open_and_reseals_them_under_the_new_key() {
        let old = ring(&["a"]);
        let sealed = old.seal("1").unwrap();
        let rotated = ring(&["b", "a"]);
        assert_eq!(rotated.open(&sealed, None).unwrap(), "1");
        let resealed = rotated.reseal(&sealed).unwrap().unwrap();
        assert!(resealed.starts_with("sealed:1:r:b:"));
        assert_eq!(rotated.reseal(&resealed).unwrap(), None);
        let error = old.open(&resealed, None).unwrap_err();
        assert!(
            matches!(&error, Error::Unsealable { key, .. } if key == "b"),
            "{error}"
        );
    }

    #[test]
    fn a_data_key_opens_only_with_its_row_and_rewraps_under_the_new_key() {
        let old = ring(&["a"]);
        let key = old.new_data_key("m1", "h1:s").unwrap();
        let wrapped = key.wrapped.clone();
        let sealed = key.seal("hello").unwrap();
        assert!(sealed.starts_with("sealed:1:d:m1:"));
        assert_eq!(old.open(&sealed, Some(&wrapped)).unwrap(), "hello");
        let gone = old.open(&sealed, None).unwrap_err();
        assert!(gone.to_string().contains("data key is gone"), "{gone}");
        let other = old.new_data_key("m2", "h1:s").unwrap();
        assert!(old.open(&sealed, Some(&other.wrapped)).is_err());

        let rotated = ring(&["b", "a"]);
        let rewrapped = rotated.rewrap(&wrapped).unwrap().unwrap();
        assert_eq!(rewrapped.ring_key, "b");
        assert_eq!(rotated.open(&sealed, Some(&rewrapped)).unwrap(), "hello");
        assert_eq!(rotated.rewrap(&rewrapped).unwrap(), None);
        let renamed = WrappedKey {
            id: "m1".into(),
            subject: "h1:s".into(),
            ring_key: "a".into(),
            wrapped: rewrapped.wrapped.clone(),
        };
        assert!(rotated.open(&sealed, Some(&renamed)).is_err());
        let moved = WrappedKey {
            subject: "h1:other".into(),
            ..rewrapped.clone()
        };
        assert!(
            rotated.open(&sealed, Some(&moved)).is_err(),
            "a key row moved to another subject opened"
        );
    }

    #[test]
    fn a_wrong_key_under_the_same_id_is_refused() {
        let sealed = ring(&["a"]).seal("1").unwrap();
        let impostor = KeyRing::builder()
            .hash_key(&[7; 32])
            .key("a", &[9; 32])
            .build()
            .unwrap();
        let error = impostor.open(&sealed, None).unwrap_err();
        assert!(error.to_string().contains("does not open"), "{error}");
    }

    #[test]
    fn hashes_match_equal_values_and_depend_on_the_hash_key() {
        let ring = ring(&["a"]);
        let hash = ring.hash("ada@example.com");
        assert!(is_hash(&hash), "{hash}");
        assert_eq!(hash, ring.hash("ada@example.com"));
        assert_eq!(ring.hash(&hash), hash);
        assert_ne!(hash, ring.hash("bob@example.com"));
        let other = KeyRing::builder()
            .hash_key(&[8; 32])
            .key("a", &[1; 32])
            .build()
            .unwrap();
        assert_ne!(hash, other.hash("ada@example.com"));
    }

    #[test]
    fn rings_parse_from_secrets_and_refuse_bad_ones_without_showing_keys() {
        let key = KeyRing::generate_key().unwrap();
        let ring = KeyRing::from_secrets(&format!("new:{key}, old:{key}"), &key).unwrap();
        assert_eq!(ring.key_ids().collect::<Vec<_>>(), ["new", "old"]);
        assert_eq!(ring.sealing_key_id(), "new");
        assert!(!format!("{ring:?}").contains(&key));
        let builder = KeyRing::builder().hash_key(&[200; 32]).key("k", &[201; 32]);
        assert!(!format!("{builder:?}").contains("200") && !format!("{builder:?}").contains("201"));
        for (keys, hash) in [
            ("new", key.as_str()),
            ("new:AAAA", key.as_str()),
            ("bad id:{key}", key.as_str()),
            ("{key}:abc", key.as_str()),
            ("", key.as_str()),
            (&format!("a:{key}") as &str, "AAAA"),
        ] {
            let keys = keys.replace("{key}", &key);
            let error = KeyRing::from_secrets(&keys, hash).unwrap_err();
            assert!(
                matches!(error, Error::InvalidInput { .. }),
                "{keys}: {error}"
            );
            assert!(!error.to_string().contains(&key), "{error}");
        }
        let twice = KeyRing::from_secrets(&format!("a:{key} a:{key}"), &key).unwrap_err();
        assert!(twice.to_string().contains("twice"), "{twice}");
    }
}
