//! What a drain logs: one JSON object per drain and one per dead letter,
//! fields a log search can use, and never a payload, an address or a
//! receiver's answer (which may quote either).

// In tests a panic is the failure report.
#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use workers_outbox::drain::deliver_fn;
use workers_outbox::testing::TestOutbox;
use workers_outbox::{
    ClaimedMessage, Delivery, Drainer, ExponentialBackoff, Message, Outbox, RetryPolicy,
};

/// Every line logged, at any level.
static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        LINES.lock().unwrap().push(record.args().to_string());
    }
    fn flush(&self) {}
}

/// Installs the capture, once for all the tests of this file: they run on
/// threads of one process, which has one logger.
fn capture() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| log::set_logger(&Capture).unwrap());
    log::set_max_level(log::LevelFilter::Trace);
}

#[tokio::test]
async fn a_drain_logs_json_lines_without_payloads_or_addresses() {
    capture();
    let t = TestOutbox::new().await.unwrap();
    let backoff = ExponentialBackoff {
        base: Duration::from_secs(1),
        cap: Duration::from_secs(10),
    };
    let outbox = Outbox::builder(t.db.clone(), "outbox")
        .clock(Arc::new(t.clock.clone()))
        .retry_policy(RetryPolicy::new(1, backoff).unwrap())
        .build()
        .unwrap();
    let mut ids = Vec::new();
    for to in [
        "ok@example.com",
        "refused@example.com",
        "failing@example.com",
    ] {
        let message = Message::raw_json("welcome-mail", format!(r#"{{"to":"{to}"}}"#));
        ids.push(outbox.enqueue_alone(message).await.unwrap().id);
    }
    let receiver = deliver_fn(|message: ClaimedMessage| async move {
        // A receiver's answer that quotes the address.
        if message.payload.contains("refused") {
            Delivery::permanent("550 no such mailbox: refused@example.com")
        } else if message.payload.contains("failing") {
            Delivery::retry("451 try later, failing@example.com")
        } else {
            Delivery::Delivered
        }
    });
    let report = Drainer::builder(outbox, receiver)
        .build()
        .unwrap()
        .drain()
        .await;
    assert_eq!((report.delivered, report.dead), (1, 2));

    let lines = LINES.lock().unwrap().clone();
    let json: Vec<serde_json::Value> = lines
        .iter()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    let drain: Vec<_> = json
        .iter()
        .filter(|l| l["event"] == "outbox.drain")
        .collect();
    assert_eq!(drain.len(), 1, "{lines:?}");
    assert_eq!(drain[0]["outbox"], "outbox");
    assert_eq!(drain[0]["delivered"], 1);
    assert_eq!(drain[0]["dead"], 2);
    assert_eq!(drain[0]["topics"]["welcome-mail"], 3);
    let mut dead: Vec<(String, String, String)> = json
        .iter()
        .filter(|l| l["event"] == "outbox.dead")
        .map(|l| {
            (
                l["id"].as_str().unwrap().to_owned(),
                l["topic"].as_str().unwrap().to_owned(),
                l["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    dead.sort();
    let mut expected = vec![
        (
            ids[1].clone(),
            "welcome-mail".to_owned(),
            "permanent".to_owned(),
        ),
        (
            ids[2].clone(),
            "welcome-mail".to_owned(),
            "attempts_exhausted".to_owned(),
        ),
    ];
    expected.sort();
    assert_eq!(dead, expected);
    for line in &lines {
        assert!(
            !line.contains("@example.com"),
            "an address was logged: {line}"
        );
        assert!(
            !line.contains("no such mailbox"),
            "a receiver's answer was logged: {line}"
        );
    }
}

#[tokio::test]
async fn a_console_change_is_logged_with_who_made_it_and_what_it_did() {
    use workers_outbox::console::{BearerToken, Console, MUTATION_HEADER};
    capture();
    let t = TestOutbox::new().await.unwrap();
    let console = Console::builder()
        .outbox("mail", t.outbox.clone())
        .authorize(BearerToken::operator("operator-token-0123456789").named("ops-alice"))
        .build()
        .unwrap();
    let request = http::Request::post("https://ops.example/outbox/api/outboxes/mail/topics/pause")
        .header("authorization", "Bearer operator-token-0123456789")
        .header("host", "ops.example")
        .header("sec-fetch-site", "same-origin")
        .header(MUTATION_HEADER, "1")
        .body(br#"{"topic": "welcome-mail", "unseen": true}"#.to_vec())
        .unwrap();
    assert_eq!(console.handle(request).await.status(), 200);

    let lines = LINES.lock().unwrap().clone();
    let change: Vec<serde_json::Value> = lines
        .iter()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["event"] == "outbox.console.change")
        .collect();
    assert_eq!(change.len(), 1, "{lines:?}");
    assert_eq!(change[0]["route"], "outboxes/mail/topics/pause");
    assert_eq!(change[0]["who"], "ops-alice");
    assert_eq!(change[0]["role"], "operator");
    assert_eq!(change[0]["status"], 200);
    assert_eq!(change[0]["answer"]["changed"], true);
    assert_eq!(change[0]["answer"]["topic"], "welcome-mail");
}
