//! A deliverer that blocks its thread (synchronous work, a paused isolate, a
//! long GC) on real time: the deliveries queued behind it must not call the
//! deliverer once their leases no longer leave room for a timeout and a
//! settle. (The conformance suite checks the same on a manual clock, on
//! every backend.)

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use workers_outbox::drain::Deliver;
use workers_outbox::future::BoxFuture;
use workers_outbox::{
    ClaimedMessage, Clock, Database, Delivery, DrainLimits, Drainer, Message, Outbox,
    SqliteDatabase, SystemClock, TokioTimer,
};

struct BlocksOnce {
    calls: AtomicU32,
    lease_left_ms: Mutex<Vec<i64>>,
}

impl Deliver for BlocksOnce {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        let left = message.lease().until().as_unix_millis() - SystemClock.now().as_unix_millis();
        self.lease_left_ms.lock().unwrap().push(left);
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            std::thread::sleep(Duration::from_millis(1_100));
        }
        Box::pin(async { Delivery::Delivered })
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_blocked_thread_makes_the_deliveries_behind_it_hand_back() {
    let db: Arc<dyn Database> = Arc::new(SqliteDatabase::open_in_memory().unwrap());
    let outbox = Outbox::new(db, "outbox").unwrap();
    outbox.create_schema().await.unwrap();
    for _ in 0..6 {
        outbox
            .enqueue_alone(Message::raw_json("mail", "{}"))
            .await
            .unwrap();
    }
    let limits = DrainLimits {
        concurrency: 6,
        lease: Duration::from_millis(800),
        delivery_timeout: Duration::from_millis(250),
        settle_margin: Duration::from_millis(150),
        deadline: Duration::from_secs(5),
        flush_interval: Duration::from_millis(100),
        ..DrainLimits::scheduled()
    };
    let deliverer = Arc::new(BlocksOnce {
        calls: AtomicU32::new(0),
        lease_left_ms: Mutex::new(Vec::new()),
    });
    let drainer = Drainer::builder(outbox.clone(), deliverer.clone())
        .timer(Arc::new(TokioTimer))
        .limits(limits)
        .build()
        .unwrap();

    let first = drainer.drain().await;
    assert_eq!(
        (first.delivered, first.too_late_to_start),
        (1, 5),
        "{first}"
    );
    let second = drainer.drain().await;
    assert_eq!(second.delivered, 5, "{second}");

    let left = deliverer.lease_left_ms.lock().unwrap().clone();
    assert_eq!(left.len(), 6);
    assert!(
        left.iter().all(|ms| *ms >= 400),
        "the deliverer was called with less than timeout + margin (400 ms) left: {left:?}"
    );
    assert_eq!(outbox.stats().await.unwrap().pending, 0);
}
