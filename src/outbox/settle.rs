//! Settling leased messages: complete, retry or dead, fenced by the lease,
//! many at once in one atomic batch.

use std::time::Duration;

use sea_query::{Expr, ExprTrait, Query};

use super::claim::LeaseHandle;
use super::{Outbox, col, state};
use crate::database::{Outcome, Statement};
use crate::error::{Error, Result};

/// How a delivery attempt ended, as the deliverer reports it; settling a
/// lease with it decides the row's fate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Delivered: the row is deleted.
    Delivered,
    /// Failed for now: retry after the policy's backoff, or park the message
    /// as dead if this was its last attempt.
    Retry {
        /// Why the attempt failed (kept as `last_error`).
        error: String,
    },
    /// Failed for now, and the receiver said when to come back (e.g. HTTP
    /// `Retry-After`); the wait is capped at 24 h.
    RetryAfter {
        /// Why the attempt failed.
        error: String,
        /// How long to wait.
        delay: Duration,
    },
    /// Can never succeed (e.g. HTTP 400): park the message as dead.
    Permanent {
        /// Why (kept as `last_error`).
        error: String,
    },
    /// Not attempted (no time was left): give the lease back as if the
    /// message had never been claimed; it is due again at once and the
    /// attempt is not counted.
    NotAttempted,
}

/// What a settle did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SettleReport {
    /// Rows deleted after delivery.
    pub completed: u32,
    /// Rows rescheduled.
    pub retried: u32,
    /// Rows parked as dead (a permanent failure, or the last attempt failed).
    pub dead: u32,
    /// Leases given back unattempted.
    pub released: u32,
    /// Ids whose lease no longer held; nothing was changed for them.
    pub lease_lost: Vec<String>,
}

/// Settle statements, and how to read their outcomes. Lets a caller send
/// them in a batch of its choosing (with the next claim, for example).
#[derive(Debug, Clone)]
pub struct PreparedSettle {
    statements: Vec<Statement>,
    plan: Vec<Planned>,
}

#[derive(Debug, Clone)]
struct Planned {
    id: String,
    effect: Effect,
    statement: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    Completed,
    Retried,
    Dead,
    Released,
}

impl PreparedSettle {
    /// The statements, to run in one atomic batch.
    pub fn statements(&self) -> &[Statement] {
        &self.statements
    }

    /// Reads the outcomes of [`statements`](PreparedSettle::statements), in
    /// the same order.
    pub fn read(&self, outcomes: &[Outcome]) -> SettleReport {
        let mut report = SettleReport::default();
        for planned in &self.plan {
            let applied = outcomes
                .get(planned.statement)
                .is_some_and(|outcome| outcome.rows_affected > 0);
            match (applied, planned.effect) {
                (false, _) => report.lease_lost.push(planned.id.clone()),
                (true, Effect::Completed) => report.completed += 1,
                (true, Effect::Retried) => report.retried += 1,
                (true, Effect::Dead) => report.dead += 1,
                (true, Effect::Released) => report.released += 1,
            }
        }
        report
    }
}

/// `last_error` keeps at most this many bytes of an error.
pub(crate) const MAX_ERROR_BYTES: usize = 2048;
const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

fn clip(error: &str) -> String {
    if error.len() <= MAX_ERROR_BYTES {
        return error.to_owned();
    }
    let mut end = MAX_ERROR_BYTES;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &error[..end])
}

impl Outbox {
    /// Settles many leased messages in one atomic batch (one round trip).
    /// Each applies only while its lease holds; the others are reported in
    /// [`SettleReport::lease_lost`] and left untouched.
    ///
    /// # Errors
    /// Any database error; then nothing was settled.
    pub async fn settle(&self, deliveries: &[(&LeaseHandle, Delivery)]) -> Result<SettleReport> {
        let prepared = self.prepare_settle(deliveries)?;
        let outcomes = self.inner.db.batch_atomic(prepared.statements()).await?;
        Ok(prepared.read(&outcomes))
    }

    /// The statements of [`settle`](Outbox::settle), for a batch of the
    /// caller's choosing.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if a statement cannot be built.
    pub fn prepare_settle(
        &self,
        deliveries: &[(&LeaseHandle, Delivery)],
    ) -> Result<PreparedSettle> {
        let now = self.now();
        let mut prepared = PreparedSettle {
            statements: Vec::with_capacity(deliveries.len()),
            plan: Vec::with_capacity(deliveries.len()),
        };
        for (lease, delivery) in deliveries {
            let (effect, statement) = match delivery {
                Delivery::Delivered => (Effect::Completed, self.delete_leased(lease)?),
                Delivery::Retry { error } => self.retry_or_dead(lease, error, None)?,
                Delivery::RetryAfter { error, delay } => {
                    self.retry_or_dead(lease, error, Some((*delay).min(MAX_RETRY_AFTER)))?
                }
                Delivery::Permanent { error } => {
                    (Effect::Dead, self.bury(lease, &clip(error), now)?)
                }
                Delivery::NotAttempted => (Effect::Released, self.release(lease, now)?),
            };
            prepared.plan.push(Planned {
                id: lease.id.clone(),
                effect,
                statement: prepared.statements.len(),
            });
            prepared.statements.push(statement);
            if effect == Effect::Completed
                && let Some(key) = &lease.ordering_key
            {
                prepared.statements.push(self.promote_next(key)?);
            }
        }
        Ok(prepared)
    }

    /// Deletes a delivered message.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the lease no longer holds (nothing changed);
    /// any database error.
    pub async fn complete(&self, lease: &LeaseHandle) -> Result<()> {
        self.settle_one(lease, Delivery::Delivered).await
    }

    /// Reschedules a message after a failed attempt (or parks it as dead if
    /// the attempt was its last).
    ///
    /// # Errors
    /// As [`complete`](Outbox::complete).
    pub async fn retry(&self, lease: &LeaseHandle, error: &str) -> Result<()> {
        self.settle_one(
            lease,
            Delivery::Retry {
                error: error.to_owned(),
            },
        )
        .await
    }

    /// Parks a message as dead after a permanent failure.
    ///
    /// # Errors
    /// As [`complete`](Outbox::complete).
    pub async fn dead(&self, lease: &LeaseHandle, error: &str) -> Result<()> {
        self.settle_one(
            lease,
            Delivery::Permanent {
                error: error.to_owned(),
            },
        )
        .await
    }

    async fn settle_one(&self, lease: &LeaseHandle, delivery: Delivery) -> Result<()> {
        let report = self.settle(&[(lease, delivery)]).await?;
        if report.lease_lost.is_empty() {
            Ok(())
        } else {
            Err(Error::LeaseLost {
                id: lease.id.clone(),
            })
        }
    }

    /// Rows this lease still holds: the primary key it was leased under,
    /// plus its token.
    fn held_by(lease: &LeaseHandle) -> Expr {
        Expr::col(col::STATE)
            .eq(state::READY)
            .and(Expr::col(col::DUE_AT).eq(lease.until.as_unix_millis()))
            .and(Expr::col(col::ID).eq(lease.id.as_str()))
            .and(Expr::col(col::LEASE_TOKEN).eq(lease.token.as_str()))
    }

    fn delete_leased(&self, lease: &LeaseHandle) -> Result<Statement> {
        let mut delete = Query::delete();
        delete
            .from_table(self.table_name())
            .and_where(Self::held_by(lease));
        Statement::from_query(&delete)
    }

    fn retry_or_dead(
        &self,
        lease: &LeaseHandle,
        error: &str,
        delay: Option<Duration>,
    ) -> Result<(Effect, Statement)> {
        let now = self.now();
        let max_attempts = self.inner.retry.max_attempts();
        if lease.attempt >= max_attempts {
            let error = clip(&format!(
                "attempts exhausted ({} of {max_attempts}); last error: {error}",
                lease.attempt
            ));
            return Ok((Effect::Dead, self.bury(lease, &error, now)?));
        }
        let delay = delay.unwrap_or_else(|| {
            self.inner
                .retry
                .delay(lease.attempt, self.inner.random.as_ref())
        });
        let next = now.checked_add(delay)?;
        let mut update = Query::update();
        update
            .table(self.table_name())
            .value(col::DUE_AT, next.as_unix_millis())
            .value(col::LEASE_TOKEN, Option::<String>::None)
            .value(col::LAST_ERROR, clip(error))
            .and_where(Self::held_by(lease));
        Ok((Effect::Retried, Statement::from_query(&update)?))
    }

    fn bury(&self, lease: &LeaseHandle, error: &str, now: crate::Timestamp) -> Result<Statement> {
        let mut update = Query::update();
        update
            .table(self.table_name())
            .value(col::STATE, state::DEAD)
            .value(col::DUE_AT, now.as_unix_millis())
            .value(col::LEASE_TOKEN, Option::<String>::None)
            .value(col::LAST_ERROR, error)
            .and_where(Self::held_by(lease));
        Statement::from_query(&update)
    }

    fn release(&self, lease: &LeaseHandle, now: crate::Timestamp) -> Result<Statement> {
        let mut update = Query::update();
        update
            .table(self.table_name())
            .value(col::DUE_AT, now.as_unix_millis())
            .value(col::LEASE_TOKEN, Option::<String>::None)
            .value(col::ATTEMPTS, Expr::col(col::ATTEMPTS).sub(1))
            .and_where(Self::held_by(lease));
        Statement::from_query(&update)
    }

    /// Makes the oldest remaining row of `key` ready, if it is waiting.
    pub(crate) fn promote_next(&self, key: &str) -> Result<Statement> {
        let mut oldest = Query::select();
        oldest
            .expr(Expr::col(col::SEQ).min())
            .from(self.table_name())
            .and_where(Expr::col(col::ORDERING_KEY).eq(key));
        let mut update = Query::update();
        update
            .table(self.table_name())
            .value(col::STATE, state::READY)
            .and_where(Expr::col(col::STATE).eq(state::WAITING))
            .and_where(Expr::col(col::ORDERING_KEY).eq(key))
            .and_where(Expr::col(col::SEQ).eq(Expr::from(oldest)));
        Statement::from_query(&update)
    }

    /// Makes the oldest row of every key ready where it is waiting: after
    /// rows were removed other than by completion (purge, erasure).
    pub(crate) fn promote_all_heads(&self) -> Result<Statement> {
        let table = self.table_name();
        let mut oldest = Query::select();
        oldest
            .expr(Expr::col(("earlier", col::SEQ)).min())
            .from_as(table.clone(), "earlier")
            .and_where(
                Expr::col(("earlier", col::ORDERING_KEY))
                    .equals((table.clone(), col::ORDERING_KEY)),
            );
        let mut update = Query::update();
        update
            .table(table.clone())
            .value(col::STATE, state::READY)
            .and_where(Expr::col(col::STATE).eq(state::WAITING))
            .and_where(Expr::col((table, col::SEQ)).eq(Expr::from(oldest)));
        Statement::from_query(&update)
    }
}
