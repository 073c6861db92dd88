//! The HTTP deliverer's transport natively: reqwest on tokio, with rustls
//! (no OpenSSL). Its timeout drops the request, which closes its connection.

use std::error::Error as _;

use reqwest::header::RETRY_AFTER;

use super::deliverer::{Answer, EXCERPT_BYTES, HttpDeliverer, To};
use crate::outbox::{ClaimedMessage, Delivery};

impl HttpDeliverer {
    pub(super) async fn send(&self, message: &ClaimedMessage) -> Delivery {
        self.send_to(&self.to(), message).await
    }

    /// Delivers `message` as this deliverer does, to `to`.
    pub(crate) async fn send_to(&self, to: &To<'_>, message: &ClaimedMessage) -> Delivery {
        let headers = match self.request_headers(to.signer, message, self.now()) {
            Ok(headers) => headers,
            Err(error) => return Delivery::permanent(format!("cannot build the request: {error}")),
        };
        let mut request = self
            .client
            .post(to.url.clone())
            .body(message.payload.clone());
        for (name, value) in &headers {
            request = request.header(name, value);
        }
        let exchange = async {
            let mut response = request
                .send()
                .await
                .map_err(|error| format!("receiver unreachable: {}", describe(error)))?;
            let status = response.status().as_u16();
            let retry_after = response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned);
            let body = if response.status().is_success() {
                String::new()
            } else {
                excerpt(&mut response).await
            };
            Ok(Answer {
                status,
                retry_after,
                body,
            })
        };
        self.verdict(tokio::time::timeout(self.timeout, exchange).await.ok())
    }
}

/// A transport error and its causes, without the URL (whose query may hold
/// a secret).
fn describe(error: reqwest::Error) -> String {
    let error = error.without_url();
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        cause = inner.source();
    }
    text
}

/// At most the first [`EXCERPT_BYTES`] of a response body, as text.
async fn excerpt(response: &mut reqwest::Response) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < EXCERPT_BYTES {
        match response.chunk().await {
            Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    bytes.truncate(EXCERPT_BYTES);
    String::from_utf8_lossy(&bytes).into_owned()
}
