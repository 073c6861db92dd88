//! One database call of a drain: the parts that ride together in one atomic
//! batch (settles, a suspect's isolation, the ordering sweep, a claim),
//! sent again while an error is transient, and read back part by part.
//!
//! Each part added returns a slot; the call's reply is read through the
//! slots, never by position. A call that failed may have committed: its
//! settles and isolation are fenced and idempotent, so they are sent again;
//! a claim is not (it would lease other rows), so a read of the rows it may
//! have leased takes its place, and the sweep is left for a later call.

use std::ops::Range;
use std::time::Duration;

use crate::database::{Database, Outcome, Rows, Statement};
use crate::error::{Error, RetryAdvice};
use crate::outbox::{Claim, ClaimStatement, PreparedSettle, SettleReport};
use crate::sql::rollups::CountsLast;
use crate::time::{Clock, Timer, Timestamp};

/// Sends of one call at most: the first, and retries while the error is
/// transient.
const MAX_SENDS: u32 = 5;

/// Statements to send as one atomic batch, built part by part.
#[derive(Default)]
#[must_use = "a call does nothing until it is sent"]
pub(super) struct Call {
    parts: Vec<Part>,
    /// The earliest lease end among the settles: retrying past it is futile.
    settle_until: Option<Timestamp>,
}

enum Part {
    Settle(PreparedSettle),
    /// Fenced or idempotent writes whose outcome nobody reads.
    Write(Vec<Statement>),
    /// A read, safe to send again.
    Read(Statement),
    Isolate(Statement),
    Sweep(Vec<Statement>),
    Claim {
        claim: Box<ClaimStatement>,
        recovery: Option<Statement>,
    },
}

/// Where a settle's report is read.
pub(super) struct SettleSlot(usize);
/// Where an isolation's result is read.
pub(super) struct IsolationSlot(usize);
/// Where a sweep's result is read.
pub(super) struct SweepSlot(usize);
/// Where a claim's rows are read.
pub(super) struct ClaimSlot(usize);
/// Where a read's rows are read.
pub(super) struct ReadSlot(usize);

/// How a call's sends may go on after a transient error.
pub(super) struct Retries<'t> {
    /// Database calls this one may make in all (at least 1).
    pub(super) budget: u32,
    /// Reads the current time, to stop retrying settles past their leases.
    pub(super) clock: &'t dyn Clock,
    /// Waits between sends after an error that asks for a backoff.
    pub(super) timer: &'t dyn Timer,
}

/// Which form of a call a send carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Send {
    /// The first: settles delete a claim's rows by checked lists.
    First,
    /// The first again, after a listed delete's check failed it (so it
    /// changed nothing): settles in their exact form, the claim as it was.
    Exact,
    /// After an error, when the call may have committed: settles in their
    /// exact form (a list's check would fail on rows the first send
    /// deleted), a claim's rows read back rather than claimed again.
    Retry,
}

impl Send {
    /// The form of `settle` this send carries.
    fn form(self, settle: &PreparedSettle) -> &PreparedSettle {
        match self {
            Send::First => settle,
            Send::Exact | Send::Retry => settle.exact(),
        }
    }
}

/// What a sent call did.
pub(super) struct Sent {
    /// Database calls made: 1, plus retries.
    pub(super) sends: u32,
    /// The parts' replies, or the error that ended the call.
    pub(super) reply: Result<Reply, Error>,
}

/// A call's reply, read part by part through the slots.
pub(super) struct Reply {
    parts: Vec<Read>,
}

enum Read {
    Settled(SettleReport),
    Written,
    Rows(Rows),
    Isolated(bool),
    Swept(bool),
    Claimed(Option<Claim>),
    Taken,
}

impl Call {
    /// An empty call.
    pub(super) fn new() -> Self {
        Self::default()
    }

    /// Settles `settle`, whose earliest lease ends at `until`.
    pub(super) fn settle(
        &mut self,
        settle: PreparedSettle,
        until: Option<Timestamp>,
    ) -> SettleSlot {
        self.settle_until = match (self.settle_until, until) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        SettleSlot(self.push(Part::Settle(settle)))
    }

    /// Writes `statements` (each safe to send again) in the same batch.
    pub(super) fn write(&mut self, statements: Vec<Statement>) {
        if !statements.is_empty() {
            self.push(Part::Write(statements));
        }
    }

    /// Reads rows in the same batch.
    pub(super) fn read(&mut self, statement: Statement) -> ReadSlot {
        ReadSlot(self.push(Part::Read(statement)))
    }

    /// Re-leases a suspect for its group; reads whether the re-lease held.
    pub(super) fn isolate(&mut self, isolation: Statement) -> IsolationSlot {
        IsolationSlot(self.push(Part::Isolate(isolation)))
    }

    /// Housekeeping (stranded heads of ordering keys, expired tombstones);
    /// reads whether it was sent.
    pub(super) fn sweep(&mut self, sweep: Vec<Statement>) -> SweepSlot {
        SweepSlot(self.push(Part::Sweep(sweep)))
    }

    /// Claims rows; after a lost reply, `recovery` reads them back.
    pub(super) fn claim(
        &mut self,
        claim: ClaimStatement,
        recovery: Option<Statement>,
    ) -> ClaimSlot {
        ClaimSlot(self.push(Part::Claim {
            claim: Box::new(claim),
            recovery,
        }))
    }

    fn push(&mut self, part: Part) -> usize {
        self.parts.push(part);
        self.parts.len() - 1
    }

    /// Whether the call has nothing to send.
    pub(super) fn is_empty(&self) -> bool {
        self.parts.iter().all(|part| match part {
            Part::Settle(settle) => settle.is_empty(),
            Part::Write(_) | Part::Read(_) => true,
            _ => false,
        })
    }

    /// The statements of a send, and where each part's statements are
    /// among them.
    fn statements(&self, send: Send) -> (Vec<Statement>, Vec<Option<Range<usize>>>) {
        let retry = send == Send::Retry;
        let mut statements = Vec::new();
        if !retry {
            // Before any write of the call (see `ClaimStatement::advance`).
            for part in &self.parts {
                if let Part::Claim { claim, .. } = part {
                    statements.extend(claim.advance().iter().cloned());
                }
            }
        }
        let mut ranges = Vec::with_capacity(self.parts.len());
        for part in &self.parts {
            let start = statements.len();
            let sent = match part {
                Part::Settle(settle) => {
                    statements.extend(send.form(settle).leading().iter().cloned());
                    true
                }
                Part::Write(writes) => {
                    statements.extend(writes.iter().cloned());
                    true
                }
                Part::Isolate(statement) | Part::Read(statement) => {
                    statements.push(statement.clone());
                    true
                }
                Part::Sweep(sweep) if !retry => {
                    statements.extend(sweep.iter().cloned());
                    true
                }
                Part::Claim { claim, .. } if !retry => {
                    statements.extend(claim.leading().cloned());
                    true
                }
                Part::Claim {
                    recovery: Some(recovery),
                    ..
                } => {
                    statements.push(recovery.clone());
                    true
                }
                Part::Sweep(_) | Part::Claim { .. } => false,
            };
            ranges.push(sent.then_some(start..statements.len()));
        }
        // After the claim: the counts whose rows stay locked until the
        // commit (Postgres), added by one statement.
        let mut last = None;
        for part in &self.parts {
            match part {
                Part::Settle(settle) => CountsLast::gather(&mut last, send.form(settle).last()),
                Part::Claim { claim, .. } if !retry => CountsLast::gather(&mut last, claim.last()),
                _ => {}
            }
        }
        statements.extend(last.map(|last| last.statements()).unwrap_or_default());
        (statements, ranges)
    }

    /// Whether sending again after an error can help: something fenced is
    /// left to apply, or a claim's rows to read back.
    fn worth_retrying(&self) -> bool {
        self.parts.iter().any(|part| match part {
            Part::Settle(settle) => !settle.is_empty(),
            Part::Isolate(_) => true,
            Part::Claim { recovery, .. } => recovery.is_some(),
            Part::Sweep(_) | Part::Write(_) | Part::Read(_) => false,
        })
    }

    /// Sends the call, and again (in its retry form) while the error is
    /// transient, the budget allows and the settles' leases have time left.
    pub(super) async fn send(&self, db: &dyn Database, retries: Retries<'_>) -> Sent {
        // With no call to spare, the exact form at once: a listed delete's
        // failed check could not be sent again.
        let mut form = if retries.budget > 1 {
            Send::First
        } else {
            Send::Exact
        };
        let (first, mut ranges) = self.statements(form);
        let mut result = db.batch_atomic(&first).await;
        let mut sends = 1;
        // A listed delete's check failed the batch, which changed nothing:
        // the same call with exact deletes.
        if form == Send::First && result.as_ref().is_err_and(Error::is_settle_not_exact) {
            let (exact, exact_ranges) = self.statements(Send::Exact);
            result = db.batch_atomic(&exact).await;
            ranges = exact_ranges;
            sends += 1;
            form = Send::Exact;
        }
        let mut retried = false;
        while let Err(error) = &result {
            let in_time = self
                .settle_until
                .is_none_or(|end| retries.clock.now() < end);
            let retryable = error.is_retryable() && self.worth_retrying();
            if !retryable || !in_time || sends >= MAX_SENDS || sends >= retries.budget {
                break;
            }
            if error.retry_advice() == RetryAdvice::AfterBackoff {
                retries
                    .timer
                    .sleep(Duration::from_millis(100 << sends))
                    .await;
            }
            let (again, _) = self.statements(Send::Retry);
            result = db.batch_atomic(&again).await;
            sends += 1;
            retried = true;
            form = Send::Retry;
        }
        let reply = result.map(|outcomes| {
            let ranges = if retried {
                self.statements(Send::Retry).1
            } else {
                ranges
            };
            self.read_reply(&outcomes, &ranges, form)
        });
        Sent { sends, reply }
    }

    fn read_reply(
        &self,
        outcomes: &[Outcome],
        ranges: &[Option<Range<usize>>],
        send: Send,
    ) -> Reply {
        let retried = send == Send::Retry;
        let of = |range: &Option<Range<usize>>| -> &[Outcome] {
            range
                .clone()
                .and_then(|range| outcomes.get(range))
                .unwrap_or(&[])
        };
        let parts = self
            .parts
            .iter()
            .zip(ranges)
            .map(|(part, range)| match part {
                Part::Settle(settle) => Read::Settled(send.form(settle).read(of(range))),
                Part::Write(_) => Read::Written,
                Part::Read(_) => Read::Rows(
                    of(range)
                        .first()
                        .map(|outcome| outcome.rows.clone())
                        .unwrap_or_default(),
                ),
                Part::Isolate(_) => Read::Isolated(
                    of(range)
                        .first()
                        .is_some_and(|outcome| outcome.rows_affected > 0),
                ),
                Part::Sweep(_) => Read::Swept(range.is_some() && !of(range).is_empty()),
                Part::Claim { claim, .. } => Read::Claimed(match of(range).first() {
                    // A claim that did not commit leased nothing; one whose
                    // rows cannot be read back returns them, unspent, when
                    // its lease ends: either way, nothing is known.
                    Some(outcome) if retried => {
                        Some(claim.read(&outcome.rows)).filter(|claim| !claim.is_empty())
                    }
                    Some(outcome) => Some(claim.read(&outcome.rows)),
                    None => None,
                }),
            })
            .collect();
        Reply { parts }
    }
}

impl Reply {
    fn take(&mut self, index: usize) -> Read {
        self.parts
            .get_mut(index)
            .map_or(Read::Taken, |read| std::mem::replace(read, Read::Taken))
    }

    /// What the settle did.
    pub(super) fn settled(&mut self, slot: SettleSlot) -> SettleReport {
        match self.take(slot.0) {
            Read::Settled(report) => report,
            _ => SettleReport::default(),
        }
    }

    /// The rows of a read.
    pub(super) fn rows(&mut self, slot: ReadSlot) -> Rows {
        match self.take(slot.0) {
            Read::Rows(rows) => rows,
            _ => Rows::default(),
        }
    }

    /// Whether the suspect is now leased for its group (`false`: taken by
    /// another drainer, or settled meanwhile).
    pub(super) fn isolated(&mut self, slot: IsolationSlot) -> bool {
        matches!(self.take(slot.0), Read::Isolated(true))
    }

    /// Whether the sweep was sent and committed (a retry leaves it out).
    pub(super) fn swept(&mut self, slot: SweepSlot) -> bool {
        matches!(self.take(slot.0), Read::Swept(true))
    }

    /// The claimed rows; `None` if the claim's outcome is unknown (its reply
    /// was lost and nothing could be read back).
    pub(super) fn claimed(&mut self, slot: ClaimSlot) -> Option<Claim> {
        match self.take(slot.0) {
            Read::Claimed(claim) => claim,
            _ => None,
        }
    }
}

#[cfg(all(test, feature = "sqlite", not(target_arch = "wasm32")))]
mod tests;
