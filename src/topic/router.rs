//! Delivery by topic: each message goes to the handler of its topic, its
//! payload decoded.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use super::typed::Topic;
use crate::drain::Deliver;
use crate::future::{BoxFuture, MaybeSend, MaybeSync};
use crate::outbox::{ClaimedMessage, Delivery};

/// One topic's delivery: `Send + Sync` natively, unbounded on `wasm32` (see
/// [`crate::future`]).
#[cfg(not(target_arch = "wasm32"))]
type Route = Box<dyn for<'a> Fn(&'a ClaimedMessage) -> BoxFuture<'a, Logged> + Send + Sync>;
#[cfg(target_arch = "wasm32")]
type Route = Box<dyn for<'a> Fn(&'a ClaimedMessage) -> BoxFuture<'a, Logged>>;

/// A verdict, and the deliverer's record of the attempt.
type Logged = (Delivery, Option<crate::drain::AttemptRecord>);

/// A [`Deliver`] that sends each message to the route of its topic, with its
/// payload decoded. A payload that does not decode fails permanently (it
/// never could succeed); a topic without a route is deferred as unavailable
/// (no attempt spent, up to the policy's deferral limit), since a newer
/// deployment may route it. Each says so in `last_error`.
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// # use workers_outbox::{Delivery, Topic};
/// use workers_outbox::topic::Router;
/// # #[derive(Serialize, Deserialize)] struct WelcomeMail { to: String }
/// # impl Topic for WelcomeMail { const NAME: &'static str = "welcome-mail"; }
///
/// let router = Router::new().handle(|mail: WelcomeMail, message| async move {
///     // send `mail.to` a welcome, with `message.id` as the idempotency key
///     Delivery::Delivered
/// });
/// ```
#[derive(Default)]
pub struct Router {
    routes: BTreeMap<&'static str, Route>,
    /// The deliverers of [`route`](Router::route)s, asked for destinations.
    delivers: BTreeMap<&'static str, Arc<dyn Deliver>>,
}

impl std::fmt::Debug for Router {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Router")
            .field("topics", &self.routes.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Router {
    /// A router without routes.
    pub fn new() -> Self {
        Router::default()
    }

    /// Messages of topic `T` go to `handler`, with their payload decoded.
    ///
    /// # Panics
    /// If topic `T` has a route already: a configuration mistake.
    #[must_use]
    pub fn handle<T, F, Fut>(mut self, handler: F) -> Self
    where
        T: Topic + 'static,
        F: Fn(T, ClaimedMessage) -> Fut + MaybeSend + MaybeSync + 'static,
        Fut: Future<Output = Delivery> + MaybeSend + 'static,
    {
        let handler = Arc::new(handler);
        self.claim_topic(T::NAME);
        self.routes.insert(
            T::NAME,
            Box::new(move |message: &ClaimedMessage| -> BoxFuture<'_, Logged> {
                match message.payload_as::<T>() {
                    Ok(payload) => {
                        let handled = handler(payload, message.clone());
                        Box::pin(async move { (handled.await, None) })
                    }
                    Err(error) => Box::pin(std::future::ready((
                        Delivery::permanent(format!("the payload is not a {}: {error}", T::NAME)),
                        None,
                    ))),
                }
            }),
        );
        self
    }

    /// Messages of topic `T` go to `deliver` as they are (after checking
    /// that their payload decodes as `T`): for a ready deliverer such as the
    /// HTTP one.
    ///
    /// # Panics
    /// If topic `T` has a route already: a configuration mistake.
    #[must_use]
    pub fn route<T, D>(mut self, deliver: D) -> Self
    where
        T: Topic + 'static,
        D: Deliver + 'static,
    {
        let deliver = Arc::new(deliver);
        self.claim_topic(T::NAME);
        self.delivers.insert(T::NAME, deliver.clone());
        self.routes.insert(
            T::NAME,
            Box::new(move |message: &ClaimedMessage| -> BoxFuture<'_, Logged> {
                if let Err(error) = message.payload_as::<T>() {
                    return Box::pin(std::future::ready((
                        Delivery::permanent(format!("the payload is not a {}: {error}", T::NAME)),
                        None,
                    )));
                }
                let deliver = deliver.clone();
                Box::pin(async move { deliver.deliver_logged(message).await })
            }),
        );
        self
    }
}

impl Router {
    fn claim_topic(&self, topic: &str) {
        assert!(
            !self.routes.contains_key(topic),
            "topic {topic:?} has a route already"
        );
    }
}

impl Deliver for Router {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        Box::pin(async move { self.deliver_logged(message).await.0 })
    }

    /// The routed deliverer's record of the attempt (a handler logs none).
    fn deliver_logged<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Logged> {
        match self.routes.get(message.topic.as_str()) {
            Some(route) => route(message),
            None => Box::pin(std::future::ready((
                Delivery::unavailable(
                    format!("no route for topic {:?} in this deployment", message.topic),
                    None,
                ),
                None,
            ))),
        }
    }

    /// The routed deliverer's destination, for topics with a
    /// [`route`](Router::route).
    fn destination(&self, message: &ClaimedMessage) -> Option<String> {
        self.delivers
            .get(message.topic.as_str())?
            .destination(message)
    }

    /// The routed deliverer's destination's own rate.
    fn destination_rate(&self, message: &ClaimedMessage) -> Option<u32> {
        self.delivers
            .get(message.topic.as_str())?
            .destination_rate(message)
    }
}
