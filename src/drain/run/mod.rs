//! The loop of one streaming drain. It owns four rooms and asks them narrow
//! questions: the intake (what is claimed and not started, how much to
//! claim), dispatch (the admission gate, what is in flight, what a verdict
//! causes), the settle buffer (when outcomes must go) and the ledger (what
//! is counted and told). Deliveries stay in flight across claims; outcomes
//! ride along with the next claim or are flushed; suspects go in groups
//! with nothing else in flight. What a database call holds and how it is
//! retried is in `call`.

use std::collections::BTreeMap;

use futures_util::future::{Either, FutureExt, select};
use futures_util::stream::{FuturesUnordered, StreamExt};

mod calls;

use super::dispatch::{Admission, Candidate, Dispatch, verdict_of};
use super::intake::Intake;
use super::ledger::Ledger;
use super::parts::{Attempt, Parts, Queued};
use super::report::{DrainReport, StopReason};
use super::settle::Outcomes;
use crate::error::Error;
use crate::future::BoxFuture;
use crate::outbox::{ClaimedMessage, Fate};
use crate::time::Timestamp;
use crate::verdict::Delivery;

/// Delivery calls in flight: each one message, or a batch for a
/// [`DeliverBatch`](super::DeliverBatch).
type InFlight<'a> = FuturesUnordered<BoxFuture<'a, Vec<(ClaimedMessage, Attempt)>>>;

pub(super) struct Run<'a> {
    drainer: &'a Parts,
    deadline: Timestamp,
    intake: Intake,
    dispatch: Dispatch,
    outcomes: Outcomes,
    ledger: Ledger<'a>,
}

impl<'a> Run<'a> {
    pub(super) fn new(drainer: &'a Parts, seed: Vec<ClaimedMessage>, may_claim: bool) -> Self {
        let started = drainer.outbox.now();
        let sweep = (may_claim && drainer.sweep_due(started))
            .then(|| drainer.outbox.sweep_statements().ok())
            .flatten();
        let mut run = Run {
            drainer,
            deadline: started
                .checked_add(drainer.limits.deadline)
                .unwrap_or(Timestamp::MAX),
            intake: Intake::new(may_claim, sweep),
            dispatch: Dispatch::new(drainer.limits.breaker, drainer.destinations),
            outcomes: Outcomes::default(),
            ledger: Ledger::new(drainer.outbox.table().as_str(), &drainer.telemetry),
        };
        run.take_up(seed);
        run
    }

    /// Runs until nothing is left to claim or start, then settles what is
    /// left and reports.
    pub(super) async fn run_to_end(mut self) -> DrainReport {
        let started = self.now();
        let mut in_flight: InFlight<'a> = FuturesUnordered::new();
        let mut tick: Option<(Timestamp, BoxFuture<'static, ()>)> = None;
        loop {
            self.start_and_collect(&mut in_flight);
            if in_flight.is_empty() && self.intake.group_due() {
                self.lease_suspect_group().await;
                continue;
            }
            if let Some(planned) = self.next_call() {
                let sent = {
                    let mut sending = self.send(&planned.call, false);
                    loop {
                        if in_flight.is_empty() {
                            break sending.await;
                        }
                        match select(sending.as_mut(), in_flight.next()).await {
                            Either::Left((sent, _)) => break sent,
                            Either::Right((finished, _)) => {
                                self.finish_all(finished.into_iter().flatten());
                                self.start_deliveries(&mut in_flight);
                            }
                        }
                    }
                };
                self.take_in_reply(planned, sent);
                continue;
            }
            if in_flight.is_empty() {
                // Only messages waiting for their destination's bucket are left.
                let Some(at) = self.destination_wait() else {
                    break;
                };
                // Or sooner, when waiting outcomes must be settled.
                let at = self.wake_at().map_or(at, |wake| wake.min(at));
                self.drainer
                    .timer
                    .sleep(at.duration_since(self.now()))
                    .await;
                continue;
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
                Either::Left((finished, _)) => self.finish_all(finished.into_iter().flatten()),
                Either::Right(((), _)) => tick = None,
            }
        }
        self.last_settle().await;
        let (tripped, paused) = self.dispatch.tripped_and_paused();
        let mut report = self.ledger.report;
        report.stopped = self.intake.stop_reason();
        report.tripped = tripped;
        report.paused = paused;
        report.elapsed = self.drainer.outbox.now().duration_since(started);
        self.drainer.telemetry.run_ended(&report.outbox);
        report
    }

    fn now(&self) -> Timestamp {
        self.drainer.outbox.now()
    }

    /// Takes up claimed (or handed) messages: the ledger records them, the
    /// intake queues them.
    fn take_up(&mut self, messages: Vec<ClaimedMessage>) {
        self.record_taken(&messages);
        let isolate = self.drainer.deliver.isolates_suspects();
        self.intake.queue(messages, isolate);
    }

    fn record_taken(&mut self, messages: &[ClaimedMessage]) {
        for message in messages {
            let destination = self.drainer.deliver.destination(message);
            if let Some(destination) = &destination {
                let rate = self.drainer.deliver.destination_rate(message);
                self.dispatch.own_rate(destination, rate);
            }
            self.ledger.record_taken(message, destination);
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
                    self.finish_all(finished);
                    misses = 0;
                }
                Some(None) => break,
                None => misses += 1,
            }
        }
    }

    /// What the admission gate is asked about `message`, which `has_room`
    /// or not, first of the messages waiting for its destination.
    fn candidate<'m>(&'m self, message: &'m ClaimedMessage, has_room: bool) -> Candidate<'m> {
        Candidate {
            topic: &message.topic,
            receiver: self.ledger.receiver(message),
            destination: self.ledger.destination(message),
            ahead: 0,
            has_room,
        }
    }

    /// The gate's answer for starting `message` at `now`, behind `ahead`
    /// messages of the run waiting for its destination.
    fn admission(&self, message: &ClaimedMessage, now: Timestamp, ahead: u32) -> Admission {
        let finish_by = self.finish_by(message.lease().until());
        let has_room = self.drainer.room_before(finish_by, now);
        self.dispatch.admit(
            Candidate {
                ahead,
                ..self.candidate(message, has_room)
            },
            now,
        )
    }

    /// Queues delivery calls into free slots: one message each, or for a
    /// batch deliverer as many startable messages as one call may carry.
    /// Each passes the admission gate; the drainer checks its time again
    /// when the call starts.
    fn start_deliveries(&mut self, in_flight: &mut InFlight<'a>) {
        let per_call = self.drainer.deliver.limits();
        while in_flight.len() < self.drainer.limits.concurrency && self.intake.has_startable() {
            let mut call = Vec::new();
            let mut bytes = 0usize;
            let mut waiting = false;
            while call.len() < per_call.max_messages {
                let now = self.now();
                // The first message not waiting, and how many wait for its
                // destination before it.
                let mut waiting_for: BTreeMap<&str, u32> = BTreeMap::new();
                let mut found = None;
                for (index, message) in self.intake.startable().enumerate() {
                    let destination = self.ledger.destination(message);
                    let ahead = destination
                        .and_then(|destination| waiting_for.get(destination).copied())
                        .unwrap_or(0);
                    match self.admission(message, now, ahead) {
                        Admission::Wait => {
                            if let Some(destination) = destination {
                                *waiting_for.entry(destination).or_default() += 1;
                            }
                        }
                        admission => {
                            found = Some((index, admission, ahead));
                            break;
                        }
                    }
                }
                let next = found.and_then(|(index, admission, ahead)| {
                    Some((self.intake.take_startable(index)?, admission, ahead))
                });
                let Some((message, admission, ahead)) = next else {
                    // Every startable message waits for its destination.
                    waiting = self.intake.has_startable();
                    break;
                };
                if admission != Admission::Admit {
                    self.give_back(message, admission, now, ahead);
                    continue;
                }
                let size = self.drainer.deliver.size_of(&message);
                if !call.is_empty() && bytes.saturating_add(size) > per_call.max_bytes {
                    self.intake.put_back(message);
                    break;
                }
                bytes = bytes.saturating_add(size);
                let finish_by = self.finish_by(message.lease().until());
                let destination = self.ledger.destination(&message);
                self.dispatch
                    .started(destination, message.lease().until(), now);
                self.ledger.record_started(&message, now);
                call.push(Queued { message, finish_by });
            }
            if call.is_empty() {
                if waiting {
                    break;
                }
                continue;
            }
            let drainer = self.drainer;
            in_flight.push(Box::pin(drainer.attempt(call)));
        }
    }

    /// Gives `message` back as the gate said, no attempt spent: due after
    /// the breaker's cooldown (handed back), or due now (released).
    fn give_back(
        &mut self,
        message: ClaimedMessage,
        admission: Admission,
        now: Timestamp,
        ahead: u32,
    ) {
        let due = match admission {
            Admission::HandBack(why) => {
                self.ledger.record_error_type(&message.id, why);
                self.ledger.report.handed_back += 1;
                self.dispatch.hand_back_until(now)
            }
            Admission::Release(why) => {
                self.ledger.record_error_type(&message.id, why);
                now
            }
            Admission::Later => {
                self.ledger.record_error_type(&message.id, "rate_limited");
                self.dispatch
                    .book(self.ledger.destination(&message), now, ahead)
            }
            Admission::Admit | Admission::Wait => return,
        };
        self.outcomes
            .add(message.lease().clone(), Fate::Release { due }, now);
        if self.intake.group_active() && self.intake.group_member_done() {
            self.end_group();
        }
    }

    /// The latest a delivery of a message leased until `lease_end` may end,
    /// its settle margin included: before the deadline and the lease.
    ///
    /// Once only the last settle is left in the budget, everything waiting
    /// for it must still land before its lease ends, so nothing may finish
    /// later than the earliest of those leases.
    fn finish_by(&self, lease_end: Timestamp) -> Timestamp {
        let settle_by = self.deadline.min(lease_end);
        if self.can_afford_call() {
            return settle_by;
        }
        [
            self.outcomes.earliest_lease_end(),
            self.dispatch.earliest_lease_end(),
        ]
        .into_iter()
        .flatten()
        .fold(settle_by, Timestamp::min)
    }

    /// The earliest time a startable message's destination can take a
    /// request, if every startable message waits for its destination and one
    /// of them waits for its bucket (not for a request in flight), before
    /// the deadline.
    fn destination_wait(&self) -> Option<Timestamp> {
        if !self.dispatch.limits_destinations() {
            return None;
        }
        let now = self.now();
        let mut earliest: Option<Timestamp> = None;
        for message in self.intake.startable() {
            match self
                .dispatch
                .destination_wait(self.ledger.destination(message), now)
            {
                None => return None,
                Some(Some(at)) => earliest = Some(earliest.map_or(at, |e| e.min(at))),
                Some(None) => {}
            }
        }
        earliest.filter(|at| *at < self.deadline)
    }

    fn finish_all(&mut self, finished: impl IntoIterator<Item = (ClaimedMessage, Attempt)>) {
        for (message, attempt) in finished {
            self.finish(message, attempt);
        }
    }

    /// Records a finished delivery and routes its verdict. A suspect group's
    /// outcomes are settled at once when its last member is done.
    fn finish(&mut self, message: ClaimedMessage, attempt: Attempt) {
        let now = self.now();
        let in_group = self.intake.group_active();
        self.ledger.record_ended(&message, now, &attempt);
        self.ledger.record_attempt_class(&message, &attempt);
        self.dispatch
            .ended(self.ledger.destination(&message), message.lease().until());
        match attempt {
            Attempt::TimedOut => self.ledger.report.timed_out += 1,
            Attempt::TooLate => self.ledger.report.too_late_to_start += 1,
            Attempt::Answered(..) => {}
        }
        if let Attempt::Answered(delivery, Some(record)) = &attempt {
            match self
                .drainer
                .outbox
                .attempt_log_entry(message.lease(), record, delivery, now)
            {
                Ok(entry) => self.outcomes.log(entry),
                Err(error) => log::warn!("the attempt of {} is not logged: {error}", message.id),
            }
        }
        let blame_timeout = !self.drainer.deliver.is_batch() || in_group;
        match verdict_of(attempt, blame_timeout, self.drainer.limits.delivery_timeout) {
            Some(delivery) => {
                if in_group {
                    self.ledger.record_alone(&message.id);
                    self.ledger.report.suspects += 1;
                }
                self.route_verdict(&message, delivery);
            }
            None => self
                .outcomes
                .add(message.lease().clone(), Fate::Release { due: now }, now),
        }
        if in_group && self.intake.group_member_done() {
            self.end_group();
        }
    }

    /// The suspect group's last member is done: its failures, held while
    /// its streaks could still decide them, are judged, and everything
    /// waiting is settled at once (the next group may crash the run).
    fn end_group(&mut self) {
        let held = self.dispatch.breaker().take_all();
        self.outcomes.add_all(held, self.now());
        self.outcomes.settle_at_once();
    }

    /// Routes a verdict through dispatch (pause, breaker) into the settle
    /// buffer.
    fn route_verdict(&mut self, message: &ClaimedMessage, delivery: Delivery) {
        let retryable = delivery.is_retryable();
        let settle = (message.lease().clone(), Fate::from(delivery));
        let receiver = self.ledger.receiver(message).to_owned();
        let routed = self
            .dispatch
            .route(&message.topic, &receiver, retryable, settle);
        if routed.tripped {
            self.ledger.record_tripped(&message.id);
        }
        self.outcomes.add_all(routed.settles, self.now());
    }

    /// Whether a call other than the last settle fits the query budget.
    fn can_afford_call(&self) -> bool {
        self.ledger.report.queries + 2 <= self.drainer.limits.max_queries
    }

    /// When the loop must wake without a finished delivery: to settle, or to
    /// settle held failures before their leases end.
    fn wake_at(&self) -> Option<Timestamp> {
        if !self.can_afford_call() {
            return None;
        }
        let limits = &self.drainer.limits;
        let held = self
            .dispatch
            .held_lease_end()
            .map(|end| end.saturating_sub(limits.settle_margin + limits.flush_interval));
        [
            self.outcomes.flush_at(limits),
            held,
            self.destination_wait(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn fail(&mut self, error: Error) {
        self.dispatch.fail();
        self.intake.stop(StopReason::DatabaseError(error));
    }
}
