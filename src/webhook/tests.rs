//! The scheme's test vector, rotation, and every way a request is refused;
//! natively and on wasm32.

#[cfg(target_arch = "wasm32")]
use wasm_bindgen_test::wasm_bindgen_test as test;

use std::collections::BTreeMap;
use std::error::Error as _;
use std::time::Duration;

use super::*;
use crate::error::Error;
use crate::time::Timestamp;

const VECTOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const VECTOR_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
const VECTOR_TIMESTAMP: i64 = 1_614_265_330;
const VECTOR_BODY: &[u8] = br#"{"test": 2432232314}"#;
const VECTOR_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

fn at(seconds: i64) -> Timestamp {
    Timestamp::from_unix_millis(seconds * 1000).unwrap()
}

fn secret(text: &str) -> Secret {
    Secret::parse(text).unwrap()
}

fn request(signed: &SignedHeaders) -> BTreeMap<&'static str, String> {
    signed.headers().into_iter().collect()
}

fn verify(
    verifier: &Verifier,
    headers: &BTreeMap<&'static str, String>,
    body: &[u8],
    now: i64,
) -> Result<Verified, Rejected> {
    let lookup = |name: &str| headers.get(name).cloned();
    verifier.verify_at(&lookup, body, at(now))
}

fn vector_verifier() -> Verifier {
    Verifier::new(vec![secret(VECTOR_SECRET)]).unwrap()
}

fn vector_request() -> BTreeMap<&'static str, String> {
    let mut headers = BTreeMap::new();
    headers.insert(WEBHOOK_ID, VECTOR_ID.to_owned());
    headers.insert(WEBHOOK_TIMESTAMP, VECTOR_TIMESTAMP.to_string());
    headers.insert(WEBHOOK_SIGNATURE, VECTOR_SIGNATURE.to_owned());
    headers
}

#[test]
fn signs_the_specifications_test_vector() {
    let signer = Signer::new(vec![secret(VECTOR_SECRET)]).unwrap();
    let signed = signer.sign(VECTOR_ID, at(VECTOR_TIMESTAMP), VECTOR_BODY);
    assert_eq!(signed.signature, VECTOR_SIGNATURE);
    assert_eq!(signed.timestamp, VECTOR_TIMESTAMP);
    assert_eq!(signed.id, VECTOR_ID);
}

#[test]
fn verifies_the_specifications_test_vector() {
    let verified = verify(
        &vector_verifier(),
        &vector_request(),
        VECTOR_BODY,
        VECTOR_TIMESTAMP,
    );
    assert_eq!(
        verified,
        Ok(Verified {
            id: VECTOR_ID.to_owned(),
            timestamp: VECTOR_TIMESTAMP,
            secret: 0,
        })
    );
}

#[test]
fn signs_with_every_secret_and_accepts_any_one() {
    let (new, old) = (
        secret("whsec_bmV3LXNlY3JldC1rZXktb2YtMjQtYnl0ZXM="),
        secret(VECTOR_SECRET),
    );
    let signed = Signer::new(vec![new.clone(), old.clone()]).unwrap().sign(
        VECTOR_ID,
        at(VECTOR_TIMESTAMP),
        VECTOR_BODY,
    );
    let entries: Vec<&str> = signed.signature.split(' ').collect();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1], VECTOR_SIGNATURE);
    let headers = request(&signed);
    for secrets in [vec![new.clone()], vec![old.clone()], vec![old, new]] {
        let verifier = Verifier::new(secrets).unwrap();
        assert!(verify(&verifier, &headers, VECTOR_BODY, VECTOR_TIMESTAMP).is_ok());
    }
    let stranger = Verifier::new(vec![secret("whsec_c3RyYW5nZXI=")]).unwrap();
    assert_eq!(
        verify(&stranger, &headers, VECTOR_BODY, VECTOR_TIMESTAMP),
        Err(Rejected::BadSignature)
    );
}

#[test]
fn a_tampered_body_id_or_timestamp_is_refused() {
    let verifier = vector_verifier();
    let headers = vector_request();
    let tampered_body = br#"{"test": 2432232315}"#;
    assert_eq!(
        verify(&verifier, &headers, tampered_body, VECTOR_TIMESTAMP),
        Err(Rejected::BadSignature)
    );
    for (name, value) in [
        (WEBHOOK_ID, "msg_other".to_owned()),
        (WEBHOOK_TIMESTAMP, (VECTOR_TIMESTAMP + 1).to_string()),
    ] {
        let mut changed = headers.clone();
        changed.insert(name, value);
        assert_eq!(
            verify(&verifier, &changed, VECTOR_BODY, VECTOR_TIMESTAMP),
            Err(Rejected::BadSignature),
            "{name}"
        );
    }
}

#[test]
fn a_timestamp_outside_the_tolerance_is_refused() {
    let verifier = vector_verifier();
    let headers = vector_request();
    let limit = 5 * 60;
    for now in [VECTOR_TIMESTAMP + limit, VECTOR_TIMESTAMP - limit] {
        assert!(verify(&verifier, &headers, VECTOR_BODY, now).is_ok());
    }
    assert_eq!(
        verify(
            &verifier,
            &headers,
            VECTOR_BODY,
            VECTOR_TIMESTAMP + limit + 1
        ),
        Err(Rejected::TooOld { seconds: limit + 1 })
    );
    assert_eq!(
        verify(
            &verifier,
            &headers,
            VECTOR_BODY,
            VECTOR_TIMESTAMP - limit - 1
        ),
        Err(Rejected::TooNew { seconds: limit + 1 })
    );
    let strict = vector_verifier().tolerance(Duration::from_secs(10));
    assert_eq!(
        verify(&strict, &headers, VECTOR_BODY, VECTOR_TIMESTAMP + 11),
        Err(Rejected::TooOld { seconds: 11 })
    );
}

#[test]
fn missing_and_malformed_headers_are_named() {
    let verifier = vector_verifier();
    for name in [WEBHOOK_ID, WEBHOOK_TIMESTAMP, WEBHOOK_SIGNATURE] {
        let mut headers = vector_request();
        headers.remove(name);
        assert_eq!(
            verify(&verifier, &headers, VECTOR_BODY, VECTOR_TIMESTAMP),
            Err(Rejected::MissingHeader(name))
        );
    }
    for (name, value) in [
        (WEBHOOK_ID, ""),
        (WEBHOOK_ID, "msg.1614265330"),
        (WEBHOOK_TIMESTAMP, "+1614265330"),
        (WEBHOOK_TIMESTAMP, "01614265330"),
        (WEBHOOK_TIMESTAMP, "yesterday"),
        (WEBHOOK_TIMESTAMP, "1614265330.5"),
        (
            WEBHOOK_SIGNATURE,
            "v2,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        ),
        (
            WEBHOOK_SIGNATURE,
            "g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",
        ),
        (WEBHOOK_SIGNATURE, "v1,not base64!"),
    ] {
        let mut headers = vector_request();
        headers.insert(name, value.to_owned());
        assert_eq!(
            verify(&verifier, &headers, VECTOR_BODY, VECTOR_TIMESTAMP),
            Err(Rejected::MalformedHeader(name)),
            "{name}: {value}"
        );
    }
}

#[test]
fn an_empty_or_shortened_signature_never_verifies() {
    let verifier = vector_verifier();
    let full = VECTOR_SIGNATURE.trim_start_matches("v1,");
    for signature in [
        "v1,".to_owned(),
        format!("v1,{}", &full[..8]),
        format!("v1,{}", &full[..full.len() - 4]),
    ] {
        let mut headers = vector_request();
        headers.insert(WEBHOOK_SIGNATURE, signature.clone());
        assert_eq!(
            verify(&verifier, &headers, VECTOR_BODY, VECTOR_TIMESTAMP),
            Err(Rejected::BadSignature),
            "{signature}"
        );
    }
    // Among others, the one good entry verifies.
    let mut headers = vector_request();
    headers.insert(
        WEBHOOK_SIGNATURE,
        format!("v1,AAAA v2,BBBB {VECTOR_SIGNATURE} v1,"),
    );
    assert!(verify(&verifier, &headers, VECTOR_BODY, VECTOR_TIMESTAMP).is_ok());
}

#[test]
fn secrets_parse_and_are_never_shown() {
    assert!(Secret::parse(" whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n").is_ok());
    // The bare base64 is the same key, as the scheme's reference reads it.
    let sign = |key: &str| {
        Signer::new(vec![secret(key)])
            .unwrap()
            .sign(VECTOR_ID, at(VECTOR_TIMESTAMP), VECTOR_BODY)
            .signature
    };
    assert_eq!(sign("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"), VECTOR_SIGNATURE);
    for text in [
        "MfKQ9r8G!KYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_!!secret!!",
        "",
        "whsec_",
    ] {
        let error = Secret::parse(text).unwrap_err();
        assert!(matches!(error, Error::InvalidInput { .. }), "{text}");
        assert!(!error.to_string().contains("secret!!"), "{error}");
        assert!(!error.to_string().contains("MfKQ9r8G"), "{error}");
    }
    let shown = format!("{:?}", secret(VECTOR_SECRET));
    assert_eq!(shown, "Secret(…)");
    let signer = format!("{:?}", Signer::new(vec![secret(VECTOR_SECRET)]).unwrap());
    assert!(!signer.contains("MfKQ"), "{signer}");

    let rotated = secrets(&format!(
        "whsec_bmV3LXNlY3JldC1rZXktb2YtMjQtYnl0ZXM= {VECTOR_SECRET}"
    ))
    .unwrap();
    let commas = secrets(&format!(
        "whsec_bmV3LXNlY3JldC1rZXktb2YtMjQtYnl0ZXM=,{VECTOR_SECRET}"
    ))
    .unwrap();
    let pair = vec![
        secret("whsec_bmV3LXNlY3JldC1rZXktb2YtMjQtYnl0ZXM="),
        secret(VECTOR_SECRET),
    ];
    let sign = |keys: Vec<Secret>| {
        Signer::new(keys)
            .unwrap()
            .sign(VECTOR_ID, at(VECTOR_TIMESTAMP), VECTOR_BODY)
    };
    assert_eq!(sign(rotated), sign(pair.clone()));
    assert_eq!(sign(commas), sign(pair));
    let second_bad =
        secrets("whsec_bmV3LXNlY3JldC1rZXktb2YtMjQtYnl0ZXM= whsec_!!secret!!").unwrap_err();
    assert!(
        second_bad.to_string().contains("secret 2 of the list"),
        "{second_bad}"
    );
    assert!(
        !second_bad.to_string().contains("!!secret!!"),
        "{second_bad}"
    );
    assert!(secrets("  ").is_err());
    assert!(Signer::new(Vec::new()).is_err());
    // Too short to sign with (the scheme asks 24 bytes), fine to verify with.
    let short = secret("whsec_c3RyYW5nZXI=");
    assert_eq!(short.len(), 8);
    let refused = Signer::new(vec![short.clone()]).unwrap_err();
    assert!(
        refused.to_string().contains("fewer than 24 bytes"),
        "{refused}"
    );
    assert!(Verifier::new(vec![short]).is_ok());
    assert!(Verifier::new(Vec::new()).is_err());
}

#[test]
fn a_rejection_is_an_unauthenticated_error_that_keeps_its_reason() {
    let error = Error::from(Rejected::TooOld { seconds: 400 });
    assert_eq!(error.http_status(), 401);
    assert!(!error.is_retryable());
    assert!(error.to_string().contains("400 s ago"), "{error}");
    let reason = error
        .source()
        .and_then(|cause| cause.downcast_ref::<Rejected>());
    assert_eq!(reason, Some(&Rejected::TooOld { seconds: 400 }));
}

#[test]
fn the_verified_request_names_the_secret_that_matched() {
    let new = secret("whsec_bmV3LXNlY3JldC1rZXktb2YtMjQtYnl0ZXM=");
    let verifier = Verifier::new(vec![new.clone(), secret(VECTOR_SECRET)]).unwrap();
    // Signed by the old secret only: the second of the list.
    let old = verify(&verifier, &vector_request(), VECTOR_BODY, VECTOR_TIMESTAMP).unwrap();
    assert_eq!(old.secret, 1);
    let signed = Signer::new(vec![new])
        .unwrap()
        .sign(VECTOR_ID, at(VECTOR_TIMESTAMP), VECTOR_BODY);
    let current = verify(&verifier, &request(&signed), VECTOR_BODY, VECTOR_TIMESTAMP).unwrap();
    assert_eq!(current.secret, 0);
}

#[test]
fn verify_reads_the_verifiers_clock() {
    let clock = crate::manual_clock::ManualClock::new(at(VECTOR_TIMESTAMP));
    let verifier = vector_verifier().clock(std::sync::Arc::new(clock.clone()));
    let headers = vector_request();
    let lookup = |name: &str| headers.get(name).cloned();
    assert!(verifier.verify(&lookup, VECTOR_BODY).is_ok());
    clock.advance(Duration::from_secs(301));
    assert_eq!(
        verifier.verify(&lookup, VECTOR_BODY),
        Err(Rejected::TooOld { seconds: 301 })
    );
    // The system's clock by default: the vector was signed in 2021.
    assert!(matches!(
        vector_verifier().verify(&lookup, VECTOR_BODY),
        Err(Rejected::TooOld { .. })
    ));
}
