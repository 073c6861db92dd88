//! The helpers users test their own code with.

#![allow(clippy::unwrap_used)]

use serde::{Deserialize, Serialize};
use workers_outbox::testing::{RecordingDeliverer, TestOutbox};
use workers_outbox::{Batch, Delivery, Message, Topic};

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Invoice {
    number: u32,
}

impl Topic for Invoice {
    const NAME: &'static str = "invoice";
}

async fn enqueue(t: &TestOutbox, number: u32) {
    let mut batch = Batch::new(t.db.clone());
    let _ = batch
        .enqueue(&t.outbox, Message::of(&Invoice { number }).unwrap())
        .unwrap();
    batch.commit().await.unwrap();
}

#[tokio::test]
async fn an_enqueued_message_is_found_checked_and_drained() {
    let t = TestOutbox::new().await.unwrap();
    enqueue(&t, 7).await;
    let invoice = t.assert_enqueued_one(|i: &Invoice| i.number == 7).await;
    assert_eq!(invoice, Invoice { number: 7 });
    let recorder = RecordingDeliverer::default();
    let report = t.drain_now(recorder.clone()).await;
    assert_eq!(report.delivered, 1);
    assert_eq!(recorder.payloads::<Invoice>(), vec![Invoice { number: 7 }]);
    assert!(t.pending().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_failing_receiver_leaves_the_message_pending() {
    let t = TestOutbox::new().await.unwrap();
    enqueue(&t, 1).await;
    let refusing = RecordingDeliverer::answering(Delivery::unavailable("503", None));
    let report = t.drain_now(refusing.clone()).await;
    assert_eq!((report.delivered, report.deferred), (0, 1));
    assert_eq!(
        t.enqueued::<Invoice>().await.unwrap(),
        vec![Invoice { number: 1 }]
    );
}

#[tokio::test]
#[should_panic(expected = "expected one invoice message, found 2")]
async fn two_messages_fail_an_assertion_of_one() {
    let t = TestOutbox::new().await.unwrap();
    enqueue(&t, 1).await;
    enqueue(&t, 2).await;
    t.assert_enqueued_one(|_: &Invoice| true).await;
}

#[tokio::test]
#[should_panic(expected = "does not satisfy the check")]
async fn a_payload_that_fails_the_check_fails_the_assertion() {
    let t = TestOutbox::new().await.unwrap();
    enqueue(&t, 1).await;
    t.assert_enqueued_one(|i: &Invoice| i.number == 2).await;
}
