//! The original algorithm (`shared/reference/outbox.rs`), rewritten on our
//! `Database` port so both run on the same adapter in the same process.
//! Benchmarks only: it keeps the original's design, flaws included —
//! RFC 3339 text times, a claim of one `SELECT` and then one guarded
//! `UPDATE` per row, one `DELETE` per delivered row, no index on due times.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use sea_query::{Expr, ExprTrait, Order, Query};
use workers_outbox::{Database, Dialect, Result, Statement, Timestamp};

/// The table, as the original shipped it.
pub const TABLE: &str = "baseline_outbox";

/// The original DDL.
pub fn schema() -> Vec<Statement> {
    vec![Statement::new(
        format!(
            "CREATE TABLE IF NOT EXISTS {TABLE} (id TEXT PRIMARY KEY, topic TEXT NOT NULL, \
             payload TEXT NOT NULL, subject TEXT, attempts INTEGER NOT NULL DEFAULT 0, \
             next_attempt_at TEXT NOT NULL, locked_until TEXT, created_at TEXT NOT NULL)"
        ),
        vec![],
    )]
}

/// The original enqueue of one message due at `at`: one row.
pub fn enqueue(id: &str, at: Timestamp) -> Statement {
    let at = rfc3339(at);
    Statement::new(
        format!(
            "INSERT INTO {TABLE} (id, topic, payload, subject, attempts, next_attempt_at, created_at) \
             VALUES (?, 'webhook', '{{\"n\":1}}', NULL, 0, ?, ?)"
        ),
        vec![id.into(), at.clone().into(), at.into()],
    )
}

/// A time as the original stored it.
pub fn rfc3339(at: Timestamp) -> String {
    let since_epoch = Duration::from_millis(u64::try_from(at.as_unix_millis()).unwrap_or(0));
    humantime::format_rfc3339_millis(SystemTime::UNIX_EPOCH + since_epoch).to_string()
}

/// A leased record.
#[derive(Debug, Clone)]
pub struct Record {
    /// The message id.
    pub id: String,
}

/// The original outbox over one database.
pub struct Baseline {
    db: Arc<dyn Database>,
}

impl Baseline {
    /// The original outbox in [`TABLE`].
    pub fn new(db: Arc<dyn Database>) -> Self {
        Baseline { db }
    }

    /// The original claim: select due rows, then win each with a guarded
    /// update, one round trip per row.
    pub async fn claim_due(
        &self,
        now: Timestamp,
        lease_until: Timestamp,
        limit: u64,
    ) -> Result<Vec<Record>> {
        let now = rfc3339(now);
        let lease_until = rfc3339(lease_until);
        let unlocked = || {
            Expr::col("locked_until")
                .is_null()
                .or(Expr::col("locked_until").lt(now.as_str()))
        };
        let mut select = Query::select();
        select
            .columns(["id", "topic", "payload", "attempts"])
            .from(TABLE)
            .and_where(Expr::col("next_attempt_at").lte(now.as_str()))
            .and_where(unlocked())
            .order_by("next_attempt_at", Order::Asc)
            .limit(limit);
        let rows = self.db.query(&Dialect::Sqlite.render(&select)?).await?;
        let mut leased = Vec::new();
        for row in rows.iter() {
            let id: String = row.get("id")?;
            let mut lease = Query::update();
            lease
                .table(TABLE)
                .value("locked_until", lease_until.as_str())
                .and_where(Expr::col("id").eq(id.as_str()))
                .and_where(unlocked());
            if self.db.execute(&Dialect::Sqlite.render(&lease)?).await? == 1 {
                leased.push(Record { id });
            }
        }
        Ok(leased)
    }

    /// The original completion: one delete per row.
    pub async fn complete(&self, id: &str) -> Result<()> {
        let mut delete = Query::delete();
        delete.from_table(TABLE).and_where(Expr::col("id").eq(id));
        self.db
            .execute(&Dialect::Sqlite.render(&delete)?)
            .await
            .map(drop)
    }
}
