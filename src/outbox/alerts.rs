//! Alerts: conditions a drain checks as it runs, told to the operator's
//! endpoints as [`ALERT`](super::operational::ALERT) at most once per rule
//! per window (see [`OutboxBuilder::alert`](super::OutboxBuilder::alert)).

use std::time::Duration;

use super::Outbox;
use super::operational::{ALERT, EVENT_ID_PREFIX};
use crate::database::Statement;
use crate::error::{Error, Result};
use crate::sql::alerts;
use crate::sql::events::{self, EventRow};
use crate::time::Timestamp;

/// A condition a drain checks at each of its sweeps (at most once a minute
/// per drainer that claims), told to the endpoints of the outbox's operator
/// ([`OutboxBuilder::operational_events`](super::OutboxBuilder::operational_events))
/// as an `outbox.alert` event, at most once per rule per window (default an
/// hour; [`once_per`](Self::once_per)), however many drains run.
///
/// Once a rule was told in its window, a sweep reads one row for it (its
/// record) until the next window: its condition is not read again.
///
/// Two more conditions are told already, as their own operational events:
/// a breaker open longer than a while (`outbox.receiver.failing`, after
/// [`receiver_failing_after`](super::OutboxBuilder::receiver_failing_after))
/// and an endpoint disabled (`outbox.endpoint.disabled`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alert {
    condition: Condition,
    once_per: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Condition {
    DeadLetters { at_least: u32, within: Duration },
    OldestDue { older_than: Duration },
}

impl Alert {
    /// The most dead letters a rule may wait for: its check reads at most
    /// this many rows.
    pub const MOST_DEAD_LETTERS: u32 = 1_000;

    /// At least `at_least` (1 ..= [`MOST_DEAD_LETTERS`](Self::MOST_DEAD_LETTERS))
    /// messages died within the last `within`. Its check reads at most
    /// `at_least` rows.
    pub fn dead_letters(at_least: u32, within: Duration) -> Self {
        Alert {
            condition: Condition::DeadLetters { at_least, within },
            once_per: Self::DEFAULT_WINDOW,
        }
    }

    /// A message of a topic that is not paused has been due, unclaimed,
    /// for longer than `older_than`: the drains fall behind, or none runs
    /// but this one. Its check reads at most the 10 oldest overdue rows
    /// (and the paused topics).
    pub fn oldest_due(older_than: Duration) -> Self {
        Alert {
            condition: Condition::OldestDue { older_than },
            once_per: Self::DEFAULT_WINDOW,
        }
    }

    /// Tells it at most once per `window` (at least a minute; default an
    /// hour), windows counted from 1970 in whole multiples.
    #[must_use]
    pub fn once_per(mut self, window: Duration) -> Self {
        self.once_per = window;
        self
    }

    /// The window unless [`once_per`](Self::once_per) says otherwise.
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(3600);

    /// Its name: the same for the same rule, different for another.
    pub fn rule(&self) -> String {
        match self.condition {
            Condition::DeadLetters { at_least, within } => {
                format!("dead_letters:{at_least}:{}s", within.as_secs())
            }
            Condition::OldestDue { older_than } => format!("oldest_due:{}s", older_than.as_secs()),
        }
    }

    /// Whether its numbers are in range.
    pub(crate) fn check(&self) -> Result<()> {
        let bad = |reason: String| Err(Error::invalid("alert", reason));
        if self.once_per < Duration::from_secs(60) {
            return bad(format!("{}: a window is at least a minute", self.rule()));
        }
        match self.condition {
            Condition::DeadLetters { at_least, .. }
                if !(1..=Self::MOST_DEAD_LETTERS).contains(&at_least) =>
            {
                bad(format!(
                    "{}: at_least is 1 ..= {}",
                    self.rule(),
                    Self::MOST_DEAD_LETTERS
                ))
            }
            Condition::DeadLetters { within: span, .. }
            | Condition::OldestDue { older_than: span }
                if span.is_zero() =>
            {
                bad(format!("{}: its time span is zero", self.rule()))
            }
            _ => Ok(()),
        }
    }

    /// The event's payload: the rule, its numbers, the window, and when.
    fn payload(&self, window_start: Timestamp, now: Timestamp) -> serde_json::Value {
        let mut payload = serde_json::json!({
            "type": ALERT,
            "rule": self.rule(),
            "window_start_ms": window_start.as_unix_millis(),
            "at_ms": now.as_unix_millis(),
        });
        match self.condition {
            Condition::DeadLetters { at_least, within } => {
                payload["condition"] = "dead_letters".into();
                payload["at_least"] = at_least.into();
                payload["within_s"] = within.as_secs().into();
            }
            Condition::OldestDue { older_than } => {
                payload["condition"] = "oldest_due".into();
                payload["older_than_s"] = older_than.as_secs().into();
            }
        }
        payload
    }
}

/// The start of the window of `length` that holds `now`.
fn window_start(now: Timestamp, length: Duration) -> Timestamp {
    let length = i64::try_from(length.as_millis()).unwrap_or(i64::MAX).max(1);
    let at = now.as_unix_millis();
    Timestamp::from_unix_millis(at - at.rem_euclid(length)).unwrap_or(now)
}

impl Outbox {
    /// The sweep's share: for each alert, its check, the record of its
    /// window and its event (kept and fanned out to the operator's
    /// endpoints only if the record was written by this call).
    pub(crate) fn alert_statements(&self, now: Timestamp) -> Result<Vec<Statement>> {
        let Some(operator) = self.operational_owner() else {
            return Ok(Vec::new());
        };
        let (table, dialect) = (self.table(), self.dialect());
        let mut statements = Vec::new();
        for alert in &self.inner.alerts {
            let holds = match alert.condition {
                Condition::DeadLetters { at_least, within } => {
                    alerts::dead_since(table, now.saturating_sub(within), at_least)
                }
                Condition::OldestDue { older_than } => {
                    alerts::overdue(table, now.saturating_sub(older_than))
                }
            };
            let window = window_start(now, alert.once_per);
            let rule = alert.rule();
            let id = format!("{EVENT_ID_PREFIX}{}", self.new_ulid(now));
            let payload = crate::sql::json_text(&alert.payload(window, now), "alert")?;
            let event = EventRow {
                id: &id,
                owner: operator,
                event_type: ALERT,
                payload: &payload,
                filtered: &payload,
                subject: None,
                ordering_key: None,
                at: now,
            };
            statements.push(alerts::tell(table, dialect, (&rule, window, &id), holds)?);
            statements.push(alerts::keep_told(table, dialect, &rule, &event)?);
            statements.push(events::fan_out_if_kept(table, dialect, &event)?);
        }
        Ok(statements)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_are_whole_multiples_and_rules_are_checked() {
        let at = |ms| Timestamp::from_unix_millis(ms).unwrap();
        let hour = Duration::from_secs(3600);
        assert_eq!(window_start(at(7_250_000), hour), at(7_200_000));
        assert_eq!(window_start(at(7_200_000), hour), at(7_200_000));
        assert!(Alert::dead_letters(10, hour).check().is_ok());
        assert!(Alert::dead_letters(0, hour).check().is_err());
        assert!(Alert::dead_letters(1_001, hour).check().is_err());
        assert!(Alert::oldest_due(Duration::ZERO).check().is_err());
        assert!(
            Alert::oldest_due(hour)
                .once_per(Duration::from_secs(59))
                .check()
                .is_err()
        );
        assert_ne!(
            Alert::dead_letters(10, hour).rule(),
            Alert::dead_letters(10, hour * 2).rule()
        );
    }
}
