//! The native `Defer`: the immediate delivery runs on tokio after the
//! caller has moved on, exactly as `wait_until` runs it on Workers.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use workers_outbox::defer::TokioDefer;
use workers_outbox::drain::deliver_fn;
use workers_outbox::{
    Batch, ClaimedMessage, Database, Delivery, DrainLimits, Drainer, Message, Outbox,
    SqliteDatabase,
};

#[tokio::test]
async fn tokio_defer_delivers_after_the_caller_returns() {
    let db: Arc<dyn Database> = Arc::new(SqliteDatabase::open_in_memory().unwrap());
    let outbox = Outbox::new(db.clone(), "outbox").unwrap();
    outbox.create_schema().await.unwrap();

    let mut batch = Batch::new(db.clone());
    let mail = batch
        .enqueue_leased(
            &outbox,
            Message::raw_json("mail", "{}"),
            Duration::from_secs(60),
        )
        .unwrap();
    let id = mail.id().to_owned();
    let claimed = batch
        .commit()
        .await
        .unwrap()
        .claimed(mail)
        .unwrap()
        .unwrap();

    let (sent, received) = oneshot::channel::<String>();
    let sent = std::sync::Mutex::new(Some(sent));
    let deliver = deliver_fn(move |message: ClaimedMessage| {
        if let Some(sent) = sent.lock().unwrap().take() {
            sent.send(message.id).unwrap();
        }
        async { Delivery::Delivered }
    });
    let drainer = Drainer::builder(outbox.clone(), deliver)
        .limits(DrainLimits::after_response())
        .build()
        .unwrap();
    drainer.deliver_now(&TokioDefer::current().unwrap(), claimed);

    // The delivery ran after the caller moved on, and its settle follows.
    assert_eq!(received.await.unwrap(), id);
    for _ in 0..100 {
        if outbox.stats().await.unwrap().pending == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the deferred delivery was never settled");
}

#[test]
fn tokio_defer_outside_a_runtime_is_an_error_not_a_panic() {
    assert!(TokioDefer::current().is_err());
}
