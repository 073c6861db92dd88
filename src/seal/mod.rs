//! Sealed payloads: AES-256-GCM under a [`KeyRing`], per-subject data keys
//! that an erasure destroys (crypto-shredding), and keyed hashes for the
//! values that only need to match (subjects, dedup and ordering keys).
//!
//! # What a sealed value is
//! A payload is stored as text, `sealed:1:<kind>:<key>:<base64>`, where the
//! base64 (URL-safe, unpadded) holds a 96-bit random nonce, the ciphertext
//! and the 128-bit tag:
//! - kind `r` (a message without a subject): sealed under ring key `<key>`;
//! - kind `d` (a message with a subject): sealed under data key `<key>`, a
//!   random 256-bit key of its own, stored in the outbox's key table wrapped
//!   by a ring key, beside the subject's keyed hash. Erasing the subject
//!   deletes those rows in the erasure's batch: every copy of the payload
//!   (a backup, a replica, an export) is then ciphertext under a key that
//!   no longer exists anywhere the live database or the ring can reach.
//!
//! The associated data binds each ciphertext to its kind and key id, so a
//! value moved under another key's name fails to open.
//!
//! # The ring
//! The first key seals; every key opens. To rotate: put a new key first,
//! keep the old one after it, run [`Outbox::reseal`](crate::Outbox::reseal)
//! until it reports nothing left, then drop the old key. The hash key is
//! separate and must not change while tombstones and hashed keys made with
//! it are kept: a new hash key matches none of them.

mod envelope;
mod ring;

pub use envelope::SEALED_PREFIX;
pub use ring::{KeyRing, RingBuilder};

pub(crate) use envelope::{DATA_KEY_ID_AT, DATA_KEY_ID_LEN, Envelope, Kind, is_sealed};
pub(crate) use ring::WrappedKey;

use crate::error::{Error, Result};

/// Opens a stored value, with its data key if it has one: a clear value as
/// it is; a sealed one under `ring`, or not at all without a ring.
///
/// # Errors
/// [`Error::Unsealable`] if it cannot be opened.
pub(crate) fn open(
    ring: Option<&KeyRing>,
    stored: &str,
    key: Option<&WrappedKey>,
) -> Result<String> {
    match ring {
        Some(ring) => ring.open(stored, key),
        None => match Envelope::parse(stored)? {
            None => Ok(stored.to_owned()),
            Some(envelope) => Err(Error::Unsealable {
                key: envelope.key.to_owned(),
                reason: "no key ring was given to open it (OutboxBuilder::key_ring)".to_owned(),
            }),
        },
    }
}
