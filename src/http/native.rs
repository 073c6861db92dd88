//! The HTTP deliverer's transport natively: reqwest on tokio, with rustls
//! (no OpenSSL). Its timeout drops the request, which closes its connection.

use std::error::Error as _;

use reqwest::header::{CONTENT_TYPE, RETRY_AFTER};

use super::deliverer::{Answer, EXCERPT_BYTES, HttpDeliverer, To, body_text};
use crate::drain::AttemptRecord;
use crate::outbox::{ClaimedMessage, Delivery};

impl HttpDeliverer {
    /// Delivers `message` as this deliverer does, to `to`: the verdict, and
    /// the attempt's record if this deliverer logs it.
    pub(crate) async fn send_to(
        &self,
        to: &To<'_>,
        message: &ClaimedMessage,
    ) -> (Delivery, Option<AttemptRecord>) {
        if let Some(service) = to.via {
            match *service {}
        }
        let started = self.now();
        let headers = match self.request_headers(to.signer, message, started) {
            Ok(headers) => headers,
            Err(error) => {
                return (
                    Delivery::permanent(format!("cannot build the request: {error}")),
                    None,
                );
            }
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
            let header = |name| {
                response
                    .headers()
                    .get(name)
                    .and_then(|value| value.to_str().ok())
                    .map(str::to_owned)
            };
            let (retry_after, content_type) = (header(RETRY_AFTER), header(CONTENT_TYPE));
            let body = if response.status().is_success() {
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
        let answered = tokio::time::timeout(self.timeout, exchange).await.ok();
        self.verdict(answered, started)
    }
}

/// Resolves a name through the system, keeping its public addresses only.
pub(super) struct PublicNames;

impl reqwest::dns::Resolve for PublicNames {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        Box::pin(async move {
            let all = tokio::net::lookup_host((name.as_str(), 0)).await?;
            let public: Vec<std::net::SocketAddr> = all
                .filter(|address| !super::is_private(address.ip()))
                .collect();
            if public.is_empty() {
                let refused = format!("{} resolves to no public address", name.as_str());
                return Err(refused.into());
            }
            Ok(Box::new(public.into_iter()) as reqwest::dns::Addrs)
        })
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
    body_text(bytes)
}
