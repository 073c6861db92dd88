//! Tombstones of erased subjects: once a subject's erasure commits, every
//! write of the library that would carry the subject fails its whole batch.
//!
//! A tombstone is the subject key and the time of its erasure, one row per
//! subject in a table shared by every outbox and inbox of the database
//! ([`ERASED_SUBJECTS`] unless configured). A batch writing a row that carries a subject (an outbox
//! message, an inbox key) holds a guard for it: the guard fails on the
//! tombstone's primary key, so the batch rolls back whole. Tombstones are
//! forgotten [`ERASURE_MEMORY`] after the erasure.

use std::time::Duration;

use sea_query::{Expr, ExprTrait, OnConflict, Query};

use crate::database::{Dialect, Statement, query_error};
use crate::error::{Error, Result};
use crate::identifier::TableName;
use crate::schema;
use crate::time::Timestamp;

/// The default table of tombstones, one per database.
pub const ERASED_SUBJECTS: &str = "erased_subjects";

/// How long a tombstone refuses writes carrying its subject: 30 days, longer
/// than a Cloudflare Queue keeps a message (at most 14 days) and than any
/// retry schedule of the library. Work that arrives later (a replay from a
/// dead letter queue after a month) is written again.
pub const ERASURE_MEMORY: Duration = Duration::from_secs(30 * 24 * 3600);

const SUBJECT: &str = "subject";
const ERASED_AT: &str = "erased_at";
/// `erased_at` of a Postgres guard's own row, never a real tombstone's.
const GUARD_MARK: i64 = -1;

const SCHEMA_TEMPLATE: &str = include_str!("erasure/schema.sql");
const POSTGRES_SCHEMA_TEMPLATE: &str = include_str!("erasure/schema.postgres.sql");

/// The tombstone table of one database, in its dialect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tombstones {
    table: TableName,
    dialect: Dialect,
}

impl Tombstones {
    /// The tombstones in `table`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad table name.
    pub(crate) fn new(table: &str, dialect: Dialect) -> Result<Self> {
        Ok(Tombstones {
            table: TableName::new(table)?,
            dialect,
        })
    }

    /// The table's name.
    pub(crate) fn table(&self) -> &TableName {
        &self.table
    }

    /// The DDL of the table.
    pub(crate) fn schema_sql(&self) -> String {
        schema::render_for(
            self.dialect,
            [SCHEMA_TEMPLATE, POSTGRES_SCHEMA_TEMPLATE],
            &self.table,
        )
    }

    fn name(&self) -> String {
        self.table.as_str().to_owned()
    }

    /// Records (or renews) the tombstone of `subject`, erased at `now`. Put
    /// it before the erasure's deletes: on Postgres it waits for any batch
    /// guarding the subject, whose rows the deletes then see.
    pub(crate) fn tombstone(&self, subject: &str, now: Timestamp) -> Result<Statement> {
        let mut insert = Query::insert();
        insert
            .into_table(self.name())
            .columns([SUBJECT, ERASED_AT])
            .values([subject.into(), now.as_unix_millis().into()])
            .map_err(query_error)?
            .on_conflict(
                OnConflict::column(SUBJECT)
                    .update_column(ERASED_AT)
                    .to_owned(),
            );
        self.dialect.render(&insert)
    }

    /// Statements that fail their batch with a conflict
    /// [`refused`](Tombstones::refused) recognises if `subject` has a
    /// tombstone, and change nothing otherwise.
    ///
    /// SQLite serializes writers, so a copy of the tombstone onto itself is
    /// enough: it conflicts exactly when one exists. Postgres, under read
    /// committed, would not see an erasure committing meanwhile: there the
    /// guard inserts a row of its own and deletes it again, so an erasure's
    /// tombstone and the guard wait for each other on the primary key, and
    /// the later one either conflicts (the guard) or runs after the guarded
    /// batch committed (the erasure, whose deletes then see its rows).
    pub(crate) fn guard(&self, subject: &str) -> Result<Vec<Statement>> {
        match self.dialect {
            Dialect::Sqlite => {
                let mut tombstone = Query::select();
                tombstone
                    .columns([SUBJECT, ERASED_AT])
                    .from(self.name())
                    .and_where(Expr::col(SUBJECT).eq(subject));
                let mut copy = Query::insert();
                copy.into_table(self.name())
                    .columns([SUBJECT, ERASED_AT])
                    .select_from(tombstone)
                    .map_err(query_error)?;
                Ok(vec![self.dialect.render(&copy)?])
            }
            Dialect::Postgres => {
                let mut take = Query::insert();
                take.into_table(self.name())
                    .columns([SUBJECT, ERASED_AT])
                    .values([subject.into(), GUARD_MARK.into()])
                    .map_err(query_error)?;
                let mut give_back = Query::delete();
                give_back
                    .from_table(self.name())
                    .and_where(Expr::col(SUBJECT).eq(subject))
                    .and_where(Expr::col(ERASED_AT).eq(GUARD_MARK));
                Ok(vec![
                    self.dialect.render(&take)?,
                    self.dialect.render(&give_back)?,
                ])
            }
        }
    }

    /// Deletes the tombstones older than [`ERASURE_MEMORY`] at `now`.
    pub(crate) fn forget(&self, now: Timestamp) -> Result<Statement> {
        let before = now.saturating_sub(ERASURE_MEMORY).as_unix_millis();
        let mut delete = Query::delete();
        delete
            .from_table(self.name())
            .and_where(Expr::col(ERASED_AT).lt(before))
            .and_where(Expr::col(ERASED_AT).ne(GUARD_MARK));
        self.dialect.render(&delete)
    }

    /// Reads when `subject` was erased: one row with `erased_at`, or none.
    pub(crate) fn read(&self, subject: &str) -> Result<Statement> {
        let mut select = Query::select();
        select
            .column(ERASED_AT)
            .from(self.name())
            .and_where(Expr::col(SUBJECT).eq(subject))
            .and_where(Expr::col(ERASED_AT).ne(GUARD_MARK));
        self.dialect.render(&select)
    }

    /// The guard of a row carrying `subject`, if any: its statements (none
    /// without a subject) and what its refusal looks like.
    pub(crate) fn guard_of(
        &self,
        subject: Option<&str>,
    ) -> Result<(Vec<Statement>, Option<Guarded>)> {
        match subject {
            None => Ok((Vec::new(), None)),
            Some(subject) => Ok((
                self.guard(subject)?,
                Some(Guarded {
                    subject: subject.to_owned(),
                    constraint: format!("{}.{SUBJECT}", self.table),
                }),
            )),
        }
    }
}

/// A subject some statements guard, and the constraint their refusal names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Guarded {
    pub(crate) subject: String,
    pub(crate) constraint: String,
}

impl Guarded {
    /// Whether `error` is this guard's refusal (or already says so).
    pub(crate) fn refused(&self, error: &Error) -> bool {
        refused(error, std::slice::from_ref(&self.constraint))
    }

    /// `error`, as [`Error::SubjectErased`] if it is this guard's refusal.
    pub(crate) fn name_refusal(&self, error: Error) -> Error {
        name_refusal(
            error,
            std::slice::from_ref(&self.constraint),
            std::slice::from_ref(&self.subject),
        )
    }
}

/// Whether `error` is the refusal of a guard failing on one of
/// `constraints` (or already says so).
pub(crate) fn refused(error: &Error, constraints: &[String]) -> bool {
    match error {
        Error::Conflict { constraint } => constraints.contains(constraint),
        Error::SubjectErased { .. } => true,
        _ => false,
    }
}

/// `error`, as [`Error::SubjectErased`] naming `subjects` when it is the
/// refusal of a guard failing on one of `constraints`.
pub(crate) fn name_refusal(error: Error, constraints: &[String], subjects: &[String]) -> Error {
    if !subjects.is_empty() && refused(&error, constraints) {
        Error::SubjectErased {
            subjects: subjects.to_vec(),
        }
    } else {
        error
    }
}
