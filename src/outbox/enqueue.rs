//! Enqueueing: an `INSERT` the caller adds to its own atomic batch.

use std::time::Duration;

use super::Outbox;
use super::claim::{ClaimedMessage, LeaseHandle, check_lease};
use super::message::Message;
use crate::database::Statement;
use crate::erasure::GuardedInsert;
use crate::error::{Error, Result};
use crate::sql;
use crate::time::Timestamp;

/// An enqueue, ready to join the caller's batch.
#[derive(Debug, Clone, PartialEq)]
#[must_use = "an enqueue writes nothing until its statements join a batch"]
pub struct Enqueue {
    id: String,
    insert: GuardedInsert,
}

impl Enqueue {
    /// The message's id (generated ULID, or the caller's).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The statements to put, in this order, into the same
    /// [`batch_atomic`](crate::database::Database::batch_atomic) as the state change:
    /// the `INSERT`, last, and before it, for a message with a subject, the
    /// guard that fails the batch if the subject was erased (see
    /// [`is_erased`](Enqueue::is_erased)) and, with a
    /// [key ring](crate::outbox::OutboxBuilder::key_ring), the insert of the
    /// data key its payload is sealed under. The `INSERT`'s outcome is the
    /// last of them.
    pub fn statements(&self) -> &[Statement] {
        self.insert.statements()
    }

    /// Whether `error` (from running the batch) means a guard refused a
    /// subject of the batch (this message's, or another row's guarded by the
    /// same tombstones): nothing of the batch was written, and writing it
    /// again fails the same way.
    pub fn is_erased(&self, error: &Error) -> bool {
        self.insert.is_erased(error)
    }

    /// The message's insert behind its subject's guard.
    pub(crate) fn guarded(&self) -> &GuardedInsert {
        &self.insert
    }

    /// `insert` (and its data key's) behind the guard of the message's
    /// subject, both at `now` (one reading of the clock).
    fn new(
        outbox: &Outbox,
        id: String,
        message: &Message,
        (insert, key): (Statement, Option<Statement>),
        now: Timestamp,
    ) -> Result<Self> {
        let subject = message.subject.as_deref();
        let insert = GuardedInsert::with(outbox.tombstones(), subject, now, key, insert)?;
        Ok(Enqueue { id, insert })
    }
}

/// What [`Outbox::enqueue_alone`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enqueued {
    /// The message's id.
    pub id: String,
    /// Whether a row was written: `false` when a row with the same dedup
    /// key was already in the outbox.
    pub written: bool,
}

/// An enqueue whose row is written already leased to the caller, so the
/// caller can deliver it right after its batch commits without a claim.
///
/// If the caller never settles (the isolate is evicted, the deadline hits),
/// the lease expires and the next drain delivers the message as usual.
#[derive(Debug, Clone)]
#[must_use = "an enqueue writes nothing until its statement joins a batch"]
pub(crate) struct LeasedEnqueue {
    enqueue: Enqueue,
    claimed: ClaimedMessage,
    unlease: Statement,
}

impl LeasedEnqueue {
    /// The message's id.
    pub(crate) fn id(&self) -> &str {
        self.enqueue.id()
    }

    /// The enqueue the caller's batch runs.
    pub(crate) fn enqueue(&self) -> &Enqueue {
        &self.enqueue
    }

    /// Sent right after the insert: gives the lease back (1 row) if the
    /// message's topic is paused, so the caller must not deliver it.
    pub(crate) fn unlease_if_paused(&self) -> &Statement {
        &self.unlease
    }

    /// The leased message, whether or not its row was written: for a
    /// [`Batch`](crate::batch::Batch), which checks its own outcome.
    pub(crate) fn into_claimed(self) -> ClaimedMessage {
        self.claimed
    }
}

impl Outbox {
    /// The statements that enqueue `message`. Add them to the same
    /// [`batch_atomic`](crate::database::Database::batch_atomic) as the state change,
    /// so the message exists exactly when the change does (or use a
    /// [`Batch`](crate::batch::Batch), which also names an erased subject).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the first bad field (see [`Message`]).
    pub fn enqueue(&self, message: Message) -> Result<Enqueue> {
        message.validate(&self.inner.limits)?;
        let now = self.now();
        let id = match &message.id {
            Some(id) => id.clone(),
            None => self.new_ulid(now),
        };
        let due_at = message.not_before.map_or(now, |at| at.max(now));
        let insert = self.insert_statement(&message, &id, due_at, None, now)?;
        let enqueue = Enqueue::new(self, id, &message, insert, now)?;
        crate::telemetry::spans::sent(&message.topic, enqueue.id());
        Ok(enqueue)
    }

    /// Like [`enqueue`](Outbox::enqueue), but the row is written leased to
    /// the caller for `lease` (its first attempt), so that delivering it
    /// right after the batch commits costs one database call: the settle.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad field, a lease out of range, or an
    /// ordering key (an ordered message must wait its turn, so it cannot be
    /// delivered at once).
    pub(crate) fn enqueue_leased(
        &self,
        message: Message,
        lease: Duration,
    ) -> Result<LeasedEnqueue> {
        message.validate(&self.inner.limits)?;
        check_lease(lease)?;
        if message.ordering_key.is_some() {
            return Err(Error::invalid(
                "ordering key",
                "a message with an ordering key must wait for its turn; enqueue it without a lease",
            ));
        }
        if message.not_before.is_some() {
            return Err(Error::invalid(
                "not before",
                "a delayed message cannot be delivered at once; enqueue it without a lease",
            ));
        }
        let now = self.now();
        let id = match &message.id {
            Some(id) => id.clone(),
            None => self.new_ulid(now),
        };
        let until = now.checked_add(lease)?;
        let token = self.new_ulid(now);
        let insert = self.insert_statement(&message, &id, until, Some(&token), now)?;
        let enqueue = Enqueue::new(self, id.clone(), &message, insert, now)?;
        crate::telemetry::spans::sent(&message.topic, &id);
        let fence = sql::Fence {
            id: &id,
            token: &token,
            until,
        };
        let unlease = sql::pause::unlease_if_paused(self.table(), self.dialect(), &fence, now)?;
        let claimed = ClaimedMessage {
            id: id.clone(),
            topic: message.topic.clone(),
            payload: message.payload,
            subject: message
                .subject
                .as_deref()
                .map(|subject| self.stored_subject(subject).into_owned()),
            trace: message.trace,
            created_at: now,
            event_id: None,
            endpoint_target: None,
            unsettled_leases: 0,
            lease: LeaseHandle {
                id: id.clone(),
                topic: message.topic,
                token,
                until,
                attempt: 1,
                ordering_key: None,
                deferrals: 0,
                created_at: now,
                became_due: Some(now),
                unsettled: Some(0),
            },
        };
        Ok(LeasedEnqueue {
            enqueue,
            claimed,
            unlease,
        })
    }

    /// Enqueues `message` on its own, for work that changes no other state.
    ///
    /// # Errors
    /// As [`enqueue`](Outbox::enqueue); [`Error::SubjectErased`] if the
    /// message's subject was erased; any database error (a transient one may
    /// have committed: see the [`Database`](crate::database::Database) contract).
    pub async fn enqueue_alone(&self, message: Message) -> Result<Enqueued> {
        let enqueue = self.enqueue(message)?;
        let outcomes = match self.inner.db.batch_atomic(enqueue.statements()).await {
            Ok(outcomes) => outcomes,
            Err(error) => {
                let db = self.inner.db.as_ref();
                return Err(enqueue.guarded().name_refusal(db, error).await);
            }
        };
        Ok(Enqueued {
            written: outcomes
                .last()
                .is_some_and(|insert| insert.rows_affected > 0),
            id: enqueue.id,
        })
    }

    /// The row of `message` with `id`, due at `due_at`, created `now`, and
    /// leased by `lease_token` if given; and the insert of its payload's data
    /// key, if sealed under one.
    fn insert_statement(
        &self,
        message: &Message,
        id: &str,
        due_at: Timestamp,
        lease_token: Option<&str>,
        now: Timestamp,
    ) -> Result<(Statement, Option<Statement>)> {
        let subject = message
            .subject
            .as_deref()
            .map(|subject| self.stored_subject(subject));
        let dedup_key = message.dedup_key.as_deref().map(|key| self.stored_key(key));
        let ordering_key = message
            .ordering_key
            .as_deref()
            .map(|key| self.stored_key(key));
        let (payload, key) = self.seal_payload(&message.payload, subject.as_deref(), now)?;
        let row = sql::enqueue::NewRow {
            id,
            id_given: message.id.is_some(),
            topic: &message.topic,
            payload: &payload,
            subject: subject.as_deref(),
            dedup_key: dedup_key.as_deref(),
            ordering_key: ordering_key.as_deref(),
            due_at,
            // Spent only by a failed outcome, also when written leased.
            attempts: 0,
            lease_token,
            created_at: now,
            traceparent: message.trace.as_ref().map(|trace| trace.traceparent()),
            tracestate: message.trace.as_ref().and_then(|trace| trace.tracestate()),
        };
        Ok((
            sql::enqueue::insert(self.table(), self.dialect(), &row)?,
            key,
        ))
    }

    /// A new ULID: the time, then 80 random bits.
    pub(crate) fn new_ulid(&self, now: Timestamp) -> String {
        let high = u128::from(self.inner.random.next_u64());
        let low = u128::from(self.inner.random.next_u64());
        let millis = u64::try_from(now.as_unix_millis()).unwrap_or(0);
        ulid::Ulid::from_parts(millis, (high << 64) | low).to_string()
    }
}
