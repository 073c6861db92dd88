//! The operator console over `http` types, on an in-memory SQLite outbox:
//! access rules, bounded counts and lists, dead-letter actions, the pause
//! switch, and bad input.

#![allow(clippy::unwrap_used)]

use serde_json::{Value as Json, json};
use workers_outbox::console::{BearerToken, Console, MUTATION_HEADER, Role, SubjectRows};
use workers_outbox::endpoint::{Endpoints, NewEndpoint};
use workers_outbox::future::BoxFuture;
use workers_outbox::testing::{RecordingDeliverer, TestOutbox};
use workers_outbox::{Batch, Delivery, Message, OfStatement, Statement, Ticket, Value};

const OPERATOR: &str = "operator-token-0123456789";
const VIEWER: &str = "viewer-token-0123456789";

fn console(t: &TestOutbox) -> Console {
    Console::builder()
        .prefix("/admin/outbox")
        .outbox("mail", t.outbox.clone())
        .inbox("hooks", t.inbox.clone())
        .authorize(BearerToken::operator(OPERATOR))
        .authorize(BearerToken::new(VIEWER, Role::Viewer))
        .build()
        .unwrap()
}

async fn enqueue(t: &TestOutbox, topic: &str, payload: Json, subject: Option<&str>) {
    let mut batch = Batch::new(t.db.clone());
    let mut message = Message::json(topic, &payload).unwrap();
    if let Some(subject) = subject {
        message = message.subject(subject);
    }
    let _ = batch.enqueue(&t.outbox, message).unwrap();
    batch.commit().await.unwrap();
}

struct Answer {
    status: u16,
    headers: http::HeaderMap,
    body: String,
}

impl Answer {
    fn json(&self) -> Json {
        serde_json::from_str(&self.body).unwrap_or_else(|_| panic!("not JSON: {}", self.body))
    }
}

async fn send(console: &Console, request: http::Request<Vec<u8>>) -> Answer {
    let response = console.handle(request).await;
    Answer {
        status: response.status().as_u16(),
        headers: response.headers().clone(),
        body: response.into_body(),
    }
}

async fn get(console: &Console, path: &str, token: &str) -> Answer {
    let request = http::Request::get(format!("https://ops.example{path}"))
        .header("authorization", format!("Bearer {token}"))
        .body(Vec::new())
        .unwrap();
    send(console, request).await
}

fn post_request(path: &str, token: &str) -> http::request::Builder {
    http::Request::post(format!("https://ops.example{path}"))
        .header("authorization", format!("Bearer {token}"))
        .header("host", "ops.example")
        .header("content-type", "application/json")
}

async fn post(console: &Console, path: &str, token: &str, body: Json) -> Answer {
    let request = post_request(path, token)
        .header("sec-fetch-site", "same-origin")
        .header("origin", "https://ops.example")
        .header(MUTATION_HEADER, "1")
        .body(body.to_string().into_bytes())
        .unwrap();
    send(console, request).await
}

#[tokio::test]
async fn the_page_and_its_assets_are_served_with_a_strict_policy() {
    let t = TestOutbox::new().await.unwrap();
    let console = console(&t);
    let request = |path: &str| {
        http::Request::get(format!("https://ops.example{path}"))
            .body(Vec::new())
            .unwrap()
    };
    let page = send(&console, request("/admin/outbox/")).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<script src=\"console.js\" defer>"));
    let policy = page.headers["content-security-policy"].to_str().unwrap();
    assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
    assert!(policy.contains("script-src 'self'"), "{policy}");
    assert!(!policy.contains("unsafe-inline"), "{policy}");
    assert_eq!(page.headers["x-content-type-options"], "nosniff");
    for (asset, kind) in [
        ("console.js", "text/javascript"),
        ("console.css", "text/css"),
    ] {
        let answer = send(&console, request(&format!("/admin/outbox/{asset}"))).await;
        assert_eq!(answer.status, 200, "{asset}");
        assert!(
            answer.headers["content-type"]
                .to_str()
                .unwrap()
                .starts_with(kind)
        );
    }
    // The script writes what the API returns as text, never as markup.
    let script = send(&console, request("/admin/outbox/console.js"))
        .await
        .body;
    for markup in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
    ] {
        assert!(!script.contains(markup), "the script uses {markup}");
    }
    let head = http::Request::head("https://ops.example/admin/outbox/api/session")
        .header("authorization", format!("Bearer {VIEWER}"))
        .body(Vec::new())
        .unwrap();
    assert_eq!(
        send(&console, head).await.status,
        200,
        "HEAD is answered as GET"
    );
    let bare = send(&console, request("/admin/outbox")).await;
    assert_eq!(
        (bare.status, &bare.headers["location"]),
        (308, &"/admin/outbox/".parse::<http::HeaderValue>().unwrap())
    );
    assert_eq!(send(&console, request("/admin/outboxes")).await.status, 404);
    let icon = send(&console, request("/admin/outbox/favicon.svg")).await;
    assert_eq!(
        (icon.status, icon.headers["content-type"].to_str().unwrap()),
        (200, "image/svg+xml")
    );
    assert!(icon.headers.contains_key("content-security-policy"));
    // The page's quiet question: who am I? No 401, and no data.
    let anonymous = send(&console, request("/admin/outbox/api/probe")).await;
    assert_eq!(
        (anonymous.status, anonymous.json()),
        (200, json!({ "role": null, "identity": null }))
    );
    assert_eq!(
        get(&console, "/admin/outbox/api/probe", VIEWER)
            .await
            .json(),
        json!({ "role": "viewer", "identity": "bearer token (viewer)" })
    );
    assert!(console.serves("/admin/outbox/api/session"));
    assert!(!console.serves("/admin/outboxes"));
}

#[tokio::test]
async fn no_credentials_no_data_and_viewers_only_read() {
    let t = TestOutbox::new().await.unwrap();
    let console = console(&t);
    let session = get(&console, "/admin/outbox/api/session", VIEWER).await;
    assert_eq!(session.status, 200);
    assert_eq!(session.json()["role"], "viewer");
    assert_eq!(session.json()["identity"], "bearer token (viewer)");
    assert_eq!(session.json()["outboxes"], json!(["mail"]));
    assert_eq!(
        get(&console, "/admin/outbox/api/session", OPERATOR)
            .await
            .json()["role"],
        "operator"
    );

    let wrong = get(&console, "/admin/outbox/api/outboxes/mail", "wrong").await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.headers.contains_key("www-authenticate"));
    let none = http::Request::get("https://ops.example/admin/outbox/api/session")
        .body(Vec::new())
        .unwrap();
    assert_eq!(send(&console, none).await.status, 401);

    let pause = json!({ "topic": "mail", "reason": "x" });
    let viewer = post(
        &console,
        "/admin/outbox/api/outboxes/mail/topics/pause",
        VIEWER,
        pause.clone(),
    )
    .await;
    assert_eq!(viewer.status, 403, "{}", viewer.body);
    assert!(t.outbox.paused_topics().await.unwrap().is_empty());

    // A console with no authorizer refuses everyone.
    let closed = Console::builder()
        .outbox("mail", t.outbox.clone())
        .build()
        .unwrap();
    assert_eq!(
        get(&closed, "/outbox/api/session", OPERATOR).await.status,
        401
    );
    // An empty token grants nothing, even to an empty bearer.
    let empty = Console::builder()
        .authorize(BearerToken::operator(""))
        .build()
        .unwrap();
    assert_eq!(get(&empty, "/outbox/api/session", "").await.status, 401);
}

#[tokio::test]
async fn cross_site_mutations_are_refused_and_change_nothing() {
    let t = TestOutbox::new().await.unwrap();
    let console = console(&t);
    let path = "/admin/outbox/api/outboxes/mail/topics/pause";
    let body = json!({ "topic": "mail" });
    let cases = [
        (
            "cross-site",
            vec![("sec-fetch-site", "cross-site"), (MUTATION_HEADER, "1")],
        ),
        (
            "same-site",
            vec![("sec-fetch-site", "same-site"), (MUTATION_HEADER, "1")],
        ),
        (
            "foreign origin",
            vec![("origin", "https://evil.example"), (MUTATION_HEADER, "1")],
        ),
        (
            "null origin",
            vec![("origin", "null"), (MUTATION_HEADER, "1")],
        ),
        ("no console header", vec![("sec-fetch-site", "same-origin")]),
    ];
    for (case, headers) in cases {
        let mut request = post_request(path, OPERATOR);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        let answer = send(
            &console,
            request.body(body.to_string().into_bytes()).unwrap(),
        )
        .await;
        assert_eq!(answer.status, 403, "{case}: {}", answer.body);
    }
    assert!(t.outbox.paused_topics().await.unwrap().is_empty());
    let allowed = post(
        &console,
        path,
        OPERATOR,
        json!({ "topic": "mail", "unseen": true }),
    )
    .await;
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    assert_eq!(t.outbox.paused_topics().await.unwrap().len(), 1);
}

#[tokio::test]
async fn counts_stop_at_their_cap_and_say_so() {
    let t = TestOutbox::new().await.unwrap();
    for n in 0..5 {
        enqueue(&t, "mail", json!({ "n": n }), None).await;
    }
    let console = Console::builder()
        .outbox("mail", t.outbox.clone())
        .authorize(BearerToken::viewer(VIEWER))
        .count_cap(3)
        .build()
        .unwrap();
    let body = get(&console, "/outbox/api/outboxes/mail", VIEWER)
        .await
        .json();
    assert_eq!(body["counts"]["due"], json!({ "count": 3, "capped": true }));
    assert_eq!(
        body["counts"]["dead"],
        json!({ "count": 0, "capped": false })
    );
    assert_eq!(body["counts"]["oldest_due_age_ms"], json!(0));
    let exact = get(
        &self::console(&t),
        "/admin/outbox/api/outboxes/mail",
        VIEWER,
    )
    .await
    .json();
    assert_eq!(
        exact["counts"]["due"],
        json!({ "count": 5, "capped": false })
    );
}

#[tokio::test]
async fn the_live_numbers_count_the_due_messages_up_to_their_cap_and_name_the_paused_topics() {
    let t = TestOutbox::new().await.unwrap();
    let live = |console: Console| async move {
        get(&console, "/admin/outbox/api/outboxes/mail/live", VIEWER)
            .await
            .json()
    };
    let body = live(self::console(&t)).await;
    assert_eq!(
        body["live"],
        json!({ "due": { "count": 0, "capped": false }, "oldest_due_age_ms": null })
    );
    assert_eq!(
        body["due_cap"],
        json!(workers_outbox::console::LIVE_DUE_CAP)
    );
    assert_eq!(body["paused"], json!([]));
    let cap = workers_outbox::console::LIVE_DUE_CAP;
    for n in 0..=cap {
        enqueue(&t, "mail", json!({ "n": n }), None).await;
    }
    t.outbox
        .pause_topic("mail", "receiver migrating")
        .await
        .unwrap();
    t.clock.advance(std::time::Duration::from_secs(3));
    let body = live(self::console(&t)).await;
    assert_eq!(
        body["live"],
        json!({ "due": { "count": cap, "capped": true }, "oldest_due_age_ms": 3000 })
    );
    assert_eq!(body["paused"][0]["topic"], "mail");
    assert_eq!(body["paused"][0]["reason"], "receiver migrating");
}

#[tokio::test]
async fn dead_letters_show_their_error_as_data_and_hide_payloads_and_keys() {
    let t = TestOutbox::new().await.unwrap();
    let mut batch = Batch::new(t.db.clone());
    let message = Message::json("mail", &json!({ "html": "<script>alert(1)</script>" }))
        .unwrap()
        .subject("user-1")
        .dedup_key("ada@example.com")
        .ordering_key("ada@example.com");
    let _ = batch.enqueue(&t.outbox, message).unwrap();
    batch.commit().await.unwrap();
    let hostile = "<img src=x onerror=alert(1)>";
    let report = t
        .drain_now(RecordingDeliverer::answering(Delivery::permanent(hostile)))
        .await;
    assert_eq!(report.dead, 1);
    let console = console(&t);
    let body = get(
        &console,
        "/admin/outbox/api/outboxes/mail/messages?state=dead",
        VIEWER,
    )
    .await
    .json();
    let message = &body["messages"][0];
    assert_eq!(message["last_error"], hostile);
    assert_eq!(message["subject"], "user-1");
    assert_eq!(
        message["payload"],
        Json::Null,
        "payloads are hidden by default"
    );
    assert_eq!(
        message["payload_bytes"],
        json!(r#"{"html":"<script>alert(1)</script>"}"#.len())
    );
    for key in ["dedup_key", "ordering_key"] {
        assert_eq!(message[key], Json::Null, "{key} is hidden with payloads");
    }
    assert_eq!(message["keys_hidden"], true);
    assert!(
        !get(
            &console,
            "/admin/outbox/api/outboxes/mail/messages?state=dead",
            OPERATOR
        )
        .await
        .body
        .contains("ada@example.com"),
        "not even to an operator"
    );
    assert_eq!(body["next"], Json::Null);

    let showing = Console::builder()
        .outbox("mail", t.outbox.clone())
        .authorize(BearerToken::viewer(VIEWER))
        .show_payloads(true)
        .build()
        .unwrap();
    let shown = get(
        &showing,
        "/outbox/api/outboxes/mail/messages?state=dead",
        VIEWER,
    )
    .await
    .json();
    assert_eq!(
        shown["messages"][0]["payload"],
        r#"{"html":"<script>alert(1)</script>"}"#
    );
    assert_eq!(shown["messages"][0]["dedup_key"], "ada@example.com");
    assert_eq!(shown["messages"][0]["ordering_key"], "ada@example.com");
    assert_eq!(shown["messages"][0]["keys_hidden"], false);
}

#[tokio::test]
async fn a_message_is_shown_by_its_key_until_it_moves_on() {
    let t = TestOutbox::new().await.unwrap();
    enqueue(&t, "mail", json!({ "to": "ada" }), Some("user-1")).await;
    t.drain_now(RecordingDeliverer::answering(Delivery::permanent(
        "HTTP 400: no",
    )))
    .await;
    let console = console(&t);
    let base = "/admin/outbox/api/outboxes/mail/message?key=";
    let listed = get(
        &console,
        "/admin/outbox/api/outboxes/mail/messages?state=dead",
        VIEWER,
    )
    .await
    .json();
    let message = &listed["messages"][0];
    let key = format!("{}.{}", message["due_at"], message["id"].as_str().unwrap());
    let detail = get(&console, &format!("{base}{key}"), VIEWER).await;
    assert_eq!(detail.status, 200, "{}", detail.body);
    let detail = detail.json();
    assert_eq!(detail["message"]["id"], message["id"]);
    assert_eq!(detail["message"]["state"], "dead");
    assert_eq!(detail["message"]["last_error"], "HTTP 400: no");
    assert_eq!(
        detail["message"]["payload"],
        Json::Null,
        "hidden as in lists"
    );
    assert_eq!(detail["message"]["paused"], Json::Null);
    assert!(detail["attempts"].is_array());
    let id = message["id"].as_str().unwrap().to_owned();
    let purged = post(
        &console,
        "/admin/outbox/api/outboxes/mail/dead/purge",
        OPERATOR,
        json!({ "ids": [id] }),
    )
    .await;
    assert_eq!(purged.json()["done"], 1);
    assert_eq!(
        get(&console, &format!("{base}{key}"), VIEWER).await.status,
        404
    );
    assert_eq!(
        get(&console, "/admin/outbox/api/outboxes/mail/message", VIEWER)
            .await
            .status,
        400,
        "no key"
    );
    for bad in ["nokey", "12", "x.y"] {
        assert_eq!(
            get(&console, &format!("{base}{bad}"), VIEWER).await.status,
            400,
            "{bad}"
        );
    }
}

#[tokio::test]
async fn dead_letters_matching_a_filter_are_counted_then_replayed_in_bounded_batches() {
    let t = TestOutbox::new().await.unwrap();
    for n in 0..5 {
        let subject = if n < 3 { "user-1" } else { "user-2" };
        enqueue(&t, "mail", json!({ "n": n }), Some(subject)).await;
    }
    enqueue(&t, "sms", json!({}), Some("user-1")).await;
    t.drain_now(RecordingDeliverer::answering(Delivery::permanent(
        "HTTP 400: bad address 17",
    )))
    .await;
    let console = console(&t);
    let base = "/admin/outbox/api/outboxes/mail/dead";
    let counted = get(
        &console,
        &format!(
            "{base}/count?topic=mail&subject=user-1&error_class=HTTP%20400%3A%20bad%20address%20%23"
        ),
        VIEWER,
    )
    .await
    .json();
    assert_eq!(
        (counted["count"].clone(), counted["complete"].clone()),
        (json!(3), json!(true))
    );
    let read_at = counted["read_at_ms"].as_i64().unwrap();
    // A letter that dies after the count is not taken.
    enqueue(&t, "mail", json!({ "late": true }), Some("user-1")).await;
    t.clock.advance(std::time::Duration::from_secs(1));
    t.drain_now(RecordingDeliverer::answering(Delivery::permanent(
        "HTTP 400: bad address 99",
    )))
    .await;
    let filter = json!({ "topic": "mail", "subject": "user-1", "error_class": "HTTP 400: bad address #", "died_by_ms": read_at, "limit": 2 });
    // Batch by batch: two, the last one, then nothing left.
    for batch in [
        json!({ "selected": 2, "done": 2, "more": true }),
        json!({ "selected": 1, "done": 1, "more": false }),
        json!({ "selected": 0, "done": 0, "more": false }),
    ] {
        let answer = post(
            &console,
            &format!("{base}/replay"),
            OPERATOR,
            filter.clone(),
        )
        .await;
        assert_eq!(answer.json(), batch);
    }
    let left = get(&console, &format!("{base}/count"), VIEWER).await.json();
    assert_eq!(
        left["count"], 4,
        "user-2's two, the sms and the late one stay dead"
    );
    assert_eq!(
        get(&console, &format!("{base}/count?from_ms=x"), VIEWER)
            .await
            .status,
        400
    );
}

#[tokio::test]
async fn lists_page_by_key_and_walk_a_bounded_number_of_rows() {
    let t = TestOutbox::new().await.unwrap();
    for n in 0..5 {
        let topic = if n == 4 { "sms" } else { "mail" };
        enqueue(&t, topic, json!({ "n": n }), None).await;
        t.clock.advance(std::time::Duration::from_millis(1));
    }
    let console = Console::builder()
        .outbox("mail", t.outbox.clone())
        .authorize(BearerToken::viewer(VIEWER))
        .scan(3)
        .build()
        .unwrap();
    let base = "/outbox/api/outboxes/mail/messages?state=due";
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    for _ in 0..10 {
        let path = match &after {
            Some(cursor) => format!("{base}&limit=2&after={cursor}"),
            None => format!("{base}&limit=2"),
        };
        let body = get(&console, &path, VIEWER).await.json();
        for message in body["messages"].as_array().unwrap() {
            seen.push(message["id"].as_str().unwrap().to_owned());
        }
        match body["next"].as_str() {
            Some(cursor) => after = Some(cursor.to_owned()),
            None => break,
        }
    }
    let mut sorted = seen.clone();
    sorted.dedup();
    assert_eq!(
        sorted.len(),
        5,
        "every message once, in key order: {seen:?}"
    );

    // A filter that matches only the fifth row: the first page walks its
    // bound of 3 rows, finds nothing, and says where to go on.
    let first = get(&console, &format!("{base}&topic=sms"), VIEWER)
        .await
        .json();
    assert_eq!(first["messages"], json!([]));
    let cursor = first["next"].as_str().unwrap().to_owned();
    let second = get(
        &console,
        &format!("{base}&topic=sms&after={cursor}"),
        VIEWER,
    )
    .await
    .json();
    assert_eq!(second["messages"][0]["topic"], "sms");
    assert_eq!(second["next"], Json::Null);

    let id = &seen[2];
    let by_id = get(
        &console,
        &format!("{base}&id={}", &id[..id.len() - 1]),
        VIEWER,
    )
    .await
    .json();
    assert!(
        by_id["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == id.as_str())
    );
}

#[tokio::test]
async fn dead_letters_are_grouped_and_a_group_replayed() {
    let t = TestOutbox::new().await.unwrap();
    for n in 0..3 {
        enqueue(&t, "mail", json!({ "n": n }), None).await;
    }
    t.drain_now(RecordingDeliverer::answering(Delivery::permanent(
        "HTTP 500: down",
    )))
    .await;
    enqueue(&t, "sms", json!({}), None).await;
    t.drain_now(RecordingDeliverer::answering(Delivery::permanent(
        "no route",
    )))
    .await;
    let console = console(&t);
    let groups = get(
        &console,
        "/admin/outbox/api/outboxes/mail/dead/groups",
        VIEWER,
    )
    .await
    .json();
    assert_eq!(groups["complete"], json!(true));
    let summary: Vec<(String, String, u64)> = groups["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["topic"].as_str().unwrap().to_owned(),
                g["error_class"].as_str().unwrap().to_owned(),
                g["count"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            ("mail".into(), "HTTP 500: down".into(), 3),
            ("sms".into(), "no route".into(), 1)
        ]
    );
    let group = json!({ "topic": "mail", "error_class": "HTTP 500: down" });
    let viewer = post(
        &console,
        "/admin/outbox/api/outboxes/mail/dead/replay",
        VIEWER,
        group.clone(),
    )
    .await;
    assert_eq!(viewer.status, 403);
    let replayed = post(
        &console,
        "/admin/outbox/api/outboxes/mail/dead/replay",
        OPERATOR,
        group,
    )
    .await;
    assert_eq!(
        replayed.json(),
        json!({ "selected": 3, "done": 3, "more": false })
    );
    let counts = get(&console, "/admin/outbox/api/outboxes/mail", VIEWER)
        .await
        .json()["counts"]
        .clone();
    assert_eq!(
        (
            counts["due"]["count"].as_u64(),
            counts["dead"]["count"].as_u64()
        ),
        (Some(3), Some(1))
    );

    let delivered = t.drain_now(RecordingDeliverer::default()).await;
    assert_eq!(delivered.delivered, 3);
    let rollups = get(
        &console,
        "/admin/outbox/api/outboxes/mail/rollups?minutes=60",
        VIEWER,
    )
    .await
    .json();
    assert_eq!(rollups["topics"]["mail"]["delivered"], json!(3));
    assert_eq!(rollups["topics"]["mail"]["dead"], json!(3));
    assert_eq!(rollups["topics"]["sms"]["dead"], json!(1));
    assert_eq!(rollups["series"][0]["delivered"], json!(3));
}

#[tokio::test]
async fn a_selection_is_purged_and_ids_that_are_not_dead_are_skipped() {
    let t = TestOutbox::new().await.unwrap();
    enqueue(&t, "mail", json!({}), None).await;
    t.drain_now(RecordingDeliverer::answering(Delivery::permanent("bad")))
        .await;
    enqueue(&t, "mail", json!({}), None).await;
    let console = console(&t);
    let dead = get(
        &console,
        "/admin/outbox/api/outboxes/mail/messages?state=dead",
        VIEWER,
    )
    .await
    .json();
    let due = get(
        &console,
        "/admin/outbox/api/outboxes/mail/messages?state=due",
        VIEWER,
    )
    .await
    .json();
    let ids = json!({ "ids": [dead["messages"][0]["id"], due["messages"][0]["id"]] });
    let purged = post(
        &console,
        "/admin/outbox/api/outboxes/mail/dead/purge",
        OPERATOR,
        ids,
    )
    .await;
    assert_eq!(
        purged.json(),
        json!({ "selected": 2, "done": 1, "more": false })
    );
    let counts = t.outbox.overview(100).await.unwrap();
    assert_eq!((counts.dead.count, counts.due.count), (0, 1));
}

#[tokio::test]
async fn a_paused_topic_is_skipped_by_drains_until_resumed_and_its_messages_say_so() {
    let t = TestOutbox::new().await.unwrap();
    enqueue(&t, "mail", json!({}), None).await;
    let console = console(&t);
    let pause = "/admin/outbox/api/outboxes/mail/topics/pause";
    let unsettled = post(&console, pause, OPERATOR, json!({ "topic": "mail" })).await;
    assert_eq!(unsettled.status, 400, "no message of it settled yet");
    assert!(
        unsettled.json()["error"]
            .as_str()
            .unwrap()
            .contains("\"unseen\": true")
    );
    assert!(t.outbox.paused_topics().await.unwrap().is_empty());
    t.drain_now(RecordingDeliverer::default()).await;
    let typo = post(&console, pause, OPERATOR, json!({ "topic": "mial" })).await;
    assert_eq!(typo.status, 400, "a typo pauses nothing");
    assert!(t.outbox.paused_topics().await.unwrap().is_empty());
    enqueue(&t, "mail", json!({}), None).await;
    let paused = post(
        &console,
        pause,
        OPERATOR,
        json!({ "topic": "mail", "reason": "receiver migrating" }),
    )
    .await;
    assert_eq!(
        paused.json(),
        json!({ "topic": "mail", "paused": true, "changed": true })
    );
    let explicit = post(
        &console,
        pause,
        OPERATOR,
        json!({ "topic": "sms", "unseen": true }),
    )
    .await;
    assert_eq!(explicit.json()["changed"], json!(true), "{}", explicit.body);
    let overview = get(&console, "/admin/outbox/api/outboxes/mail", VIEWER)
        .await
        .json();
    assert_eq!(overview["paused"][0]["reason"], "receiver migrating");
    let listed = get(
        &console,
        "/admin/outbox/api/outboxes/mail/messages?state=due",
        VIEWER,
    )
    .await
    .json();
    assert_eq!(
        listed["messages"][0]["paused"]["reason"], "receiver migrating",
        "a held message says what holds it"
    );
    let recorder = RecordingDeliverer::default();
    assert_eq!(t.drain_now(recorder.clone()).await.delivered, 0);
    let resumed = post(
        &console,
        "/admin/outbox/api/outboxes/mail/topics/resume",
        OPERATOR,
        json!({ "topic": "mail" }),
    )
    .await;
    assert_eq!(resumed.json()["changed"], json!(true));
    assert_eq!(t.drain_now(recorder).await.delivered, 1);
}

#[tokio::test]
async fn an_inbox_key_is_looked_up() {
    let t = TestOutbox::new().await.unwrap();
    let mut batch = Batch::new(t.db.clone());
    let _ = batch.inbox_key(&t.inbox, "evt-1", None).unwrap();
    batch.commit().await.unwrap();
    let console = console(&t);
    let seen = get(
        &console,
        "/admin/outbox/api/inboxes/hooks/keys?key=evt-1",
        VIEWER,
    )
    .await;
    assert_eq!(seen.json(), json!({ "key": "evt-1", "seen": true }));
    let unseen = get(
        &console,
        "/admin/outbox/api/inboxes/hooks/keys?key=evt%202",
        VIEWER,
    )
    .await;
    assert_eq!(unseen.json(), json!({ "key": "evt 2", "seen": false }));
}

#[tokio::test]
async fn bad_input_gets_a_clear_status_and_changes_nothing() {
    let t = TestOutbox::new().await.unwrap();
    enqueue(&t, "mail", json!({}), None).await;
    let console = console(&t);
    let base = "/admin/outbox/api/outboxes";
    for (path, status) in [
        (format!("{base}/nope"), 404),
        (format!("{base}/mail/messages?state=lost"), 400),
        (format!("{base}/mail/messages?after=garbage"), 400),
        (format!("{base}/mail/messages?limit=0"), 400),
        (format!("{base}/mail/messages?limit=101"), 400),
        (format!("{base}/mail/rollups?minutes=0"), 400),
        (format!("{base}/mail/rollups?minutes=2881"), 400),
        ("/admin/outbox/api/inboxes/hooks/keys".to_owned(), 400),
        (format!("{base}/mail/messages?topic=a%00b"), 400),
        ("/admin/outbox/api/nothing".to_owned(), 404),
    ] {
        let answer = get(&console, &path, VIEWER).await;
        assert_eq!(answer.status, status, "{path}: {}", answer.body);
        assert!(answer.json()["error"].is_string(), "{path}");
    }
    for body in [
        json!({}),
        json!({ "ids": [] }),
        json!({ "ids": ["a"], "topic": "mail" }),
        json!({ "from_ms": "soon" }),
        json!({ "subject": "s\u{0}" }),
        json!({ "ids": (0..101).map(|n| n.to_string()).collect::<Vec<_>>() }),
        json!({ "ids": ["a"], "extra": 1 }),
        json!({ "ids": ["a"], "limit": 2 }),
        json!({ "topic": "mail", "error_class": "x", "limit": 0 }),
        json!({ "topic": "mail", "error_class": "x", "limit": 101 }),
        json!({ "ids": ["a\u{0}b"] }),
    ] {
        let answer = post(
            &console,
            &format!("{base}/mail/dead/replay"),
            OPERATOR,
            body.clone(),
        )
        .await;
        assert_eq!(answer.status, 400, "{body}: {}", answer.body);
    }
    let not_json = post_request(&format!("{base}/mail/topics/pause"), OPERATOR)
        .header(MUTATION_HEADER, "1")
        .body(b"{not json".to_vec())
        .unwrap();
    assert_eq!(send(&console, not_json).await.status, 400);
    let empty_topic = post(
        &console,
        &format!("{base}/mail/topics/pause"),
        OPERATOR,
        json!({ "topic": "" }),
    )
    .await;
    assert_eq!(empty_topic.status, 400);
    assert!(t.outbox.paused_topics().await.unwrap().is_empty());
    assert_eq!(t.outbox.overview(10).await.unwrap().due.count, 1);

    for (builder, what) in [
        (Console::builder().prefix("admin"), "prefix without /"),
        (Console::builder().prefix("/admin/"), "prefix ending in /"),
        (
            Console::builder().prefix("//evil.example"),
            "a prefix that is another host",
        ),
        (
            Console::builder().prefix("/ad\nmin"),
            "prefix with a control character",
        ),
        (
            Console::builder().outbox("a b", t.outbox.clone()),
            "name with a space",
        ),
        (
            Console::builder()
                .outbox("x", t.outbox.clone())
                .inbox("x", t.inbox.clone()),
            "name twice",
        ),
        (Console::builder().count_cap(0), "cap 0"),
        (Console::builder().scan(100_001), "scan over the bound"),
    ] {
        assert!(builder.build().is_err(), "{what}");
    }
}

/// An application's `accounts` table, exported and erased with the subject.
struct Accounts {
    db: std::sync::Arc<dyn workers_outbox::Database>,
    /// A table that does not exist: its delete fails the whole erasure.
    table: &'static str,
}

impl SubjectRows for Accounts {
    fn export<'a>(&'a self, subject: &'a str) -> BoxFuture<'a, workers_outbox::Result<Json>> {
        Box::pin(async move {
            let select = Statement::new(
                "SELECT email FROM accounts WHERE id = ?",
                vec![Value::from(subject)],
            );
            let rows = self.db.query(&select).await?;
            let email: Option<String> = rows.first().map(|row| row.get("email")).transpose()?;
            Ok(json!({ "email": email }))
        })
    }

    fn erase(
        &self,
        batch: &mut Batch,
        subject: &str,
    ) -> workers_outbox::Result<Vec<(&'static str, Ticket<OfStatement>)>> {
        let delete = Statement::new(
            format!("DELETE FROM {} WHERE id = ?", self.table),
            vec![Value::from(subject)],
        );
        Ok(vec![("accounts", batch.statement(delete))])
    }
}

async fn with_accounts(t: &TestOutbox) {
    let create = Statement::new(
        "CREATE TABLE accounts (id TEXT PRIMARY KEY, email TEXT NOT NULL)",
        Vec::new(),
    );
    let insert = Statement::new(
        "INSERT INTO accounts (id, email) VALUES ('acct-1', 'ada@example.com'), ('acct-2', 'bo@example.com')",
        Vec::new(),
    );
    t.db.batch_atomic(&[create, insert]).await.unwrap();
    for subject in ["acct-1", "acct-2"] {
        enqueue(t, "mail", json!({ "to": subject }), Some(subject)).await;
        let mut batch = Batch::new(t.db.clone());
        let _ = batch
            .inbox_key(&t.inbox, &format!("evt-{subject}"), Some(subject))
            .unwrap();
        batch.commit().await.unwrap();
    }
}

fn subject_console(t: &TestOutbox, table: &'static str) -> Console {
    Console::builder()
        .outbox("mail", t.outbox.clone())
        .inbox("hooks", t.inbox.clone())
        .subject_rows(Accounts {
            db: t.db.clone(),
            table,
        })
        .authorize(BearerToken::operator(OPERATOR))
        .authorize(BearerToken::viewer(VIEWER))
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_subject_is_exported_and_erased_with_the_applications_rows_in_one_batch() {
    let t = TestOutbox::new().await.unwrap();
    with_accounts(&t).await;
    let console = subject_console(&t, "accounts");
    let export = "/outbox/api/subjects?subject=acct-1";
    assert_eq!(get(&console, export, VIEWER).await.status, 403);
    let exported = get(&console, export, OPERATOR).await.json();
    assert_eq!(
        exported["application"],
        json!({ "email": "ada@example.com" })
    );
    assert_eq!(exported["outboxes"]["mail"].as_array().unwrap().len(), 1);
    assert_eq!(exported["outboxes"]["mail"][0]["payload"], Json::Null);
    assert_eq!(exported["inboxes"]["hooks"][0]["key"], "evt-acct-1");
    assert_eq!(exported["erased_at_ms"], Json::Null);

    let erase = "/outbox/api/subjects/erase";
    let refused = post(&console, erase, VIEWER, json!({ "subject": "acct-1" })).await;
    assert_eq!(refused.status, 403);
    let erased = post(&console, erase, OPERATOR, json!({ "subject": "acct-1" })).await;
    assert_eq!(erased.status, 200, "{}", erased.body);
    assert_eq!(
        erased.json(),
        json!({ "outboxes": { "mail": 1 }, "inboxes": { "hooks": 1 }, "application": { "accounts": 1 } })
    );
    let after = get(&console, export, OPERATOR).await.json();
    assert_eq!(after["application"], json!({ "email": null }));
    assert_eq!(after["outboxes"]["mail"], json!([]));
    assert_eq!(after["inboxes"]["hooks"], json!([]));
    assert!(after["erased_at_ms"].is_i64());
    // The other account is untouched.
    let other = get(&console, "/outbox/api/subjects?subject=acct-2", OPERATOR)
        .await
        .json();
    assert_eq!(other["outboxes"]["mail"].as_array().unwrap().len(), 1);
    assert_eq!(other["application"], json!({ "email": "bo@example.com" }));
    for body in [
        json!({}),
        json!({ "subject": "" }),
        json!({ "subject": "a\u{0}" }),
    ] {
        assert_eq!(post(&console, erase, OPERATOR, body).await.status, 400);
    }
    assert_eq!(
        get(&console, "/outbox/api/subjects", OPERATOR).await.status,
        400
    );
}

#[tokio::test]
async fn an_erasure_whose_application_statement_fails_erases_nothing() {
    let t = TestOutbox::new().await.unwrap();
    with_accounts(&t).await;
    let console = subject_console(&t, "no_such_table");
    let erased = post(
        &console,
        "/outbox/api/subjects/erase",
        OPERATOR,
        json!({ "subject": "acct-1" }),
    )
    .await;
    assert!(erased.status >= 500, "{}: {}", erased.status, erased.body);
    let after = get(&console, "/outbox/api/subjects?subject=acct-1", OPERATOR)
        .await
        .json();
    assert_eq!(after["outboxes"]["mail"].as_array().unwrap().len(), 1);
    assert_eq!(after["inboxes"]["hooks"].as_array().unwrap().len(), 1);
    assert_eq!(after["erased_at_ms"], Json::Null);
}

#[tokio::test]
async fn scheduled_messages_are_made_due_now_and_others_are_left_alone() {
    let t = TestOutbox::new().await.unwrap();
    let later = t
        .now()
        .checked_add(std::time::Duration::from_secs(3600))
        .unwrap();
    let mut batch = Batch::new(t.db.clone());
    let scheduled = batch
        .enqueue(
            &t.outbox,
            Message::json("mail", &json!({})).unwrap().not_before(later),
        )
        .unwrap();
    let due = batch
        .enqueue(&t.outbox, Message::json("mail", &json!({})).unwrap())
        .unwrap();
    batch.commit().await.unwrap();
    let console = console(&t);
    // The keys a list gives: `<due_at>.<id>`.
    let keys = vec![
        format!("{}.{}", later.as_unix_millis(), scheduled.id()),
        format!("{}.{}", t.now().as_unix_millis(), due.id()),
    ];
    let listed = get(
        &console,
        "/admin/outbox/api/outboxes/mail/messages?state=scheduled",
        VIEWER,
    )
    .await
    .json();
    let shown = &listed["messages"][0];
    assert_eq!(
        format!("{}.{}", shown["due_at"], shown["id"].as_str().unwrap()),
        keys[0],
        "a listed message's due_at and id make its key"
    );
    let path = "/admin/outbox/api/outboxes/mail/messages/reschedule";
    let viewer = post(&console, path, VIEWER, json!({ "keys": keys })).await;
    assert_eq!(viewer.status, 403);
    let answer = post(&console, path, OPERATOR, json!({ "keys": keys })).await;
    assert_eq!(answer.json(), json!({ "selected": 2, "done": 1 }));
    let counts = get(&console, "/admin/outbox/api/outboxes/mail", VIEWER)
        .await
        .json();
    assert_eq!(counts["counts"]["due"]["count"], 2);
    assert_eq!(counts["counts"]["scheduled"]["count"], 0);
    let report = t
        .drain_now(RecordingDeliverer::answering(Delivery::Delivered))
        .await;
    assert_eq!(report.delivered, 2);
    for body in [
        json!({ "keys": [] }),
        json!({ "ids": ["x"] }),
        json!({ "keys": ["not-a-key"] }),
        json!({ "keys": ["5."] }),
    ] {
        assert_eq!(post(&console, path, OPERATOR, body).await.status, 400);
    }
}

#[tokio::test]
async fn inbox_keys_are_counted_up_to_the_cap() {
    let t = TestOutbox::new().await.unwrap();
    for n in 0..3 {
        let mut batch = Batch::new(t.db.clone());
        let _ = batch
            .inbox_key(&t.inbox, &format!("evt-{n}"), None)
            .unwrap();
        batch.commit().await.unwrap();
    }
    let capped = Console::builder()
        .inbox("hooks", t.inbox.clone())
        .authorize(BearerToken::viewer(VIEWER))
        .count_cap(2)
        .build()
        .unwrap();
    let body = get(&capped, "/outbox/api/inboxes/hooks", VIEWER)
        .await
        .json();
    assert_eq!(body["keys"], json!({ "count": 2, "capped": true }));
    let body = get(&console(&t), "/admin/outbox/api/inboxes/hooks", VIEWER)
        .await
        .json();
    assert_eq!(body["keys"], json!({ "count": 3, "capped": false }));
}

#[tokio::test]
async fn a_list_starts_at_a_time() {
    let t = TestOutbox::new().await.unwrap();
    enqueue(&t, "mail", json!({ "n": 0 }), None).await;
    t.clock.advance(std::time::Duration::from_secs(60));
    let from = t.now().as_unix_millis();
    enqueue(&t, "mail", json!({ "n": 1 }), None).await;
    let console = console(&t);
    let base = "/admin/outbox/api/outboxes/mail/messages?state=due";
    let all = get(&console, base, VIEWER).await.json();
    assert_eq!(all["messages"].as_array().unwrap().len(), 2);
    let since = get(&console, &format!("{base}&from_ms={from}"), VIEWER)
        .await
        .json();
    assert_eq!(since["messages"].as_array().unwrap().len(), 1);
    assert_eq!(
        get(&console, &format!("{base}&from_ms=soon"), VIEWER)
            .await
            .status,
        400
    );
}

#[tokio::test]
async fn as_a_tower_service_it_answers_as_handle_does_and_refuses_an_oversized_body() {
    use tower_service::Service;
    let t = TestOutbox::new().await.unwrap();
    enqueue(&t, "mail", json!({}), None).await;
    let mut service = console(&t);
    let read = http::Request::get("https://ops.example/admin/outbox/api/outboxes/mail")
        .header("authorization", format!("Bearer {VIEWER}"))
        .body(String::new())
        .unwrap();
    let response = service.call(read).await.unwrap();
    assert_eq!(response.status(), 200);
    let body: Json = serde_json::from_str(response.body()).unwrap();
    assert_eq!(body["counts"]["due"]["count"], 1);
    let pause = post_request("/admin/outbox/api/outboxes/mail/topics/pause", OPERATOR)
        .header(MUTATION_HEADER, "1")
        .body(json!({ "topic": "mail", "reason": "x".repeat(70_000) }).to_string())
        .unwrap();
    let refused = service.call(pause).await.unwrap();
    assert_eq!(refused.status(), 413);
    let paused = get(&service, "/admin/outbox/api/outboxes/mail", VIEWER)
        .await
        .json();
    assert_eq!(paused["paused"], json!([]), "nothing changed");
    let outside = http::Request::get("https://ops.example/elsewhere")
        .body(String::new())
        .unwrap();
    assert_eq!(service.call(outside).await.unwrap().status(), 404);
}

/// A body of 10,000 bytes that never ends: only an answer given before the
/// body is read comes back.
fn endless_body() -> http_body_util::StreamBody<
    impl futures_util::Stream<Item = Result<http_body::Frame<std::io::Cursor<Vec<u8>>>, std::io::Error>>,
> {
    use futures_util::StreamExt;
    let first = http_body::Frame::data(std::io::Cursor::new(vec![b'x'; 10_000]));
    http_body_util::StreamBody::new(
        futures_util::stream::iter([Ok(first)]).chain(futures_util::stream::pending()),
    )
}

#[tokio::test]
async fn as_a_tower_service_it_reads_no_body_before_credentials_role_and_origin() {
    use tower_service::Service;
    let t = TestOutbox::new().await.unwrap();
    let mut service = console(&t);
    let route = "/admin/outbox/api/outboxes/mail/dead/replay";
    let cases = [
        (None, true, 401),
        (Some(VIEWER), true, 403),
        (Some(OPERATOR), false, 403),
    ];
    for (token, same_site, status) in cases {
        let mut request = http::Request::post(format!("https://ops.example{route}"))
            .header("content-type", "application/json")
            .header(
                "sec-fetch-site",
                if same_site {
                    "same-origin"
                } else {
                    "cross-site"
                },
            )
            .header(MUTATION_HEADER, "1");
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let answered = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            service.call(request.body(endless_body()).unwrap()),
        )
        .await
        .expect("answered without reading the body");
        assert_eq!(answered.unwrap().status(), status, "{token:?}");
    }
}

#[tokio::test]
async fn a_console_reads_through_the_handle_its_outboxes_were_given() {
    use workers_outbox::testing::CountingDatabase;
    let t = TestOutbox::new().await.unwrap();
    enqueue(&t, "mail", json!({}), Some("s-1")).await;
    let reads = CountingDatabase::new(t.db.clone());
    let shared: std::sync::Arc<dyn workers_outbox::Database> = std::sync::Arc::new(reads.clone());
    let console = Console::builder()
        .outbox("mail", t.outbox.through(shared.clone()).unwrap())
        .inbox("hooks", t.inbox.through(shared).unwrap())
        .authorize(BearerToken::operator(OPERATOR))
        .build()
        .unwrap();
    let overview = get(&console, "/outbox/api/outboxes/mail", OPERATOR)
        .await
        .json();
    assert_eq!(overview["counts"]["due"]["count"], 1);
    let before = reads.counts().round_trips;
    assert!(
        before >= 1,
        "the overview went through the console's handle"
    );
    let erased = post(
        &console,
        "/outbox/api/subjects/erase",
        OPERATOR,
        json!({ "subject": "s-1" }),
    )
    .await;
    assert_eq!(erased.json()["outboxes"]["mail"], 1);
    assert!(reads.counts().round_trips > before);
    assert_eq!(t.pending().await.unwrap(), vec![], "the same table");
}

#[tokio::test]
async fn application_rows_without_an_outbox_or_inbox_are_refused_not_skipped() {
    let t = TestOutbox::new().await.unwrap();
    with_accounts(&t).await;
    let console = Console::builder()
        .subject_rows(Accounts {
            db: t.db.clone(),
            table: "accounts",
        })
        .authorize(BearerToken::operator(OPERATOR))
        .build()
        .unwrap();
    let erased = post(
        &console,
        "/outbox/api/subjects/erase",
        OPERATOR,
        json!({ "subject": "acct-1" }),
    )
    .await;
    assert_eq!(erased.status, 400, "{}", erased.body);
    let exported = get(&console, "/outbox/api/subjects?subject=acct-1", OPERATOR)
        .await
        .json();
    assert_eq!(
        exported["application"],
        json!({ "email": "ada@example.com" })
    );
}

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ROTATED: &str = "whsec_bmV3LXNlY3JldC1rZXktb2YtMjQtYnl0ZXM=";

fn endpoint_console(t: &TestOutbox, show_payloads: bool) -> Console {
    Console::builder()
        .prefix("/admin/outbox")
        .outbox("mail", t.outbox.clone())
        .endpoints("mail", Endpoints::new(&t.outbox))
        .authorize(BearerToken::operator(OPERATOR))
        .authorize(BearerToken::new(VIEWER, Role::Viewer))
        .show_payloads(show_payloads)
        .build()
        .unwrap()
}

#[tokio::test]
async fn endpoints_are_listed_shown_and_changed_by_operators_and_never_show_a_secret() {
    let t = TestOutbox::new().await.unwrap();
    let endpoints = Endpoints::new(&t.outbox);
    let url = "https://hooks.example/services/T0/B0/url-token";
    let acme = endpoints
        .create(
            NewEndpoint::new("acme", url, SECRET).metadata(json!({ "contact": "ada@example.com" })),
        )
        .await
        .unwrap();
    let globex = endpoints
        .create(NewEndpoint::new("globex", "https://g.example/hook", SECRET))
        .await
        .unwrap();
    let console = endpoint_console(&t, false);
    assert_eq!(
        get(&console, "/admin/outbox/api/session", VIEWER)
            .await
            .json()["endpoints"],
        json!(["mail"])
    );

    // Every owner's, a page at a time; a URL's origin only, no metadata, no secret.
    let listed = get(
        &console,
        "/admin/outbox/api/outboxes/mail/endpoints?limit=1",
        VIEWER,
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let first = listed.json();
    assert_eq!(first["endpoints"].as_array().unwrap().len(), 1);
    let after = first["next_after"].as_str().unwrap().to_owned();
    let rest = get(
        &console,
        &format!("/admin/outbox/api/outboxes/mail/endpoints?after={after}"),
        VIEWER,
    )
    .await
    .json();
    assert_eq!(rest["next_after"], Json::Null);
    let mut ids: Vec<String> = [&first, &rest]
        .iter()
        .flat_map(|page| page["endpoints"].as_array().unwrap().clone())
        .map(|endpoint| endpoint["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    let mut expected = vec![acme.id.clone(), globex.id.clone()];
    expected.sort();
    assert_eq!(ids, expected);
    for answer in [&listed.body, &rest.to_string()] {
        for secret in ["whsec_", "url-token", "/services/", "ada@example.com"] {
            assert!(!answer.contains(secret), "{secret} shown in {answer}");
        }
    }
    let owned = get(
        &console,
        "/admin/outbox/api/outboxes/mail/endpoints?owner=acme",
        VIEWER,
    )
    .await
    .json();
    let shown = &owned["endpoints"][0];
    assert_eq!(owned["endpoints"].as_array().unwrap().len(), 1);
    assert_eq!(shown["url"], "https://hooks.example");
    assert_eq!(shown["metadata"], Json::Null);
    assert_eq!(shown["details_hidden"], true);
    assert_eq!(shown["state"], "enabled");

    let detail_path = format!(
        "/admin/outbox/api/outboxes/mail/endpoint?owner=acme&id={}",
        acme.id
    );
    let detail = get(&console, &detail_path, VIEWER).await.json();
    assert_eq!(detail["endpoint"]["id"], acme.id.as_str());
    assert_eq!(detail["attempts"], json!([]));
    // Another owner's id under this owner is not found.
    let crossed = get(
        &console,
        &format!(
            "/admin/outbox/api/outboxes/mail/endpoint?owner=acme&id={}",
            globex.id
        ),
        VIEWER,
    )
    .await;
    assert_eq!(crossed.status, 404);

    // Viewers change nothing.
    let action = |verb: &str| format!("/admin/outbox/api/outboxes/mail/endpoint/{verb}");
    let named = json!({ "owner": "acme", "id": acme.id });
    let refused = post(&console, &action("disable"), VIEWER, named.clone()).await;
    assert_eq!(refused.status, 403);
    assert_eq!(endpoints.get("acme", &acme.id).await.unwrap(), acme);

    // An operator disables it: a test event is refused until it is enabled.
    let disabled = post(
        &console,
        &action("disable"),
        OPERATOR,
        json!({ "owner": "acme", "id": acme.id, "reason": "receiver moving" }),
    )
    .await;
    assert_eq!(disabled.status, 200, "{}", disabled.body);
    let state = get(&console, &detail_path, VIEWER).await.json()["endpoint"].clone();
    assert_eq!(state["state"], "disabled");
    assert_eq!(state["reason"], "receiver moving");
    assert_eq!(
        post(&console, &action("test"), OPERATOR, named.clone())
            .await
            .status,
        400
    );
    assert_eq!(
        post(&console, &action("enable"), OPERATOR, named.clone())
            .await
            .status,
        200
    );
    let tested = post(&console, &action("test"), OPERATOR, named.clone()).await;
    assert_eq!(tested.status, 200, "{}", tested.body);
    let event_id = tested.json()["event_id"].as_str().unwrap().to_owned();
    let pending = t.pending().await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].topic, acme.id);
    assert!(pending[0].id.starts_with(&event_id), "{}", pending[0].id);
    assert!(pending[0].payload.contains("outbox.endpoint.test"));

    // A rotation: the new secret is never echoed, the old one's end is shown.
    let rotated = post(
        &console,
        &action("rotate"),
        OPERATOR,
        json!({ "owner": "acme", "id": acme.id, "secret": ROTATED, "overlap_s": 60 }),
    )
    .await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    assert!(!rotated.body.contains("whsec_"), "{}", rotated.body);
    let expires = rotated.json()["endpoint"]["previous_secret_expires_ms"].clone();
    assert_eq!(
        expires,
        json!(workers_outbox::Clock::now(&t.clock).as_unix_millis() + 60_000),
        "{}",
        rotated.body
    );
    for (body, why) in [
        (
            json!({ "owner": "acme", "id": acme.id, "secret": "whsec_c2hvcnQ=" }),
            "a secret too short to sign",
        ),
        (
            json!({ "owner": "acme", "id": acme.id, "secret": ROTATED, "overlap_s": 8 * 86_400 }),
            "an overlap over a week",
        ),
        (
            json!({ "owner": "acme", "id": acme.id, "secret": ROTATED, "extra": 1 }),
            "an unknown field",
        ),
    ] {
        let answer = post(&console, &action("rotate"), OPERATOR, body).await;
        assert_eq!(answer.status, 400, "{why}: {}", answer.body);
    }
    let recovered = post(
        &console,
        &action("recover"),
        OPERATOR,
        json!({ "owner": "acme", "id": acme.id, "since_ms": 0 }),
    )
    .await;
    assert_eq!(recovered.status, 200, "{}", recovered.body);
    assert_eq!(recovered.json()["deliveries"], 0);

    // Nothing of one owner is changed under another's name.
    let before = endpoints.get("globex", &globex.id).await.unwrap();
    for verb in ["disable", "pause", "enable", "test"] {
        let answer = post(
            &console,
            &action(verb),
            OPERATOR,
            json!({ "owner": "acme", "id": globex.id }),
        )
        .await;
        assert_eq!(answer.status, 404, "{verb}: {}", answer.body);
    }
    assert_eq!(endpoints.get("globex", &globex.id).await.unwrap(), before);
    assert_eq!(
        post(&console, &action("explode"), OPERATOR, named)
            .await
            .status,
        404
    );

    // With payloads shown, the whole URL and the metadata.
    let showing = endpoint_console(&t, true);
    let whole = get(&showing, &detail_path, VIEWER).await.json();
    assert_eq!(whole["endpoint"]["url"], url);
    assert_eq!(whole["endpoint"]["metadata"]["contact"], "ada@example.com");
    assert!(!whole.to_string().contains("whsec_"));

    // Endpoints of an outbox the console does not show are refused.
    let orphan = Console::builder()
        .endpoints("mail", Endpoints::new(&t.outbox))
        .build();
    assert!(orphan.is_err());
}

#[tokio::test]
async fn every_change_is_in_the_audit_log_with_who_made_it_and_operators_alone_read_it() {
    let t = TestOutbox::new().await.unwrap();
    let endpoints = Endpoints::new(&t.outbox);
    let endpoint = endpoints
        .create(NewEndpoint::new("acme", "https://hooks.example/h", SECRET))
        .await
        .unwrap();
    let console = Console::builder()
        .prefix("/admin/outbox")
        .outbox("mail", t.outbox.clone())
        .endpoints("mail", Endpoints::new(&t.outbox))
        .authorize(BearerToken::operator(OPERATOR).named("ops-alice"))
        .authorize(BearerToken::new(VIEWER, Role::Viewer))
        .build()
        .unwrap();
    let api = |route: &str| format!("/admin/outbox/api/{route}");
    let paused = post(
        &console,
        &api("outboxes/mail/topics/pause"),
        OPERATOR,
        json!({ "topic": "mail", "reason": "migrating", "unseen": true }),
    )
    .await;
    assert_eq!(paused.status, 200, "{}", paused.body);
    t.clock.advance(std::time::Duration::from_secs(1));
    let rotated = post(
        &console,
        &api("outboxes/mail/endpoint/rotate"),
        OPERATOR,
        json!({ "owner": "acme", "id": endpoint.id, "secret": ROTATED }),
    )
    .await;
    assert_eq!(rotated.status, 200, "{}", rotated.body);
    // Refused changes write nothing.
    let refused = post(
        &console,
        &api("outboxes/mail/topics/pause"),
        OPERATOR,
        json!({ "topic": "never-seen" }),
    )
    .await;
    assert_eq!(refused.status, 400);
    assert_eq!(
        post(
            &console,
            &api("outboxes/mail/topics/pause"),
            VIEWER,
            json!({ "topic": "mail" })
        )
        .await
        .status,
        403
    );

    let log = get(&console, &api("outboxes/mail/audit"), OPERATOR).await;
    assert_eq!(log.status, 200, "{}", log.body);
    let entries = log.json()["entries"].as_array().unwrap().clone();
    assert_eq!(entries.len(), 2, "{entries:?}");
    let (rotation, pause) = (&entries[0], &entries[1]);
    assert_eq!(pause["who"], "ops-alice");
    assert_eq!(pause["role"], "operator");
    assert_eq!(pause["action"], "outboxes/mail/topics/pause");
    assert_eq!(pause["selection"]["topic"], "mail");
    assert_eq!(pause["result"]["changed"], true);
    assert!(pause["at_ms"].is_i64());
    assert_eq!(rotation["action"], "outboxes/mail/endpoint/rotate");
    assert_eq!(rotation["selection"]["id"], endpoint.id.as_str());
    assert!(
        !log.body.contains("whsec_"),
        "a secret reached the audit log: {}",
        log.body
    );
    assert!(!log.body.contains("hooks.example"), "{}", log.body);

    // Pages go newest first; viewers read none of it.
    let older = get(
        &console,
        &api(&format!(
            "outboxes/mail/audit?limit=1&before={}.{}",
            rotation["at_ms"],
            rotation["id"].as_str().unwrap()
        )),
        OPERATOR,
    )
    .await
    .json();
    assert_eq!(
        older["entries"][0]["action"], "outboxes/mail/topics/pause",
        "{entries:?} then {older}"
    );
    assert_eq!(
        get(&console, &api("outboxes/mail/audit"), VIEWER)
            .await
            .status,
        403
    );
}

/// A portal request: the token in the portal's header, and a change's
/// same-origin headers.
fn portal_request(
    method: &str,
    path: &str,
    token: &str,
    body: Option<Json>,
) -> http::Request<Vec<u8>> {
    let builder = http::Request::builder()
        .method(method)
        .uri(format!("https://ops.example{path}"))
        .header(workers_outbox::console::PORTAL_HEADER, token)
        .header("host", "ops.example")
        .header("sec-fetch-site", "same-origin")
        .header(MUTATION_HEADER, "1");
    builder
        .body(body.map_or_else(Vec::new, |body| body.to_string().into_bytes()))
        .unwrap()
}

#[tokio::test]
async fn a_portal_link_reaches_its_owners_endpoints_and_deliveries_and_nothing_of_another_owner() {
    let t = TestOutbox::new().await.unwrap();
    let endpoints = Endpoints::new(&t.outbox);
    let mut ids = Vec::new();
    for owner in ["acme", "globex"] {
        let endpoint = endpoints
            .create(
                NewEndpoint::new(
                    owner,
                    format!("https://{owner}.example/hooks/token"),
                    SECRET,
                )
                .metadata(json!({ "plan": "internal" })),
            )
            .await
            .unwrap();
        let mut batch = Batch::new(t.db.clone());
        let _ = batch
            .publish(
                &endpoints,
                workers_outbox::endpoint::Event::raw_json(owner, "order.paid", r#"{"n":1}"#)
                    .subject(format!("customer-of-{owner}"))
                    .ordering_key(format!("{owner}@example.com")),
            )
            .unwrap();
        batch.commit().await.unwrap();
        ids.push(endpoint.id);
    }
    let (acme, globex) = (ids[0].clone(), ids[1].clone());
    // Both endpoints' deliveries die.
    t.drain_now(RecordingDeliverer::answering(Delivery::permanent("no")))
        .await;
    let dead = t
        .outbox
        .browse(
            &workers_outbox::outbox::BrowseFilter::new(workers_outbox::outbox::Listed::Dead),
            None,
            10,
            100,
        )
        .await
        .unwrap()
        .messages;
    let key_of = |endpoint: &str| {
        let m = dead.iter().find(|m| m.message.topic == endpoint).unwrap();
        (
            format!("{}.{}", m.message.due_at.as_unix_millis(), m.message.id),
            m.message.id.clone(),
        )
    };
    let ((acme_key, _), (globex_key, globex_delivery)) = (key_of(&acme), key_of(&globex));

    let portal = workers_outbox::console::Portal::new(&[42; 32])
        .unwrap()
        .clock(std::sync::Arc::new(t.clock.clone()));
    let console = Console::builder()
        .prefix("/admin/outbox")
        .outbox("mail", t.outbox.clone())
        .inbox("hooks", t.inbox.clone())
        .endpoints("mail", Endpoints::new(&t.outbox))
        .portal(portal)
        .build()
        .unwrap();
    let link = console
        .portal_link("acme", std::time::Duration::from_secs(3600))
        .unwrap();
    let token = link
        .strip_prefix("/admin/outbox/#portal=")
        .unwrap()
        .to_owned();
    let call = |method: &'static str, route: String, body: Option<Json>| {
        let request = portal_request(method, &format!("/admin/outbox/api/{route}"), &token, body);
        let console = console.clone();
        async move { send(&console, request).await }
    };
    let session = call("GET", "session".into(), None).await.json();
    assert_eq!(session["owner"], "acme");
    assert_eq!(session["portal"], true);
    assert_eq!(session["outboxes"], json!([]));

    // Every route that is not an endpoint's or a delivery's is refused.
    let refused = [
        ("GET", "outboxes/mail".to_owned(), None),
        ("GET", "outboxes/mail/live".to_owned(), None),
        ("GET", "outboxes/mail/rollups".to_owned(), None),
        ("GET", "outboxes/mail/messages?state=dead".to_owned(), None),
        (
            "GET",
            format!("outboxes/mail/message?key={globex_key}"),
            None,
        ),
        ("GET", "outboxes/mail/dead/groups".to_owned(), None),
        ("GET", "outboxes/mail/dead/count".to_owned(), None),
        ("GET", "outboxes/mail/audit".to_owned(), None),
        ("GET", "inboxes/hooks".to_owned(), None),
        ("GET", "inboxes/hooks/keys?key=x".to_owned(), None),
        ("GET", "subjects?subject=u1".to_owned(), None),
        (
            "POST",
            "outboxes/mail/dead/replay".to_owned(),
            Some(json!({ "ids": [globex_delivery] })),
        ),
        (
            "POST",
            "outboxes/mail/dead/purge".to_owned(),
            Some(json!({ "topic": globex })),
        ),
        (
            "POST",
            "outboxes/mail/topics/pause".to_owned(),
            Some(json!({ "topic": globex, "unseen": true })),
        ),
        (
            "POST",
            "outboxes/mail/topics/resume".to_owned(),
            Some(json!({ "topic": globex })),
        ),
        (
            "POST",
            "outboxes/mail/messages/reschedule".to_owned(),
            Some(json!({ "keys": [globex_key] })),
        ),
        (
            "POST",
            "subjects/erase".to_owned(),
            Some(json!({ "subject": "u1" })),
        ),
    ];
    for (method, route, body) in refused {
        let answer = call(method, route.clone(), body).await;
        assert_eq!(answer.status, 403, "{method} {route}: {}", answer.body);
    }

    // Another owner's endpoint, by id, by owner, by filter: not found, and unchanged.
    let before = endpoints.get("globex", &globex).await.unwrap();
    let reads = [
        "outboxes/mail/endpoints?owner=globex".to_owned(),
        format!("outboxes/mail/endpoint?id={globex}"),
        format!("outboxes/mail/endpoint?owner=globex&id={globex}"),
        format!("outboxes/mail/deliveries?endpoint={globex}"),
        format!("outboxes/mail/deliveries?owner=globex&endpoint={globex}"),
        format!("outboxes/mail/delivery?endpoint={globex}&key={globex_key}"),
        format!("outboxes/mail/delivery?endpoint={acme}&key={globex_key}"),
    ];
    for route in reads {
        let answer = call("GET", route.clone(), None).await;
        assert_eq!(answer.status, 404, "{route}: {}", answer.body);
        assert!(!answer.body.contains("globex.example"), "{route}");
    }
    for action in ["enable", "disable", "pause", "test", "recover", "rotate"] {
        for named in [
            json!({ "id": globex }),
            json!({ "owner": "globex", "id": globex }),
        ] {
            let mut body = named.clone();
            match action {
                "recover" => body["since_ms"] = json!(0),
                "rotate" => body["secret"] = json!(ROTATED),
                _ => {}
            }
            let answer = call(
                "POST",
                format!("outboxes/mail/endpoint/{action}"),
                Some(body),
            )
            .await;
            assert_eq!(answer.status, 404, "{action} {named}: {}", answer.body);
        }
    }
    for body in [
        json!({ "endpoint": globex }),
        json!({ "owner": "globex", "endpoint": globex }),
    ] {
        let answer = call("POST", "outboxes/mail/deliveries/replay".into(), Some(body)).await;
        assert_eq!(answer.status, 404, "{}", answer.body);
    }
    let crossed = call(
        "POST",
        "outboxes/mail/deliveries/replay".into(),
        Some(json!({ "endpoint": acme, "ids": [globex_delivery] })),
    )
    .await
    .json();
    assert_eq!(crossed["done"], 0, "{crossed}");
    assert_eq!(endpoints.get("globex", &globex).await.unwrap(), before);
    let globex_dead = t
        .outbox
        .count_dead_matching(
            &workers_outbox::outbox::DeadFilter {
                topic: Some(globex.clone()),
                ..Default::default()
            },
            100,
        )
        .await
        .unwrap();
    assert_eq!(globex_dead.count, 1, "globex's dead delivery was replayed");

    // Its own: whole URLs (no metadata), its deliveries with their payload, replayed.
    let own = call("GET", "outboxes/mail/endpoints?after=zzz".into(), None).await;
    let own = own.json();
    assert_eq!(own["endpoints"].as_array().unwrap().len(), 1);
    assert_eq!(
        own["endpoints"][0]["url"],
        "https://acme.example/hooks/token"
    );
    assert_eq!(own["endpoints"][0]["metadata"], Json::Null);
    assert_eq!(own["endpoints"][0]["details_hidden"], false);
    let deliveries = call(
        "GET",
        format!("outboxes/mail/deliveries?endpoint={acme}"),
        None,
    )
    .await
    .json();
    let delivery = &deliveries["messages"][0];
    assert_eq!(delivery["payload"], r#"{"n":1}"#);
    // None of the application's own fields: its subject, its keys.
    assert!(
        delivery["id"].as_str().unwrap().ends_with(acme.as_str()),
        "{delivery}"
    );
    for field in ["subject", "ordering_key", "dedup_key", "trace_id"] {
        assert_eq!(delivery[field], Json::Null, "{field} in {delivery}");
    }
    assert!(!deliveries.to_string().contains("acme@example.com"));
    assert!(!deliveries.to_string().contains("customer-of-acme"));
    let one = call(
        "GET",
        format!("outboxes/mail/delivery?endpoint={acme}&key={acme_key}"),
        None,
    )
    .await;
    assert_eq!(one.status, 200, "{}", one.body);
    let replayed = call(
        "POST",
        "outboxes/mail/deliveries/replay".into(),
        Some(json!({ "endpoint": acme })),
    )
    .await
    .json();
    assert_eq!(
        (replayed["selected"].clone(), replayed["done"].clone()),
        (json!(1), json!(1))
    );

    // Its own endpoint it changes, each change audited as its link's.
    for (action, extra) in [
        ("pause", json!({})),
        ("enable", json!({})),
        ("test", json!({})),
        ("rotate", json!({ "secret": ROTATED })),
        ("recover", json!({ "since_ms": 0 })),
        ("disable", json!({ "reason": "closing" })),
        ("enable", json!({})),
    ] {
        let mut body = json!({ "id": acme });
        for (key, value) in extra.as_object().unwrap() {
            body[key] = value.clone();
        }
        let answer = call(
            "POST",
            format!("outboxes/mail/endpoint/{action}"),
            Some(body),
        )
        .await;
        assert_eq!(answer.status, 200, "{action}: {}", answer.body);
    }
    let unknown = call(
        "POST",
        "outboxes/mail/endpoint/delete".into(),
        Some(json!({ "id": acme })),
    )
    .await;
    assert_eq!(
        unknown.status, 404,
        "an action that is no route, for anyone"
    );
    let audited = t.outbox.audit_log(None, 20).await.unwrap();
    assert!(audited.len() >= 8, "{audited:?}");
    assert!(
        audited
            .iter()
            .all(|entry| entry.who == "portal link of acme"),
        "{audited:?}"
    );

    // An altered or expired link grants nothing.
    let altered = token.replacen('.', ".9", 1);
    let answer = send(
        &console,
        portal_request("GET", "/admin/outbox/api/session", &altered, None),
    )
    .await;
    assert_eq!(answer.status, 401);
    t.clock.advance(std::time::Duration::from_secs(3601));
    assert_eq!(call("GET", "session".into(), None).await.status, 401);
}

#[tokio::test]
async fn a_tenants_deliveries_page_names_no_row_of_another_owner_and_the_operators_owner_has_no_portal()
 {
    let t = TestOutbox::new().await.unwrap();
    let outbox = workers_outbox::Outbox::builder(t.db.clone(), "outbox")
        .clock(std::sync::Arc::new(t.clock.clone()))
        .operational_events("ops")
        .build()
        .unwrap();
    let endpoints = Endpoints::new(&outbox);
    let publish = |owner: &'static str| {
        let (db, endpoints) = (t.db.clone(), endpoints.clone());
        async move {
            let mut batch = Batch::new(db);
            let _ = batch
                .publish(
                    &endpoints,
                    workers_outbox::endpoint::Event::raw_json(owner, "order.paid", "{}"),
                )
                .unwrap();
            batch.commit().await.unwrap();
        }
    };
    // Five of globex's deliveries die first, then one of acme's.
    let globex = endpoints
        .create(NewEndpoint::new(
            "globex",
            "https://globex.example/in",
            SECRET,
        ))
        .await
        .unwrap();
    for _ in 0..5 {
        publish("globex").await;
    }
    t.drain_now(RecordingDeliverer::answering(Delivery::permanent("no")))
        .await;
    t.clock.advance(std::time::Duration::from_secs(1));
    let acme = endpoints
        .create(NewEndpoint::new("acme", "https://acme.example/in", SECRET))
        .await
        .unwrap();
    publish("acme").await;
    t.drain_now(RecordingDeliverer::answering(Delivery::permanent("no")))
        .await;

    let portal = workers_outbox::console::Portal::new(&[42; 32])
        .unwrap()
        .clock(std::sync::Arc::new(t.clock.clone()));
    let console = Console::builder()
        .prefix("/admin/outbox")
        .outbox("mail", outbox.clone())
        .endpoints("mail", endpoints.clone())
        .portal(portal.clone())
        .scan(3)
        .build()
        .unwrap();
    let hour = std::time::Duration::from_secs(3600);
    let token = portal.token("acme", hour).unwrap();
    let tenant_get = |route: String, token: String| {
        let request = portal_request("GET", &format!("/admin/outbox/api/{route}"), &token, None);
        let console = console.clone();
        async move { send(&console, request).await }
    };
    // The walk of 3 rows holds globex's rows only: the page says it was
    // cut and gives no cursor, whatever `after` and `limit` ask.
    for query in ["", "&after=0.", "&limit=1", "&after=0.&limit=1&state=dead"] {
        let route = format!("outboxes/mail/deliveries?endpoint={}{query}", acme.id);
        let page = tenant_get(route.clone(), token.clone()).await;
        assert_eq!(page.status, 200, "{route}: {}", page.body);
        let page = page.json();
        assert_eq!(page["messages"], json!([]), "{route}");
        assert_eq!(page["next"], Json::Null, "{route}: {page}");
        assert_eq!(page["walk_cut"], true, "{route}");
        assert!(!page.to_string().contains(&globex.id), "{route}: {page}");
    }
    // An operator's page (a bearer's grant) goes on from the walk's end.
    let operator = Console::builder()
        .prefix("/admin/outbox")
        .outbox("mail", outbox.clone())
        .endpoints("mail", endpoints.clone())
        .authorize(BearerToken::operator(OPERATOR))
        .scan(3)
        .build()
        .unwrap();
    let page = get(
        &operator,
        &format!(
            "/admin/outbox/api/outboxes/mail/deliveries?owner=acme&endpoint={}",
            acme.id
        ),
        OPERATOR,
    )
    .await
    .json();
    assert!(page["next"].as_str().is_some(), "{page}");

    // The operator's owner, whose operational events tell of every owner:
    // no link is minted for it, and a token for it reaches nothing.
    assert!(console.portal_link("ops", hour).is_err());
    let ops = portal.token("ops", hour).unwrap();
    let answer = tenant_get("outboxes/mail/endpoints".into(), ops).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
}
