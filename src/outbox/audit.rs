//! The audit log: who changed what, written in the change's own atomic call
//! (see [`Outbox::audited`]), read newest first, kept for the outbox's
//! audit retention.

use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;

use super::Outbox;
use crate::database::{Database, Dialect, Outcome, Rows, Statement};
use crate::error::{Error, Result};
use crate::future::BoxFuture;
use crate::sql::audit::{self, AuditRow, audit_col, audit_table};
use crate::time::Timestamp;

/// A change about to be made, as its audit entry will name it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Audit {
    /// Who makes it (an e-mail, a token's name).
    pub who: String,
    /// As what (`operator`).
    pub role: String,
    /// What it is (the console's route: `outboxes/mail/dead/replay`).
    pub action: String,
    /// What it selects, as asked (never a secret).
    pub selection: serde_json::Value,
}

impl Audit {
    /// `who`, as `role`, does `action` to `selection`.
    pub fn new(
        who: impl Into<String>,
        role: impl Into<String>,
        action: impl Into<String>,
        selection: serde_json::Value,
    ) -> Self {
        Audit {
            who: who.into(),
            role: role.into(),
            action: action.into(),
            selection,
        }
    }
}

/// Where an entry is: when it was written, and its id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditKey {
    /// When it was written, in Unix ms.
    #[serde(rename = "at_ms", serialize_with = "super::pause::timestamp_millis")]
    pub at: Timestamp,
    /// Its id (a ULID).
    pub id: String,
}

impl AuditKey {
    /// `<at_ms>.<id>`, as [`AuditEntry`]'s key is written in a page's link.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = || Error::invalid("audit key", "give <at_ms>.<id>, as a page gave it");
        let (at, id) = text.split_once('.').ok_or_else(bad)?;
        let at = Timestamp::from_unix_millis(at.parse().map_err(|_| bad())?)?;
        if id.is_empty() || id.contains('\0') {
            return Err(bad());
        }
        Ok(AuditKey {
            at,
            id: id.to_owned(),
        })
    }
}

impl std::fmt::Display for AuditKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.at.as_unix_millis(), self.id)
    }
}

/// One entry of the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct AuditEntry {
    /// Where it is.
    #[serde(flatten)]
    pub key: AuditKey,
    /// Who made the change.
    pub who: String,
    /// As what.
    pub role: String,
    /// What the change was.
    pub action: String,
    /// What it selected, as asked.
    pub selection: serde_json::Value,
    /// What it did, once recorded ([`Outbox::record_audit_result`]);
    /// `None` if it never was (the change committed, but the write of its
    /// result was lost).
    pub result: Option<serde_json::Value>,
}

impl Outbox {
    /// The most entries one [`audit_log`](Self::audit_log) page holds.
    pub const MAX_AUDIT_PAGE: u32 = 100;

    /// How many expired entries one sweep deletes at most.
    pub(crate) const AUDIT_PRUNED_PER_SWEEP: u32 = 500;

    /// A handle to this outbox whose next call that writes (any statement
    /// of it an `INSERT`, `UPDATE` or `DELETE`) also writes `audit`'s
    /// entry, in the same atomic call: the change and its entry commit
    /// together or not at all. Calls that only read pass as they are; the
    /// entry is written once. Make the change through the handle (or
    /// through [`Endpoints::audited`](crate::endpoint::Endpoints::audited)),
    /// then [`record_audit_result`](Self::record_audit_result) with the key.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a selection that does not serialize.
    pub fn audited(&self, audit: &Audit) -> Result<(Outbox, AuditKey)> {
        let (statement, key) = self.audit_statement(audit)?;
        let db: Arc<dyn Database> = Arc::new(Auditing {
            inner: self.inner.db.clone(),
            entry: Mutex::new(Some(statement)),
        });
        Ok((self.through(db)?, key))
    }

    /// `audit`'s entry as a statement, for a batch the caller builds, and
    /// its key.
    pub(crate) fn audit_statement(&self, audit: &Audit) -> Result<(Statement, AuditKey)> {
        let at = self.now();
        let key = AuditKey {
            at,
            id: self.new_ulid(at),
        };
        let selection = crate::sql::json_text(&audit.selection, "audit selection")?;
        let row = AuditRow {
            at,
            id: &key.id,
            who: &audit.who,
            role: &audit.role,
            action: &audit.action,
            selection: &selection,
        };
        Ok((audit::record(self.table(), self.dialect(), &row)?, key))
    }

    /// Records what the change of the entry at `key` did.
    ///
    /// # Errors
    /// [`Error::NotFound`] for no entry at `key` (its change did not
    /// commit); database errors.
    pub async fn record_audit_result(
        &self,
        key: &AuditKey,
        result: &serde_json::Value,
    ) -> Result<()> {
        let result = crate::sql::json_text(result, "audit result")?;
        let statement =
            audit::set_result(self.table(), self.dialect(), (key.at, &key.id), &result)?;
        match self.inner.db.execute(&statement).await? {
            0 => Err(Error::NotFound {
                what: "audit entry",
                id: key.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// The `limit` (1 ..= [`MAX_AUDIT_PAGE`](Self::MAX_AUDIT_PAGE)) newest
    /// entries written before `before` (from the newest if `None`), newest
    /// first.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a limit out of range; database errors;
    /// [`Error::MalformedRow`].
    pub async fn audit_log(
        &self,
        before: Option<&AuditKey>,
        limit: u32,
    ) -> Result<Vec<AuditEntry>> {
        if !(1..=Self::MAX_AUDIT_PAGE).contains(&limit) {
            return Err(Error::invalid(
                "audit page limit",
                format!("{limit} is outside 1 ..= {}", Self::MAX_AUDIT_PAGE),
            ));
        }
        let statement = audit::page(
            self.table(),
            self.dialect(),
            before.map(|key| (key.at, key.id.as_str())),
            limit,
        )?;
        let rows = self.inner.db.query(&statement).await?;
        let table = audit_table(self.table());
        let json = |text: String, column: &str| {
            serde_json::from_str(&text).map_err(|error| Error::MalformedRow {
                table: None,
                row: None,
                column: column.into(),
                reason: error.to_string(),
            })
        };
        rows.iter()
            .map(|row| {
                let id: String = row.get(audit_col::ID)?;
                let entry = (|| {
                    let result: Option<String> = row.get(audit_col::RESULT)?;
                    Ok(AuditEntry {
                        key: AuditKey {
                            at: row.get(audit_col::AT)?,
                            id: id.clone(),
                        },
                        who: row.get(audit_col::WHO)?,
                        role: row.get(audit_col::ROLE)?,
                        action: row.get(audit_col::ACTION)?,
                        selection: json(row.get(audit_col::SELECTION)?, audit_col::SELECTION)?,
                        result: result
                            .map(|text| json(text, audit_col::RESULT))
                            .transpose()?,
                    })
                })();
                entry.map_err(|error: Error| error.in_row(&table, Some(&id)))
            })
            .collect()
    }

    /// The sweep's share: deletes at most [`AUDIT_PRUNED_PER_SWEEP`](Self::AUDIT_PRUNED_PER_SWEEP)
    /// entries older than the audit retention.
    pub(crate) fn prune_audit(&self, now: Timestamp) -> Result<Statement> {
        audit::prune(
            self.table(),
            self.dialect(),
            now.saturating_sub(self.inner.audit_retention),
            Self::AUDIT_PRUNED_PER_SWEEP,
        )
    }
}

/// A database handle that adds an audit entry to the first call through it
/// that writes.
struct Auditing {
    inner: Arc<dyn Database>,
    entry: Mutex<Option<Statement>>,
}

impl Auditing {
    /// The entry, taken, if `statements` write and it was not written yet.
    fn entry_for(&self, statements: &[Statement]) -> Option<Statement> {
        if !statements.iter().any(|statement| writes(statement.sql())) {
            return None;
        }
        self.entry
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// `statements` and `entry` in one atomic call; the outcomes of
    /// `statements`.
    async fn with_entry(&self, statements: &[Statement], entry: Statement) -> Result<Vec<Outcome>> {
        let mut all = statements.to_vec();
        all.push(entry);
        let mut outcomes = self.inner.batch_atomic(&all).await?;
        outcomes.pop();
        Ok(outcomes)
    }

    async fn one_with_entry(&self, statement: &Statement, entry: Statement) -> Result<Outcome> {
        self.with_entry(std::slice::from_ref(statement), entry)
            .await?
            .pop()
            .ok_or_else(|| Error::internal("a batch returned no outcome for its statement"))
    }
}

/// Whether `sql` changes rows: it starts with `INSERT`, `UPDATE` or
/// `DELETE`.
fn writes(sql: &str) -> bool {
    let first: String = sql
        .trim_start()
        .chars()
        .take_while(char::is_ascii_alphabetic)
        .collect();
    ["INSERT", "UPDATE", "DELETE"]
        .iter()
        .any(|keyword| first.eq_ignore_ascii_case(keyword))
}

impl Database for Auditing {
    fn dialect(&self) -> Dialect {
        self.inner.dialect()
    }

    fn run<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Outcome>> {
        match self.entry_for(std::slice::from_ref(statement)) {
            Some(entry) => Box::pin(self.one_with_entry(statement, entry)),
            None => self.inner.run(statement),
        }
    }

    fn run_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
        match self.entry_for(statements) {
            Some(entry) => Box::pin(self.with_entry(statements, entry)),
            None => self.inner.run_atomic(statements),
        }
    }

    fn execute<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<u64>> {
        match self.entry_for(std::slice::from_ref(statement)) {
            Some(entry) => {
                Box::pin(
                    async move { Ok(self.one_with_entry(statement, entry).await?.rows_affected) },
                )
            }
            None => self.inner.execute(statement),
        }
    }

    fn query<'a>(&'a self, statement: &'a Statement) -> BoxFuture<'a, Result<Rows>> {
        match self.entry_for(std::slice::from_ref(statement)) {
            Some(entry) => {
                Box::pin(async move { Ok(self.one_with_entry(statement, entry).await?.rows) })
            }
            None => self.inner.query(statement),
        }
    }

    fn batch_atomic<'a>(
        &'a self,
        statements: &'a [Statement],
    ) -> BoxFuture<'a, Result<Vec<Outcome>>> {
        match self.entry_for(statements) {
            Some(entry) => Box::pin(self.with_entry(statements, entry)),
            None => self.inner.batch_atomic(statements),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::writes;

    #[test]
    fn writes_are_told_by_their_first_keyword() {
        for sql in ["INSERT INTO t", "  update t SET", "DELETE FROM t"] {
            assert!(writes(sql), "{sql}");
        }
        for sql in ["SELECT 1", "WITH x AS (SELECT 1) SELECT 1", "", "INSERTED"] {
            assert!(!writes(sql), "{sql}");
        }
    }
}
