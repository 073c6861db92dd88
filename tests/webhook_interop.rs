//! Our Standard Webhooks signing and verification against the scheme's own
//! Rust library (`standardwebhooks`), on random ids, timestamps, payloads
//! and secrets (24 to 64 bytes, as the scheme asks), in both directions.

#![allow(clippy::unwrap_used)]

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use http::HeaderMap;
use workers_outbox::webhook::{Secret, Signer, Verifier};
use workers_outbox::{Clock, FastRandom, RandomSource, SystemClock, Timestamp};

const CASES: u64 = 500;

struct Case {
    secret_text: String,
    id: String,
    timestamp: i64,
    payload: String,
}

fn pick(random: &FastRandom, below: u64) -> u64 {
    random.next_u64() % below
}

fn case(random: &FastRandom, timestamp: i64) -> Case {
    let key: Vec<u8> = (0..24 + pick(random, 41))
        .map(|_| random.next_u64() as u8)
        .collect();
    let alphabet: Vec<char> = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-"
        .chars()
        .collect();
    let id: String = (0..1 + pick(random, 40))
        .map(|_| alphabet[pick(random, alphabet.len() as u64) as usize])
        .collect();
    // JSON-ish text with multi-byte characters, quotes, dots and spaces.
    let pieces = [
        "{", "}", "\"", ":", ",", ".", " ", "ü", "日本", "🦀", "\\n", "0", "x", "null",
    ];
    let payload: String = (0..pick(random, 200))
        .map(|_| pieces[pick(random, pieces.len() as u64) as usize])
        .collect();
    Case {
        secret_text: format!("whsec_{}", STANDARD.encode(key)),
        id: format!("msg_{id}"),
        timestamp,
        payload,
    }
}

fn now_seconds() -> i64 {
    SystemClock.now().as_unix_millis() / 1000
}

fn their_headers(id: &str, timestamp: i64, signature: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("webhook-id", id.parse().unwrap());
    headers.insert("webhook-timestamp", timestamp.to_string().parse().unwrap());
    headers.insert("webhook-signature", signature.parse().unwrap());
    headers
}

#[test]
fn what_we_sign_their_library_verifies() {
    let random = FastRandom::seeded(1);
    for n in 0..CASES {
        // Their verifier reads the real clock: stay well inside its tolerance.
        let timestamp = now_seconds() - 120 + i64::try_from(pick(&random, 240)).unwrap();
        let case = case(&random, timestamp);
        let signer = Signer::new(vec![Secret::parse(&case.secret_text).unwrap()]).unwrap();
        let at = Timestamp::from_unix_millis(case.timestamp * 1000).unwrap();
        let signed = signer.sign(&case.id, at, case.payload.as_bytes());
        let theirs = standardwebhooks::Webhook::new(&case.secret_text).unwrap();
        let headers = their_headers(&case.id, signed.timestamp, &signed.signature);
        assert!(
            theirs.verify(case.payload.as_bytes(), &headers).is_ok(),
            "case {n}: {} {:?}",
            case.id,
            case.payload
        );
        // And the same signature, byte for byte.
        let expected = theirs
            .sign(&case.id, case.timestamp, case.payload.as_bytes())
            .unwrap();
        assert_eq!(signed.signature, expected, "case {n}");
    }
}

#[test]
fn what_their_library_signs_we_verify() {
    let random = FastRandom::seeded(2);
    for n in 0..CASES {
        let timestamp = i64::try_from(pick(&random, 4_000_000_000)).unwrap();
        let case = case(&random, timestamp);
        let theirs = standardwebhooks::Webhook::new(&case.secret_text).unwrap();
        let signature = theirs
            .sign(&case.id, case.timestamp, case.payload.as_bytes())
            .unwrap();
        let lookup = |name: &str| match name {
            "webhook-id" => Some(case.id.clone()),
            "webhook-timestamp" => Some(case.timestamp.to_string()),
            "webhook-signature" => Some(signature.clone()),
            _ => None,
        };
        let verifier = Verifier::new(vec![Secret::parse(&case.secret_text).unwrap()]).unwrap();
        let now = Timestamp::from_unix_millis(case.timestamp * 1000).unwrap();
        let verified = verifier.verify_at(&lookup, case.payload.as_bytes(), now);
        assert!(verified.is_ok(), "case {n}: {verified:?}");
        assert_eq!(verified.unwrap().id, case.id);
        // One byte more, and we refuse it.
        let tampered = format!("{} ", case.payload);
        assert!(
            verifier
                .verify_at(&lookup, tampered.as_bytes(), now)
                .is_err(),
            "case {n}"
        );
    }
}

#[test]
fn a_rotated_signature_verifies_under_either_secret_in_their_library() {
    let random = FastRandom::seeded(3);
    for n in 0..50 {
        let (old, new) = (case(&random, now_seconds()), case(&random, now_seconds()));
        let signer = Signer::new(vec![
            Secret::parse(&new.secret_text).unwrap(),
            Secret::parse(&old.secret_text).unwrap(),
        ])
        .unwrap();
        let at = Timestamp::from_unix_millis(old.timestamp * 1000).unwrap();
        let signed = signer.sign(&old.id, at, old.payload.as_bytes());
        let headers = their_headers(&old.id, signed.timestamp, &signed.signature);
        for secret in [&old.secret_text, &new.secret_text] {
            let theirs = standardwebhooks::Webhook::new(secret).unwrap();
            assert!(
                theirs.verify(old.payload.as_bytes(), &headers).is_ok(),
                "case {n}"
            );
        }
    }
}
