//! On Workers, endpoints that are the platform's own destinations: a mail
//! through `send_email`, a POST to another Worker over a service binding, a
//! Workflow instance, a Queue message.

use super::deliver::EndpointDeliverer;
use super::destination::Destination;
use super::mail::Fault;
use super::model::Target;
use crate::drain::AttemptRecord;
use crate::email::{EmailDeliverer, check_address};
use crate::error::Result;
use crate::outbox::{ClaimedMessage, Delivery};
use crate::workflow::{WorkflowBinding, WorkflowDeliverer};

/// The bindings an [`EndpointDeliverer`] was given, by the names endpoints
/// use.
#[derive(Default)]
pub(super) struct Bindings {
    /// The `send_email` binding and the address mails are sent from.
    email: Option<(worker::SendEmail, String)>,
    services: Vec<(String, worker::Fetcher)>,
    workflows: Vec<(String, WorkflowBinding)>,
    queues: Vec<(String, worker::Queue)>,
}

fn named<'a, T>(bindings: &'a [(String, T)], name: &str) -> Option<&'a T> {
    bindings
        .iter()
        .find(|(given, _)| given == name)
        .map(|(_, binding)| binding)
}

impl EndpointDeliverer {
    /// Delivers `mailto:` endpoints' events as mails from `from` through
    /// `binding` (`env.send_email("MAIL")`): the subject names the event,
    /// the text is its JSON, the `Message-ID` the delivery's. An address the
    /// binding refuses is its endpoint's receiver gone (the endpoint is
    /// disabled, as by a `410`); a sender it refuses is the application's
    /// to fix, so every delivery waits (no attempt spent).
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) ("mail") when
    /// `from` is not one `local@domain` address.
    pub fn email(mut self, binding: worker::SendEmail, from: impl Into<String>) -> Result<Self> {
        let from = from.into();
        check_address("from", &from)?;
        self.platform.email = Some((binding, from));
        Ok(self)
    }

    /// Delivers `service://name/…` endpoints' events through `service`
    /// (`env.service("BILLING")`): the same signed POST as an HTTPS
    /// endpoint's, to `https://name/…` inside the other Worker.
    #[must_use]
    pub fn service(mut self, name: impl Into<String>, service: worker::Fetcher) -> Self {
        self.platform.services.push((name.into(), service));
        self
    }

    /// Delivers `workflow://name` endpoints' events as instances of
    /// `workflow` (see [`WorkflowDeliverer`]): each instance's id is
    /// derived from the delivery's (`evt_…:ep_…`), its params are
    /// `{"event_id", "endpoint_id", "payload"}`, the event's payload in
    /// the last, so one Workflow can serve every tenant's endpoints.
    #[must_use]
    pub fn workflow(mut self, name: impl Into<String>, workflow: WorkflowBinding) -> Self {
        self.platform.workflows.push((name.into(), workflow));
        self
    }

    /// Delivers `queue://name` endpoints' events into `queue`
    /// (`env.queue("EVENTS")`), each an envelope as the Queue relay sends
    /// (consume them with [`QueueConsumer`](crate::queue::QueueConsumer)).
    #[must_use]
    pub fn queue(mut self, name: impl Into<String>, queue: worker::Queue) -> Self {
        self.platform.queues.push((name.into(), queue));
        self
    }

    /// Delivers `message` to the platform destination its endpoint names,
    /// and says whose a failure is to fix.
    pub(super) async fn to_platform(
        &self,
        destination: &Destination<'_>,
        target: &Target,
        message: &ClaimedMessage,
    ) -> ((Delivery, Option<AttemptRecord>), Fault) {
        let missing = |what: String| {
            let error = format!("the deliverer was given no {what} (`EndpointDeliverer`)");
            (
                (Delivery::unavailable(error, None), None),
                Fault::Application,
            )
        };
        let endpoint_s = |attempt| (attempt, Fault::Endpoint);
        let event_id = message.event_id.as_deref().unwrap_or(&message.id);
        match *destination {
            Destination::Email { address } => match &self.platform.email {
                Some((binding, from)) => {
                    let mail = super::mail::mail(from, address, event_id, &message.payload);
                    let (verdict, record, refusal) = EmailDeliverer::new(binding.clone())
                        .clock(self.clock.clone())
                        .attempt_log(self.attempt_log)
                        .send(&message.id, &mail, message.created_at)
                        .await;
                    match refusal {
                        Some(refusal) => {
                            let (verdict, fault) = super::mail::refused(refusal, verdict);
                            ((verdict, record), fault)
                        }
                        None => endpoint_s((verdict, record)),
                    }
                }
                None => missing("send_email binding".to_owned()),
            },
            Destination::Service { binding, path } => {
                match named(&self.platform.services, binding) {
                    Some(service) => match url::Url::parse(&format!("https://{binding}{path}")) {
                        Ok(url) => {
                            endpoint_s(self.post(&url, target, message, Some(service)).await)
                        }
                        Err(error) => endpoint_s((
                            Delivery::permanent(format!(
                                "the endpoint's service URL does not parse: {error}"
                            )),
                            None,
                        )),
                    },
                    None => missing(format!("service binding {binding:?}")),
                }
            }
            Destination::Workflow { binding } => match named(&self.platform.workflows, binding) {
                Some(workflow) => {
                    let params = match serde_json::from_str::<serde_json::Value>(&message.payload) {
                        Ok(payload) => serde_json::json!({
                            "event_id": event_id,
                            "endpoint_id": message.topic,
                            "payload": payload,
                        })
                        .to_string(),
                        // Refused as not JSON by the deliverer.
                        Err(_) => message.payload.clone(),
                    };
                    endpoint_s(
                        WorkflowDeliverer::new(workflow.clone(), binding)
                            .clock(self.clock.clone())
                            .attempt_log(self.attempt_log)
                            .start(&message.id, &params)
                            .await,
                    )
                }
                None => missing(format!("Workflow {binding:?}")),
            },
            Destination::Queue { binding } => match named(&self.platform.queues, binding) {
                Some(queue) => {
                    let started = self.clock.now();
                    let verdict = crate::queue::send_one(queue, message).await;
                    let took = self.clock.now().duration_since(started);
                    let record = self.attempt_log.without_status(&verdict, took);
                    endpoint_s((verdict, record))
                }
                None => missing(format!("Queue {binding:?}")),
            },
            Destination::Https => endpoint_s((
                Delivery::permanent("an HTTPS endpoint is not a platform destination"),
                None,
            )),
        }
    }
}
