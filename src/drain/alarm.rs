//! A Durable Object's alarm driving its outbox's drain.

use super::drainer::Drainer;
use super::{DrainReport, StopReason};
use crate::database::durable_object::DurableObjectDatabase;
use crate::error::Result;

impl Drainer {
    /// Runs a drain from the object's `alarm()` handler, then sets the
    /// alarm to the next due time (messages the drain left due wake the
    /// object again at once). Give the drainer
    /// [`DrainLimits::alarm`](super::DrainLimits::alarm) and the outbox `db`
    /// [`wakes for`](DurableObjectDatabase::wake_for).
    ///
    /// # Errors
    /// If the drain stopped on a database error, that error, and the alarm
    /// is left to the runtime: return the error from `alarm()` and the
    /// runtime retries the alarm with its own backoff, instead of waking at
    /// once for rows that cannot be claimed. Otherwise a failure to read the
    /// next due time or to set the alarm.
    ///
    /// With a [fleet](super::DrainerBuilder::fleet) member that
    /// [owes](crate::fleet::FleetMember::owes) a report (held back, or
    /// failed), the alarm is set no later than its
    /// [`retry_in`](crate::fleet::FleetMember::retry_in) from now, so a
    /// drain of its own writes it even when nothing is due.
    pub async fn run_alarm(&self, db: &DurableObjectDatabase) -> Result<DrainReport> {
        db.alarm_fired();
        let report = self.drain().await;
        if let StopReason::DatabaseError(error) = &report.stopped {
            return Err(error.clone());
        }
        db.rearm().await?;
        if let Some(retry) = self
            .fleet
            .as_ref()
            .and_then(|member| member.retry_in(&self.parts.outbox))
        {
            let now = self.parts.outbox.now();
            db.wake_by(now.checked_add(retry).unwrap_or(now)).await?;
        }
        Ok(report)
    }
}
