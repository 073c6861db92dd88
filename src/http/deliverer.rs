//! The HTTP deliverer's builder and request, shared by both transports:
//! Workers' `fetch` (`workers.rs`) and, natively, reqwest (`native.rs`).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

#[cfg(not(target_arch = "wasm32"))]
use reqwest::Url;
#[cfg(target_arch = "wasm32")]
use worker::Url;

use super::status::StatusMapping;
use crate::drain::{AttemptLog, AttemptRecord, Deliver};
use crate::error::{Error, Result};
use crate::future::BoxFuture;
use crate::outbox::{ClaimedMessage, Delivery};
use crate::time::{Clock, SystemClock, Timestamp};
use crate::trace::{TRACEPARENT, TRACESTATE};
use crate::webhook::{Signer, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};

/// POSTs each message's payload as JSON to one URL, with
/// `Idempotency-Key: <message id>`; see [the module](super). The same
/// builder on Workers (`fetch`) and natively (reqwest, rustls).
///
/// ```no_run
/// # fn example() -> workers_outbox::Result<()> {
/// use std::time::Duration;
/// use workers_outbox::http::{HttpDeliverer, StatusMapping, Treat};
///
/// let deliver = HttpDeliverer::new("https://api.mail.example/send")?
///     .header("authorization", "Bearer …")? // kept out of errors and logs
///     .timeout(Duration::from_secs(8))
///     .statuses(StatusMapping::default().treat(409, Treat::Delivered));
/// # Ok(()) }
/// ```
pub struct HttpDeliverer {
    pub(super) url: Url,
    pub(super) headers: Vec<(String, String)>,
    pub(super) timeout: Duration,
    pub(super) statuses: StatusMapping,
    signer: Option<Signer>,
    clock: Arc<dyn Clock>,
    attempt_log: AttemptLog,
    #[cfg(not(target_arch = "wasm32"))]
    pub(super) client: reqwest::Client,
    /// A service binding the requests go through instead of `fetch`.
    #[cfg(target_arch = "wasm32")]
    pub(super) service: Option<worker::Fetcher>,
}

/// Header values and a URL's path or query may be secrets (a chat
/// webhook's token is its path): only header names and the URL's origin
/// are shown.
impl fmt::Debug for HttpDeliverer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        let shown = self.url.origin().ascii_serialization();
        f.debug_struct("HttpDeliverer")
            .field("url", &shown)
            .field("headers", &names)
            .field("timeout", &self.timeout)
            .field("statuses", &self.statuses)
            .field("signed", &self.signer.is_some())
            .field("through_a_service", &self.through_a_service())
            .finish_non_exhaustive()
    }
}

/// Where one request goes and what signs it: the deliverer's own, or an
/// endpoint's as its delivery read it.
pub(crate) struct To<'a> {
    pub(crate) url: &'a Url,
    pub(crate) signer: Option<&'a Signer>,
    /// The service binding it goes through instead of the deliverer's way.
    pub(crate) via: Option<&'a Service>,
}

/// A service binding a request can go through: another Worker, on Workers
/// (natively there is none).
#[cfg(target_arch = "wasm32")]
pub(crate) type Service = worker::Fetcher;
/// A service binding a request can go through: another Worker, on Workers
/// (natively there is none).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) enum Service {}

impl HttpDeliverer {
    /// The default timeout, 15 s: what Standard Webhooks senders give a
    /// receiver, and shorter than [`DrainLimits`](crate::drain::DrainLimits)'
    /// default delivery timeout (16 s), so the request is aborted here first.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

    /// Delivers to `url` (http or https).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `url` is not an absolute http(s) URL, or
    /// holds a user name or password (give credentials with
    /// [`header`](HttpDeliverer::header), e.g. `authorization`); natively,
    /// [`Error::Internal`] if the HTTP client cannot be set up.
    pub fn new(url: &str) -> Result<Self> {
        let url =
            Url::parse(url).map_err(|error| Error::invalid("delivery URL", error.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Error::invalid(
                "delivery URL",
                format!("scheme {:?} is not http or https", url.scheme()),
            ));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(Error::invalid(
                "delivery URL",
                "it holds credentials; send them as a header (`.header(\"authorization\", …)`)",
            ));
        }
        Ok(HttpDeliverer {
            url,
            headers: Vec::new(),
            timeout: Self::DEFAULT_TIMEOUT,
            statuses: StatusMapping::default(),
            signer: None,
            clock: Arc::new(SystemClock),
            attempt_log: AttemptLog::default(),
            #[cfg(not(target_arch = "wasm32"))]
            client: native_client()?,
            #[cfg(target_arch = "wasm32")]
            service: None,
        })
    }

    /// Delivers through the service binding `service` (another Worker,
    /// `env.service("BILLING")`) instead of `fetch`: the same requests to
    /// `url` (its path and query reach the other Worker; its host names the
    /// destination for limits and the breaker), headers, signing, timeout
    /// and status mapping, without leaving Cloudflare.
    ///
    /// # Errors
    /// As [`new`](HttpDeliverer::new).
    #[cfg(target_arch = "wasm32")]
    pub fn service(service: worker::Fetcher, url: &str) -> Result<Self> {
        let mut deliverer = Self::new(url)?;
        deliverer.service = Some(service);
        Ok(deliverer)
    }

    fn through_a_service(&self) -> bool {
        #[cfg(target_arch = "wasm32")]
        return self.service.is_some();
        #[cfg(not(target_arch = "wasm32"))]
        false
    }

    /// Adds a header to every request (e.g. an API key).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a header name or value HTTP refuses, or
    /// one this deliverer sets itself (`content-type`, `idempotency-key`,
    /// `traceparent`, `tracestate`, and the `webhook-*` headers of
    /// [`signed`](HttpDeliverer::signed)).
    pub fn header(mut self, name: &str, value: &str) -> Result<Self> {
        let lower = name.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "content-type"
                | "idempotency-key"
                | WEBHOOK_ID
                | WEBHOOK_TIMESTAMP
                | WEBHOOK_SIGNATURE
                | TRACEPARENT
                | TRACESTATE
        ) {
            return Err(Error::invalid(
                "header",
                format!("{name} is set by the deliverer"),
            ));
        }
        let valid_name = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        let valid_value = value
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b));
        if !valid_name || !valid_value {
            return Err(Error::invalid(
                "header",
                format!("{name:?} or its value is not a valid HTTP header"),
            ));
        }
        self.headers.push((lower, value.to_owned()));
        Ok(self)
    }

    /// How long a request may take before it is aborted and retried.
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Signs every request the [Standard Webhooks](crate::webhook) way:
    /// `webhook-id` (the message id, the same on every retry),
    /// `webhook-timestamp` (now, in Unix seconds) and `webhook-signature`
    /// (one `v1` signature of the body per secret of `signer`).
    #[must_use]
    pub fn signed(mut self, signer: Signer) -> Self {
        self.signer = Some(signer);
        self
    }

    /// How statuses become verdicts (default: [`StatusMapping::default`]).
    #[must_use]
    pub fn statuses(mut self, statuses: StatusMapping) -> Self {
        self.statuses = statuses;
        self
    }

    /// The clock that stamps signatures and reads `Retry-After` dates
    /// (default: the system's).
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Which attempts it logs in the outbox's attempt log (default:
    /// [`AttemptLog::Failures`]): the status, the duration, the content
    /// type and `Retry-After`, and the start of a failure's body.
    #[must_use]
    pub fn attempt_log(mut self, log: AttemptLog) -> Self {
        self.attempt_log = log;
        self
    }

    pub(crate) fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Its own URL and signer.
    pub(super) fn to(&self) -> To<'_> {
        To {
            url: &self.url,
            signer: self.signer.as_ref(),
            via: None,
        }
    }

    /// A deliverer whose own URL is never used: each of its requests names
    /// where it goes ([`send_to`](Self::send_to)). Its URL is in the
    /// `.invalid` domain, which never resolves (RFC 2606).
    ///
    /// # Errors
    /// Natively, [`Error::Internal`] if the HTTP client cannot be set up.
    pub(crate) fn for_many() -> Result<Self> {
        Self::new("https://targets.invalid/")
    }

    /// Natively, resolves names to any address (the default client's).
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn any_names(mut self) -> Result<Self> {
        self.client = native_client()?;
        Ok(self)
    }

    /// Natively, resolves names to public addresses only: a name that
    /// resolves to a loopback, private or link-local address (see
    /// [`is_private`](super::is_private)) is unreachable, as a receiver's.
    /// (On Workers, `fetch` reaches no private network.)
    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) fn public_names_only(mut self) -> Result<Self> {
        self.client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .dns_resolver(Arc::new(super::native::PublicNames))
            .build()
            .map_err(|error| {
                Error::internal(format!("the HTTP client cannot be set up: {error}"))
            })?;
        Ok(self)
    }

    /// Every header of the request for `message`, at `now`: the content
    /// type, the idempotency key, the caller's, the message's trace
    /// context, and the signature's.
    ///
    /// # Errors
    /// Why the request cannot be built: a signed webhook's id holds a '.'
    /// (which separates the signed parts).
    pub(super) fn request_headers(
        &self,
        signer: Option<&Signer>,
        message: &ClaimedMessage,
        now: Timestamp,
    ) -> std::result::Result<Vec<(String, String)>, String> {
        // An event's deliveries carry its id, the same on every endpoint.
        let id = message.event_id.as_deref().unwrap_or(&message.id);
        let mut headers = vec![
            ("content-type".to_owned(), "application/json".to_owned()),
            ("idempotency-key".to_owned(), id.to_owned()),
        ];
        headers.extend(self.headers.iter().cloned());
        if let Some(trace) = &message.trace {
            headers.push((TRACEPARENT.to_owned(), trace.traceparent().to_owned()));
            if let Some(state) = trace.tracestate() {
                headers.push((TRACESTATE.to_owned(), state.to_owned()));
            }
        }
        if let Some(signer) = signer {
            if id.contains('.') {
                return Err(
                    "a signed webhook's id cannot contain '.' (it separates the signed parts)"
                        .into(),
                );
            }
            let signed = signer.sign(id, now, message.payload.as_bytes());
            headers.extend(
                signed
                    .headers()
                    .into_iter()
                    .map(|(name, value)| (name.to_owned(), value)),
            );
        }
        Ok(headers)
    }

    /// The verdict of one exchange: the receiver's answer, the receiver
    /// unreachable (refused, reset, DNS, TLS: the receiver failed, not this
    /// message), or `None` when it ran past the timeout and was aborted.
    pub(super) fn verdict(
        &self,
        exchange: Option<std::result::Result<Answer, String>>,
        started: Timestamp,
    ) -> (Delivery, Option<AttemptRecord>) {
        let now = self.now();
        let took = now.duration_since(started);
        let (verdict, record) = match exchange {
            Some(Ok(answer)) => {
                let verdict = self.statuses.verdict(
                    answer.status,
                    answer.retry_after.as_deref(),
                    &answer.body,
                    now,
                );
                let mut record = AttemptRecord::new(Some(answer.status), took).body(&answer.body);
                for (name, value) in [
                    ("content-type", &answer.content_type),
                    ("retry-after", &answer.retry_after),
                ] {
                    if let Some(value) = value {
                        record = record.header(name, value);
                    }
                }
                (verdict, record)
            }
            Some(Err(unreachable)) => (
                Delivery::unavailable(unreachable, None),
                AttemptRecord::new(None, took),
            ),
            None => (
                Delivery::retry(format!(
                    "no answer within {} ms; the request was aborted",
                    self.timeout.as_millis()
                )),
                AttemptRecord::new(None, took),
            ),
        };
        let logged = self.attempt_log.keeps(&verdict).then_some(record);
        (verdict, logged)
    }
}

/// What a receiver answered.
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) retry_after: Option<String>,
    pub(super) content_type: Option<String>,
    /// Of a failure, at most [`EXCERPT_BYTES`]; empty for a success.
    pub(super) body: String,
}

/// The client every native deliverer starts with: pooled connections,
/// rustls with the web's roots, and redirects never followed.
#[cfg(not(target_arch = "wasm32"))]
fn native_client() -> Result<reqwest::Client> {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|error| Error::internal(format!("the HTTP client cannot be set up: {error}")))
}

/// At most this much of a failure's body is read (a hint for `last_error`).
pub(super) const EXCERPT_BYTES: usize = 4096;

/// The start of a response body as text: invalid UTF-8 and NUL characters
/// (which Postgres text cannot hold) become U+FFFD, so what a receiver
/// answers can never make a settle unwritable.
pub(super) fn body_text(mut bytes: Vec<u8>) -> String {
    bytes.truncate(EXCERPT_BYTES);
    String::from_utf8_lossy(&bytes).replace('\0', "\u{FFFD}")
}

impl Deliver for HttpDeliverer {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin(async move { self.send_to(&self.to(), message).await.0 })
    }

    fn deliver_logged<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> BoxFuture<'a, (Delivery, Option<AttemptRecord>)> {
        Box::pin(async move { self.send_to(&self.to(), message).await })
    }

    /// The URL's host and port (`hooks.example:443`).
    fn destination(&self, _message: &ClaimedMessage) -> Option<String> {
        let host = self.url.host_str()?;
        Some(match self.url.port_or_known_default() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_kept_as_text_postgres_can_hold() {
        let mut bytes = b"a\0b".to_vec();
        bytes.extend_from_slice(&[0xff, b'c']);
        assert_eq!(body_text(bytes), "a\u{FFFD}b\u{FFFD}c");
        assert_eq!(
            body_text(vec![b'x'; EXCERPT_BYTES + 10]).len(),
            EXCERPT_BYTES
        );
    }
}
