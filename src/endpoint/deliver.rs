//! Delivering to endpoints: each delivery goes where its endpoint's URL
//! says (an HTTPS POST signed with its endpoint's secrets, or a platform
//! destination), as the claim read them.

use std::sync::Arc;
use std::time::Duration;

use super::destination::Destination;
use super::model::{BodyFormat, Target};
use crate::drain::{AttemptLog, AttemptRecord, Deliver};
use crate::error::Result;
use crate::future::BoxFuture;
use crate::http::{HttpDeliverer, Service, To};
use crate::outbox::{ClaimedMessage, Delivery};
use crate::time::Clock;
use crate::webhook::Signer;

/// Delivers an outbox's endpoint deliveries over HTTPS, the
/// [Standard Webhooks](crate::webhook) way: `webhook-id` is the event's id
/// (the same on every endpoint and retry), signed with every secret the
/// endpoint has at the attempt (the current one, and the previous one while
/// a rotation overlaps). The URL and secrets are the endpoint's as the
/// claim read them, so a change applies to what is pending; a `410 Gone`
/// disables that endpoint alone. Other messages of the outbox go to the
/// deliverer given with [`or`](Self::or).
///
/// Statuses map as [`HttpDeliverer`]'s; the breaker, retries, holds and
/// [`DestinationLimits`](crate::drain::DestinationLimits) are per endpoint
/// (each is its deliveries' topic and destination), and an endpoint's own
/// [rate limit](super::NewEndpoint::rate_limit) replaces the limits' rate
/// for it.
///
/// On Workers, endpoints may also be the platform's own destinations (see
/// [`EndpointKind`](super::EndpointKind)), each given to the deliverer by
/// the name endpoints use: `email` for `mailto:`, `service`, `workflow`
/// and `queue` for `service://NAME/…`, `workflow://NAME` and
/// `queue://NAME`. A delivery whose binding the deliverer was not given
/// (natively: any platform destination) waits ([`Delivery::Unavailable`],
/// no attempt spent) and says so.
pub struct EndpointDeliverer {
    http: HttpDeliverer,
    other: Option<Arc<dyn Deliver>>,
    disable_after: Duration,
    /// What the platform destinations' attempts are timed by and log (the
    /// HTTP deliverer keeps its own copies).
    pub(super) clock: Arc<dyn Clock>,
    pub(super) attempt_log: AttemptLog,
    #[cfg(target_arch = "wasm32")]
    pub(super) platform: super::platform::Bindings,
}

impl std::fmt::Debug for EndpointDeliverer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointDeliverer")
            .field("http", &self.http)
            .field("other", &self.other.is_some())
            .finish()
    }
}

impl EndpointDeliverer {
    /// A deliverer of endpoint deliveries only. Natively, a name that
    /// resolves to a loopback, private or link-local address is
    /// unreachable (an endpoint's literal address was checked when it was
    /// registered; see [`Endpoints::allow_private`](super::Endpoints::allow_private)
    /// and [`allow_private`](Self::allow_private)).
    ///
    /// # Errors
    /// Natively, [`Error::Internal`](crate::Error::Internal) if the HTTP
    /// client cannot be set up.
    pub fn new() -> Result<Self> {
        let http = HttpDeliverer::for_many()?;
        #[cfg(not(target_arch = "wasm32"))]
        let http = http.public_names_only()?;
        Ok(EndpointDeliverer {
            http,
            other: None,
            disable_after: Self::DEFAULT_DISABLE_AFTER,
            clock: Arc::new(crate::time::SystemClock),
            attempt_log: AttemptLog::default(),
            #[cfg(target_arch = "wasm32")]
            platform: super::platform::Bindings::default(),
        })
    }

    /// How many failed attempts (attempts spent and deferrals) a delivery
    /// needs behind it before [`disable_after`](Self::disable_after) can
    /// disable its endpoint.
    pub const FAILURES_BEFORE_DISABLING: u32 = 3;

    /// How long an endpoint may fail before it is disabled by default: 5
    /// days, as Svix.
    pub const DEFAULT_DISABLE_AFTER: Duration = Duration::from_secs(5 * 24 * 3600);

    /// Disables an endpoint whose delivery still fails `after` its event
    /// was published, having failed [`FAILURES_BEFORE_DISABLING`](Self::FAILURES_BEFORE_DISABLING)
    /// times before (default: [`DEFAULT_DISABLE_AFTER`](Self::DEFAULT_DISABLE_AFTER)):
    /// a receiver failing that long (down, or misconfigured: answering
    /// `3xx`, its name not resolving, its TLS refused) is disabled with the
    /// last error as its reason, and its deliveries are held until it is
    /// enabled, rather than retried on or dead. Keep the outbox's
    /// [`RetryPolicy`](crate::RetryPolicy) from spending a delivery's
    /// attempts before then (its `defer_limit` and attempts).
    #[must_use]
    pub fn disable_after(mut self, after: Duration) -> Self {
        self.disable_after = after;
        self
    }

    /// Resolves names to any address, private ones included (natively; for
    /// development against local receivers).
    ///
    /// # Errors
    /// Natively, [`Error::Internal`](crate::Error::Internal) if the HTTP
    /// client cannot be set up.
    pub fn allow_private(self, allow: bool) -> Result<Self> {
        #[cfg(not(target_arch = "wasm32"))]
        let http = if allow {
            self.http.any_names()?
        } else {
            self.http.public_names_only()?
        };
        #[cfg(target_arch = "wasm32")]
        let http = {
            let _ = allow;
            self.http
        };
        Ok(EndpointDeliverer { http, ..self })
    }

    /// Delivers the outbox's other messages (not to an endpoint) with
    /// `other`; without it they fail permanently.
    #[must_use]
    pub fn or(mut self, other: impl Deliver + 'static) -> Self {
        self.other = Some(Arc::new(other));
        self
    }

    /// How long a request may take (default:
    /// [`HttpDeliverer::DEFAULT_TIMEOUT`]).
    #[must_use]
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.http = self.http.timeout(timeout);
        self
    }

    /// Which attempts it logs in the outbox's attempt log (default:
    /// [`AttemptLog::Failures`]); read them with
    /// [`Endpoints::attempts`](super::Endpoints::attempts).
    #[must_use]
    pub fn attempt_log(mut self, log: AttemptLog) -> Self {
        self.http = self.http.attempt_log(log);
        self.attempt_log = log;
        self
    }

    /// The clock that stamps signatures, decides which secrets sign, and
    /// times every attempt.
    #[must_use]
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.http = self.http.clock(clock.clone());
        self.clock = clock;
        self
    }

    async fn to_endpoint(&self, message: &ClaimedMessage) -> (Delivery, Option<AttemptRecord>) {
        let refused = |error: String| (Delivery::permanent(error), None);
        let Some(target) = &message.endpoint_target else {
            return refused("its endpoint was deleted".to_owned());
        };
        let target = match Target::from_json(&target.0) {
            Ok(target) => target,
            Err(error) => return refused(format!("the endpoint's target does not read: {error}")),
        };
        let destination = match Destination::of(&target.url) {
            Ok(destination) => destination,
            Err(error) => return refused(format!("the endpoint's URL does not read: {error}")),
        };
        let (verdict, record) = match destination {
            Destination::Https => match url::Url::parse(&target.url) {
                Ok(url) => self.post(&url, &target, message, None).await,
                Err(error) => {
                    return refused(format!("the endpoint's URL does not parse: {error}"));
                }
            },
            #[cfg(target_arch = "wasm32")]
            platform => match self.to_platform(&platform, &target, message).await {
                (attempt, super::mail::Fault::Endpoint) => attempt,
                // The application's to fix: nothing counts against the endpoint.
                (attempt, super::mail::Fault::Application) => return attempt,
            },
            // A Worker's drain of the same outbox can deliver it: wait for one.
            #[cfg(not(target_arch = "wasm32"))]
            _ => {
                let error = "the endpoint's destination is reachable on Workers only";
                return (Delivery::unavailable(error, None), None);
            }
        };
        // Old, and failed before: not a backlog released at once that meets
        // one busy answer, nor a delivery that waited behind its key's head.
        let failing_for = self.http.now().duration_since(message.created_at);
        let failed_before = message.attempt().saturating_sub(1) + message.lease().deferrals;
        match verdict.error() {
            Some(error)
                if verdict.is_retryable()
                    && failing_for >= self.disable_after
                    && failed_before >= Self::FAILURES_BEFORE_DISABLING =>
            {
                let hours = failing_for.as_secs() / 3600;
                let reason = format!("disabled after failing for {hours} h; last error: {error}");
                (Delivery::gone(reason), record)
            }
            _ => (verdict, record),
        }
    }
}

impl EndpointDeliverer {
    /// POSTs `message` to `url`, signed with `target`'s secrets, through
    /// `via` if given (a service binding), else `fetch`.
    pub(super) async fn post(
        &self,
        url: &url::Url,
        target: &Target,
        message: &ClaimedMessage,
        via: Option<&Service>,
    ) -> (Delivery, Option<AttemptRecord>) {
        let signer = match target.signing_at(self.http.now()).and_then(Signer::new) {
            Ok(signer) => signer,
            Err(error) => {
                let error = format!("the endpoint's secrets do not sign: {error}");
                return (Delivery::permanent(error), None);
            }
        };
        let to = To {
            url,
            signer: Some(&signer),
            via,
        };
        match target.body {
            BodyFormat::Slack => {
                let mut as_text = message.clone();
                let event_id = message.event_id.as_deref().unwrap_or(&message.id);
                as_text.payload = super::slack::body(event_id, &message.payload);
                self.http.send_to(&to, &as_text).await
            }
            BodyFormat::Payload => self.http.send_to(&to, message).await,
        }
    }
}

impl Deliver for EndpointDeliverer {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin(async move { self.deliver_logged(message).await.0 })
    }

    fn deliver_logged<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> BoxFuture<'a, (Delivery, Option<AttemptRecord>)> {
        match (&message.event_id, &self.other) {
            (Some(_), _) => Box::pin(self.to_endpoint(message)),
            (None, Some(other)) => other.deliver_logged(message),
            (None, None) => Box::pin(async {
                let error = "not an endpoint delivery, and the deliverer has no other \
                             (`EndpointDeliverer::or`)";
                (Delivery::permanent(error), None)
            }),
        }
    }

    /// The endpoint (its id), so the drainer's
    /// [`DestinationLimits`](crate::drain::DestinationLimits) hold per
    /// endpoint; the other deliverer's destination otherwise.
    fn destination(&self, message: &ClaimedMessage) -> Option<String> {
        match (&message.event_id, &self.other) {
            (Some(_), _) => Some(message.topic.clone()),
            (None, Some(other)) => other.destination(message),
            (None, None) => None,
        }
    }

    /// The endpoint's own [rate limit](super::NewEndpoint::rate_limit), as
    /// the claim read it.
    fn destination_rate(&self, message: &ClaimedMessage) -> Option<u32> {
        if message.event_id.is_none() {
            return self
                .other
                .as_ref()
                .and_then(|other| other.destination_rate(message));
        }
        Target::from_json(&message.endpoint_target.as_ref()?.0)
            .ok()?
            .rate_limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::claim::Secretive;
    use crate::time::Timestamp;

    fn delivery(rate_limit: Option<u32>) -> ClaimedMessage {
        let mut message = ClaimedMessage::leased_for_test("evt_1:ep_1", "ep_1", Timestamp::MAX, 0);
        message.event_id = Some("evt_1".into());
        let target = Target {
            url: "https://hooks.example.com/in".into(),
            secrets: Vec::new(),
            rate_limit,
            body: BodyFormat::Payload,
        };
        message.endpoint_target = Some(Secretive(target.to_json().unwrap()));
        message
    }

    #[test]
    fn an_endpoint_is_its_deliveries_destination_and_sets_its_own_rate() {
        let other = crate::drain::deliver_fn(|_| async { Delivery::Delivered });
        let deliverer = EndpointDeliverer::new().unwrap().or(other);
        assert_eq!(
            deliverer.destination(&delivery(Some(5))).as_deref(),
            Some("ep_1")
        );
        assert_eq!(deliverer.destination_rate(&delivery(Some(5))), Some(5));
        assert_eq!(deliverer.destination_rate(&delivery(None)), None);
        let plain = ClaimedMessage::leased_for_test("m", "mail", Timestamp::MAX, 0);
        assert_eq!(deliverer.destination(&plain), None);
        assert_eq!(deliverer.destination_rate(&plain), None);
    }
}
