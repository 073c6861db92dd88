//! The confirmation mail: the outbox payload, POSTed as is to the mail API
//! by the library's HTTP deliverer (with the outbox id as
//! `Idempotency-Key`, so the provider can drop duplicates).

use serde::{Deserialize, Serialize};

pub(crate) const CONFIRMATION_TOPIC: &str = "signup-confirmation";

/// What the mail API receives.
#[derive(Serialize, Deserialize)]
pub(crate) struct Mail {
    pub(crate) to: String,
    pub(crate) subject: String,
    pub(crate) text: String,
}

impl Mail {
    pub(crate) fn confirmation(to: &str, account_id: &str) -> Self {
        Mail {
            to: to.to_owned(),
            subject: "Confirm your account".to_owned(),
            text: format!(
                "Welcome! Your account {account_id} is ready once you confirm this address."
            ),
        }
    }
}
