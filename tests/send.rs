//! Every public async method's future is `Send` natively: each is spawned
//! on a multi-threaded tokio runtime, which refuses a future that is not.
//! (Compiling is the test; running it only drives the futures once.)

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use workers_outbox::drain::{DrainLimits, Drainer, deliver_fn};
use workers_outbox::subject::{erase_subject, export_subject};
use workers_outbox::{
    ClaimedMessage, Database, Delivery, Inbox, Message, Outbox, SqliteDatabase, Statement,
    Timestamp, TokioTimer,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_public_future_can_be_spawned() {
    let db: Arc<dyn Database> = Arc::new(SqliteDatabase::open_in_memory().unwrap());
    let outbox = Outbox::new(db.clone(), "outbox").unwrap();
    let inbox = Inbox::new(db.clone(), "inbox").unwrap();
    let drainer = Drainer::new(
        outbox.clone(),
        Arc::new(deliver_fn(|_: ClaimedMessage| async {
            Delivery::Delivered
        })),
        Arc::new(TokioTimer),
        DrainLimits::scheduled(),
    )
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
                .enqueue_alone(Message::raw_json("mail", "{}").subject("s"))
                .await
                .unwrap();
            let claim = outbox.claim(10, lease).await.unwrap();
            let Some(message) = claim.messages.first() else {
                return; // a concurrent drain took it
            };
            let lease = message.lease().clone();
            // Another task may erase subject "s" meanwhile: the lease may be
            // lost. What is checked here is that the futures are `Send`.
            drop(outbox.reschedule(&lease, "503").await);
            drop(outbox.release(&lease).await);
            drop(outbox.complete(&lease).await);
            drop(outbox.bury(&lease, "400").await);
            drop(outbox.settle(&[(&lease, Delivery::Delivered)]).await);
            outbox.stats().await.unwrap();
            outbox.list_dead(10, None).await.unwrap();
            drop(outbox.replay(&enqueued.id).await);
            outbox.replay_all().await.unwrap();
            outbox.purge_dead(Timestamp::EPOCH).await.unwrap();
            outbox.export_subject("s").await.unwrap();
            outbox.erase_subject("s").await.unwrap();
        }
    }));
    tasks.push(tokio::spawn({
        let inbox = i();
        async move {
            inbox.process_once("k", Some("s"), &[]).await.unwrap();
            inbox.seen("k").await.unwrap();
            inbox.export_subject("s").await.unwrap();
            inbox.purge(Timestamp::EPOCH).await.unwrap();
            inbox.erase_subject("s").await.unwrap();
        }
    }));
    tasks.push(tokio::spawn({
        let (outbox, inbox) = (o(), i());
        async move {
            export_subject(&outbox, &inbox, "s").await.unwrap();
            erase_subject(&outbox, &inbox, "s").await.unwrap();
        }
    }));
    tasks.push(tokio::spawn({
        let (db, outbox) = (db.clone(), o());
        async move {
            let mut batch = workers_outbox::Batch::new(db);
            let ticket = batch
                .enqueue_leased(&outbox, Message::raw_json("mail", "{}"), lease)
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
    tasks.push(tokio::spawn({
        let drainer = drainer.clone();
        async move {
            drainer.drain().await;
            drainer.deliver_claimed(Vec::new()).await;
        }
    }));
    for task in tasks {
        task.await.unwrap();
    }
}
