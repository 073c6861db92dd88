//! A fleet of outboxes in one list: many Durable Objects (or tenants'
//! databases) each keep an outbox of their own, and an operator must find
//! the ones with dead letters or a backlog without knowing their names.
//!
//! - A [`Fleet`] is the registry: one row per member's outbox, in any
//!   [`Database`] (D1 beside Durable Objects, Postgres), paged by name, by
//!   dead letters or by the most overdue message, each page read by an
//!   index. The console lists it ([`ConsoleBuilder::fleet`](crate::console::ConsoleBuilder::fleet)),
//!   each row linking to its member's own console.
//! - A [`FleetMember`] keeps its row up to date from the member's own
//!   drains ([`DrainerBuilder::fleet`](crate::drain::DrainerBuilder::fleet)):
//!   after each drain it reads its outbox's [`summary`](crate::Outbox::summary)
//!   (bounded reads, in the member's own database) and writes its row (one
//!   upsert) when it changed — at once for dead letters, errors and an
//!   emptied or stuck backlog, at most once per [`every`](FleetMember::every)
//!   when only the counts drift, and once an hour when nothing changed.

mod member;

use std::sync::Arc;

use crate::database::{Database, Dialect, Row, Statement};
use crate::error::{Error, Result};
use crate::identifier::TableName;
use crate::outbox::OutboxSummary;
use crate::sql::fleet::{self, After, FleetRow, PageOrder, fleet_col};
use crate::sql::schema::{self, Templates};
use crate::time::Timestamp;

pub use member::FleetMember;

const SCHEMA: Templates = Templates {
    sqlite: include_str!("schema.sql"),
    postgres: include_str!("schema.postgres.sql"),
};

/// The registry of a fleet's outboxes: one row per member's outbox.
#[derive(Clone)]
pub struct Fleet {
    inner: Arc<Inner>,
}

struct Inner {
    db: Arc<dyn Database>,
    table: TableName,
    dialect: Dialect,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("table", &self.inner.table)
            .finish_non_exhaustive()
    }
}

/// How [`Fleet::list`] orders its rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FleetOrder {
    /// Every member, by name then outbox.
    #[default]
    Name,
    /// Only members with dead letters, most first (ties by name, last
    /// first: the index is read backwards).
    Dead,
    /// Only members with a message due, most overdue first.
    OldestDue,
}

impl FleetOrder {
    /// Its name in a console's query: `name`, `dead` or `oldest_due`.
    pub fn as_str(self) -> &'static str {
        match self {
            FleetOrder::Name => "name",
            FleetOrder::Dead => "dead",
            FleetOrder::OldestDue => "oldest_due",
        }
    }
}

impl std::str::FromStr for FleetOrder {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        [FleetOrder::Name, FleetOrder::Dead, FleetOrder::OldestDue]
            .into_iter()
            .find(|order| order.as_str() == text)
            .ok_or_else(|| Error::invalid("order", "give name, dead or oldest_due"))
    }
}

/// One member's outbox as it last reported.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetEntry {
    /// The member (a Durable Object's name).
    pub member: String,
    /// Its outbox's table.
    pub outbox: String,
    /// What it reported.
    pub summary: OutboxSummary,
    /// When.
    pub reported_at: Timestamp,
}

/// Where the next page starts: after the last row of this one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetCursor {
    value: i64,
    member: String,
    outbox: String,
}

impl FleetCursor {
    fn after_row(entry: &FleetEntry, order: FleetOrder) -> Self {
        let value = match order {
            FleetOrder::Name => 0,
            FleetOrder::Dead => i64::from(entry.summary.dead),
            FleetOrder::OldestDue => entry
                .summary
                .oldest_due_at
                .map_or(0, Timestamp::as_unix_millis),
        };
        FleetCursor {
            value,
            member: entry.member.clone(),
            outbox: entry.outbox.clone(),
        }
    }

    /// Reads a cursor as [`Display`](std::fmt::Display) wrote it.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `text` is not one.
    pub fn parse(text: &str) -> Result<Self> {
        let bad = || Error::invalid("fleet cursor", "give the cursor a page gave");
        let (value, member, outbox): (i64, String, String) =
            serde_json::from_str(text).map_err(|_| bad())?;
        check_name("member", &member).map_err(|_| bad())?;
        check_name("outbox", &outbox).map_err(|_| bad())?;
        Ok(FleetCursor {
            value,
            member,
            outbox,
        })
    }
}

impl std::fmt::Display for FleetCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = serde_json::json!([self.value, self.member, self.outbox]);
        write!(f, "{text}")
    }
}

/// One page of [`Fleet::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FleetPage {
    /// Its rows.
    pub entries: Vec<FleetEntry>,
    /// Where the next page starts; `None` on the last.
    pub next: Option<FleetCursor>,
}

/// The longest member or outbox name a registry takes, in bytes.
pub const MAX_NAME_BYTES: usize = 200;

fn check_name(what: &'static str, name: &str) -> Result<()> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES || name.contains('\0') {
        return Err(Error::invalid(
            what,
            format!("is 1 to {MAX_NAME_BYTES} bytes without NUL"),
        ));
    }
    Ok(())
}

impl Fleet {
    /// The most rows one [`list`](Self::list) page holds.
    pub const MAX_PAGE: u32 = 100;

    /// The registry in `table` of `db`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a table name that is not a plain
    /// identifier.
    pub fn new(db: Arc<dyn Database>, table: &str) -> Result<Fleet> {
        let dialect = db.dialect();
        Ok(Fleet {
            inner: Arc::new(Inner {
                db,
                table: TableName::new(table)?,
                dialect,
            }),
        })
    }

    /// The registry's table.
    pub fn table(&self) -> &TableName {
        &self.inner.table
    }

    /// The DDL of the registry's table and indexes, in the database's
    /// dialect, as a migration file holds it.
    pub fn schema_sql(&self) -> String {
        SCHEMA.render(self.inner.dialect, &self.inner.table)
    }

    /// The DDL as separate statements.
    pub fn schema_statements(&self) -> Vec<Statement> {
        schema::statements(&self.schema_sql())
    }

    /// Creates the table and indexes if they do not exist, atomically.
    ///
    /// # Errors
    /// Any database error.
    pub async fn create_schema(&self) -> Result<()> {
        self.inner
            .db
            .batch_atomic(&self.schema_statements())
            .await
            .map(drop)
    }

    /// Writes `member`'s row for `outbox`: `summary`, reported `at` (one
    /// upsert).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a name that is empty, longer than
    /// [`MAX_NAME_BYTES`] or holds a NUL; a database error.
    pub async fn report(
        &self,
        member: &str,
        outbox: &str,
        summary: &OutboxSummary,
        at: Timestamp,
    ) -> Result<()> {
        check_name("member", member)?;
        check_name("outbox", outbox)?;
        let statement = fleet::upsert(
            &self.inner.table,
            self.inner.dialect,
            &FleetRow {
                member,
                outbox,
                backlog: summary.backlog,
                dead: summary.dead,
                oldest_due_at: summary.oldest_due_at,
                last_error: summary.last_error.as_deref(),
                reported_at: at,
            },
        )?;
        self.inner.db.execute(&statement).await.map(drop)
    }

    /// At most `limit` (1 ..= [`MAX_PAGE`](Self::MAX_PAGE)) rows in `order`,
    /// after `after` (a cursor a page of the same order gave): each page
    /// reads about `limit` rows of one index.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a limit out of range; a database error;
    /// [`Error::MalformedRow`] for a row not of the registry's types.
    pub async fn list(
        &self,
        order: FleetOrder,
        after: Option<&FleetCursor>,
        limit: u32,
    ) -> Result<FleetPage> {
        if !(1..=Self::MAX_PAGE).contains(&limit) {
            return Err(Error::invalid(
                "limit",
                format!("is 1 to {}", Self::MAX_PAGE),
            ));
        }
        let page_order = match order {
            FleetOrder::Name => PageOrder::Name,
            FleetOrder::Dead => PageOrder::Dead,
            FleetOrder::OldestDue => PageOrder::OldestDue,
        };
        let statement = fleet::page(
            &self.inner.table,
            self.inner.dialect,
            page_order,
            after.map(|cursor| After {
                value: cursor.value,
                member: &cursor.member,
                outbox: &cursor.outbox,
            }),
            limit,
        )?;
        let rows = self.inner.db.query(&statement).await?;
        let entries = rows
            .iter()
            .map(|row| self.entry(&row))
            .collect::<Result<Vec<_>>>()?;
        let full = entries.len() == limit as usize;
        let next = full
            .then(|| {
                entries
                    .last()
                    .map(|last| FleetCursor::after_row(last, order))
            })
            .flatten();
        Ok(FleetPage { entries, next })
    }

    /// Deletes `member`'s rows (an object deleted for good); how many.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a bad name; a database error.
    pub async fn forget(&self, member: &str) -> Result<u64> {
        check_name("member", member)?;
        let statement = fleet::forget(&self.inner.table, self.inner.dialect, member)?;
        self.inner.db.execute(&statement).await
    }

    fn entry(&self, row: &Row<'_>) -> Result<FleetEntry> {
        let in_table = |error: Error| error.in_row(self.inner.table.as_str(), None);
        Ok(FleetEntry {
            member: row.get(fleet_col::MEMBER).map_err(in_table)?,
            outbox: row.get(fleet_col::OUTBOX).map_err(in_table)?,
            summary: OutboxSummary {
                backlog: row.get(fleet_col::BACKLOG).map_err(in_table)?,
                dead: row.get(fleet_col::DEAD).map_err(in_table)?,
                oldest_due_at: row.get(fleet_col::OLDEST_DUE_AT).map_err(in_table)?,
                last_error: row.get(fleet_col::LAST_ERROR).map_err(in_table)?,
            },
            reported_at: row.get(fleet_col::REPORTED_AT).map_err(in_table)?,
        })
    }
}
