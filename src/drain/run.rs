//! One streaming drain: deliveries stay in flight across claims, outcomes
//! are settled as they finish (riding along with the next claim when one is
//! due), and suspects are delivered alone. This file only schedules: what a
//! database call holds and how it is retried is in `call`, which failures
//! spend attempts in `breaker`.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use futures_util::future::{Either, FutureExt, select};
use futures_util::stream::{FuturesUnordered, StreamExt};

use super::breaker::{Breaker, Settle};
use super::call::{Call, ClaimSlot, ReadSlot, Reply, Retries, Sent, SettleSlot, SweepSlot};
use super::destinations::Destinations;
use super::drainer::{Attempt, Drainer, Queued};
use super::report::{DeadReason, DrainReport, StopReason, dead_letter_line};
use crate::database::Statement;
use crate::error::Error;
use crate::future::BoxFuture;
use crate::outbox::{Claim, ClaimedMessage, DeathCause, Fate, LeaseHandle, Observed, SettleReport};
use crate::telemetry::{BACKLOG_CAP, Backlog, Outcome as Told, Settled};
use crate::time::Timestamp;
use crate::verdict::Delivery;

/// Delivery calls in flight: each one message, or a batch for a
/// [`DeliverBatch`](super::DeliverBatch).
type InFlight<'a> = FuturesUnordered<BoxFuture<'a, Vec<(ClaimedMessage, Attempt)>>>;

/// A call the run sends, and where to read what it did.
struct Planned {
    call: Call,
    settled: Option<SettleSlot>,
    swept: Option<(SweepSlot, Vec<Statement>)>,
    /// The claim, and how many rows it asked for.
    claimed: Option<(ClaimSlot, u32)>,
    /// The topic streaks the outbox remembers, read with the first claim.
    streaks: Option<ReadSlot>,
    /// The backlog sample, read with the sweep when telemetry is on.
    backlog: Option<ReadSlot>,
}

/// Whether a failure may wait for its topic's streak to decide.
#[derive(Clone, Copy)]
enum Held {
    UntilDecided,
    /// A suspect's, delivered alone: settled at once, the next suspect may
    /// crash the drainer.
    Never,
}

/// What a run keeps of a message it took up, asked of the deliverer once.
struct Taken {
    topic: String,
    destination: Option<String>,
    /// Whose failures it counts toward: its topic, or `topic @ destination`.
    receiver: String,
    /// When its delivery started, and what the run saw of it (for the
    /// rollups, with its settle).
    started: Option<Timestamp>,
    observed: Observed,
    /// What the settle in flight counts, kept for telemetry.
    settling: Observed,
    /// When it was due, and enqueued (for lateness and age).
    became_due: Option<Timestamp>,
    created_at: Timestamp,
    /// The class of what last went wrong with it (`error.type`).
    error_type: Option<&'static str>,
    /// Its leases in settles not read yet: it is forgotten when the last
    /// is (a message taken again meanwhile starts again from 0).
    settles_in_flight: u32,
}

impl Taken {
    fn of(message: &ClaimedMessage, destination: Option<String>) -> Self {
        let receiver = match &destination {
            Some(destination) => format!("{} @ {destination}", message.topic),
            None => message.topic.clone(),
        };
        Taken {
            topic: message.topic.clone(),
            destination,
            receiver,
            started: None,
            observed: Observed::default(),
            settling: Observed::default(),
            became_due: message.lease().became_due,
            created_at: message.created_at,
            error_type: None,
            settles_in_flight: 0,
        }
    }
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
    /// Requests in flight and started per destination.
    destinations: Destinations,
    /// Topics paused in this run (a receiver answered `Gone`).
    paused: BTreeSet<String>,
    /// What the run knows of each message it took up and has not seen
    /// settled, by id.
    taken: HashMap<String, Taken>,
    /// Rows buried because they do not decode: their ids, and topics as
    /// far as they decoded (`""` if not at all).
    malformed: BTreeMap<String, String>,
    /// Lease ends of the deliveries in flight, with how many share each.
    running: BTreeMap<Timestamp, usize>,
    /// Why no more claims are made, once that is decided.
    claims_over: Option<StopReason>,
    /// A call failed for good: nothing new starts.
    failed: bool,
    /// Whether a call has read the topic streaks the outbox remembers.
    streaks_read: bool,
    /// Whether a call has sampled the backlog (for telemetry).
    backlog_sampled: bool,
    /// Housekeeping sent before the run's first claim in the same call, at
    /// most once a minute per drainer (see `Outbox::sweep_statements`).
    sweep: Option<Vec<Statement>>,
}

impl<'a> Run<'a> {
    pub(super) fn new(drainer: &'a Drainer, seed: Vec<ClaimedMessage>, may_claim: bool) -> Self {
        let started = drainer.outbox.now();
        let mut run = Run {
            drainer,
            deadline: started
                .checked_add(drainer.limits.deadline)
                .unwrap_or(Timestamp::MAX),
            report: DrainReport::new(drainer.outbox.table().as_str()),
            ready: VecDeque::new(),
            suspects: VecDeque::new(),
            outcomes: Vec::new(),
            first_outcome_at: None,
            settle_at_once: false,
            breaker: Breaker::new(drainer.limits.breaker),
            destinations: Destinations::new(drainer.destinations),
            paused: BTreeSet::new(),
            taken: HashMap::new(),
            malformed: BTreeMap::new(),
            running: BTreeMap::new(),
            claims_over: (!may_claim).then_some(StopReason::Drained),
            failed: false,
            streaks_read: false,
            backlog_sampled: false,
            sweep: (may_claim && drainer.sweep_due(started))
                .then(|| drainer.outbox.sweep_statements().ok())
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
                self.absorb(planned, sent);
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
        self.report.stopped = self.claims_over.take().unwrap_or(StopReason::Drained);
        self.report.tripped = self.breaker.tripped();
        self.report.paused = self.paused.iter().cloned().collect();
        self.report.elapsed = self.now().duration_since(started);
        self.drainer
            .telemetry
            .run_ended(self.drainer.outbox.table().as_str());
        self.report
    }

    fn now(&self) -> Timestamp {
        self.drainer.outbox.now()
    }

    fn queue(&mut self, messages: Vec<ClaimedMessage>) {
        let isolate = self.drainer.deliver.isolates_suspects();
        for message in messages {
            let taken = Taken::of(&message, self.drainer.deliver.destination(&message));
            self.taken.insert(message.id.clone(), taken);
            match self.report.topics.get_mut(&message.topic) {
                Some(taken) => *taken += 1,
                None => drop(self.report.topics.insert(message.topic.clone(), 1)),
            }
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
                    self.finish_all(finished);
                    misses = 0;
                }
                Some(None) => break,
                None => misses += 1,
            }
        }
    }

    /// Queues delivery calls into free slots: one message each, or for a
    /// batch deliverer as many ready messages as one call may carry. Each
    /// message goes with the latest time its delivery may end; the
    /// drainer checks it again when the call starts.
    fn start_deliveries(&mut self, in_flight: &mut InFlight<'a>) {
        let per_call = self.drainer.deliver.limits();
        while in_flight.len() < self.drainer.limits.concurrency && !self.ready.is_empty() {
            let mut call = Vec::new();
            let mut bytes = 0usize;
            let mut waiting = false;
            while call.len() < per_call.max_messages {
                let Some(message) = self.next_ready() else {
                    // Every ready message waits for its destination.
                    waiting = !self.ready.is_empty();
                    break;
                };
                let size = self.drainer.deliver.size_of(&message);
                if !call.is_empty() && bytes.saturating_add(size) > per_call.max_bytes {
                    self.ready.push_front(message);
                    break;
                }
                let now = self.now();
                let finish_by = self.finish_by(message.lease().until());
                if self.paused.contains(&message.topic) {
                    // Given back for the cooldown: should the pause not have
                    // been stored (or be resumed already), claims do not
                    // churn the topic's rows.
                    self.hand_back(message, now, "paused");
                } else if self.breaker.is_open(self.receiver(&message)) {
                    self.hand_back(message, now, "circuit_open");
                } else if self.failed || !self.drainer.room_before(finish_by, now) {
                    self.mark(&message.id, "no_time");
                    self.push(message.lease().clone(), Fate::Release { due: now }, now);
                } else {
                    bytes = bytes.saturating_add(size);
                    *self.running.entry(message.lease().until()).or_default() += 1;
                    let destination = self.destination(&message).map(str::to_owned);
                    self.destinations.start(destination.as_deref(), now);
                    self.started(&message, now);
                    call.push(Queued { message, finish_by });
                }
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

    /// The latest a delivery of a message leased until `lease_end` may end,
    /// its settle margin included: before the deadline and the lease.
    ///
    /// Once only the last settle is left in the budget, everything waiting
    /// for it must still land before its lease ends, so nothing may finish
    /// later than the earliest of those leases.
    fn finish_by(&self, lease_end: Timestamp) -> Timestamp {
        let mut settle_by = self.deadline.min(lease_end);
        if !self.can_afford_call() {
            let waiting = self.outcomes.iter().map(|(lease, _)| lease.until());
            let held = self.breaker.earliest_lease_end();
            let running = self.running.keys().next().copied();
            if let Some(end) = waiting.chain(held).chain(running).min() {
                settle_by = settle_by.min(end);
            }
        }
        settle_by
    }

    fn hand_back(&mut self, message: ClaimedMessage, now: Timestamp, why: &'static str) {
        self.mark(&message.id, why);
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

    /// Counts what a settle did, and logs a line per message it parked as
    /// dead.
    fn tally(&mut self, mut settled: SettleReport) {
        let told = std::mem::take(&mut settled.told);
        self.tell_all(&told);
        let outbox = self.drainer.outbox.table().as_str();
        for (id, cause) in std::mem::take(&mut settled.died) {
            let reason = match cause {
                _ if self.malformed.remove(&id).is_some() => DeadReason::Malformed,
                DeathCause::Buried => DeadReason::Permanent,
                DeathCause::AttemptsExhausted => DeadReason::AttemptsExhausted,
            };
            let topic = self.taken.get(&id).map(|taken| taken.topic.as_str());
            log::warn!("{}", dead_letter_line(outbox, &id, topic, reason));
        }
        for (id, _) in &told {
            if let Some(taken) = self.taken.get_mut(id)
                && taken.settles_in_flight > 0
            {
                taken.settles_in_flight -= 1;
                if taken.settles_in_flight == 0 {
                    self.taken.remove(id);
                }
            }
        }
        self.report.tally(settled);
    }

    /// Tells the telemetry sinks how each lease of a settle ended. A
    /// message given back under both its leases (an isolation whose call
    /// failed) is told once, by the lease that held.
    fn tell_all(&self, told: &[(String, Told)]) {
        if self.drainer.telemetry.is_empty() {
            return;
        }
        let applied: BTreeSet<&str> = told
            .iter()
            .filter(|(_, told)| *told != Told::LeaseLost)
            .map(|(id, _)| id.as_str())
            .collect();
        for (id, told) in told {
            if *told != Told::LeaseLost || !applied.contains(id.as_str()) {
                self.tell(id, *told);
            }
        }
    }

    /// Tells the telemetry sinks how the settle of message `id` ended.
    fn tell(&self, id: &str, told: Told) {
        let outbox = self.drainer.outbox.table().as_str();
        let Some(taken) = self.taken.get(id) else {
            if let Some(topic) = self.malformed.get(id) {
                // A row that did not decode.
                self.drainer.telemetry.settled(&Settled {
                    outbox,
                    topic: if topic.is_empty() { "(unknown)" } else { topic },
                    id,
                    outcome: told,
                    error_type: Some("malformed"),
                    duration: None,
                    lateness: None,
                    age: None,
                    alone: false,
                    tripped: false,
                });
            }
            return;
        };
        let now = self.now();
        let delivered = told == Told::Delivered;
        let error_type = taken.error_type.filter(|_| !delivered);
        self.drainer.telemetry.settled(&Settled {
            outbox,
            topic: &taken.topic,
            id,
            outcome: told,
            error_type,
            duration: taken.settling.duration,
            lateness: taken
                .became_due
                .filter(|_| delivered)
                .map(|due| now.duration_since(due)),
            age: delivered.then(|| now.duration_since(taken.created_at)),
            alone: taken.settling.alone,
            tripped: taken.settling.tripped,
        });
    }

    /// Records why message `id` was not delivered (`error.type`).
    fn mark(&mut self, id: &str, error_type: &'static str) {
        if let Some(taken) = self.taken.get_mut(id) {
            taken.error_type = Some(error_type);
        }
    }

    /// Whose failures `message` counts toward: its topic's receiver, per
    /// destination when the deliverer names one (`topic @ destination`).
    fn receiver<'m>(&'m self, message: &'m ClaimedMessage) -> &'m str {
        self.taken
            .get(&message.id)
            .map_or(message.topic.as_str(), |taken| taken.receiver.as_str())
    }

    /// Where `message` goes, as the deliverer named it when the run took it
    /// up.
    fn destination(&self, message: &ClaimedMessage) -> Option<&str> {
        self.taken.get(&message.id)?.destination.as_deref()
    }

    /// The next ready message to take up: the first whose destination has
    /// room now, or that will not be delivered (paused, tripped, the run
    /// failed, or no longer time to start it before its lease ends: handed
    /// back at once rather than left to expire). Without destination
    /// limits, the first.
    fn next_ready(&mut self) -> Option<ClaimedMessage> {
        if self.drainer.destinations.is_none() {
            return self.ready.pop_front();
        }
        let now = self.now();
        let index = self.ready.iter().position(|message| {
            self.failed
                || self.paused.contains(&message.topic)
                || self
                    .destinations
                    .wait(self.destination(message), now)
                    .is_none()
                || self.breaker.is_open(self.receiver(message))
                || !self
                    .drainer
                    .room_before(self.finish_by(message.lease().until()), now)
        })?;
        self.ready.remove(index)
    }

    /// The earliest time a ready message's destination can take a request,
    /// if every ready message waits for its destination and one of them
    /// waits for its bucket (not for a request in flight), before the
    /// deadline.
    fn destination_wait(&self) -> Option<Timestamp> {
        self.drainer.destinations?;
        let now = self.now();
        let mut earliest: Option<Timestamp> = None;
        for message in &self.ready {
            match self.destinations.wait(self.destination(message), now) {
                None => return None,
                Some(Some(at)) => earliest = Some(earliest.map_or(at, |e| e.min(at))),
                Some(None) => {}
            }
        }
        earliest.filter(|at| *at < self.deadline)
    }

    fn push(&mut self, lease: LeaseHandle, fate: Fate, now: Timestamp) {
        self.outcomes.push((lease, fate));
        self.first_outcome_at.get_or_insert(now);
    }

    fn push_all(&mut self, settles: Vec<Settle>) {
        let now = self.now();
        for (lease, fate) in settles {
            self.push(lease, fate, now);
        }
    }

    fn finish_all(&mut self, finished: impl IntoIterator<Item = (ClaimedMessage, Attempt)>) {
        for (message, attempt) in finished {
            self.finish(message, attempt);
        }
    }

    /// The one reading of an attempt: its verdict, or `None` if it never
    /// started (its lease left too little time when its turn came). A call
    /// that timed out blames its message if it carried that one `alone`.
    fn verdict(&mut self, attempt: Attempt, alone: Held) -> Option<Delivery> {
        match attempt {
            Attempt::Answered(delivery) => Some(delivery),
            Attempt::TimedOut => {
                self.report.timed_out += 1;
                let error = format!(
                    "delivery timed out after {} ms",
                    self.drainer.limits.delivery_timeout.as_millis()
                );
                // A slow batch endpoint is not any one message's fault.
                Some(
                    if self.drainer.deliver.is_batch() && matches!(alone, Held::UntilDecided) {
                        Delivery::unavailable(error, None)
                    } else {
                        Delivery::retry(error)
                    },
                )
            }
            Attempt::TooLate => {
                self.report.too_late_to_start += 1;
                None
            }
        }
    }

    /// Records a finished delivery: settled at the next call, or held by the
    /// breaker while its topic's streak is short.
    fn finish(&mut self, message: ClaimedMessage, attempt: Attempt) {
        let now = self.now();
        self.ended(&message, now, &attempt);
        self.classify(&message, &attempt);
        let destination = self.destination(&message).map(str::to_owned);
        self.destinations.finish(destination.as_deref());
        let until = message.lease().until();
        if let Some(count) = self.running.get_mut(&until) {
            *count -= 1;
            if *count == 0 {
                self.running.remove(&until);
            }
        }
        match self.verdict(attempt, Held::UntilDecided) {
            Some(delivery) => self.judge(&message, delivery, Held::UntilDecided),
            None => self.push(message.lease().clone(), Fate::Release { due: now }, now),
        }
    }

    /// Settles a verdict, through the breaker: a retryable failure counts
    /// toward its topic's streak (held back while the streak is short, unless
    /// it must be settled at once), an answer decides the streak.
    fn judge(&mut self, message: &ClaimedMessage, delivery: Delivery, held: Held) {
        let retryable = delivery.is_retryable();
        let gone = matches!(delivery, Delivery::Gone { .. });
        let settle = (message.lease().clone(), Fate::from(delivery));
        let receiver = self.receiver(message).to_owned();
        if gone {
            self.paused.insert(message.topic.clone());
            let mut settles = self.breaker.paused(&receiver);
            settles.push(settle);
            self.push_all(settles);
            return;
        }
        let was_open = self.breaker.is_open(&receiver);
        let settles = match (retryable, held) {
            (true, Held::UntilDecided) => self.breaker.failed(&receiver, settle),
            (true, Held::Never) => self.breaker.failed_alone(&receiver, settle),
            (false, _) => {
                let mut settles = self.breaker.answered(&receiver);
                settles.push(settle);
                settles
            }
        };
        if !was_open
            && self.breaker.is_open(&receiver)
            && let Some(taken) = self.taken.get_mut(&message.id)
        {
            taken.observed.tripped = true;
        }
        self.push_all(settles);
    }

    /// Records the class of a failed attempt of `message`.
    fn classify(&mut self, message: &ClaimedMessage, attempt: &Attempt) {
        let class = match attempt {
            Attempt::Answered(Delivery::Delivered) => return,
            Attempt::Answered(delivery) => delivery.class(),
            Attempt::TimedOut => "timeout",
            Attempt::TooLate => "no_time",
        };
        self.mark(&message.id, class);
    }

    /// A delivery of `message` started at `now`.
    fn started(&mut self, message: &ClaimedMessage, now: Timestamp) {
        if let Some(taken) = self.taken.get_mut(&message.id) {
            taken.started = Some(now);
        }
    }

    /// A delivery of `message` ended at `now`: how long it took (unless it
    /// never started: too late).
    fn ended(&mut self, message: &ClaimedMessage, now: Timestamp, attempt: &Attempt) {
        if let Some(taken) = self.taken.get_mut(&message.id)
            && let Some(started) = taken.started.take()
            && !matches!(attempt, Attempt::TooLate)
        {
            taken.observed.duration = Some(now.duration_since(started));
        }
    }

    /// The next database call, if one is due now: a claim when nothing is
    /// left to start (with the outcomes so far riding along), or a settle
    /// when outcomes have waited long enough.
    fn next_call(&mut self) -> Option<Planned> {
        let now = self.now();
        let limits = &self.drainer.limits;
        let soon = now
            .checked_add(limits.settle_margin + limits.flush_interval)
            .unwrap_or(Timestamp::MAX);
        let expiring = self.breaker.take_expiring(soon);
        self.push_all(expiring);
        let wanted = self.claim_wanted(now);
        let settle_due = !self.outcomes.is_empty()
            && self.can_afford_call()
            && (self.settle_at_once
                || self.outcomes.len() >= limits.batch_size as usize
                || self.flush_at().is_some_and(|at| at <= now));
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
        if let Some(wanted) = wanted {
            let claim = self.drainer.outbox.claim_statement(wanted, limits.lease);
            let streaks = (!self.streaks_read)
                .then(|| self.drainer.outbox.streaks_statement())
                .transpose();
            match claim.and_then(|claim| Ok((claim, streaks?))) {
                Ok((claim, streaks)) => {
                    if let Some(sweep) = self.sweep.take() {
                        planned.swept = Some((planned.call.sweep(sweep.clone()), sweep));
                        planned.backlog = self.backlog_read(&mut planned.call);
                    }
                    let recovery = claim.recovery().ok();
                    planned.claimed = Some((planned.call.claim(claim, recovery), wanted));
                    planned.streaks = streaks.map(|read| planned.call.read(read));
                }
                Err(error) => self.claims_over = Some(StopReason::DatabaseError(error)),
            }
        }
        if planned.call.is_empty() {
            return None;
        }
        self.write_streaks(&mut planned.call);
        Some(planned)
    }

    /// Reads the backlog in `call`, before its claim, if a sink is told.
    fn backlog_read(&mut self, call: &mut Call) -> Option<ReadSlot> {
        if self.drainer.telemetry.is_empty() || self.backlog_sampled {
            return None;
        }
        self.backlog_sampled = true;
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

    /// Adds the changes to the remembered topic streaks to `call`.
    fn write_streaks(&mut self, call: &mut Call) {
        let writes = self.breaker.take_writes();
        match self.drainer.outbox.streak_statements(&writes) {
            Ok(statements) => call.write(statements),
            Err(error) => self.fail(error),
        }
    }

    /// How many rows to claim, when the queue is empty and no limit stops
    /// it; records why claims end.
    fn claim_wanted(&mut self, now: Timestamp) -> Option<u32> {
        // Messages waiting only for their destinations leave room to claim
        // for other destinations, up to a batch waiting.
        let ready_waits = self.ready.is_empty()
            || (self.ready.len() < self.drainer.limits.batch_size as usize
                && self.all_ready_wait_for_destinations(now));
        if self.claims_over.is_some() || !ready_waits || !self.suspects.is_empty() {
            return None;
        }
        let limits = &self.drainer.limits;
        let stop = if self.report.claimed >= limits.max_messages {
            Some(StopReason::MessageCap)
        } else if !self.can_afford_call() {
            Some(StopReason::QueryBudget)
        } else if !self
            .drainer
            .room_before(self.finish_by(Timestamp::MAX), now)
        {
            Some(StopReason::Deadline)
        } else {
            None
        };
        if let Some(stop) = stop {
            self.claims_over = Some(stop);
            return None;
        }
        Some(
            limits
                .batch_size
                .min(limits.max_messages - self.report.claimed),
        )
    }

    /// Whether every ready message waits for its destination's limits.
    fn all_ready_wait_for_destinations(&self, now: Timestamp) -> bool {
        self.drainer.destinations.is_some()
            && self.ready.iter().all(|message| {
                self.destinations
                    .wait(self.destination(message), now)
                    .is_some()
            })
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
    /// settle held failures before their leases end.
    fn wake_at(&self) -> Option<Timestamp> {
        if !self.can_afford_call() {
            return None;
        }
        let limits = &self.drainer.limits;
        let held = self
            .breaker
            .earliest_lease_end()
            .map(|end| end.saturating_sub(limits.settle_margin + limits.flush_interval));
        [self.flush_at(), held, self.destination_wait()]
            .into_iter()
            .flatten()
            .min()
    }

    /// Adds the waiting outcomes to `call` as settles (`Some(None)` when
    /// none wait). On a statement that cannot be built the run fails (the
    /// leases come back when they end) and there is no call: `None`.
    fn settle_waiting(&mut self, call: &mut Call) -> Option<Option<SettleSlot>> {
        let outcomes = std::mem::take(&mut self.outcomes);
        self.first_outcome_at = None;
        self.settle_at_once = false;
        if outcomes.is_empty() {
            return Some(None);
        }
        let until = outcomes.iter().map(|(lease, _)| lease.until()).min();
        let fates: Vec<(&LeaseHandle, Fate)> = outcomes
            .iter()
            .map(|(lease, fate)| (lease, fate.clone()))
            .collect();
        let taken = &self.taken;
        let observed = |lease: &LeaseHandle| {
            taken
                .get(&lease.id)
                .map_or_else(Observed::default, |taken| taken.observed)
        };
        let prepared = self.drainer.outbox.prepare_observed(&fates, observed);
        for (lease, _) in &outcomes {
            if let Some(taken) = self.taken.get_mut(&lease.id) {
                taken.settling = std::mem::take(&mut taken.observed);
                taken.settles_in_flight += 1;
            }
        }
        match prepared {
            Ok(prepared) => Some(Some(call.settle(prepared, until))),
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

    /// Sends a call. Its retries never take the query kept for the last
    /// settle unless this is it (`last`).
    fn send<'c>(&self, call: &'c Call, last: bool) -> BoxFuture<'c, Sent>
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
        self.report.queries += sent.sends;
        self.report.settle_retries += sent.sends - 1;
        match sent.reply {
            Ok(reply) => Some(reply),
            Err(error) => {
                self.fail(error);
                None
            }
        }
    }

    /// Takes in a planned call's reply: settle counts, the claimed messages,
    /// and a sweep left out by a retry, kept for the next claim.
    fn absorb(&mut self, planned: Planned, sent: Sent) {
        let Some(mut reply) = self.count(sent) else {
            return;
        };
        if let Some(slot) = planned.settled {
            self.tally(reply.settled(slot));
        }
        if let Some((slot, sweep)) = planned.swept
            && !reply.swept(slot)
        {
            self.sweep = Some(sweep);
        }
        if let Some(slot) = planned.backlog {
            let outbox = self.drainer.outbox.table().as_str();
            match self.drainer.outbox.read_backlog(&reply.rows(slot)) {
                Ok((due, oldest_due_age)) => self.drainer.telemetry.backlog(&Backlog {
                    outbox,
                    due,
                    oldest_due_age,
                }),
                Err(error) => log::warn!("outbox drain of {outbox}: backlog unread: {error}"),
            }
        }
        if let Some(slot) = planned.streaks {
            self.streaks_read = true;
            match self.drainer.outbox.read_streaks(&reply.rows(slot)) {
                Ok(streaks) => self.breaker.remember(streaks),
                // Delivery goes on without the memory: no failure is judged
                // the message's own in this run, and nothing is written.
                Err(error) => log::warn!(
                    "outbox drain of {}: topic streaks unread: {error}",
                    self.drainer.outbox.table()
                ),
            }
        }
        if let Some((slot, wanted)) = planned.claimed
            && let Some(claim) = reply.claimed(slot)
        {
            self.accept(claim, wanted);
        }
    }

    fn accept(&mut self, claim: Claim, wanted: u32) {
        let now = self.now();
        let touched = u32::try_from(claim.len()).unwrap_or(u32::MAX);
        self.report.batches += 1;
        self.report.claimed += touched;
        self.report.dead += u32::try_from(claim.exhausted.len()).unwrap_or(u32::MAX);
        self.report.malformed += u32::try_from(claim.malformed.len()).unwrap_or(u32::MAX);
        let outbox = self.drainer.outbox.table().as_str();
        for (id, topic) in claim.exhausted.iter().zip(&claim.exhausted_topics) {
            let reason = DeadReason::UnsettledLeases;
            log::warn!("{}", dead_letter_line(outbox, id, Some(topic), reason));
            self.drainer.telemetry.settled(&Settled {
                outbox,
                topic,
                id,
                outcome: Told::Dead,
                error_type: Some("attempts_exhausted"),
                duration: None,
                lateness: None,
                age: None,
                alone: false,
                tripped: false,
            });
        }
        for malformed in claim.malformed {
            if let Some(lease) = malformed.lease {
                let error = malformed.error.to_string();
                self.malformed.insert(lease.id.clone(), lease.topic.clone());
                self.push(lease, Fate::Bury { error }, now);
            }
        }
        let all_tripped = !claim.messages.is_empty()
            && claim.messages.iter().all(|message| {
                self.paused.contains(&message.topic) || self.breaker.is_open(self.receiver(message))
            });
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
        let Some(message) = self.suspects.pop_front() else {
            return;
        };
        // Its destination's bucket holds for a suspect too.
        if let Some(Some(at)) = self
            .destinations
            .wait(self.destination(&message), self.now())
            && at < self.deadline
        {
            self.drainer
                .timer
                .sleep(at.duration_since(self.now()))
                .await;
        }
        let Some(message) = self.isolate(message).await else {
            return;
        };
        let finish_by = self.finish_by(message.lease().until());
        let destination = self.destination(&message).map(str::to_owned);
        self.destinations.start(destination.as_deref(), self.now());
        self.started(&message, self.now());
        let attempted = self
            .drainer
            .attempt(vec![Queued { message, finish_by }])
            .await
            .pop();
        self.destinations.finish(destination.as_deref());
        let Some((message, attempt)) = attempted else {
            return;
        };
        let now = self.now();
        self.ended(&message, now, &attempt);
        self.classify(&message, &attempt);
        if let Some(taken) = self.taken.get_mut(&message.id) {
            taken.observed.alone = true;
        }
        // Settled at once, outside the breaker's held streaks, though a
        // failure counts toward one (and is handed back if it trips it).
        self.settle_at_once = true;
        let Some(delivery) = self.verdict(attempt, Held::Never) else {
            self.push(message.lease().clone(), Fate::Release { due: now }, now);
            return;
        };
        self.report.suspects += 1;
        self.judge(&message, delivery, Held::Never);
    }

    /// Leases a suspect alone, in a call that also settles what is waiting;
    /// the suspect under its new lease, or `None` if it is not to be
    /// delivered now (its topic is open, no time or budget is left, or the
    /// lease passed to another drainer).
    async fn isolate(&mut self, mut message: ClaimedMessage) -> Option<ClaimedMessage> {
        let now = self.now();
        if self.paused.contains(&message.topic) {
            self.mark(&message.id, "paused");
            self.push(message.lease().clone(), Fate::Release { due: now }, now);
            return None;
        }
        if self.breaker.is_open(self.receiver(&message)) {
            self.hand_back(message, now, "circuit_open");
            return None;
        }
        let finish_by = self.finish_by(Timestamp::MAX);
        if self.failed || !self.can_afford_call() || !self.drainer.room_before(finish_by, now) {
            self.mark(&message.id, "no_time");
            self.push(message.lease().clone(), Fate::Release { due: now }, now);
            return None;
        }
        let limits = &self.drainer.limits;
        let (isolation, alone) = match self
            .drainer
            .outbox
            .isolate_statement(message.lease(), limits.lease)
        {
            Ok(isolation) => isolation,
            Err(error) => {
                self.fail(error);
                self.mark(&message.id, "no_time");
                self.push(message.lease().clone(), Fate::Release { due: now }, now);
                return None;
            }
        };
        // Held failures land first, judged: the suspect may kill this
        // drainer, and they must not die with it.
        let held = self.breaker.take_all();
        self.push_all(held);
        let mut call = Call::new();
        let settled = self.settle_waiting(&mut call)?;
        let isolated = call.isolate(isolation);
        self.write_streaks(&mut call);
        let sent = self.send(&call, false).await;
        let Some(mut reply) = self.count(sent) else {
            // The call failed for good: give the lease back, whichever holds
            // (only one of them applies), in the last settle.
            let now = self.now();
            self.push(message.lease().clone(), Fate::Release { due: now }, now);
            self.push(alone, Fate::Release { due: now }, now);
            return None;
        };
        if let Some(slot) = settled {
            self.tally(reply.settled(slot));
        }
        if !reply.isolated(isolated) {
            // Taken by another drainer, or settled meanwhile.
            self.report.lease_lost += 1;
            return None;
        }
        message.lease = alone;
        Some(message)
    }

    /// Settles whatever is left, held failures included, if the budget
    /// still has the call kept for it.
    async fn last_settle(&mut self) {
        let held = self.breaker.take_all();
        self.push_all(held);
        let now = self.now();
        for message in std::mem::take(&mut self.ready)
            .into_iter()
            .chain(std::mem::take(&mut self.suspects))
        {
            self.mark(&message.id, "run_ended");
            self.push(message.lease().clone(), Fate::Release { due: now }, now);
        }
        if self.outcomes.is_empty() || self.report.queries >= self.drainer.limits.max_queries {
            return;
        }
        let mut call = Call::new();
        let Some(Some(settled)) = self.settle_waiting(&mut call) else {
            return;
        };
        self.write_streaks(&mut call);
        let sent = self.send(&call, true).await;
        if let Some(mut reply) = self.count(sent) {
            self.tally(reply.settled(settled));
        }
    }
}

impl Drainer {
    /// Drains due messages until none is left or a limit is reached, and
    /// logs the report as one JSON line ([`DrainReport::log_line`], level
    /// info) and each message it parked as dead as one more (`event`
    /// `"outbox.dead"`, its id, topic and reason class; level warn). The
    /// dead letter lines are best effort: a death whose settle reply was
    /// lost (its retry reads as lease lost) has none.
    pub async fn drain(&self) -> DrainReport {
        let report = Run::new(self, Vec::new(), true).go().await;
        log::info!("{}", report.log_line());
        report
    }

    /// Hands the immediate delivery of `message` (leased to this request by
    /// [`Batch::enqueue_leased`](crate::batch::Batch::enqueue_leased)) to `defer`:
    /// Workers' `wait_until`, or `tokio::spawn`. If the runtime drops it,
    /// the message is delivered by a drain once its lease ends.
    pub fn deliver_now(&self, defer: &dyn crate::defer::Defer, message: ClaimedMessage) {
        let drainer = self.clone();
        defer.defer(Box::pin(async move {
            drainer.deliver_claimed(vec![message]).await;
        }));
    }

    /// Delivers messages the caller already leases (from
    /// [`Batch::enqueue_leased`](crate::batch::Batch::enqueue_leased)) and settles them: the immediate attempt
    /// after a response, one database call for its settle.
    pub(crate) async fn deliver_claimed(&self, messages: Vec<ClaimedMessage>) -> DrainReport {
        let report = Run::new(self, messages, false).go().await;
        log::info!("{}", report.log_line());
        report
    }
}
