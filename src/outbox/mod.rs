//! The outbox: outbound work, recorded in the same atomic batch as the state
//! change that caused it, delivered at least once.
//!
//! # Life of a message
//! ```text
//!  enqueue ──► ready ──claim──► leased ──complete──► (deleted)
//!   │            ▲               │  │
//!   │            └────retry──────┘  └──dead / last attempt──► dead ──replay──► ready
//!   │                                                           └──purge──► (deleted)
//!   └─(ordering key taken)─► waiting ──(previous row of the key deleted)──► ready
//! ```
//! - **ready**: deliverable once `due_at` has passed. A claim leases it:
//!   `due_at` moves to the lease's end and a fresh lease token is written, so
//!   later claims skip it until the lease expires. An expired lease makes the
//!   row due again: a crashed drainer loses nothing.
//! - **Fencing**: `complete`, `retry` and `dead` name the lease they hold and
//!   apply only while it still holds; otherwise they return
//!   [`Error::LeaseLost`](crate::error::Error::LeaseLost) and change nothing.
//! - **Attempts** are spent by outcomes that blame the message: a failed
//!   delivery ([`Delivery::Retry`], [`Delivery::RetryAfter`]), not a receiver
//!   that is down or throttling ([`Delivery::Unavailable`]) and not a claim
//!   or settle call that was lost. A claim never leases a row that has used
//!   all its attempts; it parks it as dead instead.
//! - **Suspects**: a row whose lease expired without any settle may have
//!   crashed its drainer. The next claim marks it (`unsettled_leases`), and
//!   the drainer delivers it alone under a lease of its own, which spends an
//!   attempt up front: a message that kills its drainer every time dies after
//!   the policy's attempts, and costs no other message an attempt.
//! - **Ordering keys**: rows sharing a key are delivered one at a time in
//!   enqueue order. Only the oldest row of a key is ever `ready`; the rest
//!   wait. A dead row keeps blocking its key until it is replayed (and then
//!   delivered) or purged: ordering is never silently broken.
//! - **Dedup keys**: while a row with a dedup key is in the table (pending,
//!   leased or dead), enqueueing another message with that key does nothing.
//!
//! Delivery is at least once: a delivery whose settle was lost (crash,
//! timeout, expired lease) is repeated. Receivers should be idempotent, e.g.
//! with an [`Inbox`](crate::inbox::Inbox) key or the message id as idempotency key.

mod claim;
mod dead_letters;
mod enqueue;
mod message;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod next_due;
mod records;
mod settle;
mod stats;
mod subject;
mod topics;

use std::sync::Arc;

pub(crate) use crate::verdict::Delivery;
pub(crate) use claim::ClaimStatement;
pub(crate) use claim::check_lease;
pub use claim::{Claim, ClaimedMessage, LeaseHandle, MalformedMessage};
pub use enqueue::{Enqueue, Enqueued};
pub(crate) use message::check_key;
pub use message::{Message, MessageLimits};
pub use records::{MessageState, StoredMessage};
pub(crate) use settle::Fate;
pub(crate) use settle::PreparedSettle;
pub use settle::SettleReport;
pub use stats::OutboxStats;
#[cfg(all(test, feature = "sqlite", not(target_arch = "wasm32")))]
pub(crate) use topics::STREAK_MEMORY;
pub(crate) use topics::{Streak, StreakWrite};

use crate::database::{Database, Dialect, Statement};
use crate::erasure::{ERASED_SUBJECTS, Tombstones};
use crate::error::Result;
use crate::identifier::TableName;
use crate::random::{FastRandom, RandomSource};
use crate::retry::RetryPolicy;
use crate::sql::dialects;
use crate::sql::schema;
pub(crate) use crate::sql::{col, state};
use crate::time::{Clock, SystemClock};

const SCHEMA_TEMPLATE: &str = include_str!("schema.sql");
const POSTGRES_SCHEMA_TEMPLATE: &str = include_str!("schema.postgres.sql");

/// A durable outbox in one table of a [`Database`].
///
/// Cheap to clone; clones share the database handle, clock and randomness.
#[derive(Clone)]
pub struct Outbox {
    inner: Arc<Inner>,
}

struct Inner {
    db: Arc<dyn Database>,
    dialect: Dialect,
    table: TableName,
    tombstones: Tombstones,
    clock: Arc<dyn Clock>,
    random: Arc<dyn RandomSource>,
    retry: RetryPolicy,
    limits: MessageLimits,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("table", &self.inner.table)
            .field("retry", &self.inner.retry)
            .finish_non_exhaustive()
    }
}

/// Configures an [`Outbox`]. Made by [`Outbox::builder`].
pub struct OutboxBuilder {
    db: Arc<dyn Database>,
    table: String,
    tombstones: String,
    clock: Arc<dyn Clock>,
    random: Option<Arc<dyn RandomSource>>,
    retry: RetryPolicy,
    limits: MessageLimits,
}

impl OutboxBuilder {
    /// Where "now" comes from (default: [`SystemClock`]).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Where ids, lease tokens and jitter come from (default: a
    /// [`FastRandom`] seeded from the platform).
    pub fn random(mut self, random: Arc<dyn RandomSource>) -> Self {
        self.random = Some(random);
        self
    }

    /// Attempts and backoff (default: [`RetryPolicy::default`]).
    pub fn retry_policy(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// The table of the database's tombstones of erased subjects (default:
    /// [`ERASED_SUBJECTS`]). Every outbox
    /// and inbox of a database must name the same one, or an erasure
    /// through one does not guard the others.
    pub fn tombstones_table(mut self, table: &str) -> Self {
        table.clone_into(&mut self.tombstones);
        self
    }

    /// Size limits on messages (default: [`MessageLimits::default`]).
    pub fn limits(mut self, limits: MessageLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The outbox.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::error::Error::InvalidInput) if a table name
    /// is not a plain identifier (see [`TableName`]).
    pub fn build(self) -> Result<Outbox> {
        Ok(Outbox {
            inner: Arc::new(Inner {
                dialect: self.db.dialect(),
                tombstones: Tombstones::new(&self.tombstones, self.db.dialect())?,
                db: self.db,
                table: TableName::new(&self.table)?,
                clock: self.clock,
                random: self
                    .random
                    .unwrap_or_else(|| Arc::new(FastRandom::from_entropy())),
                retry: self.retry,
                limits: self.limits,
            }),
        })
    }
}

impl Outbox {
    /// Starts configuring an outbox in `table` of `db`.
    pub fn builder(db: Arc<dyn Database>, table: &str) -> OutboxBuilder {
        OutboxBuilder {
            db,
            table: table.to_owned(),
            tombstones: ERASED_SUBJECTS.to_owned(),
            clock: Arc::new(SystemClock),
            random: None,
            retry: RetryPolicy::default(),
            limits: MessageLimits::default(),
        }
    }

    /// An outbox in `table` of `db` with default settings.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::error::Error::InvalidInput) for a bad table name.
    pub fn new(db: Arc<dyn Database>, table: &str) -> Result<Self> {
        Self::builder(db, table).build()
    }

    /// The table this outbox lives in.
    pub fn table(&self) -> &TableName {
        &self.inner.table
    }

    /// The retry policy in force.
    pub fn retry_policy(&self) -> &RetryPolicy {
        &self.inner.retry
    }

    /// The database this outbox uses.
    pub fn database(&self) -> &Arc<dyn Database> {
        &self.inner.db
    }

    /// The DDL of this outbox's table and indexes, its topics table and the
    /// database's tombstones of erased subjects, in the database's dialect,
    /// as a migration file holds it. `migrations/` ships it for the
    /// table `outbox` (`migrations/postgres/` for Postgres).
    pub fn schema_sql(&self) -> String {
        let mut sql = dialects::schema_sql(
            self.inner.dialect,
            [SCHEMA_TEMPLATE, POSTGRES_SCHEMA_TEMPLATE],
            &self.inner.table,
        );
        sql.push_str(&self.inner.tombstones.schema_sql());
        sql
    }

    /// The DDL as separate statements, for [`Database::batch_atomic`].
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

    /// The database's tombstones of erased subjects.
    pub(crate) fn tombstones(&self) -> &Tombstones {
        &self.inner.tombstones
    }

    /// The SQL dialect its statements are rendered in.
    pub(crate) fn dialect(&self) -> Dialect {
        self.inner.dialect
    }

    /// "Now" on the outbox's clock.
    pub(crate) fn now(&self) -> crate::time::Timestamp {
        self.inner.clock.now()
    }

    /// The outbox's clock.
    pub(crate) fn clock(&self) -> &dyn Clock {
        self.inner.clock.as_ref()
    }

    fn table_name(&self) -> String {
        self.inner.table.as_str().to_owned()
    }

    /// Renders a statement for this outbox's database.
    fn render(&self, query: &impl sea_query::QueryStatementBuilder) -> Result<Statement> {
        self.inner.dialect.render(query)
    }
}
