//! Bounds on one drain, and the checks that keep them consistent.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::outbox::Outbox;

/// Bounds on one drain. Pick a preset and adjust fields as needed; the
/// [`Drainer`](crate::Drainer) checks them with [`validate`](DrainLimits::validate).
///
/// # Guarantees
/// - **The deliverer is never called with less than `delivery_timeout +
///   settle_margin` left on the lease** (nor on the deadline). The lease is
///   checked at the instant each delivery or batch call starts, not only
///   when it is queued: a delivery queued behind a blocked thread that no
///   longer has that room is handed back unattempted (no attempt spent,
///   counted in [`DrainReport::too_late_to_start`](super::DrainReport::too_late_to_start)).
/// - No claim is made once it could not be settled within the query budget,
///   and the last settle always has its query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainLimits {
    /// Rows leased per claim (1 ..= [`Outbox::MAX_CLAIM`]).
    pub batch_size: u32,
    /// Delivery calls in flight at once (Workers allows 6 connections
    /// waiting for response headers per invocation): one message each, or
    /// one batch each for a [`DeliverBatch`](super::DeliverBatch).
    pub concurrency: usize,
    /// A delivery taking longer counts as a retryable failure, and is
    /// dropped (an HTTP deliverer aborts its request).
    pub delivery_timeout: Duration,
    /// How long a claim leases its rows: at least twice `delivery_timeout`
    /// plus `settle_margin`, so a claim's rows can start in time. A crashed
    /// drainer's rows return after this.
    pub lease: Duration,
    /// Time kept free after a delivery's timeout for its settle call: no
    /// delivery starts unless it can time out and still be settled before
    /// the deadline and before its lease ends. Must not be zero.
    pub settle_margin: Duration,
    /// Wall-clock budget of the drain; must fit one delivery, its settle
    /// margin and a flush interval.
    pub deadline: Duration,
    /// Database calls allowed (claims, settles, retries of settles). One is
    /// always kept for the last settle; once only it is left, no delivery
    /// starts that would finish after a waiting outcome's lease.
    pub max_queries: u32,
    /// Messages claimed at most.
    pub max_messages: u32,
    /// The longest a finished delivery's outcome waits before it is
    /// settled; a crash loses at most this much of outcomes. Outcomes also
    /// ride along with the next claim, and are settled before their leases
    /// end (less the settle margin), whichever comes first. Not zero.
    pub flush_interval: Duration,
    /// Per-run protection of a failing receiver; `None` turns it off, and
    /// every failure spends its attempt as its verdict says.
    pub breaker: Option<CircuitBreaker>,
}

/// A per-run circuit breaker on each topic's receiver, and the judge of
/// which failures spend attempts. A receiver is a topic, or a topic and a
/// destination (`topic @ host:port`) when the deliverer names one
/// ([`Deliver::destination`](super::Deliver::destination): the HTTP
/// deliverer does), so one failing receiver of a topic that fans out trips
/// alone and the healthy ones go on.
///
/// After `failures` retryable failures in a row of distinct messages of one
/// receiver (any kind: retry, unavailable, timeout), the drain stops
/// delivering to it for the rest of the run. The failures that tripped it, and the
/// topic's messages still to deliver, are rescheduled at least `cooldown`
/// later **without spending attempts**; the next run probes again.
///
/// A shorter streak is held back while it may still trip, and then judged:
/// its failures spend their attempts if the receiver answers another
/// message of the topic (it works: the messages are at fault), or if one
/// message is all that failed since the receiver last answered — in this run
/// and in the streak the outbox remembers from earlier runs — so a message
/// failing alone dies after the policy's attempts, at the policy's pace.
/// When several messages failed in turn, the receiver is at fault, and they
/// spend nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircuitBreaker {
    /// Distinct messages failing in a row that trip the breaker (at least 2).
    pub failures: u32,
    /// How long the topic's messages are handed back for.
    pub cooldown: Duration,
}

impl Default for CircuitBreaker {
    /// 5 failures in a row, a cooldown of one minute (one cron period).
    fn default() -> Self {
        CircuitBreaker {
            failures: 5,
            cooldown: Duration::from_secs(60),
        }
    }
}

impl DrainLimits {
    /// A cron drain on the Workers Paid plan: 45 s of wall time (cron runs
    /// get 30 s of CPU, and deliveries mostly wait on the network), 900 of
    /// the 1,000 D1 queries an invocation may make.
    pub fn scheduled() -> Self {
        DrainLimits {
            batch_size: 100,
            concurrency: 6,
            // Just past `HttpDeliverer`'s 15 s, which aborts the request first.
            delivery_timeout: Duration::from_secs(16),
            lease: Duration::from_secs(60),
            settle_margin: Duration::from_secs(5),
            deadline: Duration::from_secs(45),
            max_queries: 900,
            max_messages: 100_000,
            flush_interval: Duration::from_secs(1),
            breaker: Some(CircuitBreaker::default()),
        }
    }

    /// A cron drain on the Workers Free plan: 45 of the 50 D1 queries an
    /// invocation may make, so outcomes are settled every 5 s at most.
    pub fn scheduled_free_plan() -> Self {
        DrainLimits {
            max_queries: 45,
            flush_interval: Duration::from_secs(5),
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

    /// A drain in a Durable Object's `alarm()` handler. Queries go to the
    /// object's own SQLite (no subrequests, microseconds each), so outcomes
    /// are settled every 250 ms and the query budget is large; each run
    /// delivers at most 500 messages in 30 s, and the alarm fires again at
    /// once while messages are due. Each HTTP delivery is a subrequest: on
    /// the Workers Free plan (50 per invocation) set `max_messages` to 45.
    pub fn alarm() -> Self {
        DrainLimits {
            deadline: Duration::from_secs(30),
            max_queries: 10_000,
            max_messages: 500,
            flush_interval: Duration::from_millis(250),
            ..Self::scheduled()
        }
    }

    /// Checks the limits against each other, refusing any combination that
    /// would make a drain a no-op or let a settle land after its lease.
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
        if self.settle_margin.is_zero() {
            return Err(Error::invalid(
                "settle margin",
                "it is zero: a delivery that times out could not be settled before its lease ends",
            ));
        }
        let one_delivery = self.delivery_timeout + self.settle_margin;
        if self.lease < one_delivery * 2 {
            return Err(Error::invalid(
                "lease",
                format!(
                    "{} ms is under twice the delivery timeout ({} ms) plus the settle margin ({} ms): \
                     most of a claim could not start in time and would be claimed again and again",
                    self.lease.as_millis(),
                    self.delivery_timeout.as_millis(),
                    self.settle_margin.as_millis()
                ),
            ));
        }
        crate::outbox::check_lease(self.lease)?;
        if self.deadline < one_delivery + self.flush_interval {
            return Err(Error::invalid(
                "deadline",
                format!(
                    "{} ms cannot fit one delivery timeout ({} ms), its settle margin ({} ms) and a \
                     flush interval ({} ms) of slack: every drain would stop at once",
                    self.deadline.as_millis(),
                    self.delivery_timeout.as_millis(),
                    self.settle_margin.as_millis(),
                    self.flush_interval.as_millis()
                ),
            ));
        }
        if self.max_queries < 2 {
            return Err(Error::invalid(
                "query budget",
                "a batch needs 2 queries (claim and settle)",
            ));
        }
        if self.max_messages == 0 {
            return Err(Error::invalid("message cap", "it is zero"));
        }
        if self.flush_interval.is_zero() {
            return Err(Error::invalid(
                "flush interval",
                "it is zero: every finished delivery would cost a settle call of its own",
            ));
        }
        if let Some(breaker) = self.breaker {
            if breaker.failures < 2 {
                return Err(Error::invalid(
                    "circuit breaker",
                    format!(
                        "{} failures in a row would trip it on any one message's own failure, \
                         which would then never spend an attempt: at least 2",
                        breaker.failures
                    ),
                ));
            }
            if breaker.cooldown.is_zero() {
                return Err(Error::invalid(
                    "circuit breaker",
                    "a zero cooldown hands messages back due at once, to be claimed again and again",
                ));
            }
        }
        Ok(())
    }
}

impl Default for DrainLimits {
    fn default() -> Self {
        Self::scheduled()
    }
}
