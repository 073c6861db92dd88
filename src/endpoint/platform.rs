//! On Workers, endpoints that are the platform's own destinations: a mail
//! through `send_email`, a POST to another Worker over a service binding, a
//! Workflow instance, a Queue message.

use super::deliver::EndpointDeliverer;
use super::destination::Destination;
use super::model::Target;
use crate::drain::AttemptRecord;
use crate::email::EmailDeliverer;
use crate::outbox::{ClaimedMessage, Delivery};
use crate::workflow::{WorkflowBinding, WorkflowDeliverer};

/// The bindings an [`EndpointDeliverer`] was given, by the names endpoints
/// use.
#[derive(Default)]
pub(super) struct Bindings {
    /// The `send_email` deliverer and the address mails are sent from.
    email: Option<(EmailDeliverer, String)>,
    services: Vec<(String, worker::Fetcher)>,
    workflows: Vec<(String, WorkflowDeliverer)>,
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
    /// the text is its JSON, the `Message-ID` the delivery's.
    #[must_use]
    pub fn email(mut self, binding: worker::SendEmail, from: impl Into<String>) -> Self {
        self.platform.email = Some((EmailDeliverer::new(binding), from.into()));
        self
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
    /// `workflow`, each instance's id the delivery's and its params the
    /// event's payload (see [`WorkflowDeliverer`]).
    #[must_use]
    pub fn workflow(mut self, name: impl Into<String>, workflow: WorkflowBinding) -> Self {
        let name = name.into();
        let deliverer = WorkflowDeliverer::new(workflow, name.clone());
        self.platform.workflows.push((name, deliverer));
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

    /// Delivers `message` to the platform destination its endpoint names.
    pub(super) async fn to_platform(
        &self,
        destination: &Destination<'_>,
        target: &Target,
        message: &ClaimedMessage,
    ) -> (Delivery, Option<AttemptRecord>) {
        let missing = |what: String| {
            let error = format!("the deliverer was given no {what} (`EndpointDeliverer`)");
            (Delivery::unavailable(error, None), None)
        };
        let event_id = message.event_id.as_deref().unwrap_or(&message.id);
        match *destination {
            Destination::Email { address } => match &self.platform.email {
                Some((deliverer, from)) => {
                    let mail = super::mail::mail(from, address, event_id, &message.payload);
                    deliverer.send(&message.id, &mail).await
                }
                None => missing("send_email binding".to_owned()),
            },
            Destination::Service { binding, path } => {
                match named(&self.platform.services, binding) {
                    Some(service) => match url::Url::parse(&format!("https://{binding}{path}")) {
                        Ok(url) => self.post(&url, target, message, Some(service)).await,
                        Err(error) => (
                            Delivery::permanent(format!(
                                "the endpoint's service URL does not parse: {error}"
                            )),
                            None,
                        ),
                    },
                    None => missing(format!("service binding {binding:?}")),
                }
            }
            Destination::Workflow { binding } => match named(&self.platform.workflows, binding) {
                Some(workflow) => workflow.start(&message.id, &message.payload).await,
                None => missing(format!("Workflow {binding:?}")),
            },
            Destination::Queue { binding } => match named(&self.platform.queues, binding) {
                Some(queue) => (crate::queue::send_one(queue, message).await, None),
                None => missing(format!("Queue {binding:?}")),
            },
            Destination::Https => (
                Delivery::permanent("an HTTPS endpoint is not a platform destination"),
                None,
            ),
        }
    }
}
