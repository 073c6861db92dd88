//! Limits per destination (a receiver, as the deliverer names it: the
//! host of a URL), across topics, within one drain.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::time::Timestamp;

/// How hard one drain may press one destination, whatever the topics
/// sending to it. Set with
/// [`DrainerBuilder::destination_limits`](super::DrainerBuilder::destination_limits);
/// a destination is what [`Deliver::destination`](super::Deliver::destination)
/// names (for [`HttpDeliverer`](crate::http), the URL's host and port).
///
/// A message whose destination is at its limit waits in the run, unattempted
/// (no attempt spent) while other destinations' messages go ahead; one still
/// waiting when the run can no longer start it is handed back, due at once.
/// A [`DeliverBatch`](super::DeliverBatch) names no destinations: its calls
/// are bounded by [`DrainLimits::concurrency`](super::DrainLimits::concurrency) only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DestinationLimits {
    /// Requests in flight at once to one destination (at least 1).
    pub in_flight: usize,
    /// Requests started per second to one destination on average (a token
    /// bucket; at most 1000); `None` for no rate limit.
    pub per_second: Option<u32>,
    /// Requests that may start at once after a quiet spell: the bucket's
    /// size (at least 1).
    pub burst: u32,
}

impl Default for DestinationLimits {
    /// 2 requests in flight and 10 a second per destination, bursts of 10.
    fn default() -> Self {
        DestinationLimits {
            in_flight: 2,
            per_second: Some(10),
            burst: 10,
        }
    }
}

impl DestinationLimits {
    /// Checks the limits.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a zero limit.
    pub fn validate(&self) -> Result<()> {
        if self.in_flight == 0 {
            return Err(Error::invalid(
                "destination limits",
                "in_flight is zero: nothing could be delivered",
            ));
        }
        match self.per_second {
            Some(0) => {
                return Err(Error::invalid(
                    "destination limits",
                    "per_second is zero: nothing could be delivered (use None for no rate limit)",
                ));
            }
            Some(rate) if rate > 1_000 => {
                return Err(Error::invalid(
                    "destination limits",
                    format!(
                        "per_second is {rate}; the clock counts milliseconds, so at most 1000 \
                         (use None for no rate limit)"
                    ),
                ));
            }
            _ => {}
        }
        if self.burst == 0 {
            return Err(Error::invalid("destination limits", "burst is zero"));
        }
        Ok(())
    }

    /// The time one request takes from the bucket.
    fn interval(&self) -> Option<Duration> {
        self.per_second
            .map(|rate| Duration::from_secs(1) / rate.max(1))
    }
}

/// One run's use of each destination: requests in flight, and the bucket
/// as a theoretical arrival time (GCRA: a request may start once `now` is
/// within `burst - 1` intervals of it).
#[derive(Debug, Default)]
pub(super) struct Destinations {
    limits: Option<DestinationLimits>,
    used: BTreeMap<String, Use>,
}

#[derive(Debug, Clone, Copy)]
struct Use {
    in_flight: usize,
    next_free: Timestamp,
}

impl Destinations {
    pub(super) fn new(limits: Option<DestinationLimits>) -> Self {
        Destinations {
            limits,
            used: BTreeMap::new(),
        }
    }

    /// When a request to `destination` may start, if not now: `None` when
    /// it may start at once, `Some(None)` while its in-flight limit is
    /// reached (until one finishes), `Some(Some(at))` when its bucket
    /// refills at `at`.
    pub(super) fn wait(
        &self,
        destination: Option<&str>,
        now: Timestamp,
    ) -> Option<Option<Timestamp>> {
        let (Some(limits), Some(destination)) = (self.limits, destination) else {
            return None;
        };
        let used = self.used.get(destination)?;
        if used.in_flight >= limits.in_flight {
            return Some(None);
        }
        let interval = limits.interval()?;
        let slack = interval.saturating_mul(limits.burst - 1);
        let start_at = used.next_free.saturating_sub(slack);
        (start_at > now).then_some(Some(start_at))
    }

    /// A request to `destination` starts at `now`.
    pub(super) fn start(&mut self, destination: Option<&str>, now: Timestamp) {
        let (Some(limits), Some(destination)) = (self.limits, destination) else {
            return;
        };
        let used = self.used.entry(destination.to_owned()).or_insert(Use {
            in_flight: 0,
            next_free: now,
        });
        used.in_flight += 1;
        if let Some(interval) = limits.interval() {
            used.next_free = used
                .next_free
                .max(now)
                .checked_add(interval)
                .unwrap_or(Timestamp::MAX);
        }
    }

    /// A request to `destination` finished.
    pub(super) fn finish(&mut self, destination: Option<&str>) {
        if let Some(used) = destination.and_then(|destination| self.used.get_mut(destination)) {
            used.in_flight = used.in_flight.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(millis: i64) -> Timestamp {
        Timestamp::from_unix_millis(millis).unwrap_or(Timestamp::EPOCH)
    }

    #[test]
    fn in_flight_and_rate_are_kept_per_destination() {
        let mut destinations = Destinations::new(Some(DestinationLimits {
            in_flight: 2,
            per_second: Some(4),
            burst: 2,
        }));
        let a = Some("a.example:443");
        let now = at(1_000);
        assert_eq!(destinations.wait(a, now), None);
        destinations.start(a, now);
        assert_eq!(destinations.wait(a, now), None, "a burst of 2");
        destinations.start(a, now);
        assert_eq!(destinations.wait(a, now), Some(None), "2 in flight");
        assert_eq!(destinations.wait(Some("b.example:443"), now), None);
        assert_eq!(
            destinations.wait(None, now),
            None,
            "no destination, no limit"
        );
        destinations.finish(a);
        // 4 a second: the bucket took 2 × 250 ms; one is back at +250 ms.
        assert_eq!(destinations.wait(a, now), Some(Some(at(1_250))));
        assert_eq!(destinations.wait(a, at(1_250)), None);
        destinations.start(a, at(1_250));
        destinations.finish(a);
        assert_eq!(destinations.wait(a, at(1_250)), Some(Some(at(1_500))));
    }

    #[test]
    fn no_limits_admit_everything() {
        let mut destinations = Destinations::new(None);
        for _ in 0..100 {
            destinations.start(Some("a"), at(0));
        }
        assert_eq!(destinations.wait(Some("a"), at(0)), None);
    }

    #[test]
    fn zero_limits_are_refused() {
        let base = DestinationLimits::default();
        assert!(base.validate().is_ok());
        for bad in [
            DestinationLimits {
                in_flight: 0,
                ..base
            },
            DestinationLimits {
                per_second: Some(0),
                ..base
            },
            DestinationLimits { burst: 0, ..base },
            DestinationLimits {
                per_second: Some(1_001),
                ..base
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
        assert!(
            DestinationLimits {
                per_second: None,
                ..base
            }
            .validate()
            .is_ok()
        );
    }
}
