//! The drain loop before streaming ("today's loop" in the issue that
//! replaced it), rebuilt on the public API for side-by-side figures: claim a
//! batch, deliver all of it with bounded concurrency, wait for the slowest,
//! then settle the whole batch in one call.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{Either, select};
use futures_util::{StreamExt, stream};
use workers_outbox::drain::Deliver;
use workers_outbox::{Delivery, Outbox, Result, Timer};

/// The batch-barrier loop's knobs.
pub struct BatchLoop {
    /// The outbox drained.
    pub outbox: Outbox,
    /// Where messages go.
    pub deliver: Arc<dyn Deliver>,
    /// Times deliveries out.
    pub timer: Arc<dyn Timer>,
    /// Rows per claim.
    pub batch: u32,
    /// Deliveries in flight.
    pub concurrency: usize,
    /// A delivery taking longer is a retryable failure.
    pub timeout: Duration,
    /// Lease per claim.
    pub lease: Duration,
}

/// What one run of the loop did.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoopRun {
    /// Delivery attempts finished (answered or timed out).
    pub attempts: u64,
    /// Of them, delivered.
    pub delivered: u64,
}

impl BatchLoop {
    /// Drains until a claim comes back short, or `max_calls` would be passed.
    pub async fn run(&self, max_calls: u32) -> Result<LoopRun> {
        let mut run = LoopRun::default();
        let mut calls = 0;
        while calls + 2 <= max_calls {
            calls += 1;
            let claim = self.outbox.claim(self.batch, self.lease).await?;
            let claimed = claim.messages.len();
            if claimed == 0 {
                break;
            }
            let outcomes: Vec<(_, Delivery)> = stream::iter(claim.messages)
                .map(|message| async move {
                    let delivery = self.deliver.deliver(&message);
                    let timeout = self.timer.sleep(self.timeout);
                    let outcome = match select(delivery, timeout).await {
                        Either::Left((delivery, _)) => delivery,
                        Either::Right(((), _)) => Delivery::retry("timed out"),
                    };
                    (message, outcome)
                })
                .buffer_unordered(self.concurrency)
                .collect()
                .await;
            run.attempts += outcomes.len() as u64;
            run.delivered += outcomes
                .iter()
                .filter(|(_, outcome)| *outcome == Delivery::Delivered)
                .count() as u64;
            let settles: Vec<_> = outcomes
                .iter()
                .map(|(message, outcome)| (message.lease(), outcome.clone()))
                .collect();
            calls += 1;
            self.outbox.settle(&settles).await?;
            if claimed < self.batch as usize {
                break;
            }
        }
        Ok(run)
    }
}
