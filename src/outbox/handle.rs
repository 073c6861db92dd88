//! The outbox's handle: its table, database, clock, randomness and policy.

use std::sync::Arc;

use super::MessageLimits;
use crate::database::{Database, Dialect, Statement};
use crate::erasure::{ERASED_SUBJECTS, Tombstones};
use crate::error::{Error, Result};
use crate::identifier::TableName;
use crate::random::{FastRandom, RandomSource};
use crate::retry::RetryPolicy;
use crate::seal::KeyRing;
use crate::sql;
use crate::sql::schema::{self, Templates};
use crate::time::{Clock, SystemClock};

const SCHEMA: Templates = Templates {
    sqlite: include_str!("schema.sql"),
    postgres: include_str!("schema.postgres.sql"),
};
/// With a key ring: SQLite's trigger that deletes a sealed message's data
/// key with its row (Postgres's schema always has it).
const SEALED_SCHEMA: Templates = Templates {
    sqlite: include_str!("schema.sealed.sql"),
    postgres: "",
};

/// A durable outbox in one table of a [`Database`].
///
/// Cheap to clone; clones share the database handle, clock and randomness.
#[derive(Clone)]
pub struct Outbox {
    pub(super) inner: Arc<Inner>,
}

#[derive(Clone)]
pub(super) struct Inner {
    pub(super) db: Arc<dyn Database>,
    pub(super) dialect: Dialect,
    pub(super) table: TableName,
    pub(super) tombstones: Tombstones,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) random: Arc<dyn RandomSource>,
    pub(super) retry: RetryPolicy,
    pub(super) limits: MessageLimits,
    /// Its rollup writes, when rollups are on.
    pub(super) rollups: Option<sql::rollups::RollupWrites>,
    /// How long events published to endpoints are kept.
    pub(super) event_retention: std::time::Duration,
    /// How long logged attempts are kept.
    pub(super) attempt_retention: std::time::Duration,
    /// How long audit entries are kept.
    pub(super) audit_retention: std::time::Duration,
    /// What its drains' sweeps check and tell the operator.
    pub(super) alerts: Vec<super::Alert>,
    /// Whose endpoints receive the operational events.
    pub(super) operational_owner: Option<String>,
    /// How long a receiver fails before its operator is told.
    pub(super) receiver_failing_after: std::time::Duration,
    /// The ring its payloads are sealed under and its subjects hashed with.
    pub(super) ring: Option<KeyRing>,
    /// Whether dedup and ordering keys are stored as keyed hashes.
    pub(super) hash_keys: bool,
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
    rollups: bool,
    event_retention: std::time::Duration,
    attempt_retention: std::time::Duration,
    audit_retention: std::time::Duration,
    alerts: Vec<super::Alert>,
    operational_owner: Option<String>,
    receiver_failing_after: std::time::Duration,
    ring: Option<KeyRing>,
    hash_keys: bool,
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

    /// Whether settles and claims count what they did into the outbox's
    /// rollups table (default: `true`; see [`Outbox::rollups`]). Off, they
    /// write nothing there.
    pub fn rollups(mut self, on: bool) -> Self {
        self.rollups = on;
        self
    }

    /// How long events published to [endpoints](crate::endpoint) are kept,
    /// so an endpoint's deliveries can be recovered since a time (default:
    /// [`Outbox::DEFAULT_EVENT_RETENTION`], 7 days). A drain's sweep
    /// deletes older ones, oldest first, a bounded number at a time.
    pub fn event_retention(mut self, retention: std::time::Duration) -> Self {
        self.event_retention = retention;
        self
    }

    /// How long the attempt log keeps an attempt (default:
    /// [`Outbox::DEFAULT_EVENT_RETENTION`], 7 days). A drain's sweep deletes
    /// older ones, oldest first, a bounded number at a time.
    pub fn attempt_retention(mut self, retention: std::time::Duration) -> Self {
        self.attempt_retention = retention;
        self
    }

    /// How long the audit log keeps an entry (default:
    /// [`Outbox::DEFAULT_AUDIT_RETENTION`], 90 days). A drain's sweep
    /// deletes older ones, oldest first, a bounded number at a time.
    pub fn audit_retention(mut self, retention: std::time::Duration) -> Self {
        self.audit_retention = retention;
        self
    }

    /// Checks `alert` at each sweep of its drains and tells the operator's
    /// endpoints (see [`operational_events`](Self::operational_events),
    /// which it needs) when it holds, at most once per its window. Give
    /// as many as you like.
    pub fn alert(mut self, alert: super::Alert) -> Self {
        self.alerts.push(alert);
        self
    }

    /// Publishes the outbox's operational events ([`operational`](super::operational):
    /// an endpoint disabled or enabled, a message dead, a receiver failing
    /// and answering again) to the endpoints of
    /// `owner` subscribed to them, in the same atomic call as what they
    /// report (default: none). Register the operator's endpoints under
    /// `owner`, subscribed to the reserved types.
    pub fn operational_events(mut self, owner: &str) -> Self {
        self.operational_owner = Some(owner.to_owned());
        self
    }

    /// How long a receiver fails, every message sent to it failing in turn
    /// (drain after drain, its breaker open), before the operator is told
    /// ([`RECEIVER_FAILING`](super::operational::RECEIVER_FAILING), once per
    /// outage, then [`RECEIVER_RECOVERED`](super::operational::RECEIVER_RECOVERED)
    /// when it answers); default: [`Outbox::DEFAULT_RECEIVER_FAILING_AFTER`],
    /// 15 minutes. With [`operational_events`](Self::operational_events) only.
    pub fn receiver_failing_after(mut self, after: std::time::Duration) -> Self {
        self.receiver_failing_after = after;
        self
    }

    /// Seals payloads under `ring` (see [`seal`](crate::seal)): a message
    /// or event with a subject under a data key of its own, which an
    /// erasure of the subject destroys; one without under the ring's
    /// sealing key. Subjects are stored, and tombstones written, as keyed
    /// hashes. Give the database's inboxes the same ring (their tombstones
    /// are shared), and every outbox handle of the table: one without the
    /// ring cannot open what this one sealed. Rows written before stay as
    /// they were: their payloads deliver as they are, and export, erasure
    /// and the erasure guard match a subject both as given and hashed, so
    /// the switch loses no erasure.
    pub fn key_ring(mut self, ring: KeyRing) -> Self {
        self.ring = Some(ring);
        self
    }

    /// Stores dedup and ordering keys as keyed hashes under the
    /// [`key_ring`](Self::key_ring) (default: as given), so a copy of the
    /// table names nobody by an e-mail address used as a key. Keys match
    /// keys written the same way; across the switch a key written before
    /// matches none written after (one duplicate may pass, one ordering key
    /// may run as two until its old rows are gone). The console and exports
    /// show the hashes.
    pub fn hash_keys(mut self, on: bool) -> Self {
        self.hash_keys = on;
        self
    }

    /// The outbox.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::error::Error::InvalidInput) if a table name
    /// is not a plain identifier (see [`TableName`]), an alert's numbers
    /// are out of range or it has no operator to tell, or keys are to be
    /// hashed without a key ring.
    pub fn build(self) -> Result<Outbox> {
        let table = TableName::new(&self.table)?;
        if self.hash_keys && self.ring.is_none() {
            return Err(Error::invalid(
                "hash keys",
                "keys are hashed under a key ring: give .key_ring(ring)",
            ));
        }
        if let Some(owner) = &self.operational_owner {
            super::check_key("operational events' owner", Some(owner))?;
        }
        for alert in &self.alerts {
            alert.check()?;
            if self.operational_owner.is_none() {
                return Err(Error::invalid(
                    "alert",
                    format!(
                        "{} is told to the operator's endpoints: give .operational_events(owner)",
                        alert.rule()
                    ),
                ));
            }
        }
        let rollups = self
            .rollups
            .then(|| sql::rollups::RollupWrites::new(&table, self.db.dialect()));
        Ok(Outbox {
            inner: Arc::new(Inner {
                dialect: self.db.dialect(),
                tombstones: Tombstones::new(
                    &self.tombstones,
                    self.db.dialect(),
                    self.ring.clone(),
                )?,
                db: self.db,
                table,
                clock: self.clock,
                random: self
                    .random
                    .unwrap_or_else(|| Arc::new(FastRandom::from_entropy())),
                retry: self.retry,
                limits: self.limits,
                rollups,
                event_retention: self.event_retention,
                attempt_retention: self.attempt_retention,
                audit_retention: self.audit_retention,
                alerts: self.alerts,
                operational_owner: self.operational_owner,
                receiver_failing_after: self.receiver_failing_after,
                ring: self.ring,
                hash_keys: self.hash_keys,
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
            rollups: true,
            event_retention: Self::DEFAULT_EVENT_RETENTION,
            attempt_retention: Self::DEFAULT_EVENT_RETENTION,
            audit_retention: Self::DEFAULT_AUDIT_RETENTION,
            alerts: Vec::new(),
            operational_owner: None,
            receiver_failing_after: Self::DEFAULT_RECEIVER_FAILING_AFTER,
            ring: None,
            hash_keys: false,
        }
    }

    /// How long a receiver fails before the operator is told, by default:
    /// 15 minutes.
    pub const DEFAULT_RECEIVER_FAILING_AFTER: std::time::Duration =
        std::time::Duration::from_secs(15 * 60);

    /// How long audit entries are kept by default: 90 days.
    pub const DEFAULT_AUDIT_RETENTION: std::time::Duration =
        std::time::Duration::from_secs(90 * 24 * 3600);

    /// How long events published to endpoints are kept by default: 7 days.
    pub const DEFAULT_EVENT_RETENTION: std::time::Duration =
        std::time::Duration::from_secs(7 * 24 * 3600);

    /// How many expired events one sweep deletes at most.
    pub(crate) const EVENTS_PRUNED_PER_SWEEP: u32 = 500;

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

    /// The same outbox (table, policies, clock) through another handle on
    /// the same database: a D1 session that may read from a replica
    /// (`D1Database::replica_reads`, wasm32) for an operator
    /// console, say. Give such a handle to readers only: a drainer claims
    /// and settles through the outbox it was built with.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when `db` speaks another SQL dialect.
    pub fn through(&self, db: Arc<dyn Database>) -> Result<Outbox> {
        if db.dialect() != self.inner.dialect {
            return Err(Error::invalid(
                "database handle",
                "an outbox is read through a handle of its own dialect",
            ));
        }
        Ok(Outbox {
            inner: Arc::new(Inner {
                db,
                ..(*self.inner).clone()
            }),
        })
    }

    /// The DDL of this outbox's table and indexes, its topics table and the
    /// database's tombstones of erased subjects, in the database's dialect,
    /// as a migration file holds it. `migrations/` ships it for the
    /// table `outbox` (`migrations/postgres/` for Postgres).
    ///
    /// On SQLite an outbox with a [key ring](OutboxBuilder::key_ring) has
    /// one statement more: the trigger that deletes a sealed message's data
    /// key with its row. Give a ring to an outbox whose tables exist, then
    /// run [`create_schema`](Outbox::create_schema) (or that statement) so
    /// that the keys of its delivered messages go with them.
    pub fn schema_sql(&self) -> String {
        let mut sql = SCHEMA.render(self.inner.dialect, &self.inner.table);
        if self.key_ring().is_some() {
            sql.push_str(&SEALED_SCHEMA.render(self.inner.dialect, &self.inner.table));
        }
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

    /// The ring its payloads are sealed under, if any.
    pub(crate) fn key_ring(&self) -> Option<&KeyRing> {
        self.inner.ring.as_ref()
    }

    /// `subject` as this outbox stores it: its keyed hash under the ring,
    /// or as given without one.
    pub(crate) fn stored_subject<'a>(&self, subject: &'a str) -> std::borrow::Cow<'a, str> {
        match &self.inner.ring {
            Some(ring) => ring.hash(subject).into(),
            None => subject.into(),
        }
    }

    /// `subject` as rows of this outbox may hold it: as stored now (its
    /// keyed hash, with a ring) and as given (how rows written before the
    /// ring was given hold it). Export and erasure match every form.
    pub(crate) fn subject_forms(&self, subject: &str) -> Vec<String> {
        match &self.inner.ring {
            Some(ring) => vec![ring.hash(subject), subject.to_owned()],
            None => vec![subject.to_owned()],
        }
    }

    /// A dedup or ordering key as this outbox stores it.
    pub(crate) fn stored_key<'a>(&self, key: &'a str) -> std::borrow::Cow<'a, str> {
        match &self.inner.ring {
            Some(ring) if self.inner.hash_keys => ring.hash(key).into(),
            _ => key.into(),
        }
    }

    /// Whether settles and claims write rollups.
    pub(crate) fn counts_rollups(&self) -> bool {
        self.inner.rollups.is_some()
    }

    /// Its rollup writes, when rollups are on.
    pub(crate) fn rollup_writes(&self) -> Option<&sql::rollups::RollupWrites> {
        self.inner.rollups.as_ref()
    }

    /// The limits its messages are checked against.
    pub(crate) fn message_limits(&self) -> &MessageLimits {
        &self.inner.limits
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
}
