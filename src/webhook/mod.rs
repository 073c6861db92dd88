//! Webhooks as receivers expect them: the [Standard Webhooks] scheme, for
//! senders ([`Signer`], used by `HttpDeliverer::signed`) and for receivers
//! ([`Verifier`], and `Inbox::process_webhook` to apply a verified
//! webhook's effect exactly once).
//!
//! A signed request carries three headers: `webhook-id` (the message id,
//! the same on every retry), `webhook-timestamp` (Unix seconds at send)
//! and `webhook-signature`: `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`
//! for each of the sender's secrets, space-separated, so a secret can be
//! rotated without downtime (sign with the new and the old one; the
//! receiver accepts any one that matches).
//!
//! Secrets are `whsec_<base64>` strings (the bare base64 is accepted too).
//! They are never shown: not by
//! `Debug`, not in errors, not in a message's `last_error`.
//!
//! ```
//! use workers_outbox::Timestamp;
//! use workers_outbox::webhook::{Secret, Signer, Verifier};
//!
//! let secret = Secret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?;
//! let at = Timestamp::from_unix_millis(1_614_265_330_000)?;
//! let body = br#"{"test": 2432232314}"#;
//!
//! // The sender.
//! let signed = Signer::new(vec![secret.clone()])?.sign("msg_p5jXN8AQM9LWM0D4loKWxJek", at, body);
//! assert_eq!(signed.signature, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
//!
//! // The receiver, given the request's headers.
//! let headers = signed.headers();
//! let lookup = |name: &str| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
//! let verified = Verifier::new(vec![secret])?.verify_at(&lookup, body, at)?;
//! assert_eq!(verified.id, "msg_p5jXN8AQM9LWM0D4loKWxJek");
//! assert_eq!(verified.secret, 0); // the first (here the only) secret matched
//! # Ok::<(), workers_outbox::Error>(())
//! ```
//!
//! A receiver verifies, then applies the webhook's effect once per
//! `webhook-id`, in one call:
//!
//! ```
//! # #[cfg(all(feature = "sqlite", not(target_arch = "wasm32")))]
//! # fn main() -> workers_outbox::Result<()> {
//! # futures_util::FutureExt::now_or_never(async {
//! use std::sync::Arc;
//! use workers_outbox::inbox::Processed;
//! use workers_outbox::webhook::{Signer, Verified, Verifier, secrets};
//! use workers_outbox::{Clock, Database, Inbox, SqliteDatabase, Statement, SystemClock};
//!
//! let db: Arc<dyn Database> = Arc::new(SqliteDatabase::open_in_memory()?);
//! let inbox = Inbox::new(db.clone(), "inbox")?;
//! inbox.create_schema().await?;
//! db.execute(&Statement::new("CREATE TABLE received (id TEXT, body TEXT)", vec![])).await?;
//!
//! // What arrives: a body and its headers (here signed on the spot).
//! let keys = secrets("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?;
//! let body = br#"{"order": 1}"#;
//! let headers = Signer::new(keys.clone())?.sign("msg_1", SystemClock.now(), body).headers();
//! let request = |name: &str| headers.iter().find(|(n, _)| *n == name).map(|(_, v)| v.clone());
//!
//! let verifier = Verifier::new(keys)?;
//! // Called only once the request verified: the body may be read.
//! let apply = |hook: &Verified| {
//!     let text = String::from_utf8_lossy(body).into_owned();
//!     let insert = Statement::new("INSERT INTO received VALUES (?, ?)", vec![hook.id.as_str().into(), text.into()]);
//!     Ok((None, vec![insert])) // no subject
//! };
//! let (_, first) = inbox.process_webhook(&verifier, &request, body, apply).await?;
//! assert!(matches!(first, Processed::Applied(_)));
//! let (_, again) = inbox.process_webhook(&verifier, &request, body, apply).await?;
//! assert!(matches!(again, Processed::AlreadyProcessed)); // a redelivery changes nothing
//! let tampered = inbox.process_webhook(&verifier, &request, b"{}", apply).await;
//! assert_eq!(tampered.unwrap_err().http_status(), 401);
//! # Ok(()) }).expect("SQLite futures complete at once")
//! # }
//! # #[cfg(not(all(feature = "sqlite", not(target_arch = "wasm32"))))]
//! # fn main() {}
//! ```
//!
//! [Standard Webhooks]: https://www.standardwebhooks.com/

mod headers;
mod secret;
mod sign;
#[cfg(test)]
mod tests;
mod verify;

pub use headers::HeaderSource;
pub use secret::{Secret, secrets};
pub use sign::{SignedHeaders, Signer};
pub use verify::{Rejected, Verified, Verifier};

/// The header naming the message: stable across retries, the receiver's
/// idempotency key.
pub const WEBHOOK_ID: &str = "webhook-id";
/// The header holding the time of sending, in Unix seconds.
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// The header holding the signatures.
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";
