//! Every public async method's future is `Send` natively: each is spawned
//! on a multi-threaded tokio runtime, which refuses a future that is not.
//! (Compiling is the test; running it only drives the futures once.) A
//! second test reads the crate's sources and fails when a public async fn
//! is missing from the spawns, so a new one cannot slip past.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use workers_outbox::drain::deliver_fn;
use workers_outbox::subject::{erase_subject, export_subject};
use workers_outbox::{
    ClaimedMessage, Database, Delivery, DrainLimits, Drainer, Inbox, Message, Outbox,
    PostgresDatabase, SqliteDatabase, Statement, Timestamp, TokioTimer, Topic,
};

#[derive(serde::Serialize, serde::Deserialize)]
struct Mail;

impl Topic for Mail {
    const NAME: &'static str = "mail";
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_public_future_can_be_spawned() {
    let db: Arc<dyn Database> = Arc::new(SqliteDatabase::open_in_memory().unwrap());
    let outbox = Outbox::new(db.clone(), "outbox").unwrap();
    let inbox = Inbox::new(db.clone(), "inbox").unwrap();
    let drainer = Drainer::builder(
        outbox.clone(),
        deliver_fn(|_: ClaimedMessage| async { Delivery::Delivered }),
    )
    .timer(Arc::new(TokioTimer))
    .limits(DrainLimits::scheduled())
    .build()
    .unwrap();
    let lease = Duration::from_secs(60);
    let spawn = |task: tokio::task::JoinHandle<()>| task;
    let mut tasks = Vec::new();
    {
        let (db, outbox, inbox) = (db.clone(), outbox.clone(), inbox.clone());
        tasks.push(spawn(tokio::spawn(async move {
            outbox.create_schema().await.unwrap();
            inbox.create_schema().await.unwrap();
            db.execute(&Statement::new("SELECT 1", vec![]))
                .await
                .unwrap();
            db.query(&Statement::new("SELECT 1 AS one", vec![]))
                .await
                .unwrap();
            db.batch_atomic(&[]).await.unwrap();
        })));
    }
    for task in tasks.drain(..) {
        task.await.unwrap();
    }
    let o = || outbox.clone();
    let i = || inbox.clone();
    tasks.push(tokio::spawn({
        let outbox = o();
        async move {
            let enqueued = outbox
                .enqueue_alone(Message::raw_json("mail", "{}").subject("s1"))
                .await
                .unwrap();
            let claim = outbox.claim(10, lease).await.unwrap();
            let Some(message) = claim.messages.first() else {
                return; // a concurrent drain took it
            };
            let lease = message.lease().clone();
            // Another task may drain meanwhile: the lease may be lost. What is checked here is that the futures are `Send`.
            drop(outbox.reschedule(&lease, "503").await);
            drop(outbox.release(&lease).await);
            drop(outbox.complete(&lease).await);
            drop(outbox.bury(&lease, "400").await);
            drop(outbox.settle(&[(&lease, Delivery::Delivered)]).await);
            let held = workers_outbox::outbox::HeldMessage {
                error: workers_outbox::Error::Unsealable {
                    key: "k".into(),
                    reason: "a test".into(),
                },
                lease: lease.clone(),
            };
            drop(outbox.hold(&held).await);
            outbox.stats().await.unwrap();
            outbox.pause_topic("mail", "maintenance").await.unwrap();
            outbox.paused_topics().await.unwrap();
            outbox.resume_topic("mail").await.unwrap();
            let audit = workers_outbox::outbox::Audit::new(
                "ops",
                "operator",
                "pause",
                serde_json::json!({}),
            );
            let (audited, key) = outbox.audited(&audit).unwrap();
            audited.pause_topic("audited", "x").await.unwrap();
            outbox
                .record_audit_result(&key, &serde_json::json!({}))
                .await
                .unwrap();
            outbox.audit_log(None, 10).await.unwrap();
            outbox
                .rollups(
                    Timestamp::EPOCH,
                    Timestamp::from_unix_millis(60_000).unwrap(),
                    workers_outbox::outbox::Resolution::Minute,
                )
                .await
                .unwrap();
            outbox.count_due(100).await.unwrap();
            outbox.list_dead(10, None).await.unwrap();
            drop(outbox.replay(&enqueued.id).await);
            outbox.replay_all().await.unwrap();
            outbox.purge_dead(Timestamp::EPOCH).await.unwrap();
            outbox.export_subject("s1").await.unwrap();
            outbox.erase_subject("s1").await.unwrap();
            // Without a key ring a reseal is refused: the future is what is spawned.
            drop(outbox.reseal(None, 10).await);
        }
    }));
    tasks.push(tokio::spawn({
        let inbox = i();
        async move {
            inbox.process_once("k", Some("s2"), &[]).await.unwrap();
            let secrets = workers_outbox::webhook::secrets("whsec_c2VjcmV0").unwrap();
            let verifier = workers_outbox::webhook::Verifier::new(secrets).unwrap();
            let unsigned = |_: &str| None;
            let refused = inbox
                .process_webhook(&verifier, &unsigned, b"{}", |_| Ok((None, Vec::new())))
                .await;
            assert!(refused.is_err());
            inbox.seen("k").await.unwrap();
            inbox.count_keys(10).await.unwrap();
            inbox.export_subject("s2").await.unwrap();
            inbox.purge(Timestamp::EPOCH).await.unwrap();
            inbox.erase_subject("s2").await.unwrap();
        }
    }));
    tasks.push(tokio::spawn({
        let (outbox, inbox) = (o(), i());
        async move {
            export_subject(&outbox, &inbox, "s3").await.unwrap();
            erase_subject(&outbox, &inbox, "s3").await.unwrap();
        }
    }));
    tasks.push(tokio::spawn({
        let (db, outbox) = (db.clone(), o());
        async move {
            let mut batch = workers_outbox::Batch::new(db);
            let ticket = batch
                // Not "mail": another task pauses that topic meanwhile, and
                // a leased enqueue of a paused topic is written unleased.
                .enqueue_leased(&outbox, Message::raw_json("leased", "{}"), lease)
                .unwrap();
            let message = batch
                .commit()
                .await
                .unwrap()
                .claimed(ticket)
                .unwrap()
                .unwrap();
            let router = workers_outbox::topic::Router::new();
            use workers_outbox::drain::Deliver;
            router.deliver(&message).await;
        }
    }));
    tasks.push(tokio::spawn(async {
        let t = workers_outbox::testing::TestOutbox::new().await.unwrap();
        t.pending().await.unwrap();
        t.enqueued::<Mail>().await.unwrap();
        t.outbox
            .enqueue_alone(Message::of(&Mail).unwrap())
            .await
            .unwrap();
        t.assert_enqueued_one::<Mail>(|_| true).await;
        t.drain_now(workers_outbox::testing::RecordingDeliverer::default())
            .await;
    }));
    tasks.push(tokio::spawn(async {
        // Nothing listens on port 1: what is checked is that the future is `Send`.
        drop(PostgresDatabase::connect("postgres://postgres@127.0.0.1:1/none", 1).await);
    }));
    tasks.push(tokio::spawn({
        let drainer = drainer.clone();
        async move {
            drainer.drain().await;
        }
    }));
    tasks.push(tokio::spawn({
        let (outbox, inbox) = (o(), i());
        async move {
            use workers_outbox::outbox::{BrowseFilter, Listed};
            outbox.overview(100).await.unwrap();
            outbox.due_now(50).await.unwrap();
            let filter = BrowseFilter::new(Listed::Dead);
            outbox.browse(&filter, None, 10, 100).await.unwrap();
            outbox.dead_letter_groups(100).await.unwrap();
            let ids = outbox
                .dead_letters_of_group("mail", "none", 10, 100, None)
                .await
                .unwrap();
            let none = vec!["no-such-id".to_owned()];
            outbox.replay_selected(&none).await.unwrap();
            outbox.purge_selected(&none).await.unwrap();
            let key = workers_outbox::outbox::BrowseCursor::parse("1.no-such-id").unwrap();
            assert!(outbox.message_at(&key).await.unwrap().is_none());
            outbox.reschedule_now(&[key]).await.unwrap();
            let every = workers_outbox::outbox::DeadFilter::default();
            outbox.count_dead_matching(&every, 100).await.unwrap();
            outbox.dead_letters_matching(&every, 10, 100).await.unwrap();
            drop(ids);
            let console = workers_outbox::console::Console::builder()
                .outbox("mail", outbox)
                .inbox("inbox", inbox)
                .build()
                .unwrap();
            console.handle(http::Request::new(Vec::<u8>::new())).await;
        }
    }));
    tasks.push(tokio::spawn({
        let outbox = o();
        async move {
            use workers_outbox::endpoint::{EndpointUpdate, Endpoints, NewEndpoint};
            let endpoints = Endpoints::new(&outbox);
            let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
            let new = NewEndpoint::new("acme", "https://hooks.example/in", secret);
            let id = endpoints.create(new).await.unwrap().id;
            endpoints.get("acme", &id).await.unwrap();
            endpoints.list("acme").await.unwrap();
            endpoints.list_all(None, 10).await.unwrap();
            endpoints.send_test("acme", &id).await.unwrap();
            let update = EndpointUpdate::default().metadata(serde_json::json!({"plan": "pro"}));
            endpoints.update("acme", &id, update).await.unwrap();
            endpoints
                .rotate_secret("acme", &id, secret, Duration::from_secs(60))
                .await
                .unwrap();
            endpoints
                .recover("acme", &id, Timestamp::EPOCH)
                .await
                .unwrap();
            endpoints.attempts("acme", &id, 10).await.unwrap();
            outbox.attempts_of(&id).await.unwrap();
            endpoints.disable("acme", &id, "test").await.unwrap();
            endpoints.pause("acme", &id, "test").await.unwrap();
            endpoints.enable("acme", &id).await.unwrap();
            endpoints.delete("acme", &id).await.unwrap();
        }
    }));
    tasks.push(tokio::spawn({
        let (outbox, db) = (o(), db.clone());
        async move {
            use workers_outbox::fleet::{Fleet, FleetMember, FleetOrder};
            let fleet = Fleet::new(db, "fleet").unwrap();
            fleet.create_schema().await.unwrap();
            let summary = outbox.summary().await.unwrap();
            fleet
                .report("acme", "outbox", &summary, Timestamp::EPOCH)
                .await
                .unwrap();
            fleet.list(FleetOrder::Dead, None, 10).await.unwrap();
            FleetMember::new(fleet.clone(), "acme")
                .unwrap()
                .report(&outbox)
                .await
                .unwrap();
            fleet.forget("acme").await.unwrap();
        }
    }));
    for task in tasks {
        task.await.unwrap();
    }
}

/// Source files whose public async fns cannot be spawned here, and why.
const NOT_SPAWNED_HERE: &[(&str, &str)] = &[
    (
        "src/conformance/",
        "cases run on one thread by design (LocalBoxFuture)",
    ),
    (
        "src/database/durable_object.rs",
        "wasm32 only: JavaScript futures",
    ),
    (
        "src/drain/alarm.rs",
        "wasm32 only: a Durable Object's alarm",
    ),
    (
        "src/database/postgres/hyperdrive.rs",
        "wasm32 only: JavaScript futures",
    ),
    ("src/queue/consumer.rs", "wasm32 only: JavaScript futures"),
    ("src/console/workers.rs", "wasm32 only: a Worker's request"),
    ("src/queue/fan_out.rs", "wasm32 only: JavaScript futures"),
];

/// Every `pub async fn` of the crate, as the call that spawns it must be
/// spelled (then `(` or `::<`): `.name` for a method, `Type::name` for an
/// associated fn, `name` for a free fn; with the file it is in.
fn public_async_fns(dir: &std::path::Path, found: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            public_async_fns(&path, found);
            continue;
        }
        if path.extension().is_none_or(|ext| ext != "rs") {
            continue;
        }
        let source = std::fs::read_to_string(&path).unwrap();
        let file = path
            .strip_prefix(env!("CARGO_MANIFEST_DIR"))
            .unwrap()
            .to_string_lossy()
            .replace('\\', "/");
        let mut impl_type = None;
        let mut offset = 0;
        for line in source.split_inclusive('\n') {
            let at = offset;
            offset += line.len();
            if line.starts_with('}') {
                impl_type = None; // the end of a top-level impl
            }
            let line = line.trim();
            if line.starts_with("impl") && line.ends_with('{') {
                let head = line.trim_end_matches('{').trim_end();
                let last = head.rsplit([' ', '>']).next().unwrap_or(head);
                impl_type = Some(last.split('<').next().unwrap_or(last).to_owned());
            }
            let Some(rest) = line.strip_prefix("pub async fn ") else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            // The whole signature, which may span lines.
            let signature = &source[at..];
            let signature = &signature[..signature.find('{').unwrap_or(signature.len())];
            let call = if signature.contains("self") {
                format!(".{name}")
            } else {
                match &impl_type {
                    Some(ty) => format!("{ty}::{name}"),
                    None => name.clone(),
                }
            };
            found.push((file.clone(), call));
        }
    }
}

#[test]
fn every_public_async_fn_is_in_the_spawn_test() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    public_async_fns(&root.join("src"), &mut found);
    assert!(
        found.len() > 30,
        "the scan found only {} public async fns",
        found.len()
    );
    let this = std::fs::read_to_string(root.join("tests/send.rs")).unwrap();
    let spawns = this
        .split("/// Source files whose public async fns")
        .next()
        .unwrap();
    let missing: Vec<String> = found
        .iter()
        .filter(|(file, _)| {
            !NOT_SPAWNED_HERE
                .iter()
                .any(|(skip, _)| file.starts_with(skip))
        })
        .filter(|(_, call)| {
            !spawns.contains(&format!("{call}(")) && !spawns.contains(&format!("{call}::<"))
        })
        .map(|(file, call)| format!("{call}…) in {file}"))
        .collect();
    assert!(
        missing.is_empty(),
        "public async fns never spawned in every_public_future_can_be_spawned (add each, or \
         list its file in NOT_SPAWNED_HERE with the reason): {missing:#?}"
    );
    for (skip, _) in NOT_SPAWNED_HERE {
        assert!(
            found.iter().any(|(file, _)| file.starts_with(skip)),
            "{skip} has no public async fn any more: take it off NOT_SPAWNED_HERE"
        );
    }
}
