//! Delivering the confirmation mail to the mail API.

use serde::{Deserialize, Serialize};
use wasm_bindgen::JsValue;
use worker::{Fetch, Headers, Method, Request, RequestInit};
use workers_outbox::drain::Deliver;
use workers_outbox::send::BoxFuture;
use workers_outbox::{ClaimedMessage, Delivery};

pub(crate) const CONFIRMATION_TOPIC: &str = "signup-confirmation";

/// The outbox payload of a confirmation mail.
#[derive(Serialize, Deserialize)]
pub(crate) struct Confirmation {
    pub(crate) to: String,
    pub(crate) account_id: String,
}

/// `POST`s mails to `MAIL_API_URL` as `{"id", "to", "subject", "text"}`,
/// with the outbox id as `Idempotency-Key` so the provider can drop the
/// duplicates at-least-once delivery may send.
pub(crate) struct MailApi {
    url: String,
}

impl MailApi {
    pub(crate) fn new(url: String) -> Self {
        MailApi { url }
    }

    async fn send(&self, message: &ClaimedMessage) -> Delivery {
        if message.topic != CONFIRMATION_TOPIC {
            return Delivery::Permanent {
                error: format!("no mail template for topic {:?}", message.topic),
            };
        }
        let confirmation: Confirmation = match message.payload_as() {
            Ok(confirmation) => confirmation,
            Err(error) => {
                return Delivery::Permanent {
                    error: error.to_string(),
                };
            }
        };
        let mail = serde_json::json!({
            "id": message.id,
            "to": confirmation.to,
            "subject": "Confirm your account",
            "text": format!(
                "Welcome! Your account {} is ready once you confirm this address.",
                confirmation.account_id
            ),
        });
        let request = match self.request(&message.id, &mail.to_string()) {
            Ok(request) => request,
            Err(error) => {
                return Delivery::Permanent {
                    error: format!("cannot build a request to MAIL_API_URL: {error}"),
                };
            }
        };
        match Fetch::Request(request).send().await {
            Err(error) => Delivery::Retry {
                error: format!("mail API unreachable: {error}"),
            },
            Ok(mut response) => {
                let status = response.status_code();
                let retry_after = response.headers().get("retry-after").ok().flatten();
                let detail = if (200..300).contains(&status) {
                    String::new()
                } else {
                    response.text().await.unwrap_or_default()
                };
                classify(status, retry_after.as_deref(), &detail)
            }
        }
    }

    fn request(&self, id: &str, body: &str) -> worker::Result<Request> {
        let headers = Headers::new();
        headers.set("content-type", "application/json")?;
        headers.set("idempotency-key", id)?;
        let mut init = RequestInit::new();
        init.with_method(Method::Post)
            .with_headers(headers)
            .with_body(Some(JsValue::from_str(body)));
        Request::new_with_init(&self.url, &init)
    }
}

impl Deliver for MailApi {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin(self.send(message))
    }
}

/// 2xx is delivered; 408, 429 and 5xx may pass (honouring `Retry-After`
/// seconds); any other status never will.
fn classify(status: u16, retry_after: Option<&str>, detail: &str) -> Delivery {
    let detail: String = detail.chars().take(200).collect();
    let error = format!("mail API answered {status}: {detail}");
    match status {
        200..=299 => Delivery::Delivered,
        408 | 429 | 500..=599 => match retry_after.and_then(|s| s.trim().parse::<u64>().ok()) {
            Some(seconds) => Delivery::RetryAfter {
                error,
                delay: std::time::Duration::from_secs(seconds),
            },
            None => Delivery::Retry { error },
        },
        _ => Delivery::Permanent { error },
    }
}
