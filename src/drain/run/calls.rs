//! The calls the loop makes, and what it takes in from their replies: a
//! claim (with the settles, the sweep and the reads that ride along), a
//! settle of its own, a suspect group's re-lease, and the last settle.

use super::Run;
use crate::database::Statement;
use crate::drain::call::{
    Call, ClaimSlot, IsolationSlot, ReadSlot, Reply, Retries, Sent, SettleSlot, SweepSlot,
};
use crate::drain::dispatch::Admission;
use crate::drain::intake::{ClaimRoom, suspect_group};
use crate::drain::report::StopReason;
use crate::future::BoxFuture;
use crate::outbox::{Claim, ClaimedMessage, Fate, LeaseHandle};
use crate::telemetry::{BACKLOG_CAP, Backlog};
use crate::time::Timestamp;

/// A call the run sends, and where to read what it did.
pub(super) struct Planned {
    pub(super) call: Call,
    settled: Option<SettleSlot>,
    swept: Option<(SweepSlot, Vec<Statement>)>,
    /// The claim, and how many rows it asked for.
    claimed: Option<(ClaimSlot, u32)>,
    /// The topic streaks the outbox remembers, read with the first claim.
    streaks: Option<ReadSlot>,
    /// The backlog sample, read with the sweep when telemetry is on.
    backlog: Option<ReadSlot>,
}

impl<'a> Run<'a> {
    /// The next database call, if one is due now: a claim when nothing is
    /// left to start (with the outcomes so far riding along), or a settle
    /// when outcomes have waited long enough.
    pub(super) fn next_call(&mut self) -> Option<Planned> {
        self.note_recoveries();
        let now = self.now();
        let limits = &self.drainer.limits;
        let soon = now
            .checked_add(limits.settle_margin + limits.flush_interval)
            .unwrap_or(Timestamp::MAX);
        let expiring = self.dispatch.breaker().take_expiring(soon);
        self.outcomes.add_all(expiring, now);
        let wanted = self.claim_size(now);
        let settle_due = self.can_afford_call() && self.outcomes.due(now, limits);
        if wanted.is_none() && !settle_due {
            return None;
        }
        let mut call = Call::new();
        let settled = self.settle_waiting(&mut call)?;
        let mut planned = Planned {
            call,
            settled,
            swept: None,
            claimed: None,
            streaks: None,
            backlog: None,
        };
        // Before the claim: a receiver's held messages it releases are
        // claimed by it.
        self.write_streaks(&mut planned.call);
        if let Some(wanted) = wanted {
            self.plan_claim(&mut planned, wanted);
        }
        if planned.call.is_empty() {
            return None;
        }
        Some(planned)
    }

    /// Adds a claim of `wanted` rows to `planned`, with what rides along
    /// with a claim: the first claim's read of the remembered streaks, and
    /// the sweep (and backlog sample) when one is due.
    fn plan_claim(&mut self, planned: &mut Planned, wanted: u32) {
        let outbox = &self.drainer.outbox;
        let claim = outbox.claim_statement(wanted, self.drainer.limits.lease);
        let streaks = (!self.intake.streaks_read)
            .then(|| outbox.streaks_statement())
            .transpose();
        match claim.and_then(|claim| Ok((claim, streaks?))) {
            Ok((claim, streaks)) => {
                if let Some(sweep) = self.intake.take_sweep() {
                    planned.swept = Some((planned.call.sweep(sweep.clone()), sweep));
                    planned.backlog = self.backlog_read(&mut planned.call);
                }
                let recovery = claim.recovery().ok();
                planned.claimed = Some((planned.call.claim(claim, recovery), wanted));
                planned.streaks = streaks.map(|read| planned.call.read(read));
            }
            Err(error) => self.intake.stop(StopReason::DatabaseError(error)),
        }
    }

    /// How many rows to claim now, if a claim is due.
    fn claim_size(&mut self, now: Timestamp) -> Option<u32> {
        let room = ClaimRoom {
            claimed: self.ledger.report.claimed,
            can_afford_call: self.can_afford_call(),
            has_time: self
                .drainer
                .room_before(self.finish_by(Timestamp::MAX), now),
            ready_all_wait: self.dispatch.limits_destinations()
                && self.intake.ready().all(|message| {
                    self.dispatch
                        .destination_wait(self.ledger.destination(message), now)
                        .is_some()
                }),
        };
        self.intake.claim_size(room, &self.drainer.limits)
    }

    /// Reads the backlog in `call`, before its claim, if a sink is told.
    fn backlog_read(&mut self, call: &mut Call) -> Option<ReadSlot> {
        if self.drainer.telemetry.is_empty() || self.intake.backlog_sampled {
            return None;
        }
        self.intake.backlog_sampled = true;
        match self.drainer.outbox.backlog_statement(BACKLOG_CAP) {
            Ok(statement) => Some(call.read(statement)),
            Err(error) => {
                log::warn!(
                    "outbox drain of {}: backlog not sampled: {error}",
                    self.drainer.outbox.table()
                );
                None
            }
        }
    }

    /// Receivers whose remembered streak an answer just ended are back:
    /// the messages their failures held are released from the next call
    /// on, and claims go on to take them.
    fn note_recoveries(&mut self) {
        let back: Vec<String> = self
            .dispatch
            .breaker()
            .ended_streaks()
            .map(str::to_owned)
            .collect();
        for receiver in back {
            self.dispatch.recovered(&receiver);
            self.intake.reopen_claims();
        }
    }

    /// Adds the changes to the remembered topic streaks to `call`, and the
    /// release of the messages held for each receiver that answers again
    /// (with every call while it keeps answering, each bounded).
    fn write_streaks(&mut self, call: &mut Call) {
        self.note_recoveries();
        let writes = self.dispatch.breaker().take_writes();
        let outbox = &self.drainer.outbox;
        let statements = outbox
            .streak_statements(&writes)
            .and_then(|mut statements| {
                for receiver in self.dispatch.recovering() {
                    statements.push(outbox.release_held_statement(receiver)?);
                }
                Ok(statements)
            });
        match statements {
            Ok(statements) => call.write(statements),
            Err(error) => self.fail(error),
        }
    }

    /// Adds the waiting outcomes to `call` as settles (`Some(None)` when
    /// none wait). On a statement that cannot be built the run fails (the
    /// leases come back when they end) and there is no call: `None`.
    fn settle_waiting(&mut self, call: &mut Call) -> Option<Option<SettleSlot>> {
        let outcomes = self.outcomes.take();
        if outcomes.is_empty() {
            return Some(None);
        }
        let logged = self.outcomes.take_logged();
        if !logged.is_empty() {
            match self.drainer.outbox.attempt_log_statements(logged) {
                Ok(statements) => call.write(statements),
                Err(error) => log::warn!("attempts not logged: {error}"),
            }
        }
        let until = outcomes.iter().map(|(lease, _)| lease.until()).min();
        let fates: Vec<(&LeaseHandle, Fate)> = outcomes
            .iter()
            .map(|(lease, fate)| (lease, fate.clone()))
            .collect();
        let ledger = &self.ledger;
        let prepared = self.drainer.outbox.prepare_observed(
            &fates,
            |lease| ledger.observed(lease),
            |lease| ledger.receiver_of(&lease.id).map(str::to_owned),
        );
        self.ledger
            .record_settling(outcomes.iter().map(|(lease, _)| lease));
        match prepared {
            Ok(prepared) => Some(Some(call.settle(prepared, until))),
            Err(error) => {
                self.fail(error);
                None
            }
        }
    }

    /// Sends a call. Its retries never take the query kept for the last
    /// settle unless this is it (`last`).
    pub(super) fn send<'c>(&self, call: &'c Call, last: bool) -> BoxFuture<'c, Sent>
    where
        'a: 'c,
    {
        let drainer = self.drainer;
        let budget = drainer
            .limits
            .max_queries
            .saturating_sub(self.ledger.report.queries)
            .saturating_sub(u32::from(!last))
            .max(1);
        Box::pin(async move {
            let retries = Retries {
                budget,
                clock: drainer.outbox.clock(),
                timer: drainer.timer.as_ref(),
            };
            call.send(drainer.outbox.database().as_ref(), retries).await
        })
    }

    /// Counts a sent call; its reply, unless it failed for good.
    fn count(&mut self, sent: Sent) -> Option<Reply> {
        self.ledger.report.queries += sent.sends;
        self.ledger.report.settle_retries += sent.sends - 1;
        match sent.reply {
            Ok(reply) => Some(reply),
            Err(error) => {
                self.fail(error);
                None
            }
        }
    }

    /// Takes in a planned call's reply: what its settle did, the sweep (kept
    /// for the next claim if a retry left it out), the backlog sample, the
    /// remembered streaks, and the claimed messages.
    pub(super) fn take_in_reply(&mut self, planned: Planned, sent: Sent) {
        let Some(mut reply) = self.count(sent) else {
            return;
        };
        if let Some(slot) = planned.settled {
            self.ledger.record_settled(reply.settled(slot), self.now());
        }
        if let Some((slot, sweep)) = planned.swept
            && !reply.swept(slot)
        {
            self.intake.sweep_again(sweep);
        }
        let outbox = &self.drainer.outbox;
        if let Some(slot) = planned.backlog {
            let table = outbox.table().as_str();
            match outbox.read_backlog(&reply.rows(slot)) {
                Ok((due, oldest_due_age)) => self.drainer.telemetry.backlog(&Backlog {
                    outbox: table,
                    due,
                    oldest_due_age,
                }),
                Err(error) => log::warn!("outbox drain of {table}: backlog unread: {error}"),
            }
        }
        if let Some(slot) = planned.streaks {
            self.intake.streaks_read = true;
            match outbox.read_streaks(&reply.rows(slot)) {
                Ok(streaks) => self.dispatch.breaker().remember(streaks),
                // Delivery goes on without the memory: no failure is judged
                // the message's own in this run, and nothing is written.
                Err(error) => log::warn!(
                    "outbox drain of {}: topic streaks unread: {error}",
                    outbox.table()
                ),
            }
        }
        if let Some((slot, wanted)) = planned.claimed
            && let Some(claim) = reply.claimed(slot)
        {
            self.take_in_claim(claim, wanted);
        }
    }

    /// Takes in a claim: undecodable rows are buried, the messages taken up.
    fn take_in_claim(&mut self, claim: Claim, wanted: u32) {
        let now = self.now();
        self.ledger.record_claim(&claim);
        let touched = u32::try_from(claim.len()).unwrap_or(u32::MAX);
        for malformed in claim.malformed {
            if let Some(lease) = malformed.lease {
                let error = malformed.error.to_string();
                self.ledger.record_malformed(&lease);
                self.outcomes.add(lease, Fate::Bury { error }, now);
            }
        }
        for held in claim.held {
            let error = held.error.to_string();
            log::warn!(
                "outbox drain of {}: message {} held: {error}",
                self.drainer.outbox.table(),
                held.lease.id
            );
            let due = now
                .checked_add(crate::outbox::HELD_UNSEALABLE_FOR)
                .unwrap_or(now);
            self.outcomes
                .add(held.lease, Fate::Hold { error, due }, now);
        }
        let messages = claim.messages;
        self.record_taken(&messages);
        let all_refused = !messages.is_empty()
            && messages.iter().all(|message| {
                matches!(
                    self.dispatch.admit(self.candidate(message, true), now),
                    Admission::HandBack(_) | Admission::Release("paused")
                )
            });
        let isolate = self.drainer.deliver.isolates_suspects();
        self.intake.queue(messages, isolate);
        self.intake.claimed(touched, wanted, all_refused);
    }

    /// Re-leases the next suspect group in a call of its own, which first
    /// settles whatever is waiting (held failures included: the group may
    /// crash the run, and they must not die with it). Each member passes
    /// the admission gate first. The members whose re-lease held are then
    /// delivered with nothing else in flight.
    pub(super) async fn lease_suspect_group(&mut self) {
        let leasing = self.admit_suspect_group();
        if leasing.is_empty() {
            return;
        }
        let now = self.now();
        let statements = self.group_lease_statements(&leasing);
        let held = self.dispatch.breaker().take_all();
        self.outcomes.add_all(held, now);
        let mut call = Call::new();
        let settled = match statements {
            Ok(statements) => self
                .settle_waiting(&mut call)
                .map(|settled| (settled, statements)),
            Err(error) => {
                self.fail(error);
                None
            }
        };
        let Some((settled, statements)) = settled else {
            // Nothing can be sent: each member goes back in the last settle.
            for message in leasing {
                self.give_back(message, Admission::Release("no_time"), now, 0);
            }
            return;
        };
        let (slots, leases): (Vec<IsolationSlot>, Vec<LeaseHandle>) = statements
            .into_iter()
            .map(|(statement, lease)| (call.isolate(statement), lease))
            .unzip();
        self.write_streaks(&mut call);
        let sent = self.send(&call, false).await;
        self.take_in_group_lease(leasing, leases, slots, settled, sent);
    }

    /// The re-lease of each member of a group. Only a suspect whose group
    /// is down to one spends its attempt up front (see
    /// `intake::suspect_group`): a crash of a larger group is not yet any
    /// one member's fault.
    fn group_lease_statements(
        &self,
        leasing: &[ClaimedMessage],
    ) -> crate::error::Result<Vec<(Statement, LeaseHandle)>> {
        let spend = leasing
            .iter()
            .all(|message| suspect_group(message.unsettled_leases()) == 1);
        let lease = self.drainer.limits.lease;
        leasing
            .iter()
            .map(|message| {
                self.drainer
                    .outbox
                    .isolate_statement(message.lease(), lease, spend)
            })
            .collect()
    }

    /// Takes in the reply to a group's re-lease: the members whose new
    /// lease holds are delivered as the group.
    fn take_in_group_lease(
        &mut self,
        leasing: Vec<ClaimedMessage>,
        leases: Vec<LeaseHandle>,
        slots: Vec<IsolationSlot>,
        settled: Option<SettleSlot>,
        sent: Sent,
    ) {
        let now = self.now();
        let Some(mut reply) = self.count(sent) else {
            // The call failed for good: give each lease back, whichever
            // holds (only one of them applies), in the last settle.
            for (message, lease) in leasing.iter().zip(leases) {
                self.ledger.record_error_type(&message.id, "no_time");
                let release = Fate::Release { due: now };
                self.outcomes
                    .add(message.lease().clone(), release.clone(), now);
                self.outcomes.add(lease, release, now);
            }
            return;
        };
        if let Some(slot) = settled {
            self.ledger.record_settled(reply.settled(slot), now);
        }
        let mut members = Vec::with_capacity(leasing.len());
        for ((mut message, lease), slot) in leasing.into_iter().zip(leases).zip(slots) {
            if reply.isolated(slot) {
                message.lease = lease;
                members.push(message);
            } else {
                // Taken by another drainer, or settled meanwhile.
                self.ledger.report.lease_lost += 1;
            }
        }
        self.intake.begin_group(members);
    }

    /// The next suspect group's members the admission gate lets through
    /// (a member whose destination is busy waits in the group); the others
    /// are given back as it says.
    /// The other suspects go back due now, in the group's call: should the
    /// group crash the run, only its members come back more suspect; claims
    /// go on to take the others again.
    fn admit_suspect_group(&mut self) -> Vec<ClaimedMessage> {
        let group = self.intake.take_suspect_group();
        let now = self.now();
        let has_room = self.can_afford_call()
            && self
                .drainer
                .room_before(self.finish_by(Timestamp::MAX), now);
        let mut leasing = Vec::with_capacity(group.len());
        for message in group {
            match self.dispatch.admit(self.candidate(&message, has_room), now) {
                Admission::Admit | Admission::Wait => leasing.push(message),
                refused => self.give_back(message, refused, now, 0),
            }
        }
        if !leasing.is_empty() {
            for message in self.intake.take_other_suspects() {
                self.give_back(message, Admission::Release("suspect_waits"), now, 0);
                self.intake.reopen_claims();
            }
        }
        leasing
    }

    /// Settles whatever is left, held failures included, if the budget
    /// still has the call kept for it.
    pub(super) async fn last_settle(&mut self) {
        let now = self.now();
        let held = self.dispatch.breaker().take_all();
        self.outcomes.add_all(held, now);
        for message in self.intake.take_all() {
            self.ledger.record_error_type(&message.id, "run_ended");
            self.outcomes
                .add(message.lease().clone(), Fate::Release { due: now }, now);
        }
        if self.outcomes.is_empty() || self.ledger.report.queries >= self.drainer.limits.max_queries
        {
            return;
        }
        let mut call = Call::new();
        let Some(Some(settled)) = self.settle_waiting(&mut call) else {
            return;
        };
        self.write_streaks(&mut call);
        let sent = self.send(&call, true).await;
        if let Some(mut reply) = self.count(sent) {
            self.ledger
                .record_settled(reply.settled(settled), self.now());
        }
    }
}
