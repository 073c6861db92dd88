//! The e-mail deliverer on Workers: a `send_email` binding.

use std::sync::Arc;

use worker::{EmailMessage, SendEmail};

use super::{Mail, Refusal, refusal_of};
use crate::drain::{AttemptLog, AttemptRecord, Deliver};
use crate::future::BoxFuture;
use crate::outbox::{ClaimedMessage, Delivery};
use crate::time::{Clock, SystemClock, Timestamp};

/// Sends each message's [`Mail`] payload through a `send_email` binding
/// (Cloudflare Email): one binding call a message, the MIME built here, its
/// `Message-ID` the message's own and its `Date` the message's creation, so
/// a mail sent again is the same bytes. See [the module](super) for how the
/// binding's errors become verdicts; a payload that is not a mail is
/// permanent.
///
/// ```toml
/// # wrangler.toml
/// [[send_email]]
/// name = "MAIL"
/// ```
/// ```ignore
/// let deliver = EmailDeliverer::new(env.send_email("MAIL")?);
/// ```
pub struct EmailDeliverer {
    binding: SendEmail,
    clock: Arc<dyn Clock>,
    attempt_log: AttemptLog,
}

impl std::fmt::Debug for EmailDeliverer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmailDeliverer").finish_non_exhaustive()
    }
}

impl EmailDeliverer {
    /// Sends through `binding` (`env.send_email("MAIL")`).
    pub fn new(binding: SendEmail) -> Self {
        EmailDeliverer {
            binding,
            clock: Arc::new(SystemClock),
            attempt_log: AttemptLog::default(),
        }
    }

    /// The clock that dates each mail and times each attempt.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Which attempts it logs in the outbox's attempt log (default:
    /// [`AttemptLog::Failures`]): the binding's error.
    #[must_use]
    pub fn attempt_log(mut self, log: AttemptLog) -> Self {
        self.attempt_log = log;
        self
    }

    /// Sends `mail` as the mail of message `id`, dated `at`: the verdict
    /// (a refusal's is [`Refusal::verdict`]), the attempt's record if it is
    /// logged, and what refused it, if anything did.
    pub(crate) async fn send(
        &self,
        id: &str,
        mail: &Mail,
        at: Timestamp,
    ) -> (Delivery, Option<AttemptRecord>, Option<Refusal>) {
        let started = self.clock.now();
        let (verdict, refusal) = match self.try_send(id, mail, at).await {
            Ok(()) => (Delivery::Delivered, None),
            Err((refusal, error)) => (refusal.verdict(error), Some(refusal)),
        };
        let took = self.clock.now().duration_since(started);
        let record = self.attempt_log.without_status(&verdict, took);
        (verdict, record, refusal)
    }
}

impl EmailDeliverer {
    async fn try_send(
        &self,
        id: &str,
        mail: &Mail,
        at: Timestamp,
    ) -> Result<(), (Refusal, String)> {
        let raw = mail
            .to_mime(id, at)
            .map_err(|error| (Refusal::Mail, error.to_string()))?;
        let message = EmailMessage::new(&mail.from, &mail.to, &raw).map_err(|error| {
            let error = String::from(error.message());
            (Refusal::Mail, format!("the mail cannot be made: {error}"))
        })?;
        match self.binding.send(&message).await {
            Ok(_) => Ok(()),
            Err(error) => {
                let error = String::from(error.message());
                Err((
                    refusal_of(&error),
                    format!("send_email refused the mail: {error}"),
                ))
            }
        }
    }
}

impl Deliver for EmailDeliverer {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin(async move { self.deliver_logged(message).await.0 })
    }

    fn deliver_logged<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> BoxFuture<'a, (Delivery, Option<AttemptRecord>)> {
        Box::pin(async move {
            match serde_json::from_str::<Mail>(&message.payload) {
                Ok(mail) => {
                    let (verdict, record, _) =
                        self.send(&message.id, &mail, message.created_at).await;
                    (verdict, record)
                }
                Err(error) => (
                    Delivery::permanent(format!("the payload is not a mail: {error}")),
                    None,
                ),
            }
        })
    }

    /// The recipient's domain: a limit or breaker holds per receiving
    /// system.
    fn destination(&self, message: &ClaimedMessage) -> Option<String> {
        let mail = serde_json::from_str::<Mail>(&message.payload).ok()?;
        let domain = mail.to.rsplit_once('@')?.1.to_ascii_lowercase();
        Some(format!("mail:{domain}"))
    }
}
