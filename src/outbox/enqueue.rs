//! Enqueueing: an `INSERT` the caller adds to its own atomic batch.

use std::time::Duration;

use sea_query::{Expr, ExprTrait, LockType, OnConflict, Order, Query};

use super::claim::{ClaimedMessage, LeaseHandle, check_lease};
use super::message::Message;
use super::{Outbox, col, state};
use crate::database::{Dialect, Statement, query_error};
use crate::erasure::GuardedInsert;
use crate::error::{Error, Result};
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
    /// [`is_erased`](Enqueue::is_erased)). The `INSERT`'s outcome is the
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

    fn new(outbox: &Outbox, id: String, message: &Message, insert: Statement) -> Result<Self> {
        let subject = message.subject.as_deref();
        let insert = GuardedInsert::new(outbox.tombstones(), subject, outbox.now(), insert)?;
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

    /// The leased message, whether or not its row was written: for a
    /// [`Batch`](crate::batch::Batch), which checks its own outcome.
    pub(crate) fn into_claimed(self) -> ClaimedMessage {
        self.claimed
    }
}

/// Values of a new row, before they become an `INSERT`.
struct NewRow<'a> {
    message: &'a Message,
    id: &'a str,
    due_at: Timestamp,
    attempts: u32,
    lease_token: Option<&'a str>,
    created_at: Timestamp,
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
        let insert = self.insert_statement(&NewRow {
            message: &message,
            id: &id,
            due_at,
            attempts: 0,
            lease_token: None,
            created_at: now,
        })?;
        Enqueue::new(self, id, &message, insert)
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
        let insert = self.insert_statement(&NewRow {
            message: &message,
            id: &id,
            due_at: until,
            // Spent only by a failed outcome, like a claimed lease.
            attempts: 0,
            lease_token: Some(&token),
            created_at: now,
        })?;
        let enqueue = Enqueue::new(self, id.clone(), &message, insert)?;
        let claimed = ClaimedMessage {
            id: id.clone(),
            topic: message.topic,
            payload: message.payload,
            subject: message.subject,
            created_at: now,
            unsettled_leases: 0,
            lease: LeaseHandle {
                id: id.clone(),
                token,
                until,
                attempt: 1,
                ordering_key: None,
                deferrals: 0,
                created_at: now,
            },
        };
        Ok(LeasedEnqueue { enqueue, claimed })
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

    fn insert_statement(&self, row: &NewRow<'_>) -> Result<Statement> {
        let message = row.message;
        let columns = [
            col::STATE,
            col::DUE_AT,
            col::ID,
            col::TOPIC,
            col::PAYLOAD,
            col::SUBJECT,
            col::DEDUP_KEY,
            col::ORDERING_KEY,
            col::SEQ,
            col::ID_GIVEN,
            col::ATTEMPTS,
            col::LEASE_TOKEN,
            col::CREATED_AT,
        ];
        let fixed = |seq: Expr, state: Expr| -> Vec<Expr> {
            vec![
                state,
                Expr::val(row.due_at.as_unix_millis()),
                Expr::val(row.id),
                Expr::val(message.topic.as_str()),
                Expr::val(message.payload.as_str()),
                Expr::val(message.subject.clone()),
                Expr::val(message.dedup_key.clone()),
                Expr::val(message.ordering_key.clone()),
                seq,
                Expr::val(message.id.is_some()),
                Expr::val(i64::from(row.attempts)),
                Expr::val(row.lease_token.map(str::to_owned)),
                Expr::val(row.created_at.as_unix_millis()),
            ]
        };
        let mut insert = Query::insert();
        insert.into_table(self.table_name()).columns(columns);
        match &message.ordering_key {
            None => {
                insert
                    .values(fixed(
                        Expr::val(Option::<i64>::None),
                        Expr::val(state::READY),
                    ))
                    .map_err(query_error)?;
            }
            Some(key) => {
                // The new row takes the next sequence number of its key, and
                // waits if any earlier row of the key is still present.
                let mut latest = Query::select();
                latest.expr_as(Expr::col(col::SEQ).max(), "latest");
                match self.inner.dialect {
                    // Writers are serialized: the newest row cannot change
                    // before this insert commits.
                    Dialect::Sqlite => {
                        latest
                            .from(self.table_name())
                            .and_where(Expr::col(col::ORDERING_KEY).eq(key.as_str()));
                    }
                    // Lock the key's newest row, so a concurrent completion
                    // of it waits for this insert and then promotes it (or,
                    // if the row went first, this insert sees it gone). Two
                    // enqueues racing for the same place fail the later one
                    // on the unique ordering index.
                    Dialect::Postgres => {
                        let mut newest = Query::select();
                        newest
                            .column(col::SEQ)
                            .from(self.table_name())
                            .and_where(Expr::col(col::ORDERING_KEY).eq(key.as_str()))
                            .order_by(col::SEQ, Order::Desc)
                            .limit(1)
                            .lock(LockType::Update);
                        latest.from_subquery(newest, "newest");
                    }
                }
                let latest_seq = || Expr::col(("key_state", "latest"));
                let state =
                    Expr::case(latest_seq().is_null(), state::READY).finally(state::WAITING);
                let mut select = Query::select();
                select
                    .exprs(fixed(latest_seq().if_null(0).add(1), state.into()))
                    .from_subquery(latest, "key_state")
                    // `WHERE` keeps SQLite from reading `ON CONFLICT` as a join.
                    .and_where(Expr::cust("TRUE"));
                insert.select_from(select).map_err(query_error)?;
            }
        }
        insert.on_conflict(
            OnConflict::column(col::DEDUP_KEY)
                .target_and_where(Expr::col(col::DEDUP_KEY).is_not_null())
                .do_nothing()
                .to_owned(),
        );
        self.render(&insert)
    }

    /// A new ULID: the time, then 80 random bits.
    pub(crate) fn new_ulid(&self, now: Timestamp) -> String {
        let high = u128::from(self.inner.random.next_u64());
        let low = u128::from(self.inner.random.next_u64());
        let millis = u64::try_from(now.as_unix_millis()).unwrap_or(0);
        ulid::Ulid::from_parts(millis, (high << 64) | low).to_string()
    }
}
