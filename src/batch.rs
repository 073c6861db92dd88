//! One atomic write, owned by the library: the caller's statements, outbox
//! messages, inbox keys and erasures, committed together and read back
//! through typed tickets, never through positions.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::database::{Database, Outcome, Statement};
use crate::endpoint::{Endpoints, Event};
use crate::erasure::{GuardedInsert, Tombstones};
use crate::error::{Error, Result};
use crate::inbox::Inbox;
use crate::outbox::{ClaimedMessage, Message, Outbox};
use crate::time::Timestamp;

/// Tells one batch's tickets from another's.
static BATCHES: AtomicU64 = AtomicU64::new(1);

/// An atomic batch under construction. [`commit`](Batch::commit) runs it as
/// one [`Database::batch_atomic`]: every part is written, or none is.
///
/// Inbox keys go first whatever the order they were added in, so a repeat
/// fails on its key before any effect; before them go the erasures'
/// tombstones and the guards of the subjects the batch writes, ordered by
/// subject. A message or inbox key carrying a subject whose erasure
/// committed fails the whole batch ([`Error::SubjectErased`]). Every part
/// must live in the database the batch was made for.
///
/// ```
/// # #[cfg(all(feature = "sqlite", not(target_arch = "wasm32")))]
/// # fn main() -> workers_outbox::Result<()> {
/// # futures_util::FutureExt::now_or_never(async {
/// use std::sync::Arc;
/// use workers_outbox::{Batch, Database, Message, Outbox, SqliteDatabase, Statement};
///
/// let db: Arc<dyn Database> = Arc::new(SqliteDatabase::open_in_memory()?);
/// let outbox = Outbox::new(db.clone(), "outbox")?;
/// outbox.create_schema().await?;
/// db.execute(&Statement::new("CREATE TABLE accounts (email TEXT PRIMARY KEY)", vec![])).await?;
///
/// let mut batch = Batch::new(db.clone());
/// let account = batch.statement(Statement::new(
///     "INSERT INTO accounts (email) VALUES (?)",
///     vec!["ada@example.com".into()],
/// ));
/// let mail = batch.enqueue(&outbox, Message::raw_json("welcome-mail", "{}").dedup_key("ada"))?;
/// let committed = batch.commit().await?;
/// assert_eq!(committed.outcome(&account)?.rows_affected, 1);
/// assert!(committed.enqueued(&mail)?);
/// # Ok(()) }).expect("SQLite futures complete at once")
/// # }
/// # #[cfg(not(all(feature = "sqlite", not(target_arch = "wasm32"))))]
/// # fn main() {}
/// ```
#[must_use = "nothing is written until the batch is committed"]
pub struct Batch {
    db: Arc<dyn Database>,
    id: u64,
    inbox_keys: Vec<Statement>,
    inbox_constraints: Vec<String>,
    parts: Vec<Part>,
    /// Erasures' tombstones and writes' guards, by subject, then tombstone
    /// before guard, then table: run first and in this order, so batches
    /// take the subjects' keys in one order (no deadlock on Postgres) and
    /// a tombstone is written before the erasure's deletes and the caller's
    /// own statements.
    locks: BTreeMap<(String, Lock, String), Vec<Statement>>,
    /// The subjects the batch's messages and inbox keys carry.
    subjects: Vec<String>,
    /// The tombstones guarding them, and when the guards were built.
    tombstones: Vec<Tombstones>,
    guarded_at: Option<Timestamp>,
}

/// What a statement at the head of a batch does to a subject's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Lock {
    Tombstone,
    Guard,
}

/// One part: its statements, which of them its ticket reads, and the
/// leased message it carries, if any.
struct Part {
    statements: Vec<Statement>,
    read: usize,
    claimed: Option<ClaimedMessage>,
    /// For a leased message, the statement that gives its lease back if its
    /// topic is paused.
    unleased: Option<usize>,
}

impl std::fmt::Debug for Batch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("inbox_keys", &self.inbox_keys.len())
            .field("parts", &self.parts.len())
            .finish_non_exhaustive()
    }
}

/// Where one part of a batch stands, typed by what it is: read its result
/// from the [`Committed`] batch with the matching method.
#[must_use = "a ticket is how the part's result is read back"]
pub struct Ticket<Kind> {
    batch: u64,
    part: usize,
    /// The message's id, for message tickets.
    id: String,
    kind: PhantomData<Kind>,
}

impl Ticket<OfMessage> {
    /// The message's id (generated, or the caller's); stored only if the
    /// enqueue wrote its row (see [`Committed::enqueued`]).
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Ticket<OfLeasedMessage> {
    /// The message's id (generated, or the caller's).
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl<Kind> std::fmt::Debug for Ticket<Kind> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ticket")
            .field("batch", &self.batch)
            .field("part", &self.part)
            .finish()
    }
}

/// A caller's statement ([`Committed::outcome`]).
#[derive(Debug)]
pub enum OfStatement {}
/// An outbox message ([`Committed::enqueued`]).
#[derive(Debug)]
pub enum OfMessage {}
/// An outbox message leased to this request ([`Committed::claimed`]).
#[derive(Debug)]
pub enum OfLeasedMessage {}
/// A subject's erasure ([`Committed::erased`]).
#[derive(Debug)]
pub enum OfErasure {}
/// An event published to endpoints ([`Committed::published`]).
#[derive(Debug)]
pub enum OfEvent {}

impl Ticket<OfEvent> {
    /// The event's id (generated, or the caller's): the `webhook-id` its
    /// endpoints receive.
    pub fn id(&self) -> &str {
        &self.id
    }
}

/// An inbox key in a batch: tells whether a failed commit means the key was
/// processed already.
#[derive(Debug, Clone)]
#[must_use = "an inbox key tells a repeat apart from a failure"]
pub struct InboxKey {
    constraint: String,
}

impl InboxKey {
    /// Whether `error` (from [`Batch::commit`]) means this key was processed
    /// before: nothing of the batch was written, and nothing needs to be.
    pub fn already_processed(&self, error: &Error) -> bool {
        matches!(error, Error::Conflict { constraint } if *constraint == self.constraint)
    }
}

impl Batch {
    /// An empty batch on `db`.
    pub fn new(db: Arc<dyn Database>) -> Self {
        Batch {
            db,
            id: BATCHES.fetch_add(1, Ordering::Relaxed),
            inbox_keys: Vec::new(),
            inbox_constraints: Vec::new(),
            parts: Vec::new(),
            locks: BTreeMap::new(),
            subjects: Vec::new(),
            tombstones: Vec::new(),
            guarded_at: None,
        }
    }

    fn part<Kind>(
        &mut self,
        statements: Vec<Statement>,
        read: usize,
        claimed: Option<ClaimedMessage>,
        id: String,
    ) -> Ticket<Kind> {
        let unleased = claimed.is_some().then(|| statements.len() - 1);
        self.parts.push(Part {
            statements,
            read,
            claimed,
            unleased,
        });
        Ticket {
            batch: self.id,
            part: self.parts.len() - 1,
            id,
            kind: PhantomData,
        }
    }

    /// Adds one of the caller's statements, whose outcome is not needed.
    pub fn push(&mut self, statement: Statement) {
        self.parts.push(Part {
            statements: vec![statement],
            read: 0,
            claimed: None,
            unleased: None,
        });
    }

    /// Adds one of the caller's statements, to read its outcome.
    pub fn statement(&mut self, statement: Statement) -> Ticket<OfStatement> {
        self.part(vec![statement], 0, None, String::new())
    }

    /// Adds `message` to `outbox`: it exists exactly when the rest of the
    /// batch does, unless a message with the same dedup key is stored
    /// already (then [`Committed::enqueued`] is `false` and nothing of it is
    /// written). A drain delivers it.
    ///
    /// # Errors
    /// As [`Outbox::enqueue`].
    pub fn enqueue(&mut self, outbox: &Outbox, message: Message) -> Result<Ticket<OfMessage>> {
        let enqueue = outbox.enqueue(message)?;
        let insert = self.carries(enqueue.guarded());
        let id = enqueue.id().to_owned();
        let read = insert.len() - 1;
        Ok(self.part(insert, read, None, id))
    }

    /// Publishes `event` to its owner's endpoints: the event is kept, and
    /// one delivery per endpoint of the owner that takes new events and
    /// subscribes to its type is written, by statements of this batch, so
    /// they exist exactly when the rest of the batch does. A drain delivers
    /// them (with [`EndpointDeliverer`](crate::endpoint::EndpointDeliverer)).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the bad field of the event (owner,
    /// type, payload, id, subject).
    pub fn publish(&mut self, endpoints: &Endpoints, event: Event) -> Result<Ticket<OfEvent>> {
        let publish = endpoints.publish_statements(event)?;
        let mut statements = self.carries(&publish.kept);
        statements.extend(self.carries(&publish.fan_out));
        let fan_out = statements.len() - 1;
        Ok(self.part(statements, fan_out, None, publish.id))
    }

    /// Adds `message` to `outbox` already leased to this request for
    /// `lease`, to deliver it right after the commit (see
    /// [`Drainer::deliver_now`](crate::Drainer::deliver_now)); if
    /// that never happens, a drain delivers it once the lease ends.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] as [`Outbox::enqueue`], for a lease out of
    /// range, or for a message with an ordering key or a not-before time
    /// (it must wait its turn, so it cannot be delivered at once).
    pub fn enqueue_leased(
        &mut self,
        outbox: &Outbox,
        message: Message,
        lease: Duration,
    ) -> Result<Ticket<OfLeasedMessage>> {
        let leased = outbox.enqueue_leased(message, lease)?;
        let mut statements = self.carries(leased.enqueue().guarded());
        let read = statements.len() - 1;
        statements.push(leased.unlease_if_paused().clone());
        let id = leased.id().to_owned();
        Ok(self.part(statements, read, Some(leased.into_claimed()), id))
    }

    /// Adds `key` to `inbox`, first in the batch: if the key was processed
    /// before, the commit fails on it and nothing of the batch is written.
    /// One key per inbox and batch, so a failure names its key.
    ///
    /// # Errors
    /// As [`Inbox::key_statement`]; [`Error::InvalidInput`] for a second key
    /// of the same inbox in this batch.
    pub fn inbox_key(
        &mut self,
        inbox: &Inbox,
        key: &str,
        subject: Option<&str>,
    ) -> Result<InboxKey> {
        let claim = inbox.key_statement(key, subject)?;
        if self
            .inbox_constraints
            .iter()
            .any(|c| c == claim.constraint())
        {
            return Err(Error::invalid(
                "inbox key",
                "this batch has a key of that inbox already: a conflict could not say which was seen",
            ));
        }
        let insert = self.carries(claim.guarded());
        self.inbox_constraints.push(claim.constraint().to_owned());
        self.inbox_keys.extend(insert);
        Ok(InboxKey {
            constraint: claim.constraint().to_owned(),
        })
    }

    /// Erases every outbox message of `subject` (see
    /// [`Outbox::erase_subject`]: an in-flight delivery is not recalled).
    ///
    /// # Errors
    /// If a statement cannot be built.
    pub fn erase_outbox_subject(
        &mut self,
        outbox: &Outbox,
        subject: &str,
    ) -> Result<Ticket<OfErasure>> {
        let statements = outbox.erase_subject_statements(subject)?;
        let rest = self.tombstone(outbox.tombstones(), subject, statements);
        Ok(self.part(rest, Outbox::ERASE_DELETE - 1, None, String::new()))
    }

    /// Erases every inbox key of `subject`.
    ///
    /// # Errors
    /// If a statement cannot be built.
    pub fn erase_inbox_subject(
        &mut self,
        inbox: &Inbox,
        subject: &str,
    ) -> Result<Ticket<OfErasure>> {
        let statements = inbox.erase_subject_statements(subject)?;
        let rest = self.tombstone(inbox.tombstones(), subject, statements);
        Ok(self.part(rest, Inbox::ERASE_DELETE - 1, None, String::new()))
    }

    /// Takes a row's guard to the head of the batch (once per subject and
    /// tombstone table) and notes what it carries, to name an erased
    /// subject; returns the row's insert, for its part.
    fn carries(&mut self, carried: &GuardedInsert) -> Vec<Statement> {
        let (guard, insert) = carried.guard_and_insert();
        if !self.tombstones.contains(&carried.tombstones) {
            self.tombstones.push(carried.tombstones.clone());
        }
        if let Some(subject) = &carried.subject {
            if !self.subjects.contains(subject) {
                self.subjects.push(subject.clone());
            }
            let table = carried.tombstones.table().to_string();
            self.locks
                .entry((subject.clone(), Lock::Guard, table))
                .or_insert_with(|| guard.to_vec());
            self.guarded_at = Some(self.guarded_at.map_or(carried.at, |at| at.max(carried.at)));
        }
        insert.to_vec()
    }

    /// Takes an erasure's tombstone (its first statement) to the head of
    /// the batch; returns the rest, for its part.
    fn tombstone(
        &mut self,
        tombstones: &Tombstones,
        subject: &str,
        mut statements: Vec<Statement>,
    ) -> Vec<Statement> {
        if statements.is_empty() {
            return statements;
        }
        let tombstone = statements.remove(0);
        let key = (
            subject.to_owned(),
            Lock::Tombstone,
            tombstones.table().to_string(),
        );
        self.locks.entry(key).or_insert_with(|| vec![tombstone]);
        statements
    }

    /// Runs the batch as one transaction.
    ///
    /// # Errors
    /// Any database error; then nothing was written, unless the error is
    /// transient and the batch committed anyway (see the
    /// [`Database`] contract: give messages a caller id or a dedup key to
    /// make a retry safe). An inbox key seen before fails the batch with a
    /// conflict its [`InboxKey::already_processed`] recognises; a message or
    /// inbox key carrying an erased subject (even one this batch erases)
    /// fails it with [`Error::SubjectErased`].
    pub async fn commit(self) -> Result<Committed> {
        let mut statements: Vec<Statement> = self.locks.values().flatten().cloned().collect();
        statements.extend(self.inbox_keys);
        let mut reads = Vec::with_capacity(self.parts.len());
        let mut claimed = Vec::with_capacity(self.parts.len());
        let mut unleased = Vec::with_capacity(self.parts.len());
        for part in self.parts {
            reads.push(statements.len() + part.read);
            unleased.push(part.unleased.map(|at| statements.len() + at));
            statements.extend(part.statements);
            claimed.push(part.claimed);
        }
        let outcomes = match self.db.batch_atomic(&statements).await {
            Ok(outcomes) => outcomes,
            Err(error) => {
                let Some(tombstones) = self.tombstones.iter().find(|t| t.refused(&error)) else {
                    return Err(error);
                };
                let at = self.guarded_at.unwrap_or(Timestamp::EPOCH);
                let db = self.db.as_ref();
                let named = tombstones.name_refusal(db, error, &self.subjects, at).await;
                // A subject this batch erases and writes is refused by its
                // own tombstone, which rolled back with it.
                let Error::SubjectErased { mut subjects } = named else {
                    return Err(named);
                };
                let erasing = self
                    .locks
                    .keys()
                    .filter(|(_, lock, _)| *lock == Lock::Tombstone);
                for (subject, _, _) in erasing {
                    if self.subjects.contains(subject) && !subjects.contains(subject) {
                        subjects.push(subject.clone());
                    }
                }
                subjects.sort();
                return Err(Error::SubjectErased { subjects });
            }
        };
        Ok(Committed {
            batch: self.id,
            outcomes,
            reads,
            claimed,
            unleased,
        })
    }
}

/// A committed batch: read each part's result with its ticket.
#[derive(Debug)]
pub struct Committed {
    batch: u64,
    outcomes: Vec<Outcome>,
    /// Per part, the statement its ticket reads.
    reads: Vec<usize>,
    claimed: Vec<Option<ClaimedMessage>>,
    /// Per part, the statement that gave a leased message's lease back.
    unleased: Vec<Option<usize>>,
}

impl Committed {
    /// The outcome a ticket reads.
    fn read<Kind>(&self, ticket: &Ticket<Kind>) -> Result<&Outcome> {
        if ticket.batch != self.batch {
            return Err(Error::invalid("ticket", "it belongs to another batch"));
        }
        let position = self
            .reads
            .get(ticket.part)
            .copied()
            .ok_or_else(|| Error::invalid("ticket", "it names no part of this batch"))?;
        self.outcomes.get(position).ok_or_else(|| {
            Error::database(format!(
                "the database returned no outcome for statement {position} (an adapter breaking \
                 the port's contract)"
            ))
        })
    }

    /// What the caller's statement did.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a ticket of another batch.
    pub fn outcome(&self, ticket: &Ticket<OfStatement>) -> Result<&Outcome> {
        self.read(ticket)
    }

    /// Whether the message was written: `false` when a message with the
    /// same dedup key was already in the outbox.
    ///
    /// # Errors
    /// As [`outcome`](Committed::outcome).
    pub fn enqueued(&self, ticket: &Ticket<OfMessage>) -> Result<bool> {
        Ok(self.read(ticket)?.rows_affected > 0)
    }

    /// The message leased to this request, to deliver now; `None` when a
    /// message with the same dedup key was already in the outbox (there is
    /// nothing to deliver then), or when its topic is paused (it was
    /// written unleased: a drain delivers it once the topic is resumed).
    ///
    /// # Errors
    /// As [`outcome`](Committed::outcome).
    pub fn claimed(&mut self, ticket: Ticket<OfLeasedMessage>) -> Result<Option<ClaimedMessage>> {
        let written = self.read(&ticket)?.rows_affected > 0;
        let paused = self
            .unleased
            .get(ticket.part)
            .copied()
            .flatten()
            .and_then(|at| self.outcomes.get(at))
            .is_some_and(|outcome| outcome.rows_affected > 0);
        let claimed = self.claimed.get_mut(ticket.part).and_then(Option::take);
        Ok(claimed.filter(|_| written && !paused))
    }

    /// How many endpoints the event was fanned out to (deliveries written).
    ///
    /// # Errors
    /// As [`outcome`](Committed::outcome).
    pub fn published(&self, ticket: &Ticket<OfEvent>) -> Result<u64> {
        Ok(self.read(ticket)?.rows_affected)
    }

    /// How many rows the erasure removed.
    ///
    /// # Errors
    /// As [`outcome`](Committed::outcome).
    pub fn erased(&self, ticket: &Ticket<OfErasure>) -> Result<u64> {
        // The delete returns what it erased: its changes may count a
        // trigger's deletes too (D1 counts them).
        Ok(self.read(ticket)?.rows.len() as u64)
    }
}
