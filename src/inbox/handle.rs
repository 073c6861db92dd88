//! The inbox's handle and what its calls return.

use std::borrow::Cow;
use std::sync::Arc;

use serde::Serialize;

use crate::database::{Database, Dialect, Outcome, Statement};
use crate::erasure::{ERASED_SUBJECTS, GuardedInsert, Tombstones, as_strs};
use crate::error::{Error, Result};
use crate::identifier::TableName;
use crate::outbox::{CappedCount, check_key as check, check_scan};
use crate::seal::KeyRing;
use crate::sql::inbox::{self as sql, KEY, SEEN_AT, SUBJECT};
use crate::sql::schema::{self, Templates};
use crate::time::{Clock, SystemClock, Timestamp};
use crate::webhook::{HeaderSource, Verified, Verifier};

const SCHEMA: Templates = Templates {
    sqlite: include_str!("schema.sql"),
    postgres: include_str!("schema.postgres.sql"),
};

/// First-writer-wins keys, in one table of a [`Database`].
#[derive(Clone)]
pub struct Inbox {
    db: Arc<dyn Database>,
    dialect: Dialect,
    table: TableName,
    tombstones: Tombstones,
    clock: Arc<dyn Clock>,
    /// Subjects (and, with `hash_keys`, keys) are stored as keyed hashes.
    ring: Option<KeyRing>,
    hash_keys: bool,
}

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inbox")
            .field("table", &self.table)
            .finish_non_exhaustive()
    }
}

/// An inbox key's row, ready to join the effect's batch.
#[derive(Debug, Clone, PartialEq)]
#[must_use = "an inbox key protects nothing until it joins the effect's batch"]
pub struct KeyStatement {
    insert: GuardedInsert,
    constraint: String,
}

impl KeyStatement {
    /// The statements to put **first**, in this order, in the effect's
    /// [`batch_atomic`](Database::batch_atomic): for a key with a subject,
    /// the guard that fails the batch if the subject was erased (see
    /// [`is_erased`](KeyStatement::is_erased)), then the key's `INSERT`.
    pub fn statements(&self) -> &[Statement] {
        self.insert.statements()
    }

    /// Whether `error` (from running the batch) means a guard refused a
    /// subject of the batch (the key's, or another row's guarded by the same
    /// tombstones): nothing of the batch was written, and running it again
    /// fails the same way.
    pub fn is_erased(&self, error: &Error) -> bool {
        self.insert.is_erased(error)
    }

    /// The key's insert behind its subject's guard.
    pub(crate) fn guarded(&self) -> &GuardedInsert {
        &self.insert
    }

    /// The unique constraint a repeat of this key fails on.
    pub(crate) fn constraint(&self) -> &str {
        &self.constraint
    }

    /// Whether `error` (from running the batch) means the key was already
    /// present: the message was processed before, and the batch changed
    /// nothing.
    pub fn is_duplicate(&self, error: &Error) -> bool {
        matches!(error, Error::Conflict { constraint } if *constraint == self.constraint)
    }
}

/// What [`Inbox::process_once`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Processed {
    /// The key was new: the effects ran; their outcomes, in order.
    Applied(Vec<Outcome>),
    /// The key was already present: nothing changed.
    AlreadyProcessed,
}

/// A stored inbox key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct InboxEntry {
    /// The message key.
    pub key: String,
    /// The subject it was recorded for.
    pub subject: Option<String>,
    /// When it was first processed.
    pub seen_at: Timestamp,
}

impl Inbox {
    /// An inbox in `table` of `db`, on the system clock.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad table name.
    pub fn new(db: Arc<dyn Database>, table: &str) -> Result<Self> {
        let dialect = db.dialect();
        Ok(Inbox {
            tombstones: Tombstones::new(ERASED_SUBJECTS, dialect, None)?,
            dialect,
            db,
            table: TableName::new(table)?,
            clock: Arc::new(SystemClock),
            ring: None,
            hash_keys: false,
        })
    }

    /// The same inbox storing subjects, and tombstones, as keyed hashes
    /// under `ring`, and its keys too if `hash_keys` (an inbox key is often
    /// a sender's id, but may be an e-mail address). Give it the ring of
    /// the database's outboxes: the tombstones are shared. Keys recorded
    /// before stay as they were, so a redelivery of one is processed again
    /// once: turn `hash_keys` on with a new table, or after the senders'
    /// retry window.
    pub fn with_key_ring(mut self, ring: KeyRing, hash_keys: bool) -> Self {
        self.tombstones = self.tombstones.with_ring(Some(ring.clone()));
        self.ring = Some(ring);
        self.hash_keys = hash_keys;
        self
    }

    fn stored_subject<'a>(&self, subject: &'a str) -> Cow<'a, str> {
        match &self.ring {
            Some(ring) => ring.hash(subject).into(),
            None => subject.into(),
        }
    }

    /// `subject` as rows may hold it: its hash with a ring, and as given
    /// (rows written before the ring).
    fn subject_forms(&self, subject: &str) -> Vec<String> {
        match &self.ring {
            Some(ring) => vec![ring.hash(subject), subject.to_owned()],
            None => vec![subject.to_owned()],
        }
    }

    fn stored_key<'a>(&self, key: &'a str) -> Cow<'a, str> {
        match &self.ring {
            Some(ring) if self.hash_keys => ring.hash(key).into(),
            _ => key.into(),
        }
    }

    /// The same inbox guarding subjects with the tombstones in `table`
    /// (default: [`ERASED_SUBJECTS`]); see
    /// [`OutboxBuilder::tombstones_table`](crate::outbox::OutboxBuilder::tombstones_table).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad table name.
    pub fn with_tombstones_table(mut self, table: &str) -> Result<Self> {
        self.tombstones = Tombstones::new(table, self.dialect, self.ring.clone())?;
        Ok(self)
    }

    /// The same inbox on another clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The database's tombstones of erased subjects.
    pub(crate) fn tombstones(&self) -> &Tombstones {
        &self.tombstones
    }

    /// The database this inbox lives in.
    pub fn database(&self) -> &Arc<dyn Database> {
        &self.db
    }

    /// The same inbox through another handle on the same database (see
    /// [`Outbox::through`](crate::outbox::Outbox::through)).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `db` speaks another SQL dialect.
    pub fn through(&self, db: Arc<dyn Database>) -> Result<Inbox> {
        if db.dialect() != self.dialect {
            return Err(Error::invalid(
                "database handle",
                "an inbox is read through a handle of its own dialect",
            ));
        }
        Ok(Inbox { db, ..self.clone() })
    }

    /// The table this inbox lives in.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// The DDL of the inbox table and of the database's tombstones of
    /// erased subjects, as a migration file holds it.
    pub fn schema_sql(&self) -> String {
        let mut sql = SCHEMA.render(self.dialect, &self.table);
        sql.push_str(&self.tombstones.schema_sql());
        sql
    }

    /// The DDL as separate statements.
    pub fn schema_statements(&self) -> Vec<Statement> {
        schema::statements(&self.schema_sql())
    }

    /// Creates the table and indexes if missing, atomically.
    ///
    /// # Errors
    /// Database errors.
    pub async fn create_schema(&self) -> Result<()> {
        self.db
            .batch_atomic(&self.schema_statements())
            .await
            .map(drop)
    }

    /// The key's statements, to put first in the batch that applies the
    /// message's effect. If the key exists, the batch fails with an error
    /// [`KeyStatement::is_duplicate`] recognises, and nothing in it applies;
    /// likewise if `subject` was erased ([`KeyStatement::is_erased`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty key or subject, or one over 256
    /// bytes.
    pub fn key_statement(&self, key: &str, subject: Option<&str>) -> Result<KeyStatement> {
        check("inbox key", Some(key))?;
        check("subject", subject)?;
        let now = self.clock.now();
        let stored_subject = subject.map(|subject| self.stored_subject(subject));
        let insert = sql::record(
            &self.table,
            self.dialect,
            &self.stored_key(key),
            stored_subject.as_deref(),
            now,
        )?;
        Ok(KeyStatement {
            insert: GuardedInsert::new(&self.tombstones, subject, now, insert)?,
            constraint: format!("{}.{KEY}", self.table),
        })
    }

    /// Runs `effects` exactly once for `key`: in one atomic batch behind the
    /// key's insert.
    ///
    /// # Errors
    /// Input errors as [`key_statement`](Inbox::key_statement);
    /// [`Error::SubjectErased`] if `subject` was erased (nothing applied);
    /// any database error other than the key's own conflict. A transient error
    /// may have committed the key and effects: calling again is safe (it
    /// then answers that the key was seen).
    pub async fn process_once(
        &self,
        key: &str,
        subject: Option<&str>,
        effects: &[Statement],
    ) -> Result<Processed> {
        let claim = self.key_statement(key, subject)?;
        let mut batch = claim.statements().to_vec();
        let own = batch.len();
        batch.extend_from_slice(effects);
        match self.db.batch_atomic(&batch).await {
            Ok(mut outcomes) => {
                outcomes.drain(..own.min(outcomes.len()));
                Ok(Processed::Applied(outcomes))
            }
            Err(error) if claim.is_duplicate(&error) => Ok(Processed::AlreadyProcessed),
            Err(error) => Err(claim.guarded().name_refusal(self.db.as_ref(), error).await),
        }
    }

    /// Verifies a signed webhook (see [`webhook`](crate::webhook)) at the
    /// inbox's "now".
    ///
    /// # Errors
    /// [`Error::Unauthenticated`], its `source()` the
    /// [`Rejected`](crate::webhook::Rejected) reason.
    pub fn verify_webhook(
        &self,
        verifier: &Verifier,
        headers: &dyn HeaderSource,
        body: &[u8],
    ) -> Result<Verified> {
        Ok(verifier.verify_at(headers, body, self.clock.now())?)
    }

    /// Verifies a signed webhook, then runs the effects `effects` builds
    /// for it exactly once, keyed by its `webhook-id` (in one atomic batch
    /// behind the key, as [`process_once`](Inbox::process_once)). `effects`
    /// is called only for a request that verified, so it may read the body;
    /// it returns the subject the effects are about (if any, for erasure)
    /// and the statements. Nothing is written for a request that does not
    /// verify.
    ///
    /// # Errors
    /// [`Error::Unauthenticated`] for a request that does not verify;
    /// `effects`' own error; otherwise as
    /// [`process_once`](Inbox::process_once).
    pub async fn process_webhook(
        &self,
        verifier: &Verifier,
        headers: &dyn HeaderSource,
        body: &[u8],
        effects: impl FnOnce(&Verified) -> Result<(Option<String>, Vec<Statement>)>,
    ) -> Result<(Verified, Processed)> {
        let verified = self.verify_webhook(verifier, headers, body)?;
        let (subject, effects) = effects(&verified)?;
        let processed = self
            .process_once(&verified.id, subject.as_deref(), &effects)
            .await?;
        Ok((verified, processed))
    }

    /// Whether `key` was processed (and not yet purged).
    ///
    /// # Errors
    /// Database errors.
    pub async fn seen(&self, key: &str) -> Result<bool> {
        let statement = sql::seen(&self.table, self.dialect, &self.stored_key(key))?;
        Ok(!self.db.query(&statement).await?.is_empty())
    }

    /// How many keys are recorded, counting at most `cap` rows (a count
    /// that reaches `cap` says so): its cost is bounded however large the
    /// table.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a `cap` outside 1 ..= [`MAX_SCAN`](crate::outbox::MAX_SCAN); [`Error::MalformedRow`];
    /// database errors.
    pub async fn count_keys(&self, cap: u32) -> Result<CappedCount> {
        check_scan("count cap", cap)?;
        let rows = self
            .db
            .query(&sql::count(&self.table, self.dialect, cap)?)
            .await?;
        let count: u64 = rows
            .first()
            .ok_or_else(|| Error::database("an aggregate query returned no row"))?
            .get("keys")
            .map_err(|error| error.in_row(self.table.as_str(), None))?;
        Ok(CappedCount {
            count,
            capped: count >= u64::from(cap),
        })
    }

    /// Forgets keys first processed before `older_than`; returns how many.
    /// A message redelivered after its key was purged is processed again:
    /// keep keys longer than any sender retries. Also forgets the tombstones
    /// of subjects erased more than
    /// [`ERASURE_MEMORY`](crate::subject::ERASURE_MEMORY) ago.
    ///
    /// # Errors
    /// Database errors.
    pub async fn purge(&self, older_than: Timestamp) -> Result<u64> {
        let statement = sql::purge(&self.table, self.dialect, older_than)?;
        let forget = self.tombstones.forget(self.clock.now())?;
        let outcomes = self.db.batch_atomic(&[statement, forget]).await?;
        Ok(outcomes.first().map_or(0, |keys| keys.rows_affected))
    }

    /// Every key recorded for `subject` (as stored: hashed keys stay
    /// hashes; the subject is given back as asked).
    ///
    /// # Errors
    /// [`Error::MalformedRow`] naming an undecodable row; database errors.
    pub async fn export_subject(&self, subject: &str) -> Result<Vec<InboxEntry>> {
        let forms = self.subject_forms(subject);
        let statement = sql::of_subject(&self.table, self.dialect, &as_strs(&forms))?;
        let rows = self.db.query(&statement).await?;
        rows.iter()
            .map(|row| {
                let in_row = |error: Error| error.in_row(self.table.as_str(), None);
                Ok(InboxEntry {
                    key: row.get(KEY).map_err(in_row)?,
                    subject: row
                        .get::<Option<String>>(SUBJECT)
                        .map_err(in_row)?
                        .map(|_| subject.to_owned()),
                    seen_at: row.get(SEEN_AT).map_err(in_row)?,
                })
            })
            .collect()
    }

    /// Where the delete stands in
    /// [`erase_subject_statements`](Inbox::erase_subject_statements): it
    /// returns each key erased (count its rows).
    pub const ERASE_DELETE: usize = 1;

    /// The statements of [`erase_subject`](Inbox::erase_subject), in order:
    /// record the subject's tombstone, then delete its keys.
    ///
    /// # Errors
    /// If a statement cannot be built.
    pub fn erase_subject_statements(&self, subject: &str) -> Result<Vec<Statement>> {
        Ok(vec![
            self.tombstones.tombstone(subject, self.clock.now())?,
            sql::erase_subject(
                &self.table,
                self.dialect,
                &as_strs(&self.subject_forms(subject)),
            )?,
        ])
    }

    /// Deletes every key recorded for `subject` and records its tombstone;
    /// returns how many keys.
    ///
    /// # Errors
    /// Database errors.
    pub async fn erase_subject(&self, subject: &str) -> Result<u64> {
        let outcomes = self
            .db
            .batch_atomic(&self.erase_subject_statements(subject)?)
            .await?;
        Ok(outcomes
            .get(Self::ERASE_DELETE)
            .map_or(0, |outcome| outcome.rows.len() as u64))
    }
}
