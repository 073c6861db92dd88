//! The HTTP deliverer on the Workers runtime's `fetch`.

use std::fmt;
use std::time::Duration;

use futures_util::future::{Either, select};
use wasm_bindgen::JsValue;
use worker::{
    AbortController, Delay, Fetch, Headers, Method, Request, RequestInit, RequestRedirect,
};

use super::status::StatusMapping;
use crate::drain::Deliver;
use crate::error::{Error, Result};
use crate::future::BoxFuture;
use crate::outbox::{ClaimedMessage, Delivery};
use crate::time::{Clock, SystemClock};
use crate::webhook::{Signer, WEBHOOK_ID, WEBHOOK_SIGNATURE, WEBHOOK_TIMESTAMP};

/// POSTs each message's payload as JSON to one URL, with
/// `Idempotency-Key: <message id>`; see [the module](super).
///
/// ```no_run
/// # fn example(env: &worker::Env) -> workers_outbox::Result<()> {
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
    url: String,
    headers: Vec<(String, String)>,
    timeout: Duration,
    statuses: StatusMapping,
    signer: Option<Signer>,
}

/// Header values and a URL's credentials or query may be secrets: only
/// header names and the URL's origin and path are shown.
impl fmt::Debug for HttpDeliverer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        let shown = worker::Url::parse(&self.url).map_or_else(
            |_| "(invalid)".to_owned(),
            |url| format!("{}{}", url.origin().ascii_serialization(), url.path()),
        );
        f.debug_struct("HttpDeliverer")
            .field("url", &shown)
            .field("headers", &names)
            .field("timeout", &self.timeout)
            .field("statuses", &self.statuses)
            .field("signed", &self.signer.is_some())
            .finish()
    }
}

/// Aborts the request when the delivery ends, however it ends: answered,
/// timed out, or dropped by the drainer.
struct AbortOnDrop(Option<AbortController>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(controller) = self.0.take() {
            controller.abort();
        }
    }
}

impl HttpDeliverer {
    /// The default timeout, 15 s: what Standard Webhooks senders give a
    /// receiver, and shorter than [`DrainLimits`](crate::drain::DrainLimits)'
    /// default delivery timeout (16 s), so the request is aborted here first.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15);

    /// Delivers to `url` (http or https).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `url` is not an absolute http(s) URL.
    pub fn new(url: &str) -> Result<Self> {
        let parsed = worker::Url::parse(url)
            .map_err(|error| Error::invalid("delivery URL", error.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(Error::invalid(
                "delivery URL",
                format!("scheme {:?} is not http or https", parsed.scheme()),
            ));
        }
        Ok(HttpDeliverer {
            url: parsed.to_string(),
            headers: Vec::new(),
            timeout: Self::DEFAULT_TIMEOUT,
            statuses: StatusMapping::default(),
            signer: None,
        })
    }

    /// Adds a header to every request (e.g. an API key).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a header name or value HTTP refuses, or
    /// one this deliverer sets itself (`content-type`, `idempotency-key`,
    /// and the `webhook-*` headers of [`signed`](HttpDeliverer::signed)).
    pub fn header(mut self, name: &str, value: &str) -> Result<Self> {
        let lower = name.to_ascii_lowercase();
        if matches!(
            lower.as_str(),
            "content-type" | "idempotency-key" | WEBHOOK_ID | WEBHOOK_TIMESTAMP | WEBHOOK_SIGNATURE
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

    async fn send(&self, message: &ClaimedMessage) -> Delivery {
        let controller = AbortController::default();
        let signal = controller.signal();
        let _abort = AbortOnDrop(Some(controller));
        let request = match self.request(message) {
            Ok(request) => request,
            Err(error) => {
                return Delivery::permanent(format!("cannot build the request: {error}"));
            }
        };
        let exchange = async {
            let fetch = Fetch::Request(request);
            let mut response = fetch
                .send_with_signal(&signal)
                .await
                .map_err(|error| format!("receiver unreachable: {error}"))?;
            let status = response.status_code();
            let retry_after = response.headers().get("retry-after").ok().flatten();
            let body = if (200..300).contains(&status) {
                String::new()
            } else {
                excerpt(&mut response).await
            };
            Ok::<_, String>(self.statuses.verdict(
                status,
                retry_after.as_deref(),
                &body,
                SystemClock.now(),
            ))
        };
        futures_util::pin_mut!(exchange);
        match select(exchange, Delay::from(self.timeout)).await {
            Either::Left((Ok(delivery), _)) => delivery,
            // Unreachable (refused, reset, DNS): the receiver, not this
            // message, failed.
            Either::Left((Err(error), _)) => Delivery::unavailable(error, None),
            Either::Right(((), _)) => Delivery::retry(format!(
                "no answer within {} ms; the request was aborted",
                self.timeout.as_millis()
            )),
        }
    }

    fn request(&self, message: &ClaimedMessage) -> worker::Result<Request> {
        let headers = Headers::new();
        headers.set("content-type", "application/json")?;
        headers.set("idempotency-key", &message.id)?;
        for (name, value) in &self.headers {
            headers.set(name, value)?;
        }
        if let Some(signer) = &self.signer {
            if message.id.contains('.') {
                return Err(worker::Error::RustError(
                    "a signed webhook's id cannot contain '.' (it separates the signed parts)"
                        .into(),
                ));
            }
            let signed = signer.sign(&message.id, SystemClock.now(), message.payload.as_bytes());
            for (name, value) in signed.headers() {
                headers.set(name, &value)?;
            }
        }
        let mut init = RequestInit::new();
        // A redirect is a failure of the receiver's configuration, never
        // followed: the 3xx reaches the status mapping (permanent).
        init.with_method(Method::Post)
            .with_redirect(RequestRedirect::Manual)
            .with_headers(headers)
            .with_body(Some(JsValue::from_str(&message.payload)));
        Request::new_with_init(&self.url, &init)
    }
}

/// At most the first [`EXCERPT_BYTES`] of a response body, as text: a
/// failure's body is kept only as a hint for `last_error`.
async fn excerpt(response: &mut worker::Response) -> String {
    use futures_util::StreamExt;
    let Ok(mut stream) = response.stream() else {
        return String::new();
    };
    let mut bytes = Vec::new();
    while bytes.len() < EXCERPT_BYTES {
        match stream.next().await {
            Some(Ok(chunk)) => bytes.extend_from_slice(&chunk),
            Some(Err(_)) | None => break,
        }
    }
    bytes.truncate(EXCERPT_BYTES);
    String::from_utf8_lossy(&bytes).into_owned()
}

/// How much of a failure's body is read.
const EXCERPT_BYTES: usize = 4096;

impl Deliver for HttpDeliverer {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin(self.send(message))
    }
}
