//! Settles summed into data points in the Analytics Engine layout: one
//! point per outbox, topic, outcome and error type per drain, so a drain
//! of any size writes a bounded number of points (an invocation may write
//! at most 250).
//!
//! | field | a settle point | the backlog point |
//! |---|---|---|
//! | `index1` | `outbox:topic` (at most 96 bytes) | `outbox` |
//! | `blob1` | outbox (table) | outbox |
//! | `blob2` | topic | `""` |
//! | `blob3` | outcome (`delivered`, `retried`, `deferred`, `dead`, `handed_back`, `lease_lost`) | `backlog` |
//! | `blob4` | error type (`""` for none) | `""` |
//! | `double1` | messages | messages due (at most [`BACKLOG_CAP`](super::BACKLOG_CAP)) |
//! | `double2` | deliveries timed | oldest due age, ms (0: none due) |
//! | `double3` | delivery time, ms, summed | 1 if the count stopped at the cap |
//! | `double4` | delivery time, ms, longest | |
//! | `double5` | lateness, ms, summed | |
//! | `double6` | lateness, ms, longest | |
//! | `double7` | age, ms, summed | |
//! | `double8` | age, ms, oldest | |
//! | `double9` | delivered as suspects (in suspect groups) | |
//! | `double10` | breaker trips | |
//!
//! Counts are per point: in the SQL API sum `double1 * _sample_interval`.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{Backlog, Outcome, Settled};

/// The most bytes of an Analytics Engine index.
const MAX_INDEX_BYTES: usize = 96;
/// Where groups past a drain's point budget are summed.
const OTHER: &str = "(other)";

/// One data point: an index, blobs and doubles (see the module's table).
#[derive(Debug, Clone, PartialEq)]
pub struct DataPoint {
    /// The sampling key (`index1`).
    pub index: String,
    /// `blob1`… in order.
    pub blobs: Vec<String>,
    /// `double1`… in order.
    pub doubles: Vec<f64>,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Group {
    outbox: String,
    topic: String,
    outcome: String,
    error_type: &'static str,
}

#[derive(Debug, Clone, Copy, Default)]
struct Sums {
    messages: u64,
    timed: u64,
    duration_ms: u64,
    longest_ms: u64,
    lateness_ms: u64,
    latest_ms: u64,
    age_ms: u64,
    oldest_ms: u64,
    alone: u64,
    trips: u64,
}

impl Sums {
    fn add(&mut self, other: &Sums) {
        self.messages += other.messages;
        self.timed += other.timed;
        self.duration_ms = self.duration_ms.saturating_add(other.duration_ms);
        self.longest_ms = self.longest_ms.max(other.longest_ms);
        self.lateness_ms = self.lateness_ms.saturating_add(other.lateness_ms);
        self.latest_ms = self.latest_ms.max(other.latest_ms);
        self.age_ms = self.age_ms.saturating_add(other.age_ms);
        self.oldest_ms = self.oldest_ms.max(other.oldest_ms);
        self.alone += other.alone;
        self.trips += other.trips;
    }

    #[allow(clippy::cast_precision_loss)] // counts and milliseconds far below 2^53
    fn doubles(&self) -> Vec<f64> {
        [
            self.messages,
            self.timed,
            self.duration_ms,
            self.longest_ms,
            self.lateness_ms,
            self.latest_ms,
            self.age_ms,
            self.oldest_ms,
            self.alone,
            self.trips,
        ]
        .iter()
        .map(|value| *value as f64)
        .collect()
    }
}

fn ms(duration: Option<Duration>) -> u64 {
    duration.map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Settles and backlog samples summed per outbox, topic, outcome and error
/// type, until [`take`](DataPoints::take)n as data points.
#[derive(Debug, Default)]
pub struct DataPoints {
    groups: BTreeMap<Group, Sums>,
    backlogs: BTreeMap<String, (u64, Option<Duration>)>,
}

impl DataPoints {
    /// Nothing recorded yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one settle.
    pub fn record(&mut self, settled: &Settled<'_>) {
        let group = Group {
            outbox: settled.outbox.to_owned(),
            topic: settled.topic.to_owned(),
            outcome: settled.outcome.as_str().to_owned(),
            error_type: settled.error_type.unwrap_or(""),
        };
        let delivered = settled.outcome == Outcome::Delivered;
        let one = Sums {
            messages: 1,
            timed: u64::from(settled.duration.is_some()),
            duration_ms: ms(settled.duration),
            longest_ms: ms(settled.duration),
            lateness_ms: ms(settled.lateness.filter(|_| delivered)),
            latest_ms: ms(settled.lateness.filter(|_| delivered)),
            age_ms: ms(settled.age.filter(|_| delivered)),
            oldest_ms: ms(settled.age.filter(|_| delivered)),
            alone: u64::from(settled.alone),
            trips: u64::from(settled.tripped),
        };
        self.groups.entry(group).or_default().add(&one);
    }

    /// Keeps the latest backlog sample of its outbox.
    pub fn record_backlog(&mut self, backlog: &Backlog<'_>) {
        self.backlogs.insert(
            backlog.outbox.to_owned(),
            (backlog.due, backlog.oldest_due_age),
        );
    }

    /// Takes `outbox`'s points, at most `max` of them: its backlog sample
    /// (unless only one point fits and settles wait), then its groups, the
    /// largest first; groups past the budget are summed into one point of
    /// topic and outcome `(other)`, so the message counts stay whole. With
    /// `max` 0 nothing is taken but everything is dropped.
    pub fn take(&mut self, outbox: &str, max: usize) -> Vec<DataPoint> {
        let mut points = Vec::new();
        let mine: Vec<Group> = self
            .groups
            .keys()
            .filter(|group| group.outbox == outbox)
            .cloned()
            .collect();
        let backlog = self.backlogs.remove(outbox);
        // Settles first: with room for one point only, the backlog waits.
        if let Some((due, oldest)) = backlog.filter(|_| max >= 2 || mine.is_empty()) {
            #[allow(clippy::cast_precision_loss)] // capped counts, milliseconds
            points.push(DataPoint {
                index: clip_index(outbox),
                blobs: vec![
                    outbox.to_owned(),
                    String::new(),
                    "backlog".to_owned(),
                    String::new(),
                ],
                doubles: vec![
                    due as f64,
                    ms(oldest) as f64,
                    f64::from(u8::from(due >= super::BACKLOG_CAP)),
                ],
            });
        }
        let mut groups: Vec<(Group, Sums)> = mine
            .into_iter()
            .filter_map(|group| self.groups.remove_entry(&group))
            .collect();
        groups.sort_by(|a, b| b.1.messages.cmp(&a.1.messages).then_with(|| a.0.cmp(&b.0)));
        let room = max.saturating_sub(points.len());
        if groups.len() > room && room > 0 {
            let mut other = Sums::default();
            for (_, sums) in groups.drain(room - 1..) {
                other.add(&sums);
            }
            groups.push((
                Group {
                    outbox: outbox.to_owned(),
                    topic: OTHER.to_owned(),
                    outcome: OTHER.to_owned(),
                    error_type: "",
                },
                other,
            ));
        }
        groups.truncate(room);
        points.extend(groups.into_iter().map(|(group, sums)| DataPoint {
            index: clip_index(&format!("{}:{}", group.outbox, group.topic)),
            doubles: sums.doubles(),
            blobs: vec![
                group.outbox,
                group.topic,
                group.outcome,
                group.error_type.to_owned(),
            ],
        }));
        points
    }
}

fn clip_index(index: &str) -> String {
    let mut end = index.len().min(MAX_INDEX_BYTES);
    while !index.is_char_boundary(end) {
        end -= 1;
    }
    index[..end].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settled<'a>(
        topic: &'a str,
        outcome: Outcome,
        error_type: Option<&'static str>,
    ) -> Settled<'a> {
        Settled {
            outbox: "outbox",
            topic,
            id: "01",
            outcome,
            error_type,
            duration: Some(Duration::from_millis(20)),
            lateness: Some(Duration::from_millis(300)),
            age: Some(Duration::from_millis(500)),
            alone: false,
            tripped: false,
        }
    }

    #[test]
    fn settles_sum_per_topic_outcome_and_error_type() {
        let mut points = DataPoints::new();
        for _ in 0..3 {
            points.record(&settled("mail", Outcome::Delivered, None));
        }
        points.record(&settled("mail", Outcome::Retried, Some("failed")));
        let mut slow = settled("mail", Outcome::Delivered, None);
        slow.duration = Some(Duration::from_millis(80));
        slow.lateness = Some(Duration::from_millis(900));
        points.record(&slow);
        let taken = points.take("outbox", 10);
        assert_eq!(taken.len(), 2);
        assert_eq!(taken[0].index, "outbox:mail");
        assert_eq!(taken[0].blobs, ["outbox", "mail", "delivered", ""]);
        assert_eq!(
            taken[0].doubles,
            [
                4.0, 4.0, 140.0, 80.0, 1800.0, 900.0, 2000.0, 500.0, 0.0, 0.0
            ]
        );
        // A failure's lateness and age are not a delivery's.
        assert_eq!(taken[1].blobs, ["outbox", "mail", "retried", "failed"]);
        assert_eq!(
            taken[1].doubles[..8],
            [1.0, 1.0, 20.0, 20.0, 0.0, 0.0, 0.0, 0.0]
        );
        assert!(
            points.take("outbox", 10).is_empty(),
            "taken points are gone"
        );
    }

    #[test]
    fn groups_past_the_budget_are_summed_whole() {
        let mut points = DataPoints::new();
        points.record_backlog(&Backlog {
            outbox: "outbox",
            due: 1_000,
            oldest_due_age: Some(Duration::from_secs(7)),
        });
        let topics: Vec<String> = (0..10).map(|n| format!("topic-{n}")).collect();
        for (n, topic) in topics.iter().enumerate() {
            for _ in 0..=n {
                points.record(&settled(topic, Outcome::Delivered, None));
            }
        }
        points.record(&Settled {
            outbox: "other-outbox",
            ..settled("mail", Outcome::Dead, Some("permanent"))
        });
        let taken = points.take("outbox", 4);
        assert_eq!(taken.len(), 4);
        assert_eq!(taken[0].blobs[2], "backlog");
        assert_eq!(taken[0].doubles, [1_000.0, 7_000.0, 1.0]);
        assert_eq!(taken[1].blobs[1], "topic-9");
        assert_eq!(taken[2].blobs[1], "topic-8");
        assert_eq!(taken[3].blobs[1..3], ["(other)", "(other)"]);
        let messages: f64 = taken[1..].iter().map(|point| point.doubles[0]).sum();
        assert_eq!(messages, 55.0, "every message is counted once");
        assert_eq!(
            points.take("other-outbox", 4).len(),
            1,
            "other outboxes keep theirs"
        );
        assert!(points.take("outbox", 0).is_empty());
    }

    #[test]
    fn with_room_for_one_point_the_settles_go_and_the_backlog_waits() {
        let mut points = DataPoints::new();
        points.record_backlog(&Backlog {
            outbox: "outbox",
            due: 3,
            oldest_due_age: None,
        });
        points.record(&settled("mail", Outcome::Delivered, None));
        points.record(&settled("hooks", Outcome::Dead, Some("permanent")));
        let taken = points.take("outbox", 1);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].blobs[1..3], ["(other)", "(other)"]);
        assert_eq!(taken[0].doubles[0], 2.0);
        let mut backlog_only = DataPoints::new();
        backlog_only.record_backlog(&Backlog {
            outbox: "outbox",
            due: 3,
            oldest_due_age: None,
        });
        assert_eq!(backlog_only.take("outbox", 1)[0].blobs[2], "backlog");
    }

    #[test]
    fn an_index_is_clipped_on_a_character_boundary() {
        let topic = "é".repeat(60);
        let mut points = DataPoints::new();
        points.record(&settled(&topic, Outcome::Delivered, None));
        let taken = points.take("outbox", 1);
        assert!(taken[0].index.len() <= MAX_INDEX_BYTES);
        assert!(taken[0].index.starts_with("outbox:é"));
        assert_eq!(taken[0].blobs[1], topic, "the blob keeps the whole topic");
    }
}
