//! The native `Defer`: the immediate delivery runs on tokio after the
//! caller has moved on, exactly as `wait_until` runs it on Workers.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use workers_outbox::defer::{Defer, TokioDefer};
use workers_outbox::drain::{DrainLimits, Drainer, deliver_fn};
use workers_outbox::{
    ClaimedMessage, Database, Delivery, Message, Outbox, SqliteDatabase, TokioTimer,
};

#[tokio::test]
async fn tokio_defer_delivers_after_the_caller_returns() {
    let db: Arc<dyn Database> = Arc::new(SqliteDatabase::open_in_memory().unwrap());
    let outbox = Outbox::new(db.clone(), "outbox").unwrap();
    outbox.create_schema().await.unwrap();

    let mail = outbox
        .enqueue_leased(Message::raw_json("mail", "{}"), Duration::from_secs(60))
        .unwrap();
    let id = mail.id().to_owned();
    let outcomes = db.batch_atomic(&[mail.statement().clone()]).await.unwrap();
    let claimed = mail.confirm(&outcomes[0]).unwrap();

    let (sent, received) = oneshot::channel::<String>();
    let sent = std::sync::Mutex::new(Some(sent));
    let deliver = deliver_fn(move |message: ClaimedMessage| {
        if let Some(sent) = sent.lock().unwrap().take() {
            sent.send(message.id).unwrap();
        }
        async { Delivery::Delivered }
    });
    let drainer = Drainer::new(
        outbox.clone(),
        Arc::new(deliver),
        Arc::new(TokioTimer),
        DrainLimits::after_response(),
    )
    .unwrap();
    let (done, finished) = oneshot::channel();
    TokioDefer::current().unwrap().defer(Box::pin(async move {
        let report = drainer.deliver_claimed(vec![claimed]).await;
        done.send(report).unwrap();
    }));

    assert_eq!(received.await.unwrap(), id);
    let report = finished.await.unwrap();
    assert_eq!((report.delivered, report.queries), (1, 1));
    assert_eq!(outbox.stats().await.unwrap().pending, 0);
}

#[test]
fn tokio_defer_outside_a_runtime_is_an_error_not_a_panic() {
    assert!(TokioDefer::current().is_err());
}
