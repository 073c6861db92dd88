//! How failed deliveries are retried: how many attempts, and how long to wait
//! between them.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::future::{MaybeSend, MaybeSync};
use crate::random::RandomSource;

/// The wait before the next attempt after a retryable failure.
pub trait Backoff: Debug + MaybeSend + MaybeSync {
    /// The delay after failed attempt number `attempt` (1 for the first).
    /// Jitter must come from `random`, so seeded runs repeat exactly.
    fn delay(&self, attempt: u32, random: &dyn RandomSource) -> Duration;
}

/// Exponential backoff with full jitter: after attempt `n`, wait a uniformly
/// random time in `0 ..= min(cap, base × 2^(n-1))`.
///
/// Full jitter spreads the retries of many messages that failed together
/// (a provider outage) instead of sending them back in waves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExponentialBackoff {
    /// The ceiling of the first wait.
    pub base: Duration,
    /// No wait exceeds this.
    pub cap: Duration,
}

impl Default for ExponentialBackoff {
    /// 1 s base, 1 h cap.
    fn default() -> Self {
        ExponentialBackoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(3600),
        }
    }
}

impl ExponentialBackoff {
    /// The ceiling of the wait after `attempt`, before jitter.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(63);
        let base = u64::try_from(self.base.as_millis()).unwrap_or(u64::MAX);
        let cap = u64::try_from(self.cap.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(base.saturating_mul(1u64 << doublings).min(cap))
    }
}

impl Backoff for ExponentialBackoff {
    fn delay(&self, attempt: u32, random: &dyn RandomSource) -> Duration {
        let ceiling = u64::try_from(self.ceiling(attempt).as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(random.below_or_equal(ceiling))
    }
}

/// A fixed schedule of waits, each spread by ±20% of jitter: after failed
/// attempt `n`, about `delays[n - 1]` (the last one again past the end).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduledBackoff {
    delays: Vec<Duration>,
}

impl ScheduledBackoff {
    /// The schedule of `delays`, the first after the first failed attempt.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty schedule.
    pub fn new(delays: Vec<Duration>) -> Result<Self> {
        if delays.is_empty() {
            return Err(Error::invalid("backoff schedule", "it has no delay"));
        }
        Ok(ScheduledBackoff { delays })
    }

    /// The wait after `attempt`, before jitter.
    pub fn nominal(&self, attempt: u32) -> Duration {
        let index = usize::try_from(attempt.saturating_sub(1)).unwrap_or(usize::MAX);
        self.delays
            .get(index)
            .or(self.delays.last())
            .copied()
            .unwrap_or_default()
    }
}

impl Backoff for ScheduledBackoff {
    fn delay(&self, attempt: u32, random: &dyn RandomSource) -> Duration {
        let nominal = u64::try_from(self.nominal(attempt).as_millis()).unwrap_or(u64::MAX);
        let spread = nominal / 5;
        let low = nominal - spread;
        Duration::from_millis(low.saturating_add(random.below_or_equal(spread.saturating_mul(2))))
    }
}

/// How many attempts a message gets, the backoff between them, and how long
/// a message may be deferred without spending attempts.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    max_attempts: u32,
    backoff: Arc<dyn Backoff>,
    defer_limit: Duration,
}

impl RetryPolicy {
    /// The most attempts a policy may allow.
    pub const MAX_ATTEMPTS: u32 = 1_000;

    /// A policy of at most `max_attempts` delivery attempts per message.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless `1 <= max_attempts <= 1000`.
    pub fn new(max_attempts: u32, backoff: impl Backoff + 'static) -> Result<Self> {
        if !(1..=Self::MAX_ATTEMPTS).contains(&max_attempts) {
            return Err(Error::invalid(
                "max attempts",
                format!("{max_attempts} is outside 1 ..= {}", Self::MAX_ATTEMPTS),
            ));
        }
        Ok(RetryPolicy {
            max_attempts,
            backoff: Arc::new(backoff),
            defer_limit: Self::DEFAULT_DEFER_LIMIT,
        })
    }

    /// How long [`defer_limit`](RetryPolicy::defer_limit) is unless set.
    pub const DEFAULT_DEFER_LIMIT: Duration = Duration::from_secs(3 * 24 * 3600);

    /// Sets how long after its enqueue a message may be rescheduled without
    /// spending attempts (a receiver that is unavailable or throttling, a
    /// tripped circuit breaker, a failure nothing shows to be its own); each
    /// such deferral grows the backoff. Past the limit, every failure spends
    /// an attempt, so nothing waits forever. (A replayed dead letter older
    /// than the limit gets its full attempts, but no free deferrals.)
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a zero limit.
    pub fn with_defer_limit(mut self, limit: Duration) -> Result<Self> {
        if limit.is_zero() {
            return Err(Error::invalid("defer limit", "it is zero"));
        }
        self.defer_limit = limit;
        Ok(self)
    }

    /// See [`with_defer_limit`](RetryPolicy::with_defer_limit).
    pub fn defer_limit(&self) -> Duration {
        self.defer_limit
    }

    /// The most delivery attempts a message gets before it is dead.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The schedule webhook receivers know (Svix's): the first attempt at
    /// once, then retries after 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and
    /// 10 h, each ±20%: 8 attempts over about 28 hours of failures. A
    /// deferral (the receiver unavailable or throttling) also moves one step
    /// along the schedule but spends no attempt, for at most
    /// [`defer_limit`](RetryPolicy::defer_limit) (3 days): a receiver that is
    /// down for days is retried every 10 h meanwhile.
    pub fn webhooks() -> Self {
        let minute = 60;
        let hour = 3600;
        let delays = [
            5,
            5 * minute,
            30 * minute,
            2 * hour,
            5 * hour,
            10 * hour,
            10 * hour,
        ]
        .map(Duration::from_secs)
        .to_vec();
        RetryPolicy {
            max_attempts: 8,
            backoff: Arc::new(ScheduledBackoff { delays }),
            defer_limit: Self::DEFAULT_DEFER_LIMIT,
        }
    }

    /// The wait after failed attempt `attempt`.
    pub fn delay(&self, attempt: u32, random: &dyn RandomSource) -> Duration {
        self.backoff.delay(attempt, random)
    }
}

impl Default for RetryPolicy {
    /// 16 attempts with [`ExponentialBackoff::default`] (about 2.5 hours of
    /// retrying on average before a message is dead), and deferrals free of
    /// attempts for 3 days.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 16,
            backoff: Arc::new(ExponentialBackoff::default()),
            defer_limit: Self::DEFAULT_DEFER_LIMIT,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::FastRandom;

    #[test]
    fn ceilings_double_until_the_cap() {
        let backoff = ExponentialBackoff {
            base: Duration::from_secs(1),
            cap: Duration::from_secs(10),
        };
        let ceilings: Vec<u64> = (1..=6).map(|n| backoff.ceiling(n).as_secs()).collect();
        assert_eq!(ceilings, [1, 2, 4, 8, 10, 10]);
        assert_eq!(backoff.ceiling(u32::MAX), Duration::from_secs(10));
    }

    #[test]
    fn jittered_delays_stay_under_the_ceiling_and_repeat_with_a_seed() {
        let backoff = ExponentialBackoff::default();
        let run = |seed| {
            let random = FastRandom::seeded(seed);
            (1..=20)
                .map(|attempt| backoff.delay(attempt, &random))
                .collect::<Vec<_>>()
        };
        let delays = run(3);
        for (attempt, delay) in (1..).zip(&delays) {
            assert!(*delay <= backoff.ceiling(attempt));
        }
        assert_eq!(delays, run(3));
        assert_ne!(delays, run(4));
    }

    #[test]
    fn attempts_must_be_in_range() {
        assert!(RetryPolicy::new(0, ExponentialBackoff::default()).is_err());
        assert!(RetryPolicy::new(1001, ExponentialBackoff::default()).is_err());
        assert_eq!(
            RetryPolicy::new(3, ExponentialBackoff::default())
                .unwrap()
                .max_attempts(),
            3
        );
    }

    #[test]
    fn the_webhook_schedule_is_the_one_receivers_know() {
        let policy = RetryPolicy::webhooks();
        assert_eq!(policy.max_attempts(), 8);
        let random = FastRandom::seeded(7);
        let expected = [5, 300, 1_800, 7_200, 18_000, 36_000, 36_000, 36_000];
        for (attempt, seconds) in (1..).zip(expected) {
            let nominal = Duration::from_secs(seconds);
            for _ in 0..100 {
                let delay = policy.delay(attempt, &random);
                assert!(
                    delay >= nominal * 4 / 5 && delay <= nominal * 6 / 5,
                    "{attempt}: {delay:?}"
                );
            }
        }
        assert!(ScheduledBackoff::new(Vec::new()).is_err());
    }
}
