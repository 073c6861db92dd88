//! Time as the outbox sees it: integer epoch milliseconds, read from an
//! injected [`Clock`], waited on through an injected [`Timer`].
//!
//! Stored times are `INTEGER` milliseconds so that SQL comparisons order them
//! correctly (text timestamps do not: `…:00.5Z` sorts before `…:00Z`).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::future::{BoxFuture, MaybeSend, MaybeSync};

/// A point in time: milliseconds since the Unix epoch, UTC.
///
/// Always within `0 ..= Timestamp::MAX` (year 1970 to the end of year 9999),
/// which keeps every stored time exact in a JavaScript number (below 2^53).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "i64", into = "i64")]
pub struct Timestamp(i64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);
    /// 9999-12-31T23:59:59.999Z, the latest representable time.
    pub const MAX: Timestamp = Timestamp(253_402_300_799_999);

    /// A timestamp from epoch milliseconds.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `millis` is negative or after [`Timestamp::MAX`].
    pub fn from_unix_millis(millis: i64) -> Result<Self> {
        if (0..=Self::MAX.0).contains(&millis) {
            Ok(Timestamp(millis))
        } else {
            Err(Error::invalid(
                "timestamp",
                format!("{millis} ms is outside 0 ..= {} ms", Self::MAX.0),
            ))
        }
    }

    /// Milliseconds since the Unix epoch.
    pub fn as_unix_millis(self) -> i64 {
        self.0
    }

    /// `self + duration`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if the result is after [`Timestamp::MAX`].
    pub fn checked_add(self, duration: Duration) -> Result<Self> {
        let millis = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        Self::from_unix_millis(self.0.saturating_add(millis))
    }

    /// `self - duration`, stopping at the epoch.
    pub fn saturating_sub(self, duration: Duration) -> Self {
        let millis = i64::try_from(duration.as_millis()).unwrap_or(i64::MAX);
        Timestamp(self.0.saturating_sub(millis).max(0))
    }

    /// How long after `earlier` this is; zero if it is not after it.
    pub fn duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(u64::try_from(self.0 - earlier.0).unwrap_or(0))
    }
}

impl TryFrom<i64> for Timestamp {
    type Error = Error;
    fn try_from(millis: i64) -> Result<Self> {
        Self::from_unix_millis(millis)
    }
}

impl From<Timestamp> for i64 {
    fn from(timestamp: Timestamp) -> i64 {
        timestamp.0
    }
}

/// Where "now" comes from. Injected everywhere the crate needs the time, so
/// leases, backoff and deadlines are deterministic in tests.
pub trait Clock: MaybeSend + MaybeSync {
    /// The current time.
    fn now(&self) -> Timestamp;
}

/// Waits for a duration. The drain loop uses it to time out deliveries.
pub trait Timer: MaybeSend + MaybeSync {
    /// A future that completes once `duration` has passed.
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()>;
}

/// The real wall clock: `SystemTime` natively, `Date.now()` on Workers.
///
/// On Workers, `Date.now()` only advances across I/O, which is all a lease
/// or a deadline needs.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[cfg(not(target_arch = "wasm32"))]
    fn now(&self) -> Timestamp {
        let millis = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|since| i64::try_from(since.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Timestamp(millis.clamp(0, Timestamp::MAX.0))
    }

    #[cfg(target_arch = "wasm32")]
    fn now(&self) -> Timestamp {
        #[allow(clippy::cast_possible_truncation)]
        let millis = js_sys::Date::now() as i64;
        Timestamp(millis.clamp(0, Timestamp::MAX.0))
    }
}

/// A [`Timer`] on tokio's clock.
#[cfg(all(feature = "tokio", not(target_arch = "wasm32")))]
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioTimer;

#[cfg(all(feature = "tokio", not(target_arch = "wasm32")))]
impl Timer for TokioTimer {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A [`Timer`] on the Workers runtime's `setTimeout`.
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
#[derive(Debug, Clone, Copy, Default)]
pub struct WorkersTimer;

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
impl Timer for WorkersTimer {
    fn sleep(&self, duration: Duration) -> BoxFuture<'static, ()> {
        Box::pin(worker::Delay::from(duration))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manual_clock::ManualClock;
    use futures_util::FutureExt;

    #[test]
    fn timestamps_outside_the_range_are_rejected() {
        assert!(Timestamp::from_unix_millis(-1).is_err());
        assert!(Timestamp::from_unix_millis(Timestamp::MAX.as_unix_millis() + 1).is_err());
        assert!(
            Timestamp::MAX
                .checked_add(Duration::from_millis(1))
                .is_err()
        );
        assert_eq!(
            Timestamp::EPOCH.saturating_sub(Duration::from_secs(5)),
            Timestamp::EPOCH
        );
    }

    #[test]
    fn sub_second_times_order_as_numbers() {
        // 00:00:00.5 is after 00:00:00, unlike their RFC 3339 texts.
        let whole = Timestamp::from_unix_millis(1_700_000_000_000).unwrap();
        let half = whole.checked_add(Duration::from_millis(500)).unwrap();
        assert!(half > whole);
    }

    #[test]
    fn manual_sleep_completes_only_when_the_clock_passes_its_deadline() {
        let clock = ManualClock::new(Timestamp::EPOCH);
        let mut sleep = clock.sleep(Duration::from_secs(10));
        assert!((&mut sleep).now_or_never().is_none());
        clock.advance(Duration::from_secs(9));
        assert!((&mut sleep).now_or_never().is_none());
        clock.advance(Duration::from_secs(1));
        assert!(sleep.now_or_never().is_some());
    }
}
