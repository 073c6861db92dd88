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
/// One whose turn at its destination's rate is more than 2 seconds away
/// (behind the others waiting for it) goes back to the table at once, due
/// at a slot booked for it, so a slow destination's backlog holds up
/// neither the run nor its claims.
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
    /// The highest rate a destination can be held to: the clock counts
    /// milliseconds.
    pub const MOST_PER_SECOND: u32 = 1_000;

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
            Some(rate) if rate > Self::MOST_PER_SECOND => {
                return Err(Error::invalid(
                    "destination limits",
                    format!(
                        "per_second is {rate}; the clock counts milliseconds, so at most {} \
                         (use None for no rate limit)",
                        Self::MOST_PER_SECOND
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
    /// Destinations that set their own rate (see `Deliver::destination_rate`).
    own_rates: BTreeMap<String, u32>,
    used: BTreeMap<String, Use>,
}

#[derive(Debug, Clone, Copy)]
struct Use {
    in_flight: usize,
    next_free: Timestamp,
    /// Slots booked for requests given back to be made after the run.
    booked: u32,
}

impl Destinations {
    pub(super) fn new(limits: Option<DestinationLimits>) -> Self {
        Destinations {
            limits,
            own_rates: BTreeMap::new(),
            used: BTreeMap::new(),
        }
    }

    /// `destination` takes at most `per_second` requests a second, evenly
    /// spaced (no burst), whatever the run's limits say of its rate; its
    /// in-flight limit stays the run's (none if the run sets no limits).
    /// `None`: the run's limits again.
    pub(super) fn own_rate(&mut self, destination: &str, per_second: Option<u32>) {
        match per_second {
            Some(rate) => {
                let rate = rate.clamp(1, DestinationLimits::MOST_PER_SECOND);
                self.own_rates.insert(destination.to_owned(), rate);
            }
            // Its limit was lifted since an earlier claim of the run.
            None => {
                self.own_rates.remove(destination);
            }
        }
    }

    /// Whether any destination is limited.
    pub(super) fn limits_any(&self) -> bool {
        self.limits.is_some() || !self.own_rates.is_empty()
    }

    /// The limits `destination` is held to, if any.
    fn limits_of(&self, destination: &str) -> Option<DestinationLimits> {
        match self.own_rates.get(destination) {
            Some(&rate) => Some(DestinationLimits {
                in_flight: self.limits.map_or(usize::MAX, |limits| limits.in_flight),
                per_second: Some(rate),
                burst: 1,
            }),
            None => self.limits,
        }
    }

    /// When a request to `destination` may start, if not now, behind
    /// `ahead` others of the run waiting for it: `None` when it may start at
    /// once, `Some(None)` while its in-flight limit is reached (until one
    /// finishes), `Some(Some(at))` when its bucket has a slot for it at `at`.
    pub(super) fn wait(
        &self,
        destination: Option<&str>,
        now: Timestamp,
        ahead: u32,
    ) -> Option<Option<Timestamp>> {
        let destination = destination?;
        let limits = self.limits_of(destination)?;
        let used = self.used.get(destination)?;
        if used.in_flight >= limits.in_flight {
            return Some(None);
        }
        let interval = limits.interval()?;
        let slack = interval.saturating_mul(limits.burst - 1);
        let start_at = used
            .next_free
            .saturating_sub(slack)
            .checked_add(interval.saturating_mul(ahead))
            .unwrap_or(Timestamp::MAX);
        (start_at > now).then_some(Some(start_at))
    }

    /// Books a slot of `destination`'s bucket for a request given back to
    /// be made after this run, behind the `ahead` waiting in it and the
    /// run's earlier bookings: when it is.
    pub(super) fn book(&mut self, destination: &str, now: Timestamp, ahead: u32) -> Timestamp {
        let Some((limits, interval)) = self
            .limits_of(destination)
            .and_then(|limits| Some((limits, limits.interval()?)))
        else {
            return now;
        };
        let used = self.used.entry(destination.to_owned()).or_insert(Use {
            in_flight: 0,
            next_free: now,
            booked: 0,
        });
        let slack = interval.saturating_mul(limits.burst - 1);
        used.booked = used.booked.saturating_add(1);
        used.next_free
            .saturating_sub(slack)
            .max(now)
            .checked_add(interval.saturating_mul(ahead.saturating_add(used.booked)))
            .unwrap_or(Timestamp::MAX)
    }

    /// A request to `destination` starts at `now`.
    pub(super) fn start(&mut self, destination: Option<&str>, now: Timestamp) {
        let Some((limits, destination)) =
            destination.and_then(|destination| Some((self.limits_of(destination)?, destination)))
        else {
            return;
        };
        let used = self.used.entry(destination.to_owned()).or_insert(Use {
            in_flight: 0,
            next_free: now,
            booked: 0,
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
        assert_eq!(destinations.wait(a, now, 0), None);
        destinations.start(a, now);
        assert_eq!(destinations.wait(a, now, 0), None, "a burst of 2");
        destinations.start(a, now);
        assert_eq!(destinations.wait(a, now, 0), Some(None), "2 in flight");
        assert_eq!(destinations.wait(Some("b.example:443"), now, 0), None);
        assert_eq!(
            destinations.wait(None, now, 0),
            None,
            "no destination, no limit"
        );
        destinations.finish(a);
        // 4 a second: the bucket took 2 × 250 ms; one is back at +250 ms.
        assert_eq!(destinations.wait(a, now, 0), Some(Some(at(1_250))));
        assert_eq!(destinations.wait(a, at(1_250), 0), None);
        destinations.start(a, at(1_250));
        destinations.finish(a);
        assert_eq!(destinations.wait(a, at(1_250), 0), Some(Some(at(1_500))));
    }

    #[test]
    fn no_limits_admit_everything() {
        let mut destinations = Destinations::new(None);
        for _ in 0..100 {
            destinations.start(Some("a"), at(0));
        }
        assert_eq!(destinations.wait(Some("a"), at(0), 0), None);
    }

    #[test]
    fn a_destination_s_own_rate_holds_with_or_without_the_run_s_limits() {
        for run_limits in [
            None,
            Some(DestinationLimits {
                in_flight: 1,
                per_second: Some(100),
                burst: 10,
            }),
        ] {
            let mut destinations = Destinations::new(run_limits);
            assert_eq!(destinations.limits_any(), run_limits.is_some());
            destinations.own_rate("ep_slow", Some(2));
            assert!(destinations.limits_any());
            let (slow, other) = (Some("ep_slow"), Some("ep_other"));
            let now = at(1_000);
            destinations.start(slow, now);
            destinations.finish(slow);
            // 2 a second, no burst: the next one 500 ms later.
            assert_eq!(destinations.wait(slow, now, 0), Some(Some(at(1_500))));
            assert_eq!(destinations.wait(slow, at(1_500), 0), None);
            // The others keep the run's limits (none, or a burst of 10).
            destinations.start(other, now);
            destinations.finish(other);
            assert_eq!(destinations.wait(other, now, 0), None, "{run_limits:?}");
        }
        let mut destinations = Destinations::new(None);
        destinations.own_rate("ep_fast", Some(50_000));
        destinations.start(Some("ep_fast"), at(0));
        destinations.finish(Some("ep_fast"));
        assert_eq!(
            destinations.wait(Some("ep_fast"), at(0), 0),
            Some(Some(at(1))),
            "held to the most the clock can count"
        );
        // Lifted: the run's limits (none) again.
        destinations.own_rate("ep_fast", None);
        assert_eq!(destinations.wait(Some("ep_fast"), at(0), 0), None);
        assert!(!destinations.limits_any());
    }

    #[test]
    fn bookings_take_the_bucket_s_slots_in_turn() {
        let mut destinations = Destinations::new(None);
        destinations.own_rate("ep_slow", Some(1));
        let slow = Some("ep_slow");
        destinations.start(slow, at(0));
        destinations.finish(slow);
        // One waits in the run (its slot at 1 s); those given back take
        // the slots after it, in turn.
        assert_eq!(destinations.wait(slow, at(0), 0), Some(Some(at(1_000))));
        assert_eq!(destinations.wait(slow, at(0), 1), Some(Some(at(2_000))));
        assert_eq!(destinations.book("ep_slow", at(0), 1), at(3_000));
        assert_eq!(destinations.book("ep_slow", at(0), 1), at(4_000));
        assert_eq!(destinations.wait(slow, at(0), 0), Some(Some(at(1_000))));
        assert_eq!(
            destinations.book("ep_other", at(0), 0),
            at(0),
            "no limits: now"
        );
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
