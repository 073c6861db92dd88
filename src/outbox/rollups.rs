//! Reading the rollups: what the outbox did per period and topic, counted
//! in the same atomic calls as the changes themselves (see
//! [`OutboxBuilder::rollups`](super::OutboxBuilder::rollups)).

use std::collections::BTreeMap;
use std::time::Duration;

use super::Outbox;
use crate::error::{Error, Result};
use crate::sql::rollups::{self, HOUR_MS, MINUTE_MS, UNBOUNDED, metric, rollup_col};
use crate::time::Timestamp;

/// How finely [`Outbox::rollups`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Resolution {
    /// Per minute: kept 48 hours.
    Minute,
    /// Per hour: kept 90 days.
    Hour,
}

impl Resolution {
    fn period_ms(self) -> i64 {
        match self {
            Resolution::Minute => MINUTE_MS,
            Resolution::Hour => HOUR_MS,
        }
    }
}

/// The counters of one period and topic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Counts {
    /// Messages delivered (and deleted).
    pub delivered: u64,
    /// Failed deliveries that spent an attempt and were rescheduled.
    pub retried: u64,
    /// Failures that spent no attempt (receiver unavailable or throttled,
    /// circuit open), rescheduled.
    pub deferred: u64,
    /// Messages parked as dead: by a settle, or by a claim (attempts
    /// exhausted by leases that expired unsettled).
    pub dead: u64,
    /// Leases given back unattempted (no time left, topic tripped or
    /// paused, destination gone).
    pub handed_back: u64,
    /// Leases that expired without a settle, counted when the message's
    /// next attempt settles (delivered, retried or dead by a settle); those
    /// of a message a claim parks as dead are counted only if it is
    /// replayed and settled.
    pub lease_lost: u64,
    /// Suspects delivered (in suspect groups, with nothing else in flight).
    pub suspects_alone: u64,
    /// Times a topic's breaker tripped.
    pub breaker_trips: u64,
}

/// A histogram of durations in fixed buckets, in milliseconds: 5, 10, 25,
/// 50, 100, 250, 500 ms, 1, 2.5, 5, 10, 30 s, 1, 5, 15 min, 1, 6, 24 h, and
/// one with no bound.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Histogram {
    /// (upper bound, count) by bound; `None`: the unbounded bucket, last.
    buckets: BTreeMap<BucketBound, u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum BucketBound {
    AtMost(u64),
    Unbounded,
}

impl Histogram {
    /// How many values it holds.
    pub fn count(&self) -> u64 {
        self.buckets.values().sum()
    }

    /// The buckets holding values: each one's upper bound (`None` for the
    /// unbounded one) and count, by bound.
    pub fn buckets(&self) -> impl Iterator<Item = (Option<Duration>, u64)> + '_ {
        self.buckets.iter().map(|(bound, count)| {
            let bound = match bound {
                BucketBound::AtMost(ms) => Some(Duration::from_millis(*ms)),
                BucketBound::Unbounded => None,
            };
            (bound, *count)
        })
    }

    /// The upper bound of the bucket holding the `q`-quantile (`q` in
    /// 0..=1; 0.99 for p99): at least that share of the values are at most
    /// this long. `None` when the histogram is empty; [`Duration::MAX`] when
    /// the quantile falls in the unbounded bucket.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let q = if q.is_nan() { 1.0 } else { q.clamp(0.0, 1.0) };
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss
        )]
        let rank = ((q * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bound, count) in self.buckets() {
            seen += count;
            if seen >= rank {
                return Some(bound.unwrap_or(Duration::MAX));
            }
        }
        Some(Duration::MAX)
    }

    fn add(&mut self, le: i64, count: u64) -> Result<(), String> {
        let bound = match le {
            UNBOUNDED => BucketBound::Unbounded,
            ms => BucketBound::AtMost(
                u64::try_from(ms).map_err(|_| format!("bucket bound {ms} is negative"))?,
            ),
        };
        *self.buckets.entry(bound).or_default() += count;
        Ok(())
    }

    fn merge(&mut self, other: &Histogram) {
        for (bound, count) in &other.buckets {
            *self.buckets.entry(*bound).or_default() += count;
        }
    }
}

/// What one topic's messages did in one period.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rollup {
    /// When the period starts.
    pub period_start: Timestamp,
    /// Its length: a minute or an hour.
    pub period: Duration,
    /// The topic.
    pub topic: String,
    /// The counters.
    pub counts: Counts,
    /// Delivered messages' lateness: delivered (when its settle was
    /// prepared) − when it was due as it was leased (for a message whose
    /// earlier lease expired, that lease's end).
    pub lateness: Histogram,
    /// Delivered messages' age: delivered − enqueued.
    pub age: Histogram,
    /// How long deliveries took (delivered or not), as a drain measured them.
    pub duration: Histogram,
}

impl Rollup {
    /// Adds `other`'s counts and histograms to this one's (to sum topics or
    /// periods).
    pub fn merge(&mut self, other: &Rollup) {
        let (a, b) = (&mut self.counts, &other.counts);
        a.delivered += b.delivered;
        a.retried += b.retried;
        a.deferred += b.deferred;
        a.dead += b.dead;
        a.handed_back += b.handed_back;
        a.lease_lost += b.lease_lost;
        a.suspects_alone += b.suspects_alone;
        a.breaker_trips += b.breaker_trips;
        self.lateness.merge(&other.lateness);
        self.age.merge(&other.age);
        self.duration.merge(&other.duration);
    }

    fn add(&mut self, metric_name: &str, le: i64, count: u64) -> Result<(), String> {
        let counts = &mut self.counts;
        let counter = match metric_name {
            metric::DELIVERED => &mut counts.delivered,
            metric::RETRIED => &mut counts.retried,
            metric::DEFERRED => &mut counts.deferred,
            metric::DEAD | metric::DEAD_AT_CLAIM => &mut counts.dead,
            metric::HANDED_BACK => &mut counts.handed_back,
            metric::LEASE_LOST => &mut counts.lease_lost,
            metric::SUSPECTS_ALONE => &mut counts.suspects_alone,
            metric::BREAKER_TRIPS => &mut counts.breaker_trips,
            metric::LATENESS => return self.lateness.add(le, count),
            metric::AGE => return self.age.add(le, count),
            metric::DURATION => return self.duration.add(le, count),
            other => return Err(format!("unknown metric {other:?}")),
        };
        *counter += count;
        Ok(())
    }
}

/// The most periods one read covers.
const MAX_PERIODS: i64 = 10_000;

impl Outbox {
    /// What the outbox's messages did in the periods of `resolution` that
    /// overlap `from .. to` (whole periods: `from` rounded down and `to` up
    /// to their period's bounds), per period
    /// and topic, in period then topic order; periods with nothing counted
    /// are left out. One query, reading only those periods' rows.
    ///
    /// The counts are exact: each was written in the same atomic call as
    /// the change it counts, and a settle or claim that changed nothing
    /// (a lease lost, a settle sent again after it committed) counted
    /// nothing. Minutes are kept 48 hours (then folded into their hours),
    /// hours 90 days, by the drains' housekeeping.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `to` is not after `from` or the range
    /// spans more than 10,000 periods; [`Error::MalformedRow`] for a row
    /// that does not decode; any database error.
    pub async fn rollups(
        &self,
        from: Timestamp,
        to: Timestamp,
        resolution: Resolution,
    ) -> Result<Vec<Rollup>> {
        let period_ms = resolution.period_ms();
        let start = from.as_unix_millis() - from.as_unix_millis().rem_euclid(period_ms);
        let end = to.as_unix_millis();
        if to <= from {
            return Err(Error::invalid("rollup range", "`to` must be after `from`"));
        }
        if (end - start) / period_ms >= MAX_PERIODS {
            return Err(Error::invalid(
                "rollup range",
                format!("more than {MAX_PERIODS} periods of {period_ms} ms"),
            ));
        }
        // Whole periods: the last one ends on its boundary.
        let end = end.saturating_add((period_ms - end.rem_euclid(period_ms)) % period_ms);
        let statement = rollups::read(
            self.table(),
            self.dialect(),
            period_ms,
            Timestamp::from_unix_millis(start)?,
            Timestamp::from_unix_millis(end)?,
        );
        let rows = self.inner.db.query(&statement).await?;
        let table = rollups::periods_table(self.table());
        let mut periods = Vec::with_capacity(rows.len());
        for row in rows.iter() {
            let in_row = |error: Error| error.in_row(&table, None);
            let period_start: i64 = row.get(rollup_col::PERIOD_START).map_err(in_row)?;
            let topic: String = row.get(rollup_col::TOPIC).map_err(in_row)?;
            let mut rollup = Rollup {
                period_start: Timestamp::from_unix_millis(period_start)?,
                period: Duration::from_millis(period_ms.unsigned_abs()),
                topic,
                counts: Counts::default(),
                lateness: Histogram::default(),
                age: Histogram::default(),
                duration: Histogram::default(),
            };
            for column in rollups::count_columns() {
                let name = column.name();
                let count: u64 = row.get(&name).map_err(in_row)?;
                if count > 0 {
                    rollup
                        .add(column.metric, column.le, count)
                        .map_err(|reason| Error::MalformedRow {
                            table: Some(table.clone()),
                            row: None,
                            column: name,
                            reason,
                        })?;
                }
            }
            periods.push(rollup);
        }
        Ok(periods)
    }
}
