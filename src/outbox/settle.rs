//! Settling leased messages: complete, reschedule, bury or release, fenced
//! by the lease, many at once in one atomic batch.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::Outbox;
use super::claim::LeaseHandle;
use crate::database::{Outcome, Statement};
use crate::error::{Error, Result};
use crate::sql;
use crate::sql::rollups::{Counts, CountsLast, SettleCount};
use crate::sql::settle::Retry;
use crate::telemetry::Outcome as Told;
use crate::time::Timestamp;
use crate::verdict::Delivery;

/// What a settle does to one leased row: a [`Delivery`] verdict, or the
/// drainer's own decision for a message it did not attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Delete the row.
    Complete,
    /// Due again after the backoff (or `not_before`, if longer). `charged`
    /// spends the lease's attempt; otherwise it counts a deferral, unless the
    /// message is older than the policy's deferral limit.
    Reschedule {
        error: String,
        not_before: Option<Duration>,
        charged: bool,
    },
    /// Park the row as dead.
    Bury { error: String },
    /// Not attempted: give the lease back, due at `due`, no attempt spent.
    Release { due: Timestamp },
    /// Not attempted because it cannot be (its payload does not open): give
    /// the lease back, due at `due`, no attempt spent, `error` kept as its
    /// last. It never dies of this.
    Hold { error: String, due: Timestamp },
    /// The destination is gone: pause the row's topic with `reason` and
    /// give the lease back, no attempt spent.
    Pause { reason: String },
}

impl From<Delivery> for Fate {
    fn from(delivery: Delivery) -> Self {
        match delivery {
            Delivery::Delivered => Fate::Complete,
            Delivery::Retry { error } => Fate::Reschedule {
                error,
                not_before: None,
                charged: true,
            },
            Delivery::RetryAfter { error, delay } => Fate::Reschedule {
                error,
                not_before: Some(delay),
                charged: true,
            },
            Delivery::Unavailable { error, retry_after } => Fate::Reschedule {
                error,
                not_before: retry_after,
                charged: false,
            },
            Delivery::Permanent { error } => Fate::Bury { error },
            Delivery::Gone { error } => Fate::Pause { reason: error },
        }
    }
}

/// What a settle did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SettleReport {
    /// Rows deleted after delivery.
    pub completed: u32,
    /// Rows rescheduled, an attempt spent.
    pub retried: u32,
    /// Rows rescheduled without spending an attempt (receiver unavailable,
    /// circuit open).
    pub deferred: u32,
    /// Rows parked as dead (a permanent failure, or the last attempt failed).
    pub dead: u32,
    /// Leases given back unattempted.
    pub released: u32,
    /// Leases given back, no attempt spent, because their destination is
    /// gone ([`Delivery::Gone`]): their topics are paused.
    pub paused: u32,
    /// Ids whose lease no longer held; nothing was changed for them. After a
    /// settle that was retried, this includes rows the first try settled.
    pub lease_lost: Vec<String>,
    /// The rows parked as dead, and why (for the drain's dead letter lines).
    pub(crate) died: Vec<(String, DeathCause)>,
    /// Each lease's outcome, in the order settled (for live telemetry).
    pub(crate) told: Vec<(String, Told)>,
}

/// Why a settle parked a row as dead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeathCause {
    /// A permanent failure (or a row the drainer could not decode).
    Buried,
    /// Its last attempt failed.
    AttemptsExhausted,
}

/// Settle statements, and how to read their outcomes. Lets a caller send
/// them in a batch of its choosing (with the next claim, for example).
///
/// Every statement is fenced by its lease, so sending the same prepared
/// settle again after an error is safe: what the first try applied is
/// reported as lease lost, nothing is applied twice.
#[derive(Debug, Clone, Default)]
#[must_use = "a prepared settle changes nothing until it is sent"]
pub(crate) struct PreparedSettle {
    /// The statements that settle (see [`leading`](Self::leading)).
    statements: Vec<Statement>,
    /// The counts to add last in the transaction (Postgres).
    last: Option<CountsLast>,
    plan: Vec<Planned>,
    /// The same settle with each listed delete in its exact form, where
    /// this one deletes a claim's rows by a list it checks
    /// ([`complete_listed`](sql::differences::Differences::complete_listed)): to send instead when that check
    /// failed the batch ([`Error::is_settle_not_exact`]), or when sending
    /// again after any error.
    exact: Option<Box<PreparedSettle>>,
}

#[derive(Debug, Clone)]
struct Planned {
    id: String,
    effect: Effect,
    applied: Applied,
}

/// How to tell from a batch's outcomes whether a lease's settle applied.
#[derive(Debug, Clone, Copy)]
enum Applied {
    /// Statement `n` changed a row.
    Changed(usize),
    /// Statement `n` returned the lease's id.
    Returned(usize),
    /// Statement `n` deleted every listed row, or the batch failed (see
    /// [`complete_listed`](sql::differences::Differences::complete_listed)): applied if the batch replied.
    Listed(usize),
    /// Never: the lease was listed earlier in the same settle.
    Repeated,
}

impl Applied {
    fn shift(&mut self, by: usize) {
        if let Applied::Changed(n) | Applied::Returned(n) | Applied::Listed(n) = self {
            *n += by;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    Completed,
    Retried,
    Deferred,
    Dead(DeathCause),
    Released,
    Paused,
}

impl PreparedSettle {
    /// The statements, to run in one atomic batch: [`leading`](Self::leading)
    /// then the statements that add [`last`](Self::last) (rendered here,
    /// for a settle sent on its own: a drain's call adds every part's
    /// counts in one statement).
    pub(crate) fn statements(&self) -> Cow<'_, [Statement]> {
        match self.last.as_ref().map(CountsLast::statements) {
            Some(adds) if !adds.is_empty() => {
                Cow::Owned(self.statements.iter().cloned().chain(adds).collect())
            }
            _ => Cow::Borrowed(&self.statements),
        }
    }

    /// The statements that settle, read by [`read`](Self::read).
    pub(crate) fn leading(&self) -> &[Statement] {
        &self.statements
    }

    /// The counts to add after every other statement of the same
    /// transaction (Postgres, see [`CountsLast`]): a batch that also claims
    /// adds them with the claim's, after it.
    pub(crate) fn last(&self) -> Option<&CountsLast> {
        self.last.as_ref()
    }

    /// Whether there is nothing to settle.
    pub(crate) fn is_empty(&self) -> bool {
        self.statements.is_empty()
    }

    /// The form to send after this one failed its check of a listed delete,
    /// or to send again after an error: itself where it has no listed
    /// delete.
    pub(crate) fn exact(&self) -> &PreparedSettle {
        self.exact.as_deref().unwrap_or(self)
    }

    /// Reads the outcomes of [`leading`](PreparedSettle::leading) (the start
    /// of [`statements`](PreparedSettle::statements)), in the same order.
    pub(crate) fn read(&self, outcomes: &[Outcome]) -> SettleReport {
        let mut report = SettleReport {
            told: Vec::with_capacity(self.plan.len()),
            ..SettleReport::default()
        };
        let mut returned: HashMap<usize, HashSet<String>> = HashMap::new();
        for planned in &self.plan {
            let applied = match planned.applied {
                Applied::Changed(n) => outcomes
                    .get(n)
                    .is_some_and(|outcome| outcome.rows_affected > 0),
                Applied::Returned(n) => returned
                    .entry(n)
                    .or_insert_with(|| returned_ids(outcomes.get(n)))
                    .contains(&planned.id),
                Applied::Listed(n) => outcomes.get(n).is_some(),
                Applied::Repeated => false,
            };
            let told = match (applied, planned.effect) {
                (false, _) => Told::LeaseLost,
                (true, Effect::Completed) => Told::Delivered,
                (true, Effect::Retried) => Told::Retried,
                (true, Effect::Deferred) => Told::Deferred,
                (true, Effect::Dead(_)) => Told::Dead,
                (true, Effect::Released | Effect::Paused) => Told::HandedBack,
            };
            report.told.push((planned.id.clone(), told));
            match (applied, planned.effect) {
                (false, _) => report.lease_lost.push(planned.id.clone()),
                (true, Effect::Completed) => report.completed += 1,
                (true, Effect::Retried) => report.retried += 1,
                (true, Effect::Deferred) => report.deferred += 1,
                (true, Effect::Dead(cause)) => {
                    report.dead += 1;
                    report.died.push((planned.id.clone(), cause));
                }
                (true, Effect::Released) => report.released += 1,
                (true, Effect::Paused) => report.paused += 1,
            }
        }
        report
    }
}

/// The ids a statement returned (none for a missing outcome, or a row
/// whose id does not read: its lease is reported lost).
fn returned_ids(outcome: Option<&Outcome>) -> HashSet<String> {
    outcome.map_or_else(HashSet::new, |outcome| {
        outcome
            .rows
            .iter()
            .filter_map(|row| row.get::<String>(sql::col::ID).ok())
            .collect()
    })
}

/// The delivered leases of one claim that one statement deletes (and, where
/// the rollups count a statement's changes, that add the same counts).
struct Deletion<'a> {
    token: &'a str,
    until: Timestamp,
    counts: Option<sql::rollups::ChangesKey<'a>>,
    ids: Vec<&'a str>,
    /// Where each id is planned.
    planned: Vec<usize>,
}

/// The most rollup keys a claim's delivered leases may have and still be
/// counted from each delete's changes (a delete and a count per key); a
/// claim with more is deleted by one statement and counted by reading.
const MAX_KEYS_COUNTED_BY_CHANGES: usize = 2;

/// A delivered lease, and where it is planned.
type DeliveredLease<'a> = (usize, &'a LeaseHandle);

/// The delivered leases of each claim with more than one (to delete by a
/// checked list), and the rest.
fn claims_of_many<'a>(
    delivered: &[DeliveredLease<'a>],
) -> (Vec<Vec<DeliveredLease<'a>>>, Vec<DeliveredLease<'a>>) {
    let mut claims: Vec<Vec<DeliveredLease<'a>>> = Vec::new();
    for &(planned, lease) in delivered {
        match claims.iter_mut().find(|claim| {
            claim
                .first()
                .is_some_and(|(_, first)| first.token == lease.token && first.until == lease.until)
        }) {
            Some(claim) => claim.push((planned, lease)),
            None => claims.push(vec![(planned, lease)]),
        }
    }
    let (many, one): (Vec<_>, Vec<_>) = claims.into_iter().partition(|claim| claim.len() > 1);
    (many, one.into_iter().flatten().collect())
}

/// Whether `fates` deliver more than one row of some claim.
fn lists_a_claim(fates: &[(&LeaseHandle, Fate)]) -> bool {
    let mut claims = HashSet::new();
    fates
        .iter()
        .filter(|(_, fate)| *fate == Fate::Complete)
        .any(|(lease, _)| !claims.insert((lease.token.as_str(), lease.until)))
}

/// The deletes of the `delivered` leases (each with where it is planned):
/// one per claim, or per claim and rollup key where `by_changes` and its
/// leases have few keys. The leases counted by reading their rows are
/// added to `counted`, with what `counts` says of each.
fn plan_deletions<'a>(
    delivered: &[DeliveredLease<'a>],
    counts: impl Fn(&'a LeaseHandle) -> Option<sql::rollups::Counted<'a>>,
    by_changes: bool,
    counted: &mut Vec<sql::rollups::Counted<'a>>,
) -> Vec<Deletion<'a>> {
    let mut claims: Vec<(&'a str, Timestamp, Vec<DeliveredLease<'a>>)> = Vec::new();
    for &(planned, lease) in delivered {
        match claims
            .iter_mut()
            .find(|(token, until, _)| *token == lease.token && *until == lease.until)
        {
            Some((_, _, leases)) => leases.push((planned, lease)),
            None => claims.push((&lease.token, lease.until, vec![(planned, lease)])),
        }
    }
    let mut deletions: Vec<Deletion<'a>> = Vec::new();
    for (token, until, leases) in claims {
        let counts_here: Vec<_> = leases.iter().map(|(_, lease)| counts(lease)).collect();
        let keys: Vec<_> = counts_here
            .iter()
            .map(|counts| counts.filter(|_| by_changes)?.changes_key())
            .collect();
        let first = deletions.len();
        for (&(planned, lease), key) in leases.iter().zip(&keys) {
            let index = match deletions[first..]
                .iter()
                .position(|deletion| deletion.counts == *key)
            {
                Some(index) => first + index,
                None => {
                    deletions.push(Deletion {
                        token,
                        until,
                        counts: *key,
                        ids: Vec::new(),
                        planned: Vec::new(),
                    });
                    deletions.len() - 1
                }
            };
            deletions[index].ids.push(&lease.id);
            deletions[index].planned.push(planned);
        }
        let per_key = keys.iter().all(Option::is_some)
            && deletions.len() - first <= MAX_KEYS_COUNTED_BY_CHANGES;
        if !per_key {
            deletions.truncate(first);
            deletions.push(Deletion {
                token,
                until,
                counts: None,
                ids: leases.iter().map(|(_, lease)| lease.id.as_str()).collect(),
                planned: leases.iter().map(|(planned, _)| *planned).collect(),
            });
            counted.extend(counts_here.into_iter().flatten());
        }
    }
    deletions
}

/// What a drain saw of one delivery, beyond its fate: counted in the
/// rollups with its settle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Observed {
    /// How long the delivery took, when one was made.
    pub(crate) duration: Option<Duration>,
    /// It was delivered as a suspect, in a suspect group.
    pub(crate) alone: bool,
    /// Its failure tripped its topic's breaker.
    pub(crate) tripped: bool,
}

/// What the settle of `lease` with `effect` at `now` counts.
fn counting(
    lease: &LeaseHandle,
    effect: Effect,
    observed: Observed,
    now: Timestamp,
) -> sql::rollups::Counted<'_> {
    use sql::rollups::metric;
    let ms = |since: Timestamp| i64::try_from(now.duration_since(since).as_millis()).ok();
    let delivered = effect == Effect::Completed;
    let (outcome, resets_unsettled) = match effect {
        Effect::Completed => (metric::DELIVERED, true),
        Effect::Retried => (metric::RETRIED, true),
        Effect::Deferred => (metric::DEFERRED, false),
        Effect::Dead(_) => (metric::DEAD, true),
        Effect::Released | Effect::Paused => (metric::HANDED_BACK, false),
    };
    sql::rollups::Counted {
        fence: lease.fence(),
        topic: &lease.topic,
        outcome,
        lateness_ms: lease.became_due.filter(|_| delivered).and_then(ms),
        age_ms: delivered.then(|| ms(lease.created_at)).flatten(),
        duration_ms: observed
            .duration
            .and_then(|took| i64::try_from(took.as_millis()).ok()),
        counts_lost_leases: resets_unsettled,
        alone: observed.alone,
        tripped: observed.tripped,
        unsettled: lease.unsettled,
    }
}

/// `last_error` keeps at most this many bytes of an error.
pub(crate) const MAX_ERROR_BYTES: usize = 2048;
const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 3600);

/// `error` as `last_error` keeps it: at most [`MAX_ERROR_BYTES`], a NUL
/// (which Postgres text cannot hold) as U+FFFD.
pub(super) fn clip(error: &str) -> String {
    let error = error.replace('\0', "\u{FFFD}");
    if error.len() <= MAX_ERROR_BYTES {
        return error;
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
    /// Any database error. The batch may still have committed (see the
    /// [`Database`](crate::database::Database) contract); settling again with the same
    /// leases is safe.
    pub async fn settle(&self, deliveries: &[(&LeaseHandle, Delivery)]) -> Result<SettleReport> {
        let prepared = self.prepare_settle(deliveries)?;
        match self.inner.db.batch_atomic(&prepared.statements()).await {
            Ok(outcomes) => Ok(prepared.read(&outcomes)),
            Err(error) if error.is_settle_not_exact() => {
                let exact = prepared.exact();
                let outcomes = self.inner.db.batch_atomic(&exact.statements()).await?;
                Ok(exact.read(&outcomes))
            }
            Err(error) => Err(error),
        }
    }

    /// The statements of [`settle`](Outbox::settle), for a batch of the
    /// caller's choosing.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if a statement cannot be built.
    pub(crate) fn prepare_settle(
        &self,
        deliveries: &[(&LeaseHandle, Delivery)],
    ) -> Result<PreparedSettle> {
        let fates: Vec<(&LeaseHandle, Fate)> = deliveries
            .iter()
            .map(|(lease, delivery)| (*lease, Fate::from(delivery.clone())))
            .collect();
        self.prepare_fates(&fates)
    }

    pub(crate) fn prepare_fates(&self, fates: &[(&LeaseHandle, Fate)]) -> Result<PreparedSettle> {
        self.prepare_observed(fates, |_| Observed::default(), |_| None)
    }

    /// The statements of a settle, counting into the rollups (when they are
    /// on) what a drain `observed` of each lease's delivery. A row given
    /// back for later without spending an attempt (a receiver's failure, a
    /// breaker's hand-back) is held for the receiver `held_for` names, so
    /// that receiver's next answer can release it early
    /// ([`release_held_statement`](Outbox::release_held_statement)).
    ///
    /// Delivered leases are deleted one statement per claim (per claim and
    /// rollup key where the rollups count each delete's changes, for a
    /// claim of at most [`MAX_KEYS_COUNTED_BY_CHANGES`] keys); the others
    /// are settled one statement each. A lease listed twice is
    /// settled once; its second listing is reported lost.
    pub(crate) fn prepare_observed(
        &self,
        fates: &[(&LeaseHandle, Fate)],
        observed: impl Fn(&LeaseHandle) -> Observed,
        held_for: impl Fn(&LeaseHandle) -> Option<String>,
    ) -> Result<PreparedSettle> {
        let now = self.now();
        let exact = self.build_settle(fates, &observed, &held_for, now, false)?;
        if !lists_a_claim(fates) {
            return Ok(exact);
        }
        let mut listed = self.build_settle(fates, &observed, &held_for, now, true)?;
        listed.exact = Some(Box::new(exact));
        Ok(listed)
    }

    /// The statements of a settle at `now`; `listed`: the delivered rows of
    /// a claim with more than one are deleted by a checked list
    /// ([`complete_listed`](sql::differences::Differences::complete_listed)) and counted as known.
    fn build_settle(
        &self,
        fates: &[(&LeaseHandle, Fate)],
        observed: &impl Fn(&LeaseHandle) -> Observed,
        held_for: &impl Fn(&LeaseHandle) -> Option<String>,
        now: Timestamp,
        listed_deletes: bool,
    ) -> Result<PreparedSettle> {
        let writes = self.rollup_writes();
        let mut prepared = PreparedSettle {
            statements: Vec::with_capacity(fates.len() + 1),
            last: None,
            plan: Vec::with_capacity(fates.len()),
            exact: None,
        };
        // Counted by reading their rows first.
        let mut counted = Vec::new();
        let mut delivered: Vec<(usize, &LeaseHandle)> = Vec::new();
        let mut listed = HashSet::with_capacity(fates.len());
        let mut paused_here = HashSet::new();
        for (lease, fate) in fates {
            let fence = lease.fence();
            if !listed.insert((fence.id, fence.token, fence.until)) {
                prepared.plan.push(Planned {
                    id: lease.id.clone(),
                    effect: Effect::Completed,
                    applied: Applied::Repeated,
                });
                continue;
            }
            let (effect, statement) = match fate {
                Fate::Complete => {
                    delivered.push((prepared.plan.len(), *lease));
                    // Told where to look once its delete is placed below.
                    prepared.plan.push(Planned {
                        id: lease.id.clone(),
                        effect: Effect::Completed,
                        applied: Applied::Repeated,
                    });
                    continue;
                }
                Fate::Reschedule {
                    error,
                    not_before,
                    charged,
                } => {
                    let held_for = held_for(lease);
                    let failure = (error.as_str(), *not_before, *charged);
                    let (effect, statement) =
                        self.reschedule_statement(lease, failure, held_for.as_deref(), now)?;
                    if effect == Effect::Dead(DeathCause::AttemptsExhausted) {
                        // Before the bury, while the lease still holds.
                        let error = format!("attempts exhausted; last error: {error}");
                        prepared
                            .statements
                            .extend(self.report_death(lease, &error, now)?);
                    }
                    (effect, statement)
                }
                Fate::Bury { error } => {
                    // Before the bury, while the lease still holds.
                    prepared
                        .statements
                        .extend(self.report_death(lease, error, now)?);
                    (
                        Effect::Dead(DeathCause::Buried),
                        self.bury_statement(lease, &clip(error), now)?,
                    )
                }
                Fate::Hold { error, due } => {
                    let statement = sql::settle::hold(
                        self.table(),
                        self.dialect(),
                        &fence,
                        lease.attempt,
                        *due,
                        &clip(error),
                    )?;
                    (Effect::Released, statement)
                }
                Fate::Release { due } => {
                    let held_for = held_for(lease).filter(|_| *due > now);
                    let statement = self.release_statement(lease, *due, held_for.as_deref())?;
                    (Effect::Released, statement)
                }
                Fate::Pause { reason } => {
                    // Before the release, while the lease still holds.
                    prepared.statements.push(sql::pause::pause_leased(
                        self.table(),
                        self.dialect(),
                        &fence,
                        &clip(reason),
                        now,
                    )?);
                    // Once per endpoint a settle disables.
                    if paused_here.insert(lease.topic.as_str()) {
                        let payload = serde_json::json!({
                            "type": super::operational::ENDPOINT_DISABLED,
                            "endpoint_id": lease.topic, "reason": clip(reason), "at_ms": now.as_unix_millis(),
                        });
                        prepared.statements.extend(self.report_settle(
                            lease,
                            super::operational::ENDPOINT_DISABLED,
                            &payload,
                            |_| sql::events::About::AnEndpointsDelivery,
                            now,
                        )?);
                    }
                    (Effect::Paused, self.release_statement(lease, now, None)?)
                }
            };
            if writes.is_some() {
                counted.push(counting(lease, effect, observed(lease), now));
            }
            prepared.plan.push(Planned {
                id: lease.id.clone(),
                effect,
                applied: Applied::Changed(prepared.statements.len()),
            });
            prepared.statements.push(statement);
        }
        let counts_of =
            |lease| writes.map(|_| counting(lease, Effect::Completed, observed(lease), now));
        let (lists, delivered) = if listed_deletes {
            claims_of_many(&delivered)
        } else {
            (Vec::new(), delivered)
        };
        let mut known = sql::rollups::KnownCounts::default();
        for list in &lists {
            let ids: Vec<&str> = list.iter().map(|(_, lease)| lease.id.as_str()).collect();
            let Some((_, first)) = list.first() else {
                continue;
            };
            let (token, until) = (first.token.as_str(), first.until);
            let statement = prepared.statements.len();
            prepared
                .statements
                .extend(sql::dialects::of(self.dialect()).complete_listed(
                    self.table(),
                    token,
                    until,
                    &ids,
                )?);
            for (planned, lease) in list {
                prepared.plan[*planned].applied = Applied::Listed(statement);
                // Counted as known where its lost leases are; else by
                // reading its row first.
                if let Some(lease_counts) = counts_of(lease)
                    && !known.add(lease_counts.changes_key())
                {
                    counted.push(lease_counts);
                }
            }
        }
        let deletions = plan_deletions(
            &delivered,
            counts_of,
            writes.is_some_and(sql::rollups::RollupWrites::counts_changes),
            &mut counted,
        );
        for deletion in &deletions {
            let statement = prepared.statements.len();
            match deletion.ids.as_slice() {
                [id] => {
                    let fence = sql::Fence {
                        id,
                        token: deletion.token,
                        until: deletion.until,
                    };
                    prepared.statements.push(sql::settle::complete_one(
                        self.table(),
                        self.dialect(),
                        &fence,
                    )?);
                    for planned in &deletion.planned {
                        prepared.plan[*planned].applied = Applied::Changed(statement);
                    }
                }
                ids => {
                    prepared.statements.push(sql::settle::complete_all(
                        self.table(),
                        self.dialect(),
                        deletion.token,
                        deletion.until,
                        ids,
                    )?);
                    for planned in &deletion.planned {
                        prepared.plan[*planned].applied = Applied::Returned(statement);
                    }
                }
            }
            if let (Some(writes), Some(key)) = (writes, &deletion.counts)
                && let Some(count) = writes.count_changes(key, now)
            {
                prepared.statements.push(count);
            }
        }
        // Where rollup rows are locked until the commit (Postgres), last.
        let mut last = None;
        match writes.map(|writes| writes.count_known(&known, now)) {
            Some(Counts::Now(counts)) => prepared.statements.extend(counts),
            Some(Counts::Last(counts)) => last = Some(counts),
            None => {}
        }
        // After the deletes: each makes the next row of its key the head.
        for (lease, fate) in fates {
            if *fate == Fate::Complete
                && let Some(key) = &lease.ordering_key
            {
                prepared.statements.push(self.promote_next(key)?);
            }
        }
        // First: it counts the rows the settles after it are about to change.
        let mut leading = Vec::new();
        if let Some(SettleCount {
            count,
            last: stashed,
        }) = match writes {
            Some(writes) => writes.count_settles(&counted, now)?,
            None => None,
        } {
            leading.push(count);
            CountsLast::gather(&mut last, stashed.as_ref());
        }
        prepared.last = last;
        // Before everything, on Postgres: the planner settings of
        // `sql::postgres::planner` (the count's estimate, and a delete's,
        // grow with the table's dead tuples).
        if !prepared.statements.is_empty()
            && let Some(settings) = crate::sql::dialects::of(self.dialect()).planner_settings()
        {
            leading.insert(0, settings);
        }
        for planned in &mut prepared.plan {
            planned.applied.shift(leading.len());
        }
        prepared.statements.splice(0..0, leading);
        Ok(prepared)
    }

    /// Deletes a delivered message.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the lease no longer holds (nothing changed);
    /// any database error.
    pub async fn complete(&self, lease: &LeaseHandle) -> Result<()> {
        self.settle_one(lease, Fate::Complete).await
    }

    /// Reschedules a message after a failed attempt (or parks it as dead if
    /// the attempt was its last).
    ///
    /// # Errors
    /// As [`complete`](Outbox::complete).
    pub async fn reschedule(&self, lease: &LeaseHandle, error: &str) -> Result<()> {
        self.settle_one(lease, Delivery::retry(error).into()).await
    }

    /// Parks a message as dead after a permanent failure.
    ///
    /// # Errors
    /// As [`complete`](Outbox::complete).
    pub async fn bury(&self, lease: &LeaseHandle, error: &str) -> Result<()> {
        self.settle_one(lease, Delivery::permanent(error).into())
            .await
    }

    /// Gives back a claimed message whose sealed payload did not open
    /// ([`Claim::held`](super::Claim::held)): due again after
    /// [`HELD_UNSEALABLE_FOR`](super::HELD_UNSEALABLE_FOR), no attempt
    /// spent, its error kept as its last. A drain does this itself; a
    /// caller of [`claim`](Outbox::claim) must, or the lease expires
    /// unsettled and counts against the message.
    ///
    /// # Errors
    /// [`Error::LeaseLost`]; database errors.
    pub async fn hold(&self, held: &super::HeldMessage) -> Result<()> {
        let due = self.now().checked_add(super::HELD_UNSEALABLE_FOR)?;
        let error = held.error.to_string();
        self.settle_one(&held.lease, Fate::Hold { error, due })
            .await
    }

    /// Gives a lease back without attempting delivery: the message is due
    /// again at once and no attempt is spent.
    ///
    /// # Errors
    /// As [`complete`](Outbox::complete).
    pub async fn release(&self, lease: &LeaseHandle) -> Result<()> {
        let due = self.now();
        self.settle_one(lease, Fate::Release { due }).await
    }

    async fn settle_one(&self, lease: &LeaseHandle, fate: Fate) -> Result<()> {
        let prepared = self.prepare_fates(&[(lease, fate)])?;
        let outcomes = self.inner.db.batch_atomic(&prepared.statements()).await?;
        if prepared.read(&outcomes).lease_lost.is_empty() {
            Ok(())
        } else {
            Err(Error::LeaseLost {
                id: lease.id.clone(),
            })
        }
    }

    /// A failure spends the lease's attempt (`charged`, or the message is
    /// past the policy's deferral limit) or counts a deferral; the last
    /// attempt spent parks the row as dead.
    /// `failure` is its error, the wait the receiver asked for, and
    /// whether it is charged; an uncharged one is held for `held_for`.
    /// The operational event of the death of the row `lease` holds, with
    /// `error` (nothing without an operator owner).
    fn report_death(
        &self,
        lease: &LeaseHandle,
        error: &str,
        now: Timestamp,
    ) -> Result<Vec<Statement>> {
        let payload = serde_json::json!({
            "type": super::operational::MESSAGE_DEAD,
            "message_id": lease.id, "topic": lease.topic, "error": clip(error), "at_ms": now.as_unix_millis(),
        });
        self.report_settle(
            lease,
            super::operational::MESSAGE_DEAD,
            &payload,
            |owner| sql::events::About::NotADeliveryOf(owner),
            now,
        )
    }

    fn reschedule_statement(
        &self,
        lease: &LeaseHandle,
        (error, not_before, charged): (&str, Option<Duration>, bool),
        held_for: Option<&str>,
        now: Timestamp,
    ) -> Result<(Effect, Statement)> {
        let policy = &self.inner.retry;
        let too_old = now.duration_since(lease.created_at) >= policy.defer_limit();
        let charged = charged || too_old;
        let max_attempts = policy.max_attempts();
        if charged && lease.attempt >= max_attempts {
            let error = clip(&format!(
                "attempts exhausted ({} of {max_attempts}); last error: {error}",
                lease.attempt
            ));
            let statement = self.bury_statement(lease, &error, now)?;
            return Ok((Effect::Dead(DeathCause::AttemptsExhausted), statement));
        }
        // Every failure so far grows the wait, free or not.
        let failures = lease.attempt.saturating_add(lease.deferrals);
        let backoff = policy.delay(failures, self.inner.random.as_ref());
        let wait = not_before.map_or(backoff, |asked| asked.min(MAX_RETRY_AFTER).max(backoff));
        let retry = Retry {
            // A policy's wait past the end of time is "never", not an error.
            due: now.checked_add(wait).unwrap_or(Timestamp::MAX),
            error: &clip(error),
            charged,
            attempt: lease.attempt,
            deferrals: lease.deferrals,
            held_for,
        };
        let effect = if charged {
            Effect::Retried
        } else {
            Effect::Deferred
        };
        let statement = sql::settle::retry(self.table(), self.dialect(), &lease.fence(), &retry)?;
        Ok((effect, statement))
    }

    fn bury_statement(
        &self,
        lease: &LeaseHandle,
        error: &str,
        now: Timestamp,
    ) -> Result<Statement> {
        let fence = lease.fence();
        sql::settle::bury(
            self.table(),
            self.dialect(),
            &fence,
            lease.attempt,
            error,
            now,
        )
    }

    fn release_statement(
        &self,
        lease: &LeaseHandle,
        due: Timestamp,
        held_for: Option<&str>,
    ) -> Result<Statement> {
        let fence = lease.fence();
        let attempt = lease.attempt;
        sql::settle::release(self.table(), self.dialect(), &fence, attempt, due, held_for)
    }

    /// The most rows one [`release_held_statement`](Outbox::release_held_statement) makes due.
    pub(crate) const RELEASED_PER_CALL: u32 = 100;

    /// Makes due now the rows held longest for `receiver` (at most
    /// [`RELEASED_PER_CALL`](Outbox::RELEASED_PER_CALL), oldest due first):
    /// its failures held them back, and it answers again. Spends and
    /// refunds no attempt; leased rows are left alone.
    pub(crate) fn release_held_statement(&self, receiver: &str) -> Result<Statement> {
        sql::settle::release_held(
            self.table(),
            self.dialect(),
            receiver,
            self.now(),
            Self::RELEASED_PER_CALL,
        )
    }

    /// Makes the oldest remaining row of `key` ready, if it is waiting.
    pub(crate) fn promote_next(&self, key: &str) -> Result<Statement> {
        sql::settle::promote_next(self.table(), self.dialect(), key)
    }

    /// A drain's housekeeping, sent at most once a minute per drainer with
    /// a claim: keeps the retention of the rollups, of the events, of the
    /// attempt log and of the audit log (at most 500 rows of each),
    /// forgets the tombstones of
    /// subjects erased more than
    /// [`ERASURE_MEMORY`](crate::subject::ERASURE_MEMORY) ago, and on
    /// Postgres makes ready the head of any ordering key left waiting (it
    /// reads every waiting row; see
    /// [`Differences::sweep_promotes_heads`](crate::sql::differences::Differences::sweep_promotes_heads)).
    pub(crate) fn sweep_statements(&self) -> Result<Vec<Statement>> {
        let now = self.now();
        let mut sweep = vec![self.tombstones().forget(now)?];
        if sql::dialects::of(self.dialect()).sweep_promotes_heads() {
            sweep.push(self.promote_all_heads()?);
        }
        if self.counts_rollups() {
            sweep.extend(sql::rollups::retention(self.table(), self.dialect(), now));
        }
        sweep.push(sql::events::prune_events(
            self.table(),
            self.dialect(),
            now.saturating_sub(self.inner.event_retention),
            Self::EVENTS_PRUNED_PER_SWEEP,
        )?);
        sweep.push(sql::attempts::prune(
            self.table(),
            self.dialect(),
            now.saturating_sub(self.inner.attempt_retention),
            Self::ATTEMPTS_PRUNED_PER_SWEEP,
        )?);
        sweep.push(self.prune_audit(now)?);
        sweep.extend(self.alert_statements(now)?);
        Ok(sweep)
    }

    /// Makes the oldest row of every key ready where it is waiting: after
    /// rows were removed other than by completion (purge, erasure).
    pub(crate) fn promote_all_heads(&self) -> Result<Statement> {
        sql::settle::promote_all_heads(self.table(), self.dialect())
    }
}
