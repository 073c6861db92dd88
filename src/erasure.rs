//! Tombstones of erased subjects: once a subject's erasure commits, every
//! write of the library that would carry the subject fails its whole batch.
//!
//! A tombstone is the subject key and the time of its erasure, one row per
//! subject in a table shared by every outbox and inbox of the database
//! ([`ERASED_SUBJECTS`] unless configured). A batch writing a row that carries a subject (an outbox
//! message, an inbox key) holds a guard for it: the guard fails on the
//! tombstone's primary key, so the batch rolls back whole. Tombstones are
//! forgotten [`ERASURE_MEMORY`] after the erasure.

use std::borrow::Cow;
use std::time::Duration;

use crate::database::{Database, Dialect, Statement};
use crate::error::{Error, Result};
use crate::identifier::TableName;
use crate::seal::KeyRing;
use crate::sql::schema::Templates;
use crate::sql::tombstone_col::SUBJECT;
use crate::sql::{dialects, tombstones};
use crate::time::Timestamp;

/// The default table of tombstones, one per database.
pub const ERASED_SUBJECTS: &str = "erased_subjects";

/// How long a tombstone refuses writes carrying its subject: 30 days, longer
/// than a Cloudflare Queue keeps a message (at most 14 days) and than any
/// retry schedule of the library. Work that arrives later (a replay from a
/// dead letter queue after a month) is written again.
pub const ERASURE_MEMORY: Duration = Duration::from_secs(30 * 24 * 3600);

const SCHEMA: Templates = Templates {
    sqlite: include_str!("erasure/schema.sql"),
    postgres: include_str!("erasure/schema.postgres.sql"),
};

/// The tombstone table of one database, in its dialect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tombstones {
    table: TableName,
    dialect: Dialect,
    /// With a ring, a tombstone holds the subject's keyed hash.
    ring: Option<KeyRing>,
}

impl Tombstones {
    /// The tombstones in `table`, holding subjects' keyed hashes under
    /// `ring` if given.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad table name.
    pub(crate) fn new(table: &str, dialect: Dialect, ring: Option<KeyRing>) -> Result<Self> {
        Ok(Tombstones {
            table: TableName::new(table)?,
            dialect,
            ring,
        })
    }

    /// The same tombstones, hashing under `ring`.
    pub(crate) fn with_ring(self, ring: Option<KeyRing>) -> Self {
        Tombstones { ring, ..self }
    }

    /// `subject` as a tombstone holds it.
    fn stored<'a>(&self, subject: &'a str) -> Cow<'a, str> {
        match &self.ring {
            Some(ring) => ring.hash(subject).into(),
            None => subject.into(),
        }
    }

    /// `subject` as tombstones may hold it: as written now, and as given
    /// (before a key ring was given; the same without one).
    fn forms(&self, subject: &str) -> Vec<String> {
        match &self.ring {
            Some(ring) => vec![ring.hash(subject), subject.to_owned()],
            None => vec![subject.to_owned()],
        }
    }

    /// The table's name.
    pub(crate) fn table(&self) -> &TableName {
        &self.table
    }

    /// The DDL of the table.
    pub(crate) fn schema_sql(&self) -> String {
        SCHEMA.render(self.dialect, &self.table)
    }

    /// Records (or renews) the tombstone of `subject`, erased at `now`. Put
    /// it before the erasure's deletes: on Postgres it waits for any batch
    /// guarding the subject, whose rows the deletes then see.
    pub(crate) fn tombstone(&self, subject: &str, now: Timestamp) -> Result<Statement> {
        tombstones::tombstone(
            &self.table,
            self.dialect,
            &self.stored(subject),
            now.as_unix_millis(),
        )
    }

    /// Statements that fail their batch with a conflict
    /// [`refused`](Tombstones::refused) recognises if `subject` has a
    /// tombstone younger than [`ERASURE_MEMORY`] at `now`, and change
    /// nothing else (an older one no longer refuses, even before a sweep
    /// forgets it).
    ///
    /// How, in each dialect: [`Differences::erasure_guard`](crate::sql::differences::Differences::erasure_guard).
    pub(crate) fn guard(&self, subject: &str, now: Timestamp) -> Result<Vec<Statement>> {
        let remembered_from = now.saturating_sub(ERASURE_MEMORY);
        // With a ring, a tombstone written before it holds the subject as
        // given: the guard refuses on either.
        let before = self.ring.is_some().then_some(subject);
        dialects::of(self.dialect).erasure_guard(
            &self.table,
            &self.stored(subject),
            before,
            remembered_from,
        )
    }

    /// Deletes the tombstones older than [`ERASURE_MEMORY`] at `now` (and a
    /// guard's own row, should one ever have been committed).
    pub(crate) fn forget(&self, now: Timestamp) -> Result<Statement> {
        let before = now.saturating_sub(ERASURE_MEMORY).as_unix_millis();
        tombstones::forget(&self.table, self.dialect, before)
    }

    /// Reads when `subject` was erased: one row with `erased_at`, or none.
    pub(crate) fn read(&self, subject: &str) -> Result<Statement> {
        tombstones::read(&self.table, self.dialect, &as_strs(&self.forms(subject)))
    }

    /// Whether `error` is a refusal by a guard of these tombstones (or
    /// already says a subject was erased).
    pub(crate) fn refused(&self, error: &Error) -> bool {
        match error {
            // Postgres names the key `table.index` when it cannot say the
            // column (see the adapter).
            Error::Conflict { constraint } => {
                *constraint == format!("{}.{SUBJECT}", self.table)
                    || *constraint == format!("{0}.{0}_pkey", self.table)
            }
            Error::SubjectErased { .. } => true,
            _ => false,
        }
    }

    /// `error` as [`Error::SubjectErased`] if it is a guard's refusal,
    /// naming those of `subjects` whose tombstones refuse at `now` (all of
    /// them if that cannot be read; none if the refused row came from a
    /// statement of the caller's).
    pub(crate) async fn name_refusal(
        &self,
        db: &dyn Database,
        error: Error,
        subjects: &[String],
        now: Timestamp,
    ) -> Error {
        if !self.refused(&error) || matches!(error, Error::SubjectErased { .. }) {
            return error;
        }
        if subjects.is_empty() {
            return Error::SubjectErased {
                subjects: Vec::new(),
            };
        }
        let statement = tombstones::erased_since(
            &self.table,
            self.dialect,
            subjects
                .iter()
                .flat_map(|subject| self.forms(subject))
                .collect(),
            now.saturating_sub(ERASURE_MEMORY).as_unix_millis(),
        );
        let erased = match statement {
            Ok(statement) => db.query(&statement).await.ok(),
            Err(_) => None,
        };
        let erased: Option<Vec<String>> = erased.and_then(|rows| {
            rows.iter()
                .map(|row| row.get::<String>(SUBJECT).ok())
                .collect()
        });
        // Named as the caller gave them, not as stored.
        let mut subjects: Vec<String> = match erased {
            Some(stored) => subjects
                .iter()
                .filter(|subject| {
                    let forms = self.forms(subject);
                    stored.iter().any(|s| forms.contains(s))
                })
                .cloned()
                .collect(),
            None => subjects.to_vec(),
        };
        subjects.sort();
        Error::SubjectErased { subjects }
    }
}

/// The `&str`s of `forms`.
pub(crate) fn as_strs(forms: &[String]) -> Vec<&str> {
    forms.iter().map(String::as_str).collect()
}

/// An `INSERT` of a row that may carry a subject, behind that subject's
/// guard: what an enqueue and an inbox key both hand to a batch.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GuardedInsert {
    /// The guard (none without a subject), what goes with the row (its
    /// data key), then the insert.
    statements: Vec<Statement>,
    /// How many of `statements` are the guard.
    guard: usize,
    pub(crate) subject: Option<String>,
    pub(crate) tombstones: Tombstones,
    /// When the guard was built.
    pub(crate) at: Timestamp,
}

impl GuardedInsert {
    /// `insert`, behind the guard of `subject` at `at`.
    pub(crate) fn new(
        tombstones: &Tombstones,
        subject: Option<&str>,
        at: Timestamp,
        insert: Statement,
    ) -> Result<Self> {
        Self::with(tombstones, subject, at, None, insert)
    }

    /// `insert`, behind the guard of `subject` at `at`, and `with` (the
    /// row's data key) right before it.
    pub(crate) fn with(
        tombstones: &Tombstones,
        subject: Option<&str>,
        at: Timestamp,
        with: Option<Statement>,
        insert: Statement,
    ) -> Result<Self> {
        let mut statements = match subject {
            Some(subject) => tombstones.guard(subject, at)?,
            None => Vec::new(),
        };
        let guard = statements.len();
        statements.extend(with);
        statements.push(insert);
        Ok(GuardedInsert {
            statements,
            guard,
            subject: subject.map(str::to_owned),
            tombstones: tombstones.clone(),
            at,
        })
    }

    /// The guard's statements, what goes with the row, then the insert (the
    /// last).
    pub(crate) fn statements(&self) -> &[Statement] {
        &self.statements
    }

    /// The guard's statements, and the row's (the insert last).
    pub(crate) fn guard_and_insert(&self) -> (&[Statement], &[Statement]) {
        self.statements.split_at(self.guard)
    }

    /// Whether `error` is a refusal by a guard of these tombstones.
    pub(crate) fn is_erased(&self, error: &Error) -> bool {
        self.tombstones.refused(error)
    }

    /// `error` as [`Error::SubjectErased`] if it is a guard's refusal.
    pub(crate) async fn name_refusal(&self, db: &dyn Database, error: Error) -> Error {
        let subjects: Vec<String> = self.subject.iter().cloned().collect();
        self.tombstones
            .name_refusal(db, error, &subjects, self.at)
            .await
    }
}
