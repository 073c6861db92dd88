//! The drain loop, shared by the immediate attempt (`wait_until`) and the
//! scheduled drain (cron): claim a batch, deliver it with bounded
//! concurrency, settle it in one call, and stop before a Workers limit bites.

mod deliver;
mod report;

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{Either, select};
use futures_util::{StreamExt, stream};

pub use deliver::{Deliver, DeliverFn, deliver_fn};
pub use report::{DrainReport, StopReason};

use crate::error::{Error, Result};
use crate::outbox::{Claim, ClaimedMessage, Delivery, LeaseHandle, Outbox, SettleReport};
use crate::time::{Timer, Timestamp};

/// Bounds on one drain. Pick a preset and adjust fields as needed; the
/// [`Drainer`] checks them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainLimits {
    /// Rows leased per claim (1 ..= [`Outbox::MAX_CLAIM`]).
    pub batch_size: u32,
    /// Deliveries in flight at once (Workers allows 6 open connections).
    pub concurrency: usize,
    /// A delivery taking longer counts as a retryable failure.
    pub delivery_timeout: Duration,
    /// How long a claim leases its rows. Must exceed `delivery_timeout` plus
    /// `settle_margin`; a crashed drainer's rows return after this.
    pub lease: Duration,
    /// Time kept free after a delivery's timeout for its settle call: no
    /// delivery starts unless it can time out and still be settled before
    /// the deadline and before its lease ends.
    pub settle_margin: Duration,
    /// Wall-clock budget: no delivery starts unless it can time out and be
    /// settled before the deadline.
    pub deadline: Duration,
    /// Database calls allowed (claims and settles). A batch is claimed only
    /// if its settle still fits.
    pub max_queries: u32,
    /// Messages claimed at most.
    pub max_messages: u32,
}

impl DrainLimits {
    /// A cron drain on the Workers Paid plan: 45 s of wall time (cron runs
    /// get 30 s of CPU, and deliveries mostly wait on the network), 900 of
    /// the 1,000 D1 queries an invocation may make.
    pub fn scheduled() -> Self {
        DrainLimits {
            batch_size: 100,
            concurrency: 6,
            delivery_timeout: Duration::from_secs(10),
            lease: Duration::from_secs(60),
            settle_margin: Duration::from_secs(5),
            deadline: Duration::from_secs(45),
            max_queries: 900,
            max_messages: 100_000,
        }
    }

    /// A cron drain on the Workers Free plan: 45 of the 50 D1 queries an
    /// invocation may make.
    pub fn scheduled_free_plan() -> Self {
        DrainLimits {
            max_queries: 45,
            ..Self::scheduled()
        }
    }

    /// An attempt inside `wait_until` after a response: 25 s, inside the
    /// 30 s the runtime grants, and few queries, leaving the rest of the
    /// invocation's budget to the request itself.
    pub fn after_response() -> Self {
        DrainLimits {
            deadline: Duration::from_secs(25),
            max_queries: 10,
            ..Self::scheduled()
        }
    }

    /// Checks the limits against each other.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the first limit out of range.
    pub fn validate(&self) -> Result<()> {
        if !(1..=Outbox::MAX_CLAIM).contains(&self.batch_size) {
            return Err(Error::invalid(
                "batch size",
                format!("{} is outside 1 ..= {}", self.batch_size, Outbox::MAX_CLAIM),
            ));
        }
        if self.concurrency == 0 {
            return Err(Error::invalid("concurrency", "it is zero"));
        }
        if self.delivery_timeout.is_zero() {
            return Err(Error::invalid("delivery timeout", "it is zero"));
        }
        if self.lease <= self.delivery_timeout + self.settle_margin {
            return Err(Error::invalid(
                "lease",
                format!(
                    "{} ms does not outlive the delivery timeout ({} ms) plus the settle margin ({} ms)",
                    self.lease.as_millis(),
                    self.delivery_timeout.as_millis(),
                    self.settle_margin.as_millis()
                ),
            ));
        }
        crate::outbox::check_lease(self.lease)?;
        if self.max_queries < 2 {
            return Err(Error::invalid(
                "query budget",
                "a batch needs 2 queries (claim and settle)",
            ));
        }
        Ok(())
    }
}

impl Default for DrainLimits {
    fn default() -> Self {
        Self::scheduled()
    }
}

/// Delivers an outbox's messages through a [`Deliver`]. Cheap to clone, so
/// it can move into a deferred task.
#[derive(Clone)]
pub struct Drainer {
    outbox: Outbox,
    deliver: Arc<dyn Deliver>,
    timer: Arc<dyn Timer>,
    limits: DrainLimits,
}

impl std::fmt::Debug for Drainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Drainer")
            .field("outbox", &self.outbox)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

/// What happened to one claimed message.
enum Attempt {
    Delivered(Delivery),
    TimedOut,
    /// Not started: too close to the deadline or the lease's end.
    NotStarted,
}

impl Drainer {
    /// A drainer over `outbox`; `timer` times out slow deliveries.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `limits` do not [validate](DrainLimits::validate).
    pub fn new(
        outbox: Outbox,
        deliver: Arc<dyn Deliver>,
        timer: Arc<dyn Timer>,
        limits: DrainLimits,
    ) -> Result<Self> {
        limits.validate()?;
        Ok(Drainer {
            outbox,
            deliver,
            timer,
            limits,
        })
    }

    /// The limits in force.
    pub fn limits(&self) -> &DrainLimits {
        &self.limits
    }

    /// Drains due messages until none is left or a limit is reached, and
    /// logs the report as one line.
    pub async fn drain(&self) -> DrainReport {
        let started = self.outbox.now();
        let deadline = started
            .checked_add(self.limits.deadline)
            .unwrap_or(Timestamp::MAX);
        let mut report = DrainReport::new();
        report.stopped = loop {
            if report.claimed >= self.limits.max_messages {
                break StopReason::MessageCap;
            }
            if report.queries + 2 > self.limits.max_queries {
                break StopReason::QueryBudget;
            }
            if !self.time_for_one_more(deadline) {
                break StopReason::Deadline;
            }
            let wanted = self
                .limits
                .batch_size
                .min(self.limits.max_messages - report.claimed);
            report.queries += 1;
            let claim = match self.outbox.claim(wanted, self.limits.lease).await {
                Ok(claim) => claim,
                Err(error) => break StopReason::DatabaseError(error),
            };
            if claim.is_empty() {
                break StopReason::Drained;
            }
            let claimed = u32::try_from(claim.len()).unwrap_or(u32::MAX);
            if let Err(error) = self.deliver_batch(claim, deadline, &mut report).await {
                break StopReason::DatabaseError(error);
            }
            if claimed < wanted {
                break StopReason::Drained;
            }
        };
        report.elapsed = self.outbox.now().duration_since(started);
        log::info!("{report}");
        report
    }

    /// Delivers messages the caller already leases (from
    /// [`Outbox::enqueue_leased`]) and settles them in one call: the
    /// immediate attempt after a response.
    pub async fn deliver_claimed(&self, messages: Vec<ClaimedMessage>) -> DrainReport {
        let started = self.outbox.now();
        let deadline = started
            .checked_add(self.limits.deadline)
            .unwrap_or(Timestamp::MAX);
        let mut report = DrainReport::new();
        let claim = Claim {
            messages,
            ..Claim::default()
        };
        if !claim.is_empty()
            && let Err(error) = self.deliver_batch(claim, deadline, &mut report).await
        {
            report.stopped = StopReason::DatabaseError(error);
        }
        report.elapsed = self.outbox.now().duration_since(started);
        log::info!("{report}");
        report
    }

    /// Whether a delivery started now can time out and be settled before
    /// `deadline`.
    fn time_for_one_more(&self, deadline: Timestamp) -> bool {
        self.outbox
            .now()
            .checked_add(self.limits.delivery_timeout + self.limits.settle_margin)
            .is_ok_and(|finish| finish <= deadline)
    }

    /// Delivers a claimed batch and settles it with one database call.
    async fn deliver_batch(
        &self,
        claim: Claim,
        deadline: Timestamp,
        report: &mut DrainReport,
    ) -> Result<()> {
        report.batches += 1;
        report.claimed += u32::try_from(claim.len()).unwrap_or(u32::MAX);
        report.dead += u32::try_from(claim.exhausted.len()).unwrap_or(u32::MAX);
        report.malformed += u32::try_from(claim.malformed.len()).unwrap_or(u32::MAX);

        let attempts: Vec<(LeaseHandle, Attempt)> = stream::iter(claim.messages)
            .map(|message| async move {
                let attempt = self.attempt(&message, deadline).await;
                (message.lease, attempt)
            })
            .buffer_unordered(self.limits.concurrency)
            .collect()
            .await;

        let mut outcomes: Vec<(LeaseHandle, Delivery)> = Vec::with_capacity(attempts.len());
        for (lease, attempt) in attempts {
            let delivery = match attempt {
                Attempt::Delivered(delivery) => delivery,
                Attempt::TimedOut => {
                    report.timed_out += 1;
                    Delivery::Retry {
                        error: format!(
                            "delivery timed out after {} ms",
                            self.limits.delivery_timeout.as_millis()
                        ),
                    }
                }
                Attempt::NotStarted => Delivery::NotAttempted,
            };
            outcomes.push((lease, delivery));
        }
        for malformed in claim.malformed {
            if let Some(lease) = malformed.lease {
                outcomes.push((
                    lease,
                    Delivery::Permanent {
                        error: malformed.error.to_string(),
                    },
                ));
            }
        }
        if outcomes.is_empty() {
            return Ok(());
        }
        let settles: Vec<(&LeaseHandle, Delivery)> = outcomes
            .iter()
            .map(|(lease, delivery)| (lease, delivery.clone()))
            .collect();
        report.queries += 1;
        let settled = self.outbox.settle(&settles).await?;
        tally(report, &settled);
        Ok(())
    }

    /// One delivery, unless there is no time left for it; timed out if it
    /// runs past the delivery timeout.
    async fn attempt(&self, message: &ClaimedMessage, deadline: Timestamp) -> Attempt {
        let cutoff = deadline.min(message.lease().until());
        if !self.time_for_one_more(cutoff) {
            return Attempt::NotStarted;
        }
        let delivery = self.deliver.deliver(message);
        let timeout = self.timer.sleep(self.limits.delivery_timeout);
        match select(delivery, timeout).await {
            Either::Left((delivery, _)) => Attempt::Delivered(delivery),
            Either::Right(((), _)) => Attempt::TimedOut,
        }
    }
}

fn tally(report: &mut DrainReport, settled: &SettleReport) {
    report.delivered += settled.completed;
    report.retried += settled.retried;
    report.dead += settled.dead;
    report.released += settled.released;
    report.lease_lost += u32::try_from(settled.lease_lost.len()).unwrap_or(u32::MAX);
}
