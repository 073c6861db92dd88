//! What the simulation saw, and the promises it checks.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Faults injected, by kind.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub(crate) struct Faults {
    pub(crate) db_errors_before: u64,
    pub(crate) db_errors_after_commit: u64,
    pub(crate) crashes_after_claim: u64,
    pub(crate) crashes_after_delivery: u64,
    pub(crate) retryable_failures: u64,
    pub(crate) permanent_failures: u64,
    pub(crate) overruns: u64,
    pub(crate) clock_jumps: u64,
    pub(crate) poison_crashes: u64,
    pub(crate) outage_failures: u64,
    pub(crate) throttled: u64,
    pub(crate) hangs: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Ledger {
    pub(crate) faults: Faults,
    /// Ids of the messages enqueued (deduplicated enqueues excluded).
    pub(crate) sent: BTreeSet<String>,
    pub(crate) deduplicated: u64,
    pub(crate) deliveries_started: u64,
    /// Deliveries of a message whose effect the receiver had applied already.
    pub(crate) deliveries_after_effect: u64,
    /// Deliveries started, by message.
    pub(crate) started_ids: BTreeMap<String, u64>,
    pub(crate) permanent: BTreeSet<String>,
    /// Deliveries that started while another lease on the row was live.
    pub(crate) concurrent_double_deliveries: u64,
    /// Settles applied by a holder whose lease was no longer the row's.
    pub(crate) stale_settles_applied: u64,
    pub(crate) attempts_over_max: u64,
    /// Keyed deliveries that started while an earlier row of the key remained.
    pub(crate) order_violations: u64,
    /// Dead messages whose last lease expired unsettled (outcome unknown).
    pub(crate) died_unsettled: BTreeSet<String>,
    /// Dead messages, with their attempts, when last seen (before purges).
    pub(crate) dead: BTreeMap<String, u32>,
}

/// The figures a run ends with.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Figures {
    pub(crate) seed: u64,
    pub(crate) messages: usize,
    pub(crate) drainers: usize,
    pub(crate) faults: Faults,
    pub(crate) delivered: usize,
    pub(crate) dead: usize,
    pub(crate) lost: usize,
    pub(crate) concurrent_double_deliveries: u64,
    pub(crate) stale_settles_applied: u64,
    pub(crate) attempts_over_max: u64,
    pub(crate) order_violations: u64,
    pub(crate) effects_applied_twice: usize,
    pub(crate) rows_left_not_dead: usize,
    pub(crate) redeliveries: u64,
    /// Dead messages that neither failed permanently nor were the poison.
    pub(crate) innocent_dead: usize,
    /// Of those, the ones whose last lease expired unsettled: a drainer died
    /// while delivering them alone, as often as the policy allows.
    pub(crate) innocent_dead_unsettled: usize,
    pub(crate) deliveries_after_effect: u64,
    pub(crate) innocent_deliveries: u64,
    pub(crate) innocent_messages: usize,
    pub(crate) most_deliveries_of_one_innocent: u64,
    /// The poison's spent attempts when it died.
    pub(crate) poison_dead_after: Option<u32>,
    /// Attempts spent by messages other than the poison from a minute into
    /// the 2-hour outage to its end.
    pub(crate) outage_attempts: i64,
    /// Where the rollups of the run and the database's own audit of every
    /// row change disagree (topic, kind: both counts).
    pub(crate) rollup_differences: Vec<String>,
    /// Changes the audit recorded (each one a rollup must count).
    pub(crate) audited_changes: u64,
    pub(crate) simulated_seconds: u64,
}

impl Figures {
    /// Whether every promise held.
    pub(crate) fn kept(&self) -> bool {
        self.lost == 0
            && self.concurrent_double_deliveries == 0
            && self.stale_settles_applied == 0
            && self.attempts_over_max == 0
            && self.order_violations == 0
            && self.effects_applied_twice == 0
            && self.rows_left_not_dead == 0
            && self.outage_attempts == 0
            && self.poison_dead_after.is_some()
            && self.rollup_differences.is_empty()
            && self.audited_changes > 0
    }
}

impl fmt::Display for Figures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let x = &self.faults;
        writeln!(
            f,
            "seed {} · {} messages · {} drainers · {} simulated s",
            self.seed, self.messages, self.drainers, self.simulated_seconds
        )?;
        writeln!(
            f,
            "faults: {} db errors before commit, {} after commit, {} crashes after claim, {} crashes after delivery, \
             {} retryable failures, {} permanent failures, {} deliveries past their lease, {} clock jumps",
            x.db_errors_before,
            x.db_errors_after_commit,
            x.crashes_after_claim,
            x.crashes_after_delivery,
            x.retryable_failures,
            x.permanent_failures,
            x.overruns,
            x.clock_jumps
        )?;
        writeln!(
            f,
            "weather: {} poison crashes, {} failures during the outage, {} throttled (429, Retry-After 0/1), \
             {} hung deliveries",
            x.poison_crashes, x.outage_failures, x.throttled, x.hangs
        )?;
        writeln!(
            f,
            "delivered {} · dead {} · lost {}",
            self.delivered, self.dead, self.lost
        )?;
        writeln!(
            f,
            "concurrent double deliveries {} · stale settles applied {} · attempts over the maximum {} · \
             order violations {} · effects applied twice {} · rows left that are not dead {}",
            self.concurrent_double_deliveries,
            self.stale_settles_applied,
            self.attempts_over_max,
            self.order_violations,
            self.effects_applied_twice,
            self.rows_left_not_dead
        )?;
        writeln!(f, "total redeliveries {}", self.redeliveries)?;
        writeln!(
            f,
            "rollups against the database's audit (delivered, retried, deferred, dead, handed back \
             per topic): {} differences in {} changes{}",
            self.rollup_differences.len(),
            self.audited_changes,
            if self.rollup_differences.is_empty() {
                String::new()
            } else {
                format!(": {}", self.rollup_differences.join("; "))
            }
        )?;
        write!(
            f,
            "innocent messages dead {} ({} of them with their last lease unsettled) · \
             delivery attempts per innocent message {:.3} (most {}) · \
             deliveries after the effect was applied {} · poison dead after {} attempts · \
             attempts spent during the 2-hour outage (poison aside) {}",
            self.innocent_dead,
            self.innocent_dead_unsettled,
            self.innocent_deliveries as f64 / self.innocent_messages.max(1) as f64,
            self.most_deliveries_of_one_innocent,
            self.deliveries_after_effect,
            self.poison_dead_after
                .map_or_else(|| "(not dead)".to_owned(), |n| n.to_string()),
            self.outage_attempts
        )
    }
}
