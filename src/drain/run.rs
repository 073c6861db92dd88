//! One streaming drain: deliveries stay in flight across claims, outcomes
//! are settled as they finish (riding along with the next claim when one is
//! due), and suspects are delivered alone.

use std::collections::{BTreeMap, VecDeque};

use futures_util::future::{Either, FutureExt, select};
use futures_util::stream::{FuturesUnordered, StreamExt};

use super::breaker::{Breaker, Settle};
use super::deliver::Delivery;
use super::report::{DrainReport, StopReason};
use super::{Attempt, Drainer};
use crate::database::{Dialect, Outcome, Statement};
use crate::error::{Error, Result, RetryAdvice};
use crate::future::BoxFuture;
use crate::outbox::{Claim, ClaimStatement, ClaimedMessage, Fate, LeaseHandle, PreparedSettle};
use crate::time::Timestamp;

/// Retries of a failed settle call, within the time its leases leave.
const SETTLE_RETRIES: u32 = 4;

/// Delivery calls in flight: each one message, or a batch for a
/// [`DeliverBatch`](super::DeliverBatch).
type InFlight<'a> = FuturesUnordered<BoxFuture<'a, Vec<(ClaimedMessage, Attempt)>>>;

/// One database call: outcomes to settle, and optionally a claim or the
/// isolation of a suspect riding along in the same atomic batch.
struct Call {
    settle: PreparedSettle,
    /// The earliest lease end among the settles: retrying past it is futile.
    settle_until: Option<Timestamp>,
    isolate: Option<Statement>,
    /// Promotes stranded heads of ordering keys before the first claim (see
    /// [`Run::sweep`]).
    sweep: Option<Statement>,
    claim: Option<Claiming>,
}

/// A claim, how many rows it asked for, and how to read its rows back if
/// its reply is lost.
type Claiming = (ClaimStatement, u32, Option<Statement>);

impl Call {
    fn statements(&self) -> Vec<Statement> {
        let mut statements = self.settle.statements().to_vec();
        statements.extend(self.isolate.iter().cloned());
        statements.extend(self.sweep.iter().cloned());
        statements.extend(
            self.claim
                .iter()
                .map(|(claim, ..)| claim.statement().clone()),
        );
        statements
    }

    /// What is sent again after an error: the settles and the isolation are
    /// fenced and idempotent; a claim is not (it would lease other rows), so
    /// a read of the rows it may have leased takes its place.
    fn retry_statements(&self) -> Vec<Statement> {
        let mut statements = self.settle.statements().to_vec();
        statements.extend(self.isolate.iter().cloned());
        statements.extend(
            self.claim
                .iter()
                .filter_map(|(_, _, recovery)| recovery.clone()),
        );
        statements
    }

    fn is_retryable(&self) -> bool {
        !self.settle.is_empty()
            || self.isolate.is_some()
            || self
                .claim
                .as_ref()
                .is_some_and(|(_, _, recovery)| recovery.is_some())
    }
}

/// What a call came back with.
struct Executed {
    outcomes: Result<Vec<Outcome>>,
    /// Database calls made (1 plus retries).
    tries: u32,
}

pub(super) struct Run<'a> {
    drainer: &'a Drainer,
    deadline: Timestamp,
    report: DrainReport,
    /// Claimed and not yet started.
    ready: VecDeque<ClaimedMessage>,
    /// Claimed suspects, delivered one at a time with nothing else in flight.
    suspects: VecDeque<ClaimedMessage>,
    /// Outcomes waiting for the next settle call.
    outcomes: Vec<Settle>,
    first_outcome_at: Option<Timestamp>,
    /// Settle at the next chance (a suspect's outcome).
    settle_at_once: bool,
    breaker: Breaker,
    /// Lease ends of the deliveries in flight, with how many share each.
    running: BTreeMap<Timestamp, usize>,
    /// Why no more claims are made, once that is decided.
    claims_over: Option<StopReason>,
    /// A call failed for good: nothing new starts.
    failed: bool,
    /// Postgres only, sent before the run's first claim in the same call,
    /// at most once a minute per drainer (it reads every waiting row):
    /// makes ready the head of any ordering key left waiting. Under read
    /// committed, a completion and an erasure (or purge) of one key's rows
    /// committing at once can each miss the other's delete and promote
    /// nothing; SQLite serializes writers, so it never happens there.
    sweep: Option<Statement>,
}

impl<'a> Run<'a> {
    pub(super) fn new(drainer: &'a Drainer, seed: Vec<ClaimedMessage>, may_claim: bool) -> Self {
        let started = drainer.outbox.now();
        let mut run = Run {
            drainer,
            deadline: started
                .checked_add(drainer.limits.deadline)
                .unwrap_or(Timestamp::MAX),
            report: DrainReport::new(),
            ready: VecDeque::new(),
            suspects: VecDeque::new(),
            outcomes: Vec::new(),
            first_outcome_at: None,
            settle_at_once: false,
            breaker: Breaker::new(drainer.limits.breaker),
            running: BTreeMap::new(),
            claims_over: (!may_claim).then_some(StopReason::Drained),
            failed: false,
            sweep: (may_claim
                && drainer.outbox.dialect() == Dialect::Postgres
                && drainer.sweep_due(started))
            .then(|| drainer.outbox.promote_all_heads().ok())
            .flatten(),
        };
        run.queue(seed);
        run
    }

    pub(super) async fn go(mut self) -> DrainReport {
        let started = self.now();
        let mut in_flight: InFlight<'a> = FuturesUnordered::new();
        let mut tick: Option<(Timestamp, BoxFuture<'static, ()>)> = None;
        loop {
            self.start_and_collect(&mut in_flight);
            if in_flight.is_empty() && !self.suspects.is_empty() {
                self.deliver_suspect().await;
                continue;
            }
            if let Some(call) = self.next_call() {
                let executing = self.execute(&call, false);
                futures_util::pin_mut!(executing);
                let executed = loop {
                    if in_flight.is_empty() {
                        break executing.await;
                    }
                    match select(executing.as_mut(), in_flight.next()).await {
                        Either::Left((executed, _)) => break executed,
                        Either::Right((finished, _)) => {
                            for (message, attempt) in finished.into_iter().flatten() {
                                self.finish(message, attempt);
                            }
                            self.start_deliveries(&mut in_flight);
                        }
                    }
                };
                self.absorb(&call, executed);
                continue;
            }
            if in_flight.is_empty() {
                break;
            }
            let wake = self.wake_at();
            if tick.as_ref().map(|(at, _)| *at) != wake {
                tick = wake.map(|at| (at, self.drainer.timer.sleep(at.duration_since(self.now()))));
            }
            let sleeping = match tick.as_mut() {
                Some((_, sleep)) => Either::Left(sleep),
                None => Either::Right(std::future::pending::<()>()),
            };
            match select(in_flight.next(), sleeping).await {
                Either::Left((finished, _)) => {
                    for (message, attempt) in finished.into_iter().flatten() {
                        self.finish(message, attempt);
                    }
                }
                Either::Right(((), _)) => tick = None,
            }
        }
        self.last_settle().await;
        self.report.stopped = self.claims_over.take().unwrap_or(StopReason::Drained);
        self.report.tripped = self.breaker.tripped();
        self.report.elapsed = self.now().duration_since(started);
        self.report
    }

    fn now(&self) -> Timestamp {
        self.drainer.outbox.now()
    }

    fn queue(&mut self, messages: Vec<ClaimedMessage>) {
        let isolate = self.drainer.deliver.isolates_suspects();
        for message in messages {
            if isolate && message.is_suspect() {
                self.suspects.push_back(message);
            } else {
                self.ready.push_back(message);
            }
        }
    }

    /// Starts deliveries into free slots, and takes in every delivery that
    /// has already finished, until neither makes progress: a call then
    /// carries every outcome that is ready.
    fn start_and_collect(&mut self, in_flight: &mut InFlight<'a>) {
        // A delivery that yields once (to its runtime, or a cooperative
        // scheduler) is not done at the first poll: look a few times.
        const LOOKS: u32 = 3;
        let mut misses = 0;
        while misses < LOOKS {
            self.start_deliveries(in_flight);
            match in_flight.next().now_or_never() {
                Some(Some(finished)) => {
                    for (message, attempt) in finished {
                        self.finish(message, attempt);
                    }
                    misses = 0;
                }
                Some(None) => break,
                None => misses += 1,
            }
        }
    }

    /// Starts delivery calls into free slots: one message each, or for a
    /// batch deliverer as many ready messages as one call may carry.
    fn start_deliveries(&mut self, in_flight: &mut InFlight<'a>) {
        let per_call = self.drainer.deliver.limits();
        while in_flight.len() < self.drainer.limits.concurrency && !self.ready.is_empty() {
            let mut call = Vec::new();
            let mut bytes = 0usize;
            while call.len() < per_call.max_messages {
                let Some(message) = self.ready.pop_front() else {
                    break;
                };
                let size = self.drainer.deliver.size_of(&message);
                if !call.is_empty() && bytes.saturating_add(size) > per_call.max_bytes {
                    self.ready.push_front(message);
                    break;
                }
                let now = self.now();
                if self.breaker.is_open(&message.topic) {
                    self.hand_back(message, now);
                } else if self.failed || !self.fits(message.lease().until(), now) {
                    self.push(message.lease().clone(), Fate::Release { due: now }, now);
                } else {
                    bytes = bytes.saturating_add(size);
                    *self.running.entry(message.lease().until()).or_default() += 1;
                    call.push(message);
                }
            }
            if call.is_empty() {
                continue;
            }
            let drainer = self.drainer;
            in_flight.push(Box::pin(async move {
                let attempts = drainer.attempt(&call).await;
                call.into_iter().zip(attempts).collect()
            }));
        }
    }

    /// Whether a delivery started `now` can time out and be settled before
    /// both the deadline and `lease_end`.
    ///
    /// Once only the last settle is left in the budget, everything waiting
    /// for it must still land before its lease ends, so nothing starts that
    /// would finish later than that.
    fn fits(&self, lease_end: Timestamp, now: Timestamp) -> bool {
        let limits = &self.drainer.limits;
        let mut settle_by = self.deadline.min(lease_end);
        if !self.can_afford_call() {
            let waiting = self.outcomes.iter().map(|(lease, _)| lease.until());
            let held = self.breaker.earliest_lease_end();
            let running = self.running.keys().next().copied();
            if let Some(end) = waiting.chain(held).chain(running).min() {
                settle_by = settle_by.min(end);
            }
        }
        now.checked_add(limits.delivery_timeout + limits.settle_margin)
            .is_ok_and(|finish| finish <= settle_by)
    }

    fn hand_back(&mut self, message: ClaimedMessage, now: Timestamp) {
        let cooldown = self
            .drainer
            .limits
            .breaker
            .map(|breaker| breaker.cooldown)
            .unwrap_or_default();
        let due = now.checked_add(cooldown).unwrap_or(Timestamp::MAX);
        self.report.handed_back += 1;
        self.push(message.lease().clone(), Fate::Release { due }, now);
    }

    fn push(&mut self, lease: LeaseHandle, fate: Fate, now: Timestamp) {
        self.outcomes.push((lease, fate));
        self.first_outcome_at.get_or_insert(now);
    }

    /// Records a finished delivery: settled at the next call, or held by the
    /// breaker while its topic's streak is undecided.
    fn finish(&mut self, message: ClaimedMessage, attempt: Attempt) {
        let now = self.now();
        let until = message.lease().until();
        if let Some(count) = self.running.get_mut(&until) {
            *count -= 1;
            if *count == 0 {
                self.running.remove(&until);
            }
        }
        let (delivery, timed_out) = match attempt {
            Attempt::Answered(delivery) => (delivery, false),
            Attempt::TimedOut => {
                self.report.timed_out += 1;
                let error = format!(
                    "delivery timed out after {} ms",
                    self.drainer.limits.delivery_timeout.as_millis()
                );
                // A slow batch endpoint is not any one message's fault.
                if self.drainer.deliver.is_batch() {
                    (Delivery::unavailable(error, None), true)
                } else {
                    (Delivery::retry(error), true)
                }
            }
        };
        let settle = (message.lease().clone(), Fate::from(delivery.clone()));
        let settles = if timed_out || delivery.is_retryable() {
            self.breaker.failed(&message.topic, settle)
        } else {
            let mut settles = self.breaker.answered(&message.topic);
            settles.push(settle);
            settles
        };
        for (lease, fate) in settles {
            self.push(lease, fate, now);
        }
    }

    /// The next database call, if one is due now: a claim when nothing is
    /// left to start (with the outcomes so far riding along), or a settle
    /// when outcomes have waited long enough.
    fn next_call(&mut self) -> Option<Call> {
        let now = self.now();
        let limits = &self.drainer.limits;
        let soon = now
            .checked_add(limits.settle_margin + limits.flush_interval)
            .unwrap_or(Timestamp::MAX);
        let expiring = self.breaker.take_expiring(soon);
        for (lease, fate) in expiring {
            self.push(lease, fate, now);
        }
        let claim = self.claim_if_wanted(now);
        let settle_due = !self.outcomes.is_empty()
            && self.can_afford_call()
            && (self.settle_at_once
                || self.outcomes.len() >= limits.batch_size as usize
                || self.flush_at().is_some_and(|at| at <= now));
        if claim.is_none() && !settle_due {
            return None;
        }
        let (settle, settle_until) = self.take_outcomes()?;
        let sweep = claim.as_ref().and_then(|_| self.sweep.take());
        Some(Call {
            settle,
            settle_until,
            isolate: None,
            sweep,
            claim,
        })
    }

    /// A claim, when the queue is empty and no limit stops it; records why
    /// claims end.
    fn claim_if_wanted(&mut self, now: Timestamp) -> Option<Claiming> {
        if self.claims_over.is_some() || !self.ready.is_empty() || !self.suspects.is_empty() {
            return None;
        }
        let limits = &self.drainer.limits;
        let stop = if self.report.claimed >= limits.max_messages {
            Some(StopReason::MessageCap)
        } else if !self.can_afford_call() {
            Some(StopReason::QueryBudget)
        } else if !self.fits(Timestamp::MAX, now) {
            Some(StopReason::Deadline)
        } else {
            None
        };
        if let Some(stop) = stop {
            self.claims_over = Some(stop);
            return None;
        }
        let wanted = limits
            .batch_size
            .min(limits.max_messages - self.report.claimed);
        match self.drainer.outbox.claim_statement(wanted, limits.lease) {
            Ok(claim) => {
                let recovery = claim.recovery().ok();
                Some((claim, wanted, recovery))
            }
            Err(error) => {
                self.claims_over = Some(StopReason::DatabaseError(error));
                None
            }
        }
    }

    /// Whether a call other than the last settle fits the query budget.
    fn can_afford_call(&self) -> bool {
        self.report.queries + 2 <= self.drainer.limits.max_queries
    }

    /// When waiting outcomes must be settled: after the flush interval, and
    /// well before any of their leases (or a held failure's) ends.
    fn flush_at(&self) -> Option<Timestamp> {
        let limits = &self.drainer.limits;
        let interval = self
            .first_outcome_at
            .filter(|_| !self.outcomes.is_empty())
            .map(|first| {
                first
                    .checked_add(limits.flush_interval)
                    .unwrap_or(Timestamp::MAX)
            });
        let lease_end = self
            .outcomes
            .iter()
            .map(|(lease, _)| lease.until())
            .min()
            .map(|end| end.saturating_sub(limits.settle_margin));
        [interval, lease_end].into_iter().flatten().min()
    }

    /// When the loop must wake without a finished delivery: to settle, or to
    /// release held failures before their leases end.
    fn wake_at(&self) -> Option<Timestamp> {
        if !self.can_afford_call() {
            return None;
        }
        let limits = &self.drainer.limits;
        let held = self
            .breaker
            .earliest_lease_end()
            .map(|end| end.saturating_sub(limits.settle_margin + limits.flush_interval));
        [self.flush_at(), held].into_iter().flatten().min()
    }

    /// The waiting outcomes as settle statements; on a statement that cannot
    /// be built, the run fails (the leases come back when they end).
    fn take_outcomes(&mut self) -> Option<(PreparedSettle, Option<Timestamp>)> {
        let outcomes = std::mem::take(&mut self.outcomes);
        let until = outcomes.iter().map(|(lease, _)| lease.until()).min();
        self.first_outcome_at = None;
        self.settle_at_once = false;
        let fates: Vec<(&LeaseHandle, Fate)> = outcomes
            .iter()
            .map(|(lease, fate)| (lease, fate.clone()))
            .collect();
        match self.drainer.outbox.prepare_fates(&fates) {
            Ok(prepared) => Some((prepared, until)),
            Err(error) => {
                self.fail(error);
                None
            }
        }
    }

    fn fail(&mut self, error: Error) {
        self.failed = true;
        if !matches!(self.claims_over, Some(StopReason::DatabaseError(_))) {
            self.claims_over = Some(StopReason::DatabaseError(error));
        }
    }

    /// Runs a call. A failed call may have committed; its settles and
    /// isolation are fenced and idempotent, so they are sent again (without
    /// the claim) while the error is transient, the budget allows, and the
    /// leases have time left.
    /// Retries never take the query kept for the last settle unless this is
    /// it (`last`).
    fn execute<'c>(&self, call: &'c Call, last: bool) -> BoxFuture<'c, Executed>
    where
        'a: 'c,
    {
        let drainer = self.drainer;
        let budget = drainer
            .limits
            .max_queries
            .saturating_sub(self.report.queries)
            .saturating_sub(u32::from(!last))
            .max(1);
        let lease_end = call.settle_until;
        Box::pin(async move {
            let db = drainer.outbox.database();
            let mut outcomes = db.batch_atomic(&call.statements()).await;
            let mut tries = 1;
            while let Err(error) = &outcomes {
                let retryable = error.is_retryable() && call.is_retryable();
                let in_time = lease_end.is_none_or(|end| drainer.outbox.now() < end);
                if !retryable || !in_time || tries > SETTLE_RETRIES || tries >= budget {
                    break;
                }
                if error.retry_advice() == RetryAdvice::AfterBackoff {
                    let wait = std::time::Duration::from_millis(100 << tries);
                    drainer.timer.sleep(wait).await;
                }
                outcomes = db.batch_atomic(&call.retry_statements()).await;
                tries += 1;
            }
            Executed { outcomes, tries }
        })
    }

    /// Takes in a call's results: settle counts, the claimed messages, and
    /// whether an isolation held (`None`: unknown, or there was none).
    fn absorb(&mut self, call: &Call, executed: Executed) -> Option<bool> {
        self.report.queries += executed.tries;
        self.report.settle_retries += executed.tries - 1;
        let outcomes = match executed.outcomes {
            Ok(outcomes) => outcomes,
            Err(error) => {
                self.fail(error);
                return None;
            }
        };
        let settled = call.settle.statements().len();
        self.report
            .tally(call.settle.read(&outcomes[..settled.min(outcomes.len())]));
        let mut next = settled;
        let mut isolated = None;
        if call.isolate.is_some() {
            isolated = Some(
                outcomes
                    .get(next)
                    .is_some_and(|outcome| outcome.rows_affected > 0),
            );
            next += 1;
        }
        if call.sweep.is_some() {
            if executed.tries == 1 {
                next += 1;
            } else {
                // A retry leaves it out (with the claim): the next claim
                // call carries it.
                self.sweep.clone_from(&call.sweep);
            }
        }
        // After a retry, the claim's rows are read back by its recovery (a
        // claim that did not commit leased nothing; one whose rows cannot be
        // read back returns them, unspent, when its lease ends).
        if let Some((claim, wanted, _)) = &call.claim {
            let rows = outcomes.get(next).map(|outcome| &outcome.rows);
            let claimed = rows.map(|rows| claim.read(rows)).unwrap_or_default();
            if executed.tries == 1 || !claimed.is_empty() {
                self.accept(claimed, *wanted);
            }
        }
        isolated
    }

    fn accept(&mut self, claim: Claim, wanted: u32) {
        let now = self.now();
        let touched = u32::try_from(claim.len()).unwrap_or(u32::MAX);
        self.report.batches += 1;
        self.report.claimed += touched;
        self.report.dead += u32::try_from(claim.exhausted.len()).unwrap_or(u32::MAX);
        self.report.malformed += u32::try_from(claim.malformed.len()).unwrap_or(u32::MAX);
        for malformed in claim.malformed {
            if let Some(lease) = malformed.lease {
                let error = malformed.error.to_string();
                self.push(lease, Fate::Bury { error }, now);
            }
        }
        let all_tripped = !claim.messages.is_empty()
            && claim
                .messages
                .iter()
                .all(|message| self.breaker.is_open(&message.topic));
        self.queue(claim.messages);
        if touched < wanted {
            self.claims_over = Some(StopReason::Drained);
        } else if all_tripped {
            // Claiming on would only hand back more of the failing topics.
            self.claims_over = Some(StopReason::CircuitOpen);
        }
    }

    /// Delivers the next suspect alone: one call settles what is waiting and
    /// re-leases the suspect on its own (spending its attempt up front), then
    /// the delivery runs with nothing else in flight, and its outcome is
    /// settled at the next call.
    async fn deliver_suspect(&mut self) {
        let Some(mut message) = self.suspects.pop_front() else {
            return;
        };
        let now = self.now();
        if self.breaker.is_open(&message.topic) {
            self.hand_back(message, now);
            return;
        }
        if self.failed || !self.can_afford_call() || !self.fits(Timestamp::MAX, now) {
            self.push(message.lease().clone(), Fate::Release { due: now }, now);
            return;
        }
        let limits = &self.drainer.limits;
        let (isolate, alone) = match self
            .drainer
            .outbox
            .isolate_statement(message.lease(), limits.lease)
        {
            Ok(isolation) => isolation,
            Err(error) => {
                self.fail(error);
                self.push(message.lease().clone(), Fate::Release { due: now }, now);
                return;
            }
        };
        // Failures held by the breaker ride along, undecided: a suspect may
        // kill this drainer, and they must not die with it.
        for (lease, fate) in self.breaker.take_all() {
            self.push(lease, fate, now);
        }
        let Some((settle, settle_until)) = self.take_outcomes() else {
            return;
        };
        let call = Call {
            settle,
            settle_until,
            isolate: Some(isolate),
            sweep: None,
            claim: None,
        };
        let executed = self.execute(&call, false).await;
        match self.absorb(&call, executed) {
            Some(true) => {}
            // Taken by another drainer, or settled meanwhile.
            Some(false) => {
                self.report.lease_lost += 1;
                return;
            }
            // The call failed for good: give the lease back, whichever holds
            // (only one of them applies), in the last settle.
            None => {
                let now = self.now();
                self.push(message.lease().clone(), Fate::Release { due: now }, now);
                self.push(alone, Fate::Release { due: now }, now);
                return;
            }
        }
        message.lease = alone;
        self.report.suspects += 1;
        let attempt = self
            .drainer
            .attempt(std::slice::from_ref(&message))
            .await
            .pop()
            .unwrap_or(Attempt::TimedOut);
        // Settled at once, outside the breaker's held streaks, though a
        // failure counts toward one. It answered, so it did not crash: a
        // retryable failure, with nothing to compare it with, gives the
        // attempt spent up front back.
        let now = self.now();
        let failure = match attempt {
            Attempt::Answered(delivery) if !delivery.is_retryable() => {
                let settles = self.breaker.answered(&message.topic);
                for (lease, fate) in settles {
                    self.push(lease, fate, now);
                }
                self.push(message.lease().clone(), Fate::from(delivery), now);
                self.settle_at_once = true;
                return;
            }
            Attempt::Answered(delivery) => delivery,
            Attempt::TimedOut => {
                self.report.timed_out += 1;
                Delivery::retry(format!(
                    "delivery timed out after {} ms",
                    self.drainer.limits.delivery_timeout.as_millis()
                ))
            }
        };
        let fate = self.breaker.undecided(&message.topic, failure.into());
        self.push(message.lease().clone(), fate, now);
        for (lease, fate) in self.breaker.failed_alone(&message.topic) {
            self.push(lease, fate, now);
        }
        self.settle_at_once = true;
    }

    /// Settles whatever is left, held failures included, if the budget
    /// still has the call kept for it.
    async fn last_settle(&mut self) {
        let now = self.now();
        for (lease, fate) in self.breaker.take_all() {
            self.push(lease, fate, now);
        }
        for message in std::mem::take(&mut self.ready)
            .into_iter()
            .chain(std::mem::take(&mut self.suspects))
        {
            self.push(message.lease().clone(), Fate::Release { due: now }, now);
        }
        if self.outcomes.is_empty() || self.report.queries >= self.drainer.limits.max_queries {
            return;
        }
        let Some((settle, settle_until)) = self.take_outcomes() else {
            return;
        };
        let call = Call {
            settle,
            settle_until,
            isolate: None,
            sweep: None,
            claim: None,
        };
        let executed = self.execute(&call, true).await;
        self.absorb(&call, executed);
    }
}
