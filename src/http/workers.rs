//! The HTTP deliverer's transport on Workers: the runtime's `fetch`.

use futures_util::future::{Either, select};
use wasm_bindgen::JsValue;
use worker::{
    AbortController, Delay, Fetch, Headers, Method, Request, RequestInit, RequestRedirect,
};

use super::deliverer::{Answer, EXCERPT_BYTES, HttpDeliverer, To, body_text};
use crate::drain::AttemptRecord;
use crate::outbox::{ClaimedMessage, Delivery};

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
    /// Delivers `message` as this deliverer does, to `to`: the verdict, and
    /// the attempt's record if this deliverer logs it.
    pub(crate) async fn send_to(
        &self,
        to: &To<'_>,
        message: &ClaimedMessage,
    ) -> (Delivery, Option<AttemptRecord>) {
        let started = self.now();
        let controller = AbortController::default();
        let signal = controller.signal();
        let _abort = AbortOnDrop(Some(controller));
        let request = match self.request(to, message) {
            Ok(request) => request,
            Err(error) => {
                return (
                    Delivery::permanent(format!("cannot build the request: {error}")),
                    None,
                );
            }
        };
        let exchange = async {
            let sent = match to.via.or(self.service.as_ref()) {
                Some(service) => through(service, &request, &signal).await,
                None => Fetch::Request(request).send_with_signal(&signal).await,
            };
            let mut response = sent.map_err(|error| format!("receiver unreachable: {error}"))?;
            let status = response.status_code();
            let retry_after = response.headers().get("retry-after").ok().flatten();
            let content_type = response.headers().get("content-type").ok().flatten();
            let body = if (200..300).contains(&status) {
                String::new()
            } else {
                excerpt(&mut response).await
            };
            Ok(Answer {
                status,
                retry_after,
                content_type,
                body,
            })
        };
        futures_util::pin_mut!(exchange);
        let answered = match select(exchange, Delay::from(self.timeout)).await {
            Either::Left((answered, _)) => Some(answered),
            Either::Right(((), _)) => None,
        };
        self.verdict(answered, started)
    }

    fn request(&self, to: &To<'_>, message: &ClaimedMessage) -> worker::Result<Request> {
        let headers = Headers::new();
        let all = self
            .request_headers(to.signer, message, self.now())
            .map_err(worker::Error::RustError)?;
        for (name, value) in &all {
            headers.set(name, value)?;
        }
        let mut init = RequestInit::new();
        // A redirect is a failure of the receiver's configuration, never
        // followed: the 3xx reaches the status mapping (a retry).
        init.with_method(Method::Post)
            .with_redirect(RequestRedirect::Manual)
            .with_headers(headers)
            .with_body(Some(JsValue::from_str(&message.payload)));
        Request::new_with_init(to.url.as_str(), &init)
    }
}

/// Sends `request` through the service binding `service`, aborted with
/// `signal`.
async fn through(
    service: &worker::Fetcher,
    request: &Request,
    signal: &worker::AbortSignal,
) -> worker::Result<worker::Response> {
    let init = worker::web_sys::RequestInit::new();
    init.set_signal(Some(signal));
    let request = worker::web_sys::Request::new_with_request_and_init(request.inner(), &init)?;
    service.fetch_request(Request::from(request)).await
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
    body_text(bytes)
}
