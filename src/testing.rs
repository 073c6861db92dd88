//! Helpers for testing code that uses the outbox (feature `testing`): an
//! outbox in memory on a manual clock, a deliverer that records what it is
//! given, a drain at once, and assertions on what was enqueued.
//!
//! ```
//! # #[cfg(all(feature = "sqlite", not(target_arch = "wasm32")))]
//! # fn main() -> workers_outbox::Result<()> {
//! # futures_util::FutureExt::now_or_never(async {
//! use serde::{Deserialize, Serialize};
//! use workers_outbox::{Batch, Message, Topic};
//! use workers_outbox::testing::{RecordingDeliverer, TestOutbox};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Welcome { to: String }
//! impl Topic for Welcome { const NAME: &'static str = "welcome"; }
//!
//! let t = TestOutbox::new().await?;
//! // The code under test enqueues through a batch, as a handler would.
//! let mut batch = Batch::new(t.db.clone());
//! let _ = batch.enqueue(&t.outbox, Message::of(&Welcome { to: "ada@example.com".into() })?)?;
//! batch.commit().await?;
//!
//! let welcome: Welcome = t.assert_enqueued_one(|w: &Welcome| w.to.ends_with("@example.com")).await;
//! let recorder = RecordingDeliverer::default();
//! let report = t.drain_now(recorder.clone()).await;
//! assert_eq!((report.delivered, recorder.payloads::<Welcome>().len()), (1, 1));
//! # let _ = welcome;
//! # Ok(()) }).expect("SQLite futures complete at once")
//! # }
//! # #[cfg(not(all(feature = "sqlite", not(target_arch = "wasm32"))))]
//! # fn main() {}
//! ```

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

pub use crate::database::counting::{CallCounts, CountingDatabase};
pub use crate::database::faulty::{Around, Chooser, Fault, FaultyDatabase, Strike, Struck};
use crate::drain::Deliver;
use crate::future::BoxFuture;
pub use crate::manual_clock::ManualClock;
use crate::outbox::{ClaimedMessage, Delivery};
use crate::topic::typed::Topic;

/// A [`Deliver`] that records every message it is given and answers with
/// one verdict ([`Delivery::Delivered`] unless told otherwise). Clones share
/// the record.
#[derive(Clone)]
pub struct RecordingDeliverer {
    messages: Arc<Mutex<Vec<ClaimedMessage>>>,
    answer: Delivery,
}

impl Default for RecordingDeliverer {
    fn default() -> Self {
        Self::answering(Delivery::Delivered)
    }
}

impl std::fmt::Debug for RecordingDeliverer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingDeliverer")
            .field("recorded", &self.messages().len())
            .field("answer", &self.answer)
            .finish()
    }
}

impl RecordingDeliverer {
    /// A recorder answering every delivery with `answer`.
    pub fn answering(answer: Delivery) -> Self {
        RecordingDeliverer {
            messages: Arc::default(),
            answer,
        }
    }

    /// Every message given so far, in order (repeats included).
    pub fn messages(&self) -> Vec<ClaimedMessage> {
        self.messages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The payloads of topic `T` given so far, decoded.
    pub fn payloads<T: Topic>(&self) -> Vec<T> {
        self.messages()
            .iter()
            .filter(|message| message.topic == T::NAME)
            .filter_map(|message| message.payload_as().ok())
            .collect()
    }
}

impl Deliver for RecordingDeliverer {
    fn deliver<'a>(&'a self, message: &'a ClaimedMessage) -> BoxFuture<'a, Delivery> {
        self.messages
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(message.clone());
        Box::pin(std::future::ready(self.answer.clone()))
    }
}

/// One settle a [`RecordingTelemetry`] was told of.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ToldSettle {
    /// The outbox (its table).
    pub outbox: String,
    /// The message's topic.
    pub topic: String,
    /// The message's id.
    pub id: String,
    /// How its settle ended.
    pub outcome: crate::telemetry::Outcome,
    /// The class of failure, if any.
    pub error_type: Option<&'static str>,
    /// How long its delivery took.
    pub duration: Option<std::time::Duration>,
    /// How late it was delivered.
    pub lateness: Option<std::time::Duration>,
    /// How old it was when delivered.
    pub age: Option<std::time::Duration>,
    /// Delivered as a suspect, in a suspect group.
    pub alone: bool,
    /// Its failure tripped its receiver's breaker.
    pub tripped: bool,
}

/// What a [`RecordingTelemetry`] was told, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Told {
    /// Settles.
    pub settled: Vec<ToldSettle>,
    /// Backlog samples: outbox, messages due, oldest due age.
    pub backlogs: Vec<(String, u64, Option<std::time::Duration>)>,
    /// Outboxes whose runs ended, one entry per run.
    pub runs_ended: Vec<String>,
}

/// A [`Telemetry`](crate::telemetry::Telemetry) that records everything it
/// is told. Clones share the record.
#[derive(Debug, Clone, Default)]
pub struct RecordingTelemetry {
    told: Arc<Mutex<Told>>,
}

impl RecordingTelemetry {
    /// What it was told so far.
    pub fn told(&self) -> Told {
        self.record().clone()
    }

    fn record(&self) -> std::sync::MutexGuard<'_, Told> {
        self.told.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl crate::telemetry::Telemetry for RecordingTelemetry {
    fn settled(&self, settled: &crate::telemetry::Settled<'_>) {
        self.record().settled.push(ToldSettle {
            outbox: settled.outbox.to_owned(),
            topic: settled.topic.to_owned(),
            id: settled.id.to_owned(),
            outcome: settled.outcome,
            error_type: settled.error_type,
            duration: settled.duration,
            lateness: settled.lateness,
            age: settled.age,
            alone: settled.alone,
            tripped: settled.tripped,
        });
    }

    fn backlog(&self, backlog: &crate::telemetry::Backlog<'_>) {
        self.record().backlogs.push((
            backlog.outbox.to_owned(),
            backlog.due,
            backlog.oldest_due_age,
        ));
    }

    fn run_ended(&self, outbox: &str) {
        self.record().runs_ended.push(outbox.to_owned());
    }
}

/// Runs a future until it finishes or `crashed` is raised; a raised flag
/// drops it where it stands, as a dying isolate (or an aborted task) would:
/// `None`. For testing what survives a crash mid-drain.
pub struct UnlessCrashed<F> {
    inner: Pin<Box<F>>,
    crashed: Arc<AtomicBool>,
}

impl<F> UnlessCrashed<F> {
    /// `inner`, dropped once `crashed` is raised.
    pub fn new(inner: F, crashed: Arc<AtomicBool>) -> Self {
        UnlessCrashed {
            inner: Box::pin(inner),
            crashed,
        }
    }
}

impl<F> std::fmt::Debug for UnlessCrashed<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnlessCrashed")
            .field("crashed", &self.crashed.load(Ordering::SeqCst))
            .finish_non_exhaustive()
    }
}

impl<F: Future> Future for UnlessCrashed<F> {
    type Output = Option<F::Output>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.crashed.load(Ordering::SeqCst) {
            return Poll::Ready(None);
        }
        match self.inner.as_mut().poll(cx) {
            Poll::Ready(output) => Poll::Ready(Some(output)),
            Poll::Pending if self.crashed.load(Ordering::SeqCst) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(all(feature = "sqlite", not(target_arch = "wasm32")))]
pub use in_memory::TestOutbox;

#[cfg(all(feature = "sqlite", not(target_arch = "wasm32")))]
mod in_memory {
    use std::sync::Arc;

    use super::ManualClock;
    use crate::database::Database;
    use crate::database::sqlite::SqliteDatabase;
    use crate::drain::drainer::Drainer;
    use crate::drain::{Deliver, DrainLimits, DrainReport};
    use crate::error::Result;
    use crate::inbox::Inbox;
    use crate::outbox::{MessageState, Outbox, StoredMessage};
    use crate::time::{Clock, Timestamp};
    use crate::topic::typed::Topic;

    /// An outbox and an inbox (tables `outbox` and `inbox`) in an in-memory
    /// SQLite database, on a [`ManualClock`] starting at 2023-11-14T22:13:20Z.
    #[derive(Clone)]
    pub struct TestOutbox {
        /// The database: hand it to the code under test.
        pub db: Arc<dyn Database>,
        /// The outbox.
        pub outbox: Outbox,
        /// The inbox.
        pub inbox: Inbox,
        /// The clock both run on: advance it to make retries due.
        pub clock: ManualClock,
    }

    impl std::fmt::Debug for TestOutbox {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("TestOutbox").finish_non_exhaustive()
        }
    }

    impl TestOutbox {
        /// A fresh outbox and inbox, their tables created.
        ///
        /// # Errors
        /// If SQLite cannot open or create the tables.
        pub async fn new() -> Result<Self> {
            let db: Arc<dyn Database> = Arc::new(SqliteDatabase::open_in_memory()?);
            let clock = ManualClock::new(Timestamp::from_unix_millis(1_700_000_000_000)?);
            let outbox = Outbox::builder(db.clone(), "outbox")
                .clock(Arc::new(clock.clone()))
                .build()?;
            let inbox = Inbox::new(db.clone(), "inbox")?.with_clock(Arc::new(clock.clone()));
            outbox.create_schema().await?;
            inbox.create_schema().await?;
            Ok(TestOutbox {
                db,
                outbox,
                inbox,
                clock,
            })
        }

        /// Every stored message that is not dead, oldest first.
        ///
        /// # Errors
        /// Database errors, or a row that does not decode.
        pub async fn pending(&self) -> Result<Vec<StoredMessage>> {
            let mut messages = self.outbox.every_message().await?;
            messages.retain(|message| message.state != MessageState::Dead);
            Ok(messages)
        }

        /// The payloads of pending messages of topic `T`, decoded, oldest
        /// first.
        ///
        /// # Errors
        /// Database errors, or a payload that does not decode as `T`.
        pub async fn enqueued<T: Topic>(&self) -> Result<Vec<T>> {
            self.pending()
                .await?
                .iter()
                .filter(|message| message.topic == T::NAME)
                .map(|message| {
                    serde_json::from_str(&message.payload).map_err(|error| {
                        crate::error::Error::MalformedRow {
                            table: Some("outbox".into()),
                            row: Some(message.id.clone()),
                            column: "payload".into(),
                            reason: error.to_string(),
                        }
                    })
                })
                .collect()
        }

        /// Asserts that exactly one pending message of topic `T` was
        /// enqueued and that its payload satisfies `check`; returns it.
        ///
        /// # Panics
        /// With a message saying what was found instead: this is a test
        /// assertion.
        pub async fn assert_enqueued_one<T: Topic>(&self, check: impl Fn(&T) -> bool) -> T {
            let found = match self.enqueued::<T>().await {
                Ok(found) => found,
                Err(error) => panic!("could not read the outbox's {} messages: {error}", T::NAME),
            };
            let count = found.len();
            let mut found = found.into_iter();
            match (found.next(), count) {
                (Some(payload), 1) if check(&payload) => payload,
                (Some(_), 1) => panic!("the one {} message does not satisfy the check", T::NAME),
                _ => panic!("expected one {} message, found {count}", T::NAME),
            }
        }

        /// Drains everything due now through `deliver` (deliveries must
        /// finish without the clock moving), and returns the report.
        pub async fn drain_now(&self, deliver: impl Deliver + 'static) -> DrainReport {
            let limits = DrainLimits {
                breaker: None,
                ..DrainLimits::scheduled()
            };
            match Drainer::builder(self.outbox.clone(), deliver)
                .limits(limits)
                .timer(Arc::new(self.clock.clone()))
                .build()
            {
                Ok(drainer) => drainer.drain().await,
                Err(error) => unreachable_preset(self.outbox.table().as_str(), &error),
            }
        }

        /// The time on the test's clock.
        pub fn now(&self) -> Timestamp {
            self.clock.now()
        }
    }

    /// The scheduled preset always validates.
    fn unreachable_preset(outbox: &str, error: &crate::error::Error) -> DrainReport {
        let mut report = DrainReport::new(outbox);
        report.stopped = crate::drain::StopReason::DatabaseError(error.clone());
        report
    }
}
