//! Endpoints: events fan out inside the publishing batch, to the endpoints
//! of their owner subscribed to their type; each endpoint keeps its own
//! state; a delivery reads its endpoint as it is at the attempt.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use super::{
    CaseResult, Failure, Harness, drainer_through, enqueue_message, ensure, ensure_eq, yield_now,
};
use crate::batch::Batch;
use crate::drain::{Deliver, DrainReport};
use crate::endpoint::model::Target;
use crate::endpoint::{EndpointState, EndpointUpdate, Endpoints, Event, NewEndpoint};
use crate::error::Error;
use crate::outbox::{ClaimedMessage, Delivery, Message, Outbox};
use crate::webhook::{Secret, Signer, Verifier};

const FIRST: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const SECOND: &str = "whsec_bmV3LXNlY3JldC1rZXktb2YtMjQtYnl0ZXM=";

/// What one delivery carried: its endpoint (topic), event, URL, and which
/// of [`FIRST`] and [`SECOND`] its signature verifies under.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    endpoint: String,
    event: Option<String>,
    url: String,
    rate_limit: Option<u32>,
    first_verifies: bool,
    second_verifies: bool,
}

/// Delivers every endpoint delivery (answering `Gone` for the endpoints in
/// `gone`), signing each as the endpoint deliverer does and recording it.
#[derive(Clone)]
struct Receivers {
    h_clock: crate::manual_clock::ManualClock,
    gone: Arc<Mutex<Vec<String>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Receivers {
    fn new(h: &Harness) -> Self {
        Receivers {
            h_clock: h.clock().clone(),
            gone: Arc::default(),
            seen: Arc::default(),
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn seen_by(&self, endpoint: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|seen| seen.endpoint == endpoint)
            .collect()
    }

    fn set_gone(&self, endpoint: &str) {
        self.gone
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(endpoint.to_owned());
    }

    /// What a receiver holding `secret` makes of the delivery's signature.
    fn verifies(signed: &crate::webhook::SignedHeaders, body: &str, secret: &str) -> bool {
        let headers = signed.headers();
        let lookup = |name: &str| {
            headers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.clone())
        };
        let Ok(secret) = Secret::parse(secret) else {
            return false;
        };
        Verifier::new(vec![secret]).is_ok_and(|verifier| {
            verifier
                .verify_at(
                    &lookup,
                    body.as_bytes(),
                    crate::time::Timestamp::from_unix_millis(signed.timestamp * 1000)
                        .unwrap_or(crate::time::Timestamp::EPOCH),
                )
                .is_ok()
        })
    }

    fn record(&self, message: &ClaimedMessage) -> Result<Seen, String> {
        if format!("{message:?}").contains("whsec_") {
            return Err("the claimed message shows its endpoint's secret".into());
        }
        let target = message
            .endpoint_target
            .as_ref()
            .ok_or("no endpoint target came with the claim")?;
        let target = Target::from_json(&target.0).map_err(|e| e.to_string())?;
        let now = crate::time::Clock::now(&self.h_clock);
        let signer = Signer::new(target.signing_at(now).map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
        let id = message.event_id.as_deref().unwrap_or(&message.id);
        let signed = signer.sign(id, now, message.payload.as_bytes());
        Ok(Seen {
            endpoint: message.topic.clone(),
            event: message.event_id.clone(),
            url: target.url,
            rate_limit: target.rate_limit,
            first_verifies: Self::verifies(&signed, &message.payload, FIRST),
            second_verifies: Self::verifies(&signed, &message.payload, SECOND),
        })
    }
}

impl Deliver for Receivers {
    fn deliver<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> crate::future::BoxFuture<'a, Delivery> {
        Box::pin(async move {
            yield_now().await;
            let seen = match self.record(message) {
                Ok(seen) => seen,
                Err(error) => return Delivery::permanent(error),
            };
            self.seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(seen);
            let gone = self.gone.lock().unwrap_or_else(PoisonError::into_inner);
            if gone.contains(&message.topic) {
                Delivery::gone("receiver answered 410: endpoint deleted")
            } else {
                Delivery::Delivered
            }
        })
    }
}

async fn drain(
    h: &Harness,
    outbox: &Outbox,
    receivers: &Receivers,
) -> Result<DrainReport, Failure> {
    Ok(drainer_through(h, outbox, receivers.clone(), 1)?
        .drain()
        .await)
}

fn new(owner: &str, host: &str, types: &[&str]) -> NewEndpoint {
    NewEndpoint::new(owner, format!("https://{host}/hooks"), FIRST)
        .event_types(types.iter().copied())
}

async fn publish(
    h: &Harness,
    endpoints: &Endpoints,
    owner: &str,
    event_type: &str,
) -> Result<(String, u64), Failure> {
    let mut batch = Batch::new(h.db());
    let ticket = batch.publish(endpoints, Event::raw_json(owner, event_type, r#"{"n":1}"#))?;
    let committed = batch.commit().await?;
    Ok((ticket.id().to_owned(), committed.published(&ticket)?))
}

/// The delivery rows of `endpoint`: how many, and the most attempts any spent.
async fn rows_of(h: &Harness, outbox: &Outbox, endpoint: &str) -> Result<(i64, i64), Failure> {
    let rows = h
        .sql(
            &format!(
                "SELECT COUNT(*) AS n, COALESCE(MAX(attempts), 0) AS attempts FROM \"{}\" WHERE topic = ?",
                outbox.table()
            ),
            vec![endpoint.into()],
        )
        .await?;
    let row = rows.first().ok_or_else(|| Failure("no count row".into()))?;
    Ok((row.get("n")?, row.get("attempts")?))
}

pub(crate) async fn an_event_fans_out_in_the_business_batch_or_not_at_all(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    let endpoints = Endpoints::new(&outbox);
    let paid = endpoints
        .create(new("acme", "a.example", &["order.paid"]))
        .await?;
    let every = endpoints.create(new("acme", "b.example", &["*"])).await?;
    let other_type = endpoints
        .create(new("acme", "c.example", &["order.lost"]))
        .await?;
    let other_owner = endpoints
        .create(new("globex", "d.example", &["order.paid"]))
        .await?;
    let business = h.table("orders");
    h.sql(
        &format!("CREATE TABLE \"{business}\" (id TEXT PRIMARY KEY)"),
        vec![],
    )
    .await?;
    let insert_sql = format!("INSERT INTO \"{business}\" (id) VALUES (?)");
    let insert = |id: &str| h.statement(&insert_sql, vec![id.into()]);
    let mut batch = Batch::new(h.db());
    batch.push(insert("o-1"));
    let ticket = batch.publish(
        &endpoints,
        Event::raw_json("acme", "order.paid", r#"{"order":"o-1"}"#),
    )?;
    let committed = batch.commit().await?;
    ensure_eq!(committed.published(&ticket)?, 2);
    ensure!(ticket.id().starts_with("evt_"), "{}", ticket.id());
    ensure_eq!(rows_of(&h, &outbox, &paid.id).await?.0, 1);
    ensure_eq!(rows_of(&h, &outbox, &every.id).await?.0, 1);
    ensure_eq!(rows_of(&h, &outbox, &other_type.id).await?.0, 0);
    ensure_eq!(rows_of(&h, &outbox, &other_owner.id).await?.0, 0);

    // The business write fails: neither the event nor a delivery stays.
    let mut batch = Batch::new(h.db());
    let _ = batch.publish(&endpoints, Event::raw_json("acme", "order.paid", "{}"))?;
    batch.push(insert("o-1"));
    ensure!(batch.commit().await.is_err(), "a duplicate order committed");
    ensure_eq!(h.count(outbox.table().as_str()).await?, 2);
    ensure_eq!(h.count(&format!("{}_events", outbox.table())).await?, 1);

    // Every endpoint receives the event once, under one webhook-id.
    let receivers = Receivers::new(&h);
    let report = drain(&h, &outbox, &receivers).await?;
    ensure_eq!(report.delivered, 2);
    let seen = receivers.seen();
    ensure!(
        seen.iter().all(|s| s.event.as_deref() == Some(ticket.id())),
        "{seen:?}"
    );
    ensure_eq!(receivers.seen_by(&other_owner.id).len(), 0);
    Ok(())
}

pub(crate) async fn one_endpoints_gone_disables_it_and_no_other(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let endpoints = Endpoints::new(&outbox);
    let deleted = endpoints
        .create(new("acme", "gone.example", &["*"]))
        .await?;
    let healthy = endpoints.create(new("acme", "ok.example", &["*"])).await?;
    publish(&h, &endpoints, "acme", "order.paid").await?;
    let receivers = Receivers::new(&h);
    receivers.set_gone(&deleted.id);
    let report = drain(&h, &outbox, &receivers).await?;
    ensure_eq!((report.delivered, report.retried, report.dead), (1, 0, 0));
    ensure_eq!(report.paused, vec![deleted.id.clone()]);
    let state = endpoints.get("acme", &deleted.id).await?.state;
    ensure!(
        matches!(&state, EndpointState::Disabled { reason, .. } if reason.contains("410")),
        "{state:?}"
    );
    ensure_eq!(
        endpoints.get("acme", &healthy.id).await?.state,
        EndpointState::Enabled
    );
    // Its delivery waits, no attempt spent; new events go to the others only.
    ensure_eq!(rows_of(&h, &outbox, &deleted.id).await?, (1, 0));
    ensure_eq!(publish(&h, &endpoints, "acme", "order.paid").await?.1, 1);
    let report = drain(&h, &outbox, &receivers).await?;
    ensure_eq!(report.delivered, 1);
    ensure_eq!(receivers.seen_by(&healthy.id).len(), 2);
    ensure_eq!(receivers.seen_by(&deleted.id).len(), 1);
    Ok(())
}

pub(crate) async fn a_disabled_endpoint_spends_no_attempts_and_loses_nothing(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    let endpoints = Endpoints::new(&outbox);
    let endpoint = endpoints.create(new("acme", "a.example", &["*"])).await?;
    for _ in 0..3 {
        publish(&h, &endpoints, "acme", "order.paid").await?;
    }
    endpoints
        .disable("acme", &endpoint.id, "customer asked")
        .await?;
    ensure_eq!(publish(&h, &endpoints, "acme", "order.paid").await?.1, 0);
    let receivers = Receivers::new(&h);
    h.clock().advance(Duration::from_secs(3600));
    let report = drain(&h, &outbox, &receivers).await?;
    ensure_eq!((report.claimed, report.delivered), (0, 0));
    ensure_eq!(rows_of(&h, &outbox, &endpoint.id).await?, (3, 0));
    ensure!(
        matches!(
            endpoints.get("acme", &endpoint.id).await?.state,
            EndpointState::Disabled { .. }
        ),
        "not disabled"
    );
    // Paused, it takes new events and holds them too.
    endpoints.pause("acme", &endpoint.id, "maintenance").await?;
    ensure_eq!(publish(&h, &endpoints, "acme", "order.paid").await?.1, 1);
    ensure_eq!(drain(&h, &outbox, &receivers).await?.delivered, 0);
    endpoints.enable("acme", &endpoint.id).await?;
    let report = drain(&h, &outbox, &receivers).await?;
    ensure_eq!((report.delivered, report.retried), (4, 0));
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    Ok(())
}

pub(crate) async fn a_rotated_secret_signs_beside_the_old_until_it_expires(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    let endpoints = Endpoints::new(&outbox);
    let endpoint = endpoints.create(new("acme", "a.example", &["*"])).await?;
    publish(&h, &endpoints, "acme", "order.paid").await?;
    let rotated = endpoints
        .rotate_secret("acme", &endpoint.id, SECOND, Duration::from_secs(3600))
        .await?;
    ensure_eq!(
        rotated.previous_secret_expires,
        Some(h.later(Duration::from_secs(3600))?)
    );
    let receivers = Receivers::new(&h);
    ensure_eq!(drain(&h, &outbox, &receivers).await?.delivered, 1);
    let both = receivers.seen();
    ensure!(
        both[0].first_verifies && both[0].second_verifies,
        "{both:?}"
    );

    h.clock().advance(Duration::from_secs(3600));
    publish(&h, &endpoints, "acme", "order.paid").await?;
    ensure_eq!(drain(&h, &outbox, &receivers).await?.delivered, 1);
    let after = receivers.seen();
    ensure!(
        !after[1].first_verifies && after[1].second_verifies,
        "{after:?}"
    );
    ensure_eq!(
        endpoints
            .get("acme", &endpoint.id)
            .await?
            .previous_secret_expires,
        None
    );
    Ok(())
}

pub(crate) async fn a_delivery_uses_its_endpoints_url_and_secret_at_the_attempt(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    let endpoints = Endpoints::new(&outbox);
    let endpoint = endpoints.create(new("acme", "old.example", &["*"])).await?;
    publish(&h, &endpoints, "acme", "order.paid").await?;
    // Changed after the delivery was written, before its attempt.
    let updated = endpoints
        .update(
            "acme",
            &endpoint.id,
            EndpointUpdate::default()
                .url("https://new.example/in")
                .rate_limit(7)
                .body(crate::endpoint::BodyFormat::Slack),
        )
        .await?;
    ensure_eq!(updated.rate_limit, Some(7));
    ensure_eq!(updated.body, crate::endpoint::BodyFormat::Slack);
    endpoints
        .rotate_secret("acme", &endpoint.id, SECOND, Duration::ZERO)
        .await?;
    let receivers = Receivers::new(&h);
    ensure_eq!(drain(&h, &outbox, &receivers).await?.delivered, 1);
    let seen = receivers.seen();
    ensure_eq!(seen[0].url.as_str(), "https://new.example/in");
    ensure_eq!(seen[0].rate_limit, Some(7));
    let unlimited = endpoints
        .update(
            "acme",
            &endpoint.id,
            EndpointUpdate::default().without_rate_limit(),
        )
        .await?;
    ensure_eq!(unlimited.rate_limit, None);
    ensure!(
        !seen[0].first_verifies && seen[0].second_verifies,
        "{seen:?}"
    );
    // Deleted before its attempt: the delivery goes with it.
    publish(&h, &endpoints, "acme", "order.paid").await?;
    endpoints.delete("acme", &endpoint.id).await?;
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    ensure!(
        matches!(
            endpoints.get("acme", &endpoint.id).await,
            Err(Error::NotFound { .. })
        ),
        "still there"
    );
    Ok(())
}

pub(crate) async fn an_endpoint_answers_to_its_owner_only(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    let endpoints = Endpoints::new(&outbox);
    let theirs = endpoints.create(new("globex", "g.example", &["*"])).await?;
    endpoints.create(new("acme", "a.example", &["*"])).await?;
    let not_found = |result: Result<(), Error>| matches!(result, Err(Error::NotFound { .. }));
    ensure!(
        matches!(
            endpoints.get("acme", &theirs.id).await,
            Err(Error::NotFound { .. })
        ),
        "read across owners"
    );
    ensure!(
        not_found(endpoints.disable("acme", &theirs.id, "x").await),
        "disabled across owners"
    );
    ensure!(
        not_found(endpoints.delete("acme", &theirs.id).await),
        "deleted across owners"
    );
    let update = endpoints
        .update(
            "acme",
            &theirs.id,
            EndpointUpdate::default().url("https://evil.example/"),
        )
        .await;
    ensure!(
        matches!(update, Err(Error::NotFound { .. })),
        "updated across owners"
    );
    let rotate = endpoints
        .rotate_secret("acme", &theirs.id, SECOND, Duration::ZERO)
        .await;
    ensure!(
        matches!(rotate, Err(Error::NotFound { .. })),
        "rotated across owners"
    );
    ensure_eq!(endpoints.list("acme").await?.len(), 1);
    let kept = endpoints.get("globex", &theirs.id).await?;
    ensure_eq!(kept, theirs);
    // Acme's events never reach globex's endpoint.
    ensure_eq!(publish(&h, &endpoints, "acme", "order.paid").await?.1, 1);
    let receivers = Receivers::new(&h);
    drain(&h, &outbox, &receivers).await?;
    ensure_eq!(receivers.seen_by(&theirs.id).len(), 0);
    // Its owner deletes it, with no delivery left.
    endpoints.delete("globex", &theirs.id).await?;
    ensure_eq!(endpoints.list("globex").await?.len(), 0);
    Ok(())
}

pub(crate) async fn bad_endpoints_and_events_are_refused_and_write_nothing(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox().await?;
    let endpoints = Endpoints::new(&outbox).event_types(["order.paid"]);
    let refused = |result: Result<crate::endpoint::Endpoint, Error>, what: &str| matches!(result, Err(Error::InvalidInput { what: w, .. }) if w == what);
    let cases = [
        (
            NewEndpoint::new("acme", "http://a.example/", FIRST),
            "endpoint URL",
        ),
        (
            NewEndpoint::new("acme", "https://u:p@a.example/", FIRST),
            "endpoint URL",
        ),
        (
            NewEndpoint::new("acme", "https://127.0.0.1/", FIRST),
            "endpoint URL",
        ),
        (
            NewEndpoint::new("acme", "https://a.example/", "whsec_c3RyYW5nZXI="),
            "webhook secret",
        ),
        (
            NewEndpoint::new("", "https://a.example/", FIRST),
            "endpoint owner",
        ),
        (
            NewEndpoint::new("acme", "https://a.example/", FIRST).event_types(["order.lost"]),
            "event type",
        ),
        (
            NewEndpoint::new("acme", "https://a.example/", FIRST).rate_limit(0),
            "endpoint rate limit",
        ),
    ];
    for (endpoint, what) in cases {
        let shown = format!("{endpoint:?}");
        ensure!(
            refused(endpoints.create(endpoint).await, what),
            "{what}: {shown}"
        );
    }
    ensure_eq!(endpoints.list("acme").await?.len(), 0);
    let mut batch = Batch::new(h.db());
    let unknown = batch.publish(&endpoints, Event::raw_json("acme", "order.lost", "{}"));
    ensure!(
        matches!(
            unknown,
            Err(Error::InvalidInput {
                what: "event type",
                ..
            })
        ),
        "published an unknown type"
    );
    let dotted = batch.publish(
        &endpoints,
        Event::raw_json("acme", "order.paid", "{}").id("a.b"),
    );
    ensure!(
        matches!(
            dotted,
            Err(Error::InvalidInput {
                what: "event id",
                ..
            })
        ),
        "published a dotted id"
    );
    let outboxs_own = batch.publish(
        &endpoints,
        Event::raw_json("acme", "order.paid", "{}").id("evt_outbox_x"),
    );
    ensure!(
        matches!(
            outboxs_own,
            Err(Error::InvalidInput {
                what: "event id",
                ..
            })
        ),
        "published under an operational event's id"
    );
    let not_json = batch.publish(&endpoints, Event::raw_json("acme", "order.paid", "{"));
    ensure!(
        matches!(
            not_json,
            Err(Error::InvalidInput {
                what: "payload",
                ..
            })
        ),
        "published bad JSON"
    );
    batch.commit().await?;
    ensure_eq!(h.count(&format!("{}_events", outbox.table())).await?, 0);
    Ok(())
}

pub(crate) async fn an_endpoint_is_given_the_events_since_a_time(h: Harness) -> CaseResult {
    let outbox = h
        .outbox_builder(h.db(), &h.table("outbox"))
        .event_retention(Duration::from_secs(24 * 3600))
        .build()?;
    outbox.create_schema().await?;
    let endpoints = Endpoints::new(&outbox);
    let first = endpoints
        .create(new("acme", "a.example", &["order.paid"]))
        .await?;
    let (mut published, mut times) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        times.push(h.later(Duration::ZERO)?);
        published.push(publish(&h, &endpoints, "acme", "order.paid").await?.0);
        h.clock().advance(Duration::from_secs(60));
    }
    publish(&h, &endpoints, "acme", "order.lost").await?;
    let receivers = Receivers::new(&h);
    ensure_eq!(drain(&h, &outbox, &receivers).await?.delivered, 3);

    // Since the second event: two of its type, none of another type.
    let since = times[1];
    let recovered = endpoints.recover("acme", &first.id, since).await?;
    ensure_eq!((recovered.deliveries, recovered.next_since), (2, None));
    // Still pending: not written twice.
    ensure_eq!(
        endpoints
            .recover("acme", &first.id, since)
            .await?
            .deliveries,
        0
    );
    ensure_eq!(drain(&h, &outbox, &receivers).await?.delivered, 2);
    let events: Vec<_> = receivers
        .seen_by(&first.id)
        .into_iter()
        .filter_map(|s| s.event)
        .collect();
    ensure_eq!(events[3..].to_vec(), published[1..].to_vec());

    // A new endpoint gets the recent past it missed; another owner's, nothing.
    let late = endpoints.create(new("acme", "b.example", &["*"])).await?;
    let since = times[0];
    ensure_eq!(
        endpoints.recover("acme", &late.id, since).await?.deliveries,
        4
    );
    let theirs = endpoints.create(new("globex", "g.example", &["*"])).await?;
    ensure!(
        matches!(
            endpoints.recover("acme", &theirs.id, since).await,
            Err(Error::NotFound { .. })
        ),
        "recovered another owner's endpoint"
    );
    ensure_eq!(
        endpoints
            .recover("globex", &theirs.id, since)
            .await?
            .deliveries,
        0
    );

    // A delivery that died is written anew.
    let refused = Operators {
        refusing: vec![first.id.clone()],
        ..Operators::default()
    };
    let since = h.later(Duration::ZERO)?;
    publish(&h, &endpoints, "acme", "order.paid").await?;
    drainer_through(&h, &outbox, refused, 1)?.drain().await;
    ensure_eq!(outbox.stats().await?.dead, 1);
    ensure_eq!(
        endpoints
            .recover("acme", &first.id, since)
            .await?
            .deliveries,
        1
    );
    ensure_eq!(outbox.stats().await?.dead, 0);

    // Past the retention, a drain's sweep forgets them.
    h.clock().advance(Duration::from_secs(25 * 3600));
    drain(&h, &outbox, &receivers).await?;
    ensure_eq!(h.count(&format!("{}_events", outbox.table())).await?, 0);
    Ok(())
}

/// Fails the first attempt of each delivery to `failing`, delivers the
/// rest; records the event ids each endpoint received, in order.
#[derive(Clone, Default)]
struct Ordered {
    failing: String,
    failed: Arc<Mutex<Vec<String>>>,
    received: Arc<Mutex<Vec<(String, String)>>>,
}

impl Deliver for Ordered {
    fn deliver<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> crate::future::BoxFuture<'a, Delivery> {
        Box::pin(async move {
            yield_now().await;
            let event = message.event_id.clone().unwrap_or_default();
            if message.topic == self.failing {
                let mut failed = self.failed.lock().unwrap_or_else(PoisonError::into_inner);
                if !failed.contains(&message.id) {
                    failed.push(message.id.clone());
                    return Delivery::retry("receiver answered 500");
                }
            }
            self.received
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((message.topic.clone(), event));
            Delivery::Delivered
        })
    }
}

pub(crate) async fn an_ordering_key_orders_each_endpoints_deliveries_alone(
    h: Harness,
) -> CaseResult {
    let outbox = h.outbox_named("outbox", 5).await?;
    let endpoints = Endpoints::new(&outbox);
    let slow = endpoints
        .create(new("acme", "slow.example", &["*"]))
        .await?;
    let fast = endpoints
        .create(new("acme", "fast.example", &["*"]))
        .await?;
    let mut published = Vec::new();
    for n in 0..3 {
        let mut batch = Batch::new(h.db());
        let event = Event::raw_json("acme", "order.updated", format!("{{\"n\":{n}}}"))
            .ordering_key("order-1");
        let ticket = batch.publish(&endpoints, event)?;
        batch.commit().await?;
        published.push(ticket.id().to_owned());
    }
    let receiver = Ordered {
        failing: slow.id.clone(),
        ..Ordered::default()
    };
    for _ in 0..6 {
        drainer_through(&h, &outbox, receiver.clone(), 4)?
            .drain()
            .await;
        h.clock().advance(Duration::from_secs(60));
    }
    let received = receiver
        .received
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let of = |endpoint: &str| -> Vec<String> {
        received
            .iter()
            .filter(|(topic, _)| topic == endpoint)
            .map(|(_, event)| event.clone())
            .collect()
    };
    ensure_eq!(of(&fast.id), published);
    ensure_eq!(of(&slow.id), published);
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    Ok(())
}

/// Answers by endpoint: `Gone` for those in `gone`, `Permanent` for those
/// in `refusing`, delivered for the rest; records what each received.
#[derive(Clone, Default)]
struct Operators {
    gone: Vec<String>,
    refusing: Vec<String>,
    /// Topics whose every delivery fails, retryably.
    failing: Vec<String>,
    received: Arc<Mutex<Vec<(String, serde_json::Value)>>>,
}

impl Operators {
    fn received_by(&self, endpoint: &str) -> Vec<serde_json::Value> {
        self.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|(to, _)| to == endpoint)
            .map(|(_, payload)| payload.clone())
            .collect()
    }
}

impl Deliver for Operators {
    fn deliver<'a>(
        &'a self,
        message: &'a ClaimedMessage,
    ) -> crate::future::BoxFuture<'a, Delivery> {
        Box::pin(async move {
            yield_now().await;
            if self.gone.contains(&message.topic) {
                return Delivery::gone("receiver answered 410");
            }
            if self.refusing.contains(&message.topic) {
                return Delivery::permanent("receiver answered 400: bad payload");
            }
            if self.failing.contains(&message.topic) {
                return Delivery::retry("receiver answered 500");
            }
            let payload = serde_json::from_str(&message.payload).unwrap_or_default();
            self.received
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((message.topic.clone(), payload));
            Delivery::Delivered
        })
    }
}

/// An outbox whose operational events go to owner `ops`, retrying every
/// second up to `max_attempts`, as `configure` sets it further; its schema
/// created.
async fn operational_outbox(
    h: &Harness,
    max_attempts: u32,
    configure: impl FnOnce(crate::outbox::OutboxBuilder) -> crate::outbox::OutboxBuilder,
) -> Result<Outbox, Failure> {
    let backoff = crate::retry::ExponentialBackoff {
        base: Duration::from_secs(1),
        cap: Duration::from_secs(1),
    };
    let builder = h
        .outbox_builder(h.db(), &h.table("outbox"))
        .operational_events("ops")
        .retry_policy(crate::retry::RetryPolicy::new(max_attempts, backoff)?);
    let outbox = configure(builder).build()?;
    outbox.create_schema().await?;
    Ok(outbox)
}

pub(crate) async fn operational_events_reach_the_operators_endpoints(h: Harness) -> CaseResult {
    use crate::outbox::operational::{ENDPOINT_DISABLED, ENDPOINT_ENABLED, MESSAGE_DEAD};
    let outbox = operational_outbox(&h, 2, |builder| builder).await?;
    let endpoints = Endpoints::new(&outbox);
    let ops = endpoints
        .create(new(
            "ops",
            "ops.example",
            &[ENDPOINT_DISABLED, ENDPOINT_ENABLED, MESSAGE_DEAD],
        ))
        .await?;
    let broken_ops = endpoints
        .create(new("ops", "broken.example", &[MESSAGE_DEAD]))
        .await?;
    let gone = endpoints
        .create(new("acme", "gone.example", &["*"]))
        .await?;
    let refusing = endpoints
        .create(new("acme", "refusing.example", &["*"]))
        .await?;
    publish(&h, &endpoints, "acme", "order.paid").await?;
    let receiver = Operators {
        gone: vec![gone.id.clone()],
        refusing: vec![refusing.id.clone(), broken_ops.id.clone()],
        failing: vec!["mail".to_owned()],
        ..Operators::default()
    };
    let drainer = drainer_through(&h, &outbox, receiver.clone(), 1)?;
    drainer.drain().await;
    drainer.drain().await;
    let told = receiver.received_by(&ops.id);
    let types: Vec<&str> = told.iter().filter_map(|e| e["type"].as_str()).collect();
    ensure!(
        types.contains(&ENDPOINT_DISABLED) && types.contains(&MESSAGE_DEAD),
        "{told:?}"
    );
    let disabled = told
        .iter()
        .find(|e| e["type"] == ENDPOINT_DISABLED)
        .cloned()
        .unwrap_or_default();
    ensure_eq!(disabled["endpoint_id"].as_str(), Some(gone.id.as_str()));
    let dead = told
        .iter()
        .find(|e| e["type"] == MESSAGE_DEAD)
        .cloned()
        .unwrap_or_default();
    ensure_eq!(dead["topic"].as_str(), Some(refusing.id.as_str()));
    // The broken operator endpoint's own dead report is not reported again.
    let reports = h.count(&format!("{}_events", outbox.table())).await?;
    drainer.drain().await;
    drainer.drain().await;
    ensure_eq!(
        h.count(&format!("{}_events", outbox.table())).await?,
        reports
    );

    // An operator's change is told too, in its own batch.
    endpoints.enable("acme", &gone.id).await?;
    endpoints
        .disable("acme", &refusing.id, "customer asked")
        .await?;
    drainer.drain().await;
    let told = receiver.received_by(&ops.id);
    ensure!(
        told.iter()
            .any(|e| e["type"] == ENDPOINT_ENABLED && e["endpoint_id"] == gone.id.as_str()),
        "{told:?}"
    );
    ensure!(
        told.iter()
            .any(|e| e["type"] == ENDPOINT_DISABLED && e["reason"] == "customer asked"),
        "{told:?}"
    );
    // A plain message dead after its last attempt is told too.
    let mail = super::enqueue(&outbox, "mail").await?;
    for _ in 0..3 {
        drainer.drain().await;
        h.clock().advance(Duration::from_secs(2));
    }
    drainer.drain().await;
    let told = receiver.received_by(&ops.id);
    let exhausted = told
        .iter()
        .find(|e| e["type"] == MESSAGE_DEAD && e["message_id"] == mail.as_str());
    ensure!(
        exhausted.is_some_and(|e| e["error"]
            .as_str()
            .is_some_and(|error| error.contains("attempts exhausted"))),
        "{told:?}"
    );
    // The reserved types are the outbox's own.
    let mut batch = Batch::new(h.db());
    let reserved = batch.publish(&endpoints, Event::raw_json("acme", MESSAGE_DEAD, "{}"));
    ensure!(
        matches!(
            reserved,
            Err(Error::InvalidInput {
                what: "event type",
                ..
            })
        ),
        "published a reserved type"
    );
    Ok(())
}

pub(crate) async fn a_receiver_failing_too_long_is_told_once_and_then_its_recovery(
    h: Harness,
) -> CaseResult {
    use crate::outbox::operational::{RECEIVER_FAILING, RECEIVER_RECOVERED};
    let outbox = operational_outbox(&h, 1_000, |builder| {
        builder.receiver_failing_after(Duration::from_secs(600))
    })
    .await?;
    let endpoints = Endpoints::new(&outbox);
    let ops = endpoints
        .create(new(
            "ops",
            "ops.example",
            &[RECEIVER_FAILING, RECEIVER_RECOVERED],
        ))
        .await?;
    let began = crate::time::Clock::now(h.clock());
    for _ in 0..4 {
        super::enqueue(&outbox, "mail").await?;
        super::enqueue(&outbox, "brief").await?;
    }
    let received = Arc::default();
    let failing = |topics: &[&str]| Operators {
        failing: topics.iter().map(|t| (*t).to_owned()).collect(),
        received: Arc::clone(&received),
        ..Operators::default()
    };
    let drain_through = |receiver: Operators| async {
        let drainer = drainer_through(&h, &outbox, receiver, 1)?;
        drainer.drain().await;
        drainer.drain().await;
        Ok::<_, Failure>(())
    };
    drain_through(failing(&["mail", "brief"])).await?;
    let told = |received: &Arc<Mutex<Vec<(String, serde_json::Value)>>>| {
        Operators {
            received: Arc::clone(received),
            ..Operators::default()
        }
        .received_by(&ops.id)
    };
    ensure_eq!(told(&received).len(), 0);
    // 11 minutes on, "mail" still fails and "brief" answers again.
    h.clock().advance(Duration::from_secs(660));
    drain_through(failing(&["mail"])).await?;
    let reports = told(&received);
    ensure_eq!(reports.len(), 1);
    ensure_eq!(reports[0]["type"].as_str(), Some(RECEIVER_FAILING));
    ensure_eq!(reports[0]["receiver"].as_str(), Some("mail"));
    ensure_eq!(reports[0]["error"].as_str(), Some("receiver answered 500"));
    ensure_eq!(
        reports[0]["since_ms"].as_i64(),
        Some(began.as_unix_millis())
    );
    ensure_eq!(reports[0]["failing_minutes"].as_i64(), Some(11));
    // Told once per outage.
    h.clock().advance(Duration::from_secs(120));
    drain_through(failing(&["mail"])).await?;
    ensure_eq!(told(&received).len(), 1);
    // It answers again, after a day without a drain (past the streak's
    // memory): told so. ("brief" was never told of, so its recovery is not
    // either.)
    h.clock().advance(Duration::from_secs(25 * 3600));
    drain_through(failing(&[])).await?;
    let reports = told(&received);
    ensure_eq!(reports.len(), 2);
    ensure_eq!(reports[1]["type"].as_str(), Some(RECEIVER_RECOVERED));
    ensure_eq!(reports[1]["receiver"].as_str(), Some("mail"));
    ensure_eq!(h.count(outbox.table().as_str()).await?, 0);
    Ok(())
}

pub(crate) async fn an_operators_own_failing_endpoint_is_not_reported(h: Harness) -> CaseResult {
    use crate::outbox::operational::RECEIVER_FAILING;
    let outbox = operational_outbox(&h, 1_000, |builder| {
        builder.receiver_failing_after(Duration::from_secs(600))
    })
    .await?;
    let endpoints = Endpoints::new(&outbox);
    let ops = endpoints
        .create(new("ops", "ops.example", &[RECEIVER_FAILING]))
        .await?;
    // The operator's own endpoint, failing: its deliveries fail in turn.
    let broken = endpoints
        .create(new("ops", "broken.example", &["order.paid"]))
        .await?;
    for _ in 0..3 {
        publish(&h, &endpoints, "ops", "order.paid").await?;
        super::enqueue(&outbox, "mail").await?;
    }
    let receiver = Operators {
        failing: vec![broken.id.clone(), "mail".to_owned()],
        ..Operators::default()
    };
    for _ in 0..2 {
        let drainer = drainer_through(&h, &outbox, receiver.clone(), 1)?;
        drainer.drain().await;
        drainer.drain().await;
        h.clock().advance(Duration::from_secs(660));
    }
    let told = receiver.received_by(&ops.id);
    let about: Vec<&str> = told.iter().filter_map(|e| e["receiver"].as_str()).collect();
    ensure_eq!(about, vec!["mail"]);
    Ok(())
}

pub(crate) async fn messages_a_claim_parks_as_dead_are_told_in_its_batch(h: Harness) -> CaseResult {
    use crate::outbox::operational::MESSAGE_DEAD;
    let outbox = operational_outbox(&h, 1, |builder| builder).await?;
    let endpoints = Endpoints::new(&outbox);
    let ops = endpoints
        .create(new("ops", "ops.example", &[MESSAGE_DEAD, "order.paid"]))
        .await?;
    let mut mail = vec![
        super::enqueue(&outbox, "mail").await?,
        super::enqueue(&outbox, "mail").await?,
    ];
    // A delivery to the operator's own endpoint: its death is not told.
    publish(&h, &endpoints, "ops", "order.paid").await?;
    // Each delivered alone, its attempt spent up front; the drainer dies.
    let claim = outbox.claim(10, super::LEASE).await?;
    ensure_eq!(claim.messages.len(), 3);
    for message in &claim.messages {
        let (isolate, _) = outbox.isolate_statement(message.lease(), super::LEASE, true)?;
        ensure_eq!(h.db().execute(&isolate).await?, 1);
    }
    h.clock().advance(super::LEASE);
    let trips = h.counts().round_trips;
    let claim = outbox.claim(10, super::LEASE).await?;
    ensure_eq!(h.counts().round_trips, trips + 1);
    ensure_eq!(claim.exhausted.len(), 3);
    let receiver = Operators::default();
    drainer_through(&h, &outbox, receiver.clone(), 1)?
        .drain()
        .await;
    let told = receiver.received_by(&ops.id);
    ensure_eq!(told.len(), 2);
    let mut told_of: Vec<String> = told
        .iter()
        .filter_map(|e| e["message_id"].as_str().map(str::to_owned))
        .collect();
    told_of.sort();
    mail.sort();
    ensure_eq!(told_of, mail);
    for event in &told {
        ensure_eq!(event["type"].as_str(), Some(MESSAGE_DEAD));
        ensure_eq!(event["topic"].as_str(), Some("mail"));
        ensure!(
            event["error"]
                .as_str()
                .is_some_and(|error| error.contains("expired without a settle")),
            "{event}"
        );
    }
    Ok(())
}

pub(crate) async fn a_filter_lets_through_only_the_events_it_matches(h: Harness) -> CaseResult {
    let outbox = h.outbox().await?;
    filtered_events(&h, &outbox, None).await
}

/// As [`a_filter_lets_through_only_the_events_it_matches`], the events
/// sealed (see [`seal`](crate::seal)), under a data key of their own: the
/// filter reads the clear payload at publish time, and a recovery reads it
/// from the payloads it opens.
pub(crate) async fn a_filter_reads_sealed_events_at_publish_and_in_a_recovery(
    h: Harness,
) -> CaseResult {
    let ring = crate::seal::KeyRing::builder()
        .hash_key(&[7; 32])
        .key("k1", &[1; 32])
        .build()?;
    let outbox = h
        .outbox_builder(h.db(), &h.table("outbox"))
        .key_ring(ring)
        .build()?;
    outbox.create_schema().await?;
    filtered_events(&h, &outbox, Some("customer-1")).await?;
    let stored = h
        .sql(
            &format!("SELECT payload FROM \"{}_events\"", outbox.table()),
            Vec::new(),
        )
        .await?;
    for row in stored.iter() {
        let payload: String = row.get("payload")?;
        ensure!(
            payload.starts_with("sealed:1:d:"),
            "an event kept clear: {payload}"
        );
    }
    Ok(())
}

async fn filtered_events(
    h: &Harness,
    outbox: &Outbox,
    subject: Option<&'static str>,
) -> CaseResult {
    let endpoints = Endpoints::new(outbox);
    let eu = endpoints
        .create(new("acme", "eu.example", &["*"]).filter("customer.region", "eu"))
        .await?;
    let big = endpoints
        .create(new("acme", "big.example", &["*"]).filter("total", "42"))
        .await?;
    let every = endpoints.create(new("acme", "all.example", &["*"])).await?;
    ensure_eq!(
        eu.filter
            .as_ref()
            .map(|f| (f.field.as_str(), f.equals.as_str())),
        Some(("customer.region", "eu"))
    );
    let publish_payload = |payload: &'static str| {
        let endpoints = &endpoints;
        async move {
            let mut batch = Batch::new(h.db());
            let event = Event::raw_json("acme", "order.paid", payload);
            let event = match subject {
                Some(subject) => event.subject(subject),
                None => event,
            };
            let ticket = batch.publish(endpoints, event)?;
            let committed = batch.commit().await?;
            Ok::<u64, Failure>(committed.published(&ticket)?)
        }
    };
    ensure_eq!(
        publish_payload(r#"{"customer":{"region":"eu"},"total":7}"#).await?,
        2
    );
    ensure_eq!(
        publish_payload(r#"{"customer":{"region":"us"},"total":42}"#).await?,
        2
    );
    ensure_eq!(publish_payload(r#"{"note":"no fields"}"#).await?, 1);
    ensure_eq!(rows_of(h, outbox, &eu.id).await?.0, 1);
    ensure_eq!(rows_of(h, outbox, &big.id).await?.0, 1);
    ensure_eq!(rows_of(h, outbox, &every.id).await?.0, 3);

    // Changed, it applies to what is published next; a recovery keeps to it.
    endpoints
        .update(
            "acme",
            &eu.id,
            EndpointUpdate::default().filter("customer.region", "us"),
        )
        .await?;
    ensure_eq!(publish_payload(r#"{"customer":{"region":"us"}}"#).await?, 2);
    let receivers = Receivers::new(h);
    drain(h, outbox, &receivers).await?;
    let since = crate::time::Timestamp::EPOCH;
    ensure_eq!(
        endpoints.recover("acme", &eu.id, since).await?.deliveries,
        2
    );
    // Without a filter, every event it subscribes to, no payload read.
    ensure_eq!(
        endpoints
            .recover("acme", &every.id, since)
            .await?
            .deliveries,
        4
    );
    endpoints
        .update("acme", &eu.id, EndpointUpdate::default().without_filter())
        .await?;
    ensure_eq!(endpoints.get("acme", &eu.id).await?.filter, None);
    let bad = endpoints
        .create(new("acme", "bad.example", &["*"]).filter("a..b", "x"))
        .await;
    ensure!(
        matches!(
            bad,
            Err(Error::InvalidInput {
                what: "endpoint filter",
                ..
            })
        ),
        "a bad path passed"
    );
    Ok(())
}

/// Platform destinations (`mailto:`, `service://`, `workflow://`,
/// `queue://`) are endpoints like any other once the application allows
/// them: stored with their kind, secrets only where they sign, and fanned
/// out in the business batch with their URL at the attempt.
pub(crate) async fn platform_endpoints_are_allowed_stored_and_fanned_out_alike(
    h: Harness,
) -> CaseResult {
    use crate::endpoint::EndpointKind;
    let outbox = h.outbox().await?;
    let refused = |result: Result<crate::endpoint::Endpoint, Error>, what: &str| matches!(result, Err(Error::InvalidInput { what: w, .. }) if w == what);
    let closed = Endpoints::new(&outbox);
    for url in [
        "mailto:ops@acme.example",
        "workflow://FLOW",
        "queue://EVENTS",
    ] {
        let result = closed.create(NewEndpoint::unsigned("acme", url)).await;
        ensure!(refused(result, "endpoint URL"), "{url} without leave");
    }
    let endpoints = Endpoints::new(&outbox)
        .allow_email_to(["acme.example"])
        .allow_bindings(["BILLING", "FLOW", "EVENTS"]);
    let unlisted = endpoints
        .create(NewEndpoint::unsigned("acme", "queue://OTHER"))
        .await;
    ensure!(refused(unlisted, "endpoint URL"), "a binding not allowed");
    let unsigned_service = endpoints
        .create(NewEndpoint::unsigned("acme", "service://BILLING/in"))
        .await;
    ensure!(
        refused(unsigned_service, "webhook secret"),
        "a service endpoint without a secret"
    );
    let mut kinds = Vec::new();
    for new in [
        NewEndpoint::unsigned("acme", "mailto:ops@acme.example"),
        NewEndpoint::new("acme", "service://BILLING/in", FIRST),
        NewEndpoint::unsigned("acme", "workflow://FLOW"),
        NewEndpoint::unsigned("acme", "queue://EVENTS"),
        NewEndpoint::new("acme", "https://hooks.acme.example/in", FIRST),
    ] {
        let endpoint = endpoints.create(new).await?;
        kinds.push((endpoint.id.clone(), endpoint.kind, endpoint.url.clone()));
    }
    ensure_eq!(
        kinds.iter().map(|(_, kind, _)| *kind).collect::<Vec<_>>(),
        vec![
            EndpointKind::Email,
            EndpointKind::Service,
            EndpointKind::Workflow,
            EndpointKind::Queue,
            EndpointKind::Https
        ]
    );
    // An unsigned endpoint cannot become one that signs without a secret.
    let workflow = &kinds[2].0;
    let resigned = endpoints
        .update(
            "acme",
            workflow,
            EndpointUpdate::default().url("https://a.example/"),
        )
        .await;
    ensure!(
        matches!(
            resigned,
            Err(Error::InvalidInput {
                what: "endpoint secret",
                ..
            })
        ),
        "an unsigned endpoint took an HTTPS URL"
    );
    let (_, published) = publish(&h, &endpoints, "acme", "order.paid").await?;
    ensure_eq!(published, 5);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    let deliver = crate::drain::deliver_fn(move |message: ClaimedMessage| {
        let record = record.clone();
        async move {
            let url = message
                .endpoint_target
                .as_ref()
                .and_then(|target| Target::from_json(&target.0).ok())
                .map(|target| (target.url, target.secrets.len()));
            record
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((message.topic.clone(), url));
            Delivery::Delivered
        }
    });
    let report = drainer_through(&h, &outbox, deliver, 1)?.drain().await;
    ensure_eq!(report.delivered, 5);
    let mut seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
    seen.sort();
    let mut expected: Vec<_> = kinds
        .iter()
        .map(|(id, kind, url)| (id.clone(), Some((url.clone(), usize::from(kind.signs())))))
        .collect();
    expected.sort();
    ensure_eq!(seen, expected);
    Ok(())
}

pub(crate) async fn every_owners_endpoints_page_and_a_test_event_reaches_one(
    h: Harness,
) -> CaseResult {
    let outbox = h
        .outbox_builder(h.db(), &h.table("outbox"))
        .event_retention(Duration::from_secs(24 * 3600))
        .build()?;
    outbox.create_schema().await?;
    let endpoints = Endpoints::new(&outbox).event_types(["order.paid"]);
    let mut created = Vec::new();
    for (owner, host) in [
        ("acme", "a.example"),
        ("globex", "g.example"),
        ("acme", "b.example"),
    ] {
        created.push(
            endpoints
                .create(new(owner, host, &["order.paid"]))
                .await?
                .id,
        );
    }
    created.sort();

    // Two pages of every owner's endpoints, in id order.
    let first = endpoints.list_all(None, 2).await?;
    ensure_eq!(first.next_after.as_deref(), Some(created[1].as_str()));
    let second = endpoints.list_all(first.next_after.as_deref(), 2).await?;
    ensure_eq!(second.next_after, None);
    let listed: Vec<String> = first
        .endpoints
        .iter()
        .chain(&second.endpoints)
        .map(|endpoint| endpoint.id.clone())
        .collect();
    ensure_eq!(listed, created);
    for limit in [0, Endpoints::MAX_PAGE + 1] {
        ensure!(
            matches!(
                endpoints.list_all(None, limit).await,
                Err(Error::InvalidInput { .. })
            ),
            "a page limit out of range is refused"
        );
    }

    // A test event reaches the one endpoint, whatever it subscribes to.
    let acme = endpoints.list("acme").await?;
    let (tested, other) = (&acme[0].id, &acme[1].id);
    let event = endpoints.send_test("acme", tested).await?;
    ensure!(
        event.starts_with(crate::outbox::operational::EVENT_ID_PREFIX),
        "a test event's id is the outbox's own"
    );
    ensure!(
        matches!(
            endpoints.send_test("globex", tested).await,
            Err(Error::NotFound { .. })
        ),
        "a test event sent across owners"
    );
    let receivers = Receivers::new(&h);
    ensure_eq!(drain(&h, &outbox, &receivers).await?.delivered, 1);
    let seen = receivers.seen();
    ensure_eq!(seen.len(), 1);
    ensure_eq!(seen[0].endpoint.as_str(), tested.as_str());
    ensure_eq!(seen[0].event.as_deref(), Some(event.as_str()));
    ensure!(seen[0].first_verifies, "a test event is signed");
    // Not kept: a recovery gives it to no one.
    let recovered = endpoints
        .recover("acme", other, crate::time::Timestamp::EPOCH)
        .await?;
    ensure_eq!(recovered.deliveries, 0);

    // A disabled endpoint takes none, and nothing is written.
    endpoints.disable("acme", other, "maintenance").await?;
    ensure!(
        matches!(
            endpoints.send_test("acme", other).await,
            Err(Error::InvalidInput { .. })
        ),
        "a disabled endpoint is sent a test event"
    );
    ensure_eq!(rows_of(&h, &outbox, other).await?.0, 0);
    Ok(())
}

pub(crate) async fn alerts_are_told_once_per_window_by_the_sweep_of_a_drain(
    h: Harness,
) -> CaseResult {
    use crate::outbox::Alert;
    use crate::outbox::operational::ALERT;
    let minutes = |n: u64| Duration::from_secs(60 * n);
    let outbox = operational_outbox(&h, 1, |builder| {
        builder
            .alert(Alert::dead_letters(2, minutes(10)))
            .alert(Alert::oldest_due(minutes(5)))
    })
    .await?;
    let endpoints = Endpoints::new(&outbox);
    let ops = endpoints
        .create(new("ops", "ops.example", &[ALERT]))
        .await?;
    let alerts = || async {
        let rows = h
            .sql(
                &format!(
                    "SELECT payload FROM \"{}_events\" WHERE event_type = ? ORDER BY created_at, id",
                    outbox.table()
                ),
                vec![ALERT.into()],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let payload: String = row.get("payload")?;
                Ok(serde_json::from_str::<serde_json::Value>(&payload)
                    .map_err(|e| Failure(e.to_string()))?["condition"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned())
            })
            .collect::<Result<Vec<String>, Failure>>()
    };
    let sweep = || async {
        h.db().batch_atomic(&outbox.sweep_statements()?).await?;
        Ok::<(), Failure>(())
    };

    // One dead letter holds no alert; two do, told once by a drain's sweep
    // and delivered to the operator's endpoint.
    enqueue_message(&outbox, Message::raw_json("mail", "{}")).await?;
    let receiver = Operators {
        refusing: vec!["mail".to_owned()],
        ..Operators::default()
    };
    let drainer = drainer_through(&h, &outbox, receiver.clone(), 1)?;
    drainer.drain().await;
    sweep().await?;
    ensure_eq!(alerts().await?, Vec::<String>::new());
    enqueue_message(&outbox, Message::raw_json("mail", "{}")).await?;
    drainer.drain().await;
    h.clock().advance(minutes(1) + Duration::from_secs(1));
    drainer.drain().await;
    drainer.drain().await;
    ensure_eq!(alerts().await?, vec!["dead_letters".to_owned()]);
    let told = receiver.received_by(&ops.id);
    ensure_eq!(told.len(), 1);
    ensure_eq!(told[0]["rule"].as_str(), Some("dead_letters:2:600s"));
    // Not again in the same window, however often it is checked.
    h.clock().advance(minutes(1) + Duration::from_secs(1));
    drainer.drain().await;
    sweep().await?;
    ensure_eq!(alerts().await?.len(), 1);

    // A message due for over 5 minutes and unclaimed holds the other rule,
    // unless its topic is paused.
    enqueue_message(&outbox, Message::raw_json("late", "{}")).await?;
    h.clock().advance(minutes(6));
    outbox.pause_topic("late", "maintenance").await?;
    sweep().await?;
    ensure_eq!(alerts().await?.len(), 1);
    outbox.resume_topic("late").await?;
    sweep().await?;
    ensure_eq!(alerts().await?[1..].to_vec(), vec!["oldest_due".to_owned()]);

    // In the next window, only what still holds is told again: the letters
    // died over 10 minutes ago, the late message is still due.
    h.clock().advance(minutes(60));
    sweep().await?;
    ensure_eq!(alerts().await?[2..].to_vec(), vec!["oldest_due".to_owned()]);

    // An alert needs an operator to tell, and numbers in range.
    let unowned = h
        .outbox_builder(h.db(), &h.table("unowned"))
        .alert(Alert::oldest_due(minutes(5)))
        .build();
    ensure!(
        matches!(unowned, Err(Error::InvalidInput { .. })),
        "an alert with no operator was built"
    );
    Ok(())
}
