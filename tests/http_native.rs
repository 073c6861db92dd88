//! The native `HttpDeliverer` (reqwest, rustls) against real HTTP servers on
//! loopback: what it sends (idempotency key, the caller's headers, a
//! Standard Webhooks signature stamped by the injected clock), how answers
//! map to verdicts (`Retry-After` honoured, 410 pausing, 3xx never
//! followed), and that a hung request is cut at its timeout with its
//! connection closed.

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use workers_outbox::drain::Deliver;
use workers_outbox::http::{HttpDeliverer, StatusMapping, Treat};
use workers_outbox::testing::{ManualClock, TestOutbox};
use workers_outbox::trace::TraceContext;
use workers_outbox::webhook::{self, Signer, Verifier};
use workers_outbox::{ClaimedMessage, Clock, Delivery, Drainer, Message, Timestamp};

/// What one request looked like.
#[derive(Debug, Clone, Default)]
struct Seen {
    request_line: String,
    /// Lower-case names.
    headers: Vec<(String, String)>,
    body: String,
}

impl Seen {
    fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }
}

/// How the server answers a request: raw response bytes, or never.
#[derive(Clone)]
enum Answer {
    Raw(String),
    Hang,
}

fn status(code: u16, extra_headers: &str, body: &str) -> Answer {
    Answer::Raw(format!(
        "HTTP/1.1 {code} X\r\ncontent-length: {}\r\nconnection: close\r\n{extra_headers}\r\n{body}",
        body.len()
    ))
}

/// A loopback server answering every request with `answer`; records each
/// request, and sends on `closed` when a hung request's connection closes.
struct Server {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
}

async fn server(answer: Answer) -> (Server, oneshot::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/hooks?token=s3cret",
        listener.local_addr().unwrap()
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (tx, rx) = oneshot::channel();
    let closed = Arc::new(Mutex::new(Some(tx)));
    let (s, c) = (seen.clone(), closed.clone());
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (s, c, answer) = (s.clone(), c.clone(), answer.clone());
            tokio::spawn(async move { serve(stream, answer, s, c).await });
        }
    });
    (Server { url, seen }, rx)
}

async fn serve(
    mut stream: TcpStream,
    answer: Answer,
    seen: Arc<Mutex<Vec<Seen>>>,
    closed: Arc<Mutex<Option<oneshot::Sender<()>>>>,
) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    while buffer.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    let body = String::from_utf8_lossy(&buffer[head_end..]).into_owned();
    seen.lock().unwrap().push(Seen {
        request_line,
        headers,
        body,
    });
    match answer {
        Answer::Raw(response) => {
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        }
        Answer::Hang => {
            // Until the client goes away: a read of 0 bytes or an error.
            let _ = stream.read(&mut chunk).await;
            if let Some(tx) = closed.lock().unwrap().take() {
                let _ = tx.send(());
            }
        }
    }
}

/// A message claimed from an in-memory outbox, and that outbox.
async fn claimed(payload: &str) -> (TestOutbox, ClaimedMessage) {
    let t = TestOutbox::new().await.unwrap();
    t.outbox
        .enqueue_alone(Message::raw_json("hook", payload))
        .await
        .unwrap();
    let mut claim = t.outbox.claim(1, Duration::from_secs(60)).await.unwrap();
    (t, claim.messages.remove(0))
}

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

#[tokio::test]
async fn sends_the_payload_with_its_idempotency_key_headers_and_signature() {
    let (server, _) = server(status(202, "", "")).await;
    let (_t, message) = claimed(r#"{"order":42}"#).await;
    let clock = ManualClock::new(Timestamp::from_unix_millis(1_614_265_330_500).unwrap());
    let deliver = HttpDeliverer::new(&server.url)
        .unwrap()
        .header("Authorization", "Bearer api-key")
        .unwrap()
        .signed(Signer::new(webhook::secrets(SECRET).unwrap()).unwrap())
        .clock(Arc::new(clock.clone()));
    assert_eq!(deliver.deliver(&message).await, Delivery::Delivered);

    let seen = server.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.request_line, "POST /hooks?token=s3cret HTTP/1.1");
    assert_eq!(seen.body, r#"{"order":42}"#);
    assert_eq!(
        seen.header("content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(seen.header("idempotency-key"), Some(message.id.clone()));
    assert_eq!(
        seen.header("authorization").as_deref(),
        Some("Bearer api-key")
    );
    assert_eq!(seen.header("webhook-id"), Some(message.id.clone()));
    // Stamped by the injected clock, in whole seconds.
    assert_eq!(
        seen.header("webhook-timestamp").as_deref(),
        Some("1614265330")
    );
    let verifier = Verifier::new(webhook::secrets(SECRET).unwrap()).unwrap();
    let headers = |name: &str| seen.header(name);
    let verified = verifier
        .verify_at(&headers, seen.body.as_bytes(), clock.now())
        .unwrap();
    assert_eq!(verified.id, message.id);
}

#[tokio::test]
async fn a_hung_request_is_cut_at_its_timeout_and_its_connection_closed() {
    let (server, closed) = server(Answer::Hang).await;
    let (_t, message) = claimed("{}").await;
    let deliver = HttpDeliverer::new(&server.url)
        .unwrap()
        .timeout(Duration::from_millis(300));
    assert_eq!(
        deliver.deliver(&message).await,
        Delivery::retry("no answer within 300 ms; the request was aborted")
    );
    // The server sees its connection closed: the request was cancelled,
    // not left running.
    tokio::time::timeout(Duration::from_secs(10), closed)
        .await
        .expect("the hung connection was never closed")
        .unwrap();
    assert_eq!(server.seen.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn retry_after_is_honoured_in_seconds_and_as_a_date_on_the_injected_clock() {
    let (_t, message) = claimed("{}").await;
    // Tue, 14 Nov 2023 22:13:20 GMT
    let clock = ManualClock::new(Timestamp::from_unix_millis(1_700_000_000_000).unwrap());
    let (throttled, _) = server(status(429, "retry-after: 120\r\n", "slow down")).await;
    let deliver = HttpDeliverer::new(&throttled.url).unwrap();
    assert_eq!(
        deliver.deliver(&message).await,
        Delivery::unavailable(
            "receiver answered 429: slow down",
            Some(Duration::from_secs(120))
        )
    );
    let (failing, _) = server(status(
        500,
        "retry-after: Tue, 14 Nov 2023 22:14:50 GMT\r\n",
        "",
    ))
    .await;
    let deliver = HttpDeliverer::new(&failing.url)
        .unwrap()
        .clock(Arc::new(clock));
    assert_eq!(
        deliver.deliver(&message).await,
        Delivery::RetryAfter {
            error: "receiver answered 500".into(),
            delay: Duration::from_secs(90),
        }
    );
}

#[tokio::test]
async fn statuses_map_as_documented_and_as_overridden() {
    let (_t, message) = claimed("{}").await;
    let long = "x".repeat(10_000);
    let cases = [
        (status(204, "", ""), Delivery::Delivered),
        (
            status(503, "", ""),
            Delivery::unavailable("receiver answered 503", None),
        ),
        (
            status(500, "", "oops"),
            Delivery::retry("receiver answered 500: oops"),
        ),
        (
            status(410, "", "endpoint deleted"),
            Delivery::gone("receiver answered 410: endpoint deleted"),
        ),
        (
            status(400, "", &long),
            Delivery::permanent(format!("receiver answered 400: {}", &long[..200])),
        ),
    ];
    for (answer, expected) in cases {
        let (server, _) = server(answer).await;
        let deliver = HttpDeliverer::new(&server.url).unwrap();
        assert_eq!(deliver.deliver(&message).await, expected);
    }
    let (conflict, _) = server(status(409, "", "")).await;
    let deliver = HttpDeliverer::new(&conflict.url)
        .unwrap()
        .statuses(StatusMapping::default().treat(409, Treat::Delivered));
    assert_eq!(deliver.deliver(&message).await, Delivery::Delivered);
}

#[tokio::test]
async fn a_redirect_is_never_followed() {
    let (target, _) = server(status(202, "", "")).await;
    let (moved, _) = server(status(302, &format!("location: {}\r\n", target.url), "")).await;
    let (_t, message) = claimed("{}").await;
    let deliver = HttpDeliverer::new(&moved.url).unwrap();
    assert_eq!(
        deliver.deliver(&message).await,
        Delivery::retry("receiver answered 302")
    );
    assert_eq!(moved.seen.lock().unwrap().len(), 1);
    assert!(
        target.seen.lock().unwrap().is_empty(),
        "the redirect was followed"
    );
}

#[tokio::test]
async fn an_unreachable_receiver_spends_no_attempt_and_the_url_stays_out_of_errors() {
    // A port nobody listens on.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "http://{}/hooks?token=s3cret",
        listener.local_addr().unwrap()
    );
    drop(listener);
    let (_t, message) = claimed("{}").await;
    let deliver = HttpDeliverer::new(&url).unwrap();
    match deliver.deliver(&message).await {
        Delivery::Unavailable { error, retry_after } => {
            assert!(error.starts_with("receiver unreachable"), "{error}");
            assert!(!error.contains("s3cret"), "the URL's query leaked: {error}");
            assert_eq!(retry_after, None);
        }
        other => panic!("{other:?}"),
    }
    assert!(!format!("{deliver:?}").contains("s3cret"));
}

#[tokio::test]
async fn a_drain_through_it_delivers_and_a_410_pauses_the_topic() {
    let (ok, _) = server(status(202, "", "")).await;
    let t = TestOutbox::new().await.unwrap();
    for n in 0..3 {
        t.outbox
            .enqueue_alone(Message::raw_json("hook", format!(r#"{{"n":{n}}}"#)))
            .await
            .unwrap();
    }
    let drainer = Drainer::builder(t.outbox.clone(), HttpDeliverer::new(&ok.url).unwrap())
        .build()
        .unwrap();
    assert_eq!(drainer.drain().await.delivered, 3);
    assert_eq!(ok.seen.lock().unwrap().len(), 3);

    let (gone, _) = server(status(410, "", "")).await;
    t.outbox
        .enqueue_alone(Message::raw_json("hook", "{}"))
        .await
        .unwrap();
    let drainer = Drainer::builder(t.outbox.clone(), HttpDeliverer::new(&gone.url).unwrap())
        .build()
        .unwrap();
    let report = drainer.drain().await;
    assert_eq!(report.paused, vec!["hook".to_owned()]);
    let paused = t.outbox.paused_topics().await.unwrap();
    assert_eq!(paused[0].reason, "receiver answered 410");
    assert_eq!(t.outbox.stats().await.unwrap().pending, 1);
}

#[tokio::test]
async fn a_url_with_credentials_is_refused_and_debug_shows_the_origin_only() {
    for url in [
        "https://user:pw@hooks.example/x",
        "https://user@hooks.example/x",
        "ftp://hooks.example/x",
        "not a url",
    ] {
        match HttpDeliverer::new(url) {
            Err(workers_outbox::Error::InvalidInput { what, .. }) => {
                assert_eq!(what, "delivery URL")
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    let deliver = HttpDeliverer::new("https://hooks.example/T000/B000/XXXX?token=s3cret")
        .unwrap()
        .header("authorization", "Bearer api-key")
        .unwrap();
    let shown = format!("{deliver:?}");
    assert!(shown.contains("https://hooks.example"), "{shown}");
    for secret in ["T000", "XXXX", "s3cret", "api-key"] {
        assert!(!shown.contains(secret), "{secret} shown: {shown}");
    }
}

#[tokio::test]
async fn a_messages_trace_context_is_sent_as_traceparent_and_tracestate() {
    let (server, _) = server(status(202, "", "")).await;
    let t = TestOutbox::new().await.unwrap();
    let parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let trace = TraceContext::parse(parent, Some("rojo=00f067aa0ba902b7")).unwrap();
    t.outbox
        .enqueue_alone(Message::raw_json("hook", "{}").trace(trace))
        .await
        .unwrap();
    let message = t
        .outbox
        .claim(1, Duration::from_secs(60))
        .await
        .unwrap()
        .messages
        .remove(0);
    let deliver = HttpDeliverer::new(&server.url).unwrap();
    assert_eq!(deliver.deliver(&message).await, Delivery::Delivered);
    let seen = server.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.header("traceparent").as_deref(), Some(parent));
    assert_eq!(
        seen.header("tracestate").as_deref(),
        Some("rojo=00f067aa0ba902b7")
    );
    // The deliverer's own headers cannot be overridden.
    assert!(
        HttpDeliverer::new(&server.url)
            .unwrap()
            .header("traceparent", parent)
            .is_err()
    );
}

#[tokio::test]
async fn endpoints_receive_one_event_under_one_webhook_id_signed_with_their_own_secret() {
    use workers_outbox::endpoint::{EndpointDeliverer, EndpointState, NewEndpoint};

    const OTHER: &str = "whsec_bmV3LXNlY3JldC1rZXktb2YtMjQtYnl0ZXM=";
    let (ok, _) = server(status(204, "", "")).await;
    let (gone, _) = server(status(410, "", "endpoint removed")).await;
    let (t, endpoints) = local_endpoints().await;
    let healthy = endpoints
        .create(NewEndpoint::new("acme", &ok.url, SECRET))
        .await
        .unwrap();
    let removed = endpoints
        .create(NewEndpoint::new("acme", &gone.url, OTHER))
        .await
        .unwrap();
    let (event, published) = publish_to(&t, &endpoints, r#"{"order":7}"#).await;
    assert_eq!(published, 2);

    let deliver = EndpointDeliverer::new()
        .unwrap()
        .clock(Arc::new(t.clock.clone()));
    let report = Drainer::builder(t.outbox.clone(), deliver)
        .build()
        .unwrap()
        .drain()
        .await;
    assert_eq!((report.delivered, report.paused.len()), (1, 1), "{report}");

    for (server, secret) in [(&ok, SECRET), (&gone, OTHER)] {
        let seen = server.seen.lock().unwrap()[0].clone();
        assert_eq!(seen.header("webhook-id").as_deref(), Some(event.as_str()));
        assert_eq!(
            seen.header("idempotency-key").as_deref(),
            Some(event.as_str())
        );
        assert_eq!(seen.body, r#"{"order":7}"#);
        let verifier = Verifier::new(webhook::secrets(secret).unwrap()).unwrap();
        let headers = |name: &str| seen.header(name);
        verifier
            .verify_at(&headers, seen.body.as_bytes(), t.clock.now())
            .unwrap();
    }
    let state = endpoints.get("acme", &removed.id).await.unwrap().state;
    assert!(
        matches!(&state, EndpointState::Disabled { reason, .. } if reason.contains("410")),
        "{state:?}"
    );
    assert_eq!(
        endpoints.get("acme", &healthy.id).await.unwrap().state,
        EndpointState::Enabled
    );
    // The 410 is in the endpoint's attempt log (failures only, by default).
    let attempts = endpoints.attempts("acme", &removed.id, 10).await.unwrap();
    assert_eq!(attempts.len(), 1);
    assert_eq!(
        (attempts[0].status, attempts[0].body.as_str()),
        (Some(410), "endpoint removed")
    );
    assert_eq!(attempts[0].event_id.as_deref(), Some(event.as_str()));
    assert!(
        endpoints
            .attempts("acme", &healthy.id, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(endpoints.attempts("globex", &removed.id, 10).await.is_err());
    // A plain message of the outbox needs a deliverer of its own.
    t.outbox
        .enqueue_alone(Message::raw_json("mail", "{}"))
        .await
        .unwrap();
    let only_endpoints = EndpointDeliverer::new().unwrap();
    let mut claim = t.outbox.claim(10, Duration::from_secs(60)).await.unwrap();
    let mail = claim.messages.remove(0);
    assert!(matches!(
        only_endpoints.deliver(&mail).await,
        Delivery::Permanent { .. }
    ));
    let with_other = EndpointDeliverer::new()
        .unwrap()
        .or(HttpDeliverer::new(&ok.url).unwrap());
    assert_eq!(with_other.deliver(&mail).await, Delivery::Delivered);
}

#[tokio::test]
async fn an_endpoint_failing_past_the_policy_is_disabled_not_retried() {
    use workers_outbox::endpoint::{EndpointDeliverer, EndpointState, NewEndpoint};

    // Misconfigured: it redirects, forever.
    let (moved, _) = server(status(301, "location: https://elsewhere.example/\r\n", "")).await;
    let (t, endpoints) = local_endpoints().await;
    let endpoint = endpoints
        .create(NewEndpoint::new("acme", &moved.url, SECRET))
        .await
        .unwrap();
    publish_to(&t, &endpoints, "{}").await;
    let drain = || async {
        let deliver = EndpointDeliverer::new()
            .unwrap()
            .disable_after(Duration::from_secs(3600))
            .clock(Arc::new(t.clock.clone()));
        Drainer::builder(t.outbox.clone(), deliver)
            .timer(Arc::new(t.clock.clone()))
            .build()
            .unwrap()
            .drain()
            .await
    };
    // Old, but failing for the first time: a backlog released at once.
    t.clock.advance(Duration::from_secs(3600));
    let report = drain().await;
    assert_eq!((report.retried, report.paused.len()), (1, 0), "{report}");
    // Failing on and on, old enough: disabled.
    for _ in 0..2 {
        t.clock.advance(Duration::from_secs(600));
        let report = drain().await;
        assert_eq!(report.paused.len(), 0, "{report}");
    }
    assert_eq!(
        endpoints.get("acme", &endpoint.id).await.unwrap().state,
        EndpointState::Enabled
    );
    t.clock.advance(Duration::from_secs(600));
    let report = drain().await;
    assert_eq!(report.paused, vec![endpoint.id.clone()], "{report}");
    let state = endpoints.get("acme", &endpoint.id).await.unwrap().state;
    assert!(
        matches!(&state, EndpointState::Disabled { reason, .. } if reason.contains("failing for 1 h") && reason.contains("301")),
        "{state:?}"
    );
    // Held, not dead: enabled again, it is due at once.
    assert_eq!(t.outbox.stats().await.unwrap().pending, 1);
}

#[tokio::test]
async fn a_name_resolving_to_a_private_address_is_unreachable_unless_allowed() {
    use workers_outbox::endpoint::{EndpointDeliverer, NewEndpoint};

    let (ok, _) = server(status(204, "", "")).await;
    // The same server by name: "localhost" resolves to a loopback address.
    let by_name = ok.url.replace("127.0.0.1", "localhost");
    let (t, endpoints) = local_endpoints().await;
    endpoints
        .create(NewEndpoint::new("acme", &by_name, SECRET))
        .await
        .unwrap();
    publish_to(&t, &endpoints, "{}").await;
    let mut claim = t.outbox.claim(1, Duration::from_secs(60)).await.unwrap();
    let message = claim.messages.remove(0);
    let refused = EndpointDeliverer::new().unwrap().deliver(&message).await;
    assert!(
        matches!(&refused, Delivery::Unavailable { error, .. } if error.contains("no public address")),
        "{refused:?}"
    );
    assert!(ok.seen.lock().unwrap().is_empty());
    let allowed = EndpointDeliverer::new()
        .unwrap()
        .allow_private(true)
        .unwrap();
    assert_eq!(allowed.deliver(&message).await, Delivery::Delivered);
}

#[tokio::test]
async fn a_slack_endpoint_receives_a_quiet_line_signed_like_any_body() {
    use workers_outbox::endpoint::{BodyFormat, EndpointDeliverer, NewEndpoint};

    let (chat, _) = server(status(200, "", "ok")).await;
    let (t, endpoints) = local_endpoints().await;
    let endpoint = endpoints
        .create(NewEndpoint::new("acme", &chat.url, SECRET).body(BodyFormat::Slack))
        .await
        .unwrap();
    assert_eq!(endpoint.body, BodyFormat::Slack);
    let (event, _) = publish_to(&t, &endpoints, r#"{"type":"order.paid","note":"<!here>"}"#).await;
    let deliver = EndpointDeliverer::new()
        .unwrap()
        .clock(Arc::new(t.clock.clone()));
    let report = Drainer::builder(t.outbox.clone(), deliver)
        .build()
        .unwrap()
        .drain()
        .await;
    assert_eq!(report.delivered, 1, "{report}");
    let seen = chat.seen.lock().unwrap()[0].clone();
    let body: serde_json::Value = serde_json::from_str(&seen.body).unwrap();
    assert_eq!(
        body,
        serde_json::json!({
            "text": format!(r#"`{event}` {{"note":"&lt;!here&gt;","type":"order.paid"}}"#),
            "unfurl_links": false,
            "unfurl_media": false,
        })
    );
    assert_eq!(seen.header("webhook-id").as_deref(), Some(event.as_str()));
    let verifier = Verifier::new(webhook::secrets(SECRET).unwrap()).unwrap();
    let headers = |name: &str| seen.header(name);
    verifier
        .verify_at(&headers, seen.body.as_bytes(), t.clock.now())
        .unwrap();
}

/// An outbox in memory whose endpoints may be loopback receivers (allowed
/// here, refused by default).
async fn local_endpoints() -> (TestOutbox, workers_outbox::endpoint::Endpoints) {
    let t = TestOutbox::new().await.unwrap();
    let endpoints = workers_outbox::endpoint::Endpoints::new(&t.outbox)
        .allow_http(true)
        .allow_private(true);
    (t, endpoints)
}

/// Publishes an `order.paid` of `acme` with `payload`: its id, and how many
/// endpoints it reached.
async fn publish_to(
    t: &TestOutbox,
    endpoints: &workers_outbox::endpoint::Endpoints,
    payload: &str,
) -> (String, u64) {
    let mut batch = workers_outbox::Batch::new(t.db.clone());
    let event = workers_outbox::endpoint::Event::raw_json("acme", "order.paid", payload);
    let ticket = batch.publish(endpoints, event).unwrap();
    let published = batch.commit().await.unwrap().published(&ticket).unwrap();
    (ticket.id().to_owned(), published)
}
