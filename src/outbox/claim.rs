//! Claiming: one statement that leases up to `n` due rows and returns them.

use std::time::Duration;

use sea_query::{
    BinOper, CommonTableExpression, Expr, ExprTrait, LockBehavior, LockType, Order, Query,
    SelectStatement, UpdateStatement, WithClause,
};
use serde::de::DeserializeOwned;

use super::{Outbox, col, state};
use crate::database::{Dialect, Row, Rows, Statement};
use crate::error::{Error, Result};
use crate::time::Timestamp;

/// What a lease holder needs to settle a message, and nothing more.
///
/// The token is fresh for every lease; settling with a lease that no longer
/// holds is refused with [`Error::LeaseLost`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHandle {
    pub(crate) id: String,
    pub(crate) token: String,
    pub(crate) until: Timestamp,
    pub(crate) attempt: u32,
    pub(crate) ordering_key: Option<String>,
    /// Failures so far that spent no attempt: they grow the backoff.
    pub(crate) deferrals: u32,
    /// When the message was enqueued: free deferrals end at the policy's
    /// [`defer_limit`](crate::retry::RetryPolicy::defer_limit) after it.
    pub(crate) created_at: Timestamp,
}

impl LeaseHandle {
    /// The leased message's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// When the lease expires; after that another drainer may take it.
    pub fn until(&self) -> Timestamp {
        self.until
    }

    /// Which attempt this lease is (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
}

/// A message leased to the caller for delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimedMessage {
    /// The message id: pass it on as an idempotency key.
    pub id: String,
    /// The topic the message was enqueued with.
    pub topic: String,
    /// The payload's JSON text.
    pub payload: String,
    /// The subject the message is about, if any.
    pub subject: Option<String>,
    /// When the message was enqueued.
    pub created_at: Timestamp,
    /// How many leases in a row expired without a settle before this one.
    pub(crate) unsettled_leases: u32,
    pub(crate) lease: LeaseHandle,
}

impl ClaimedMessage {
    /// The lease to settle with.
    pub fn lease(&self) -> &LeaseHandle {
        &self.lease
    }

    /// Which attempt this delivery is (1 for the first).
    pub fn attempt(&self) -> u32 {
        self.lease.attempt
    }

    /// How many leases of this message in a row expired without a settle:
    /// its delivery may have crashed a drainer, or succeeded with its settle
    /// lost. A drainer delivers such a message alone.
    pub fn unsettled_leases(&self) -> u32 {
        self.unsettled_leases
    }

    /// Whether the message is a suspect (see
    /// [`unsettled_leases`](ClaimedMessage::unsettled_leases)).
    pub fn is_suspect(&self) -> bool {
        self.unsettled_leases > 0
    }

    /// The payload decoded as `T`.
    ///
    /// # Errors
    /// [`Error::MalformedRow`] naming the message if the payload does not
    /// decode as `T`.
    pub fn payload_as<T: DeserializeOwned>(&self) -> Result<T> {
        serde_json::from_str(&self.payload).map_err(|error| Error::MalformedRow {
            table: None,
            row: Some(self.id.clone()),
            column: col::PAYLOAD.into(),
            reason: error.to_string(),
        })
    }
}

/// A claimed row that could not be decoded. It is leased like the others;
/// settle it dead through its lease (when the row's key columns were
/// readable) so it stops coming back.
#[derive(Debug, Clone, PartialEq)]
pub struct MalformedMessage {
    /// What was wrong, naming the row.
    pub error: Error,
    /// The lease, when the row's id was readable.
    pub lease: Option<LeaseHandle>,
}

/// What one claim returned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Claim {
    /// Messages now leased to the caller, oldest due first.
    pub messages: Vec<ClaimedMessage>,
    /// Ids of rows whose attempts were used up by leases that expired
    /// without a settle; the claim parked them as dead instead of leasing.
    pub exhausted: Vec<String>,
    /// Rows leased but undecodable.
    pub malformed: Vec<MalformedMessage>,
}

impl Claim {
    /// Whether the claim found no due rows at all.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty() && self.exhausted.is_empty() && self.malformed.is_empty()
    }

    /// How many rows the claim touched.
    pub fn len(&self) -> usize {
        self.messages.len() + self.exhausted.len() + self.malformed.len()
    }
}

/// A prepared claim: the statement, and how to read what it returns. Lets a
/// caller send the claim in the same batch as other statements (for
/// example the previous batch's settle).
#[derive(Debug, Clone)]
#[must_use = "a prepared claim leases nothing until it is sent"]
pub(crate) struct ClaimStatement {
    statement: Statement,
    token: String,
    until: Timestamp,
    table: String,
    /// Postgres returns rows in no order: each carries its `claimed_due`
    /// to sort by.
    dialect: Dialect,
}

impl ClaimStatement {
    /// The statement.
    pub(crate) fn statement(&self) -> &Statement {
        &self.statement
    }

    /// A read of the rows this claim leased, for when the claim may have
    /// committed but its reply was lost: safe to send any number of times,
    /// and read with [`read`](ClaimStatement::read) like the claim's own
    /// rows. (Rows the claim parked as dead are not among them.)
    ///
    /// # Errors
    /// If the statement cannot be built.
    pub(crate) fn recovery(&self) -> Result<Statement> {
        let mut select = Query::select();
        select
            .columns(RETURNED)
            .from(self.table.clone())
            .and_where(Expr::col(col::STATE).eq(state::READY))
            .and_where(Expr::col(col::DUE_AT).eq(self.until.as_unix_millis()))
            .and_where(Expr::col(col::LEASE_TOKEN).eq(self.token.as_str()))
            .order_by(col::ID, Order::Asc);
        self.dialect.render(&select)
    }

    /// Reads the rows the statement returned.
    pub(crate) fn read(&self, rows: &Rows) -> Claim {
        let mut claim = Claim::default();
        let mut rows: Vec<Row<'_>> = rows.iter().collect();
        if self.dialect == Dialect::Postgres {
            // An unreadable due time sorts first; the row is reported as it
            // decodes below.
            rows.sort_by_cached_key(|row| {
                (
                    row.get::<i64>(CLAIMED_DUE).unwrap_or(i64::MIN),
                    row.get::<String>(col::ID).unwrap_or_default(),
                )
            });
        }
        for row in rows {
            match self.read_row(row) {
                Ok(Returned::Leased(message)) => claim.messages.push(message),
                Ok(Returned::Exhausted(id)) => claim.exhausted.push(id),
                Err(malformed) => claim.malformed.push(*malformed),
            }
        }
        claim
    }

    fn read_row(&self, row: Row<'_>) -> Result<Returned, Box<MalformedMessage>> {
        let id = row.get::<String>(col::ID).map_err(|error| {
            Box::new(MalformedMessage {
                error: error.in_row(&self.table, None),
                lease: None,
            })
        })?;
        let lease = |attempt, ordering_key, deferrals, created_at| LeaseHandle {
            id: id.clone(),
            token: self.token.clone(),
            until: self.until,
            attempt,
            ordering_key,
            deferrals,
            created_at,
        };
        let decoded = (|| {
            if row.get::<String>(col::STATE)? == state::DEAD {
                return Ok(Returned::Exhausted(id.clone()));
            }
            // A claim spends no attempt: this lease is attempt `attempts + 1`.
            let attempts: u32 = row.get(col::ATTEMPTS)?;
            let created_at = row.get(col::CREATED_AT)?;
            Ok(Returned::Leased(ClaimedMessage {
                id: id.clone(),
                topic: row.get(col::TOPIC)?,
                payload: row.get(col::PAYLOAD)?,
                subject: row.get(col::SUBJECT)?,
                created_at,
                unsettled_leases: row.get(col::UNSETTLED_LEASES)?,
                lease: lease(
                    attempts.saturating_add(1),
                    row.get(col::ORDERING_KEY)?,
                    row.get(col::DEFERRALS)?,
                    created_at,
                ),
            }))
        })();
        decoded.map_err(|error: Error| {
            // Only good for burying the row: an unreadable attempt count
            // counts as the last, so even a retry parks it.
            let attempt = row
                .get::<u32>(col::ATTEMPTS)
                .map_or(u32::MAX, |attempts| attempts.saturating_add(1));
            Box::new(MalformedMessage {
                error: error.in_row(&self.table, Some(&id)),
                lease: Some(lease(attempt, None, 0, Timestamp::EPOCH)),
            })
        })
    }
}

/// The columns a claim returns.
const RETURNED: [&str; 10] = [
    col::STATE,
    col::ID,
    col::TOPIC,
    col::PAYLOAD,
    col::SUBJECT,
    col::ORDERING_KEY,
    col::ATTEMPTS,
    col::CREATED_AT,
    col::UNSETTLED_LEASES,
    col::DEFERRALS,
];

enum Returned {
    Leased(ClaimedMessage),
    Exhausted(String),
}

/// The longest lease accepted: a day.
pub(crate) const MAX_LEASE: Duration = Duration::from_secs(24 * 3600);

pub(crate) fn check_lease(lease: Duration) -> Result<()> {
    if lease.is_zero() || lease > MAX_LEASE {
        return Err(Error::invalid(
            "lease",
            format!(
                "{} ms is outside 1 ms ..= {} ms",
                lease.as_millis(),
                MAX_LEASE.as_millis()
            ),
        ));
    }
    Ok(())
}

impl Outbox {
    /// The most rows one claim may lease (D1 returns at most 50 MB; this
    /// many 64 KiB payloads stay under it).
    pub const MAX_CLAIM: u32 = 500;

    /// Leases up to `limit` due rows for `lease` and returns them, in one
    /// statement: one database round trip whatever `limit` is.
    ///
    /// Only rows that are due are read: leased, waiting, dead and future
    /// rows sit outside the primary-key range the claim scans.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless `1 <= limit <= MAX_CLAIM` and the lease
    /// is 1 ms to 24 h; any database error. A failed claim may still have
    /// committed: its rows come back when the lease ends, as suspects, with
    /// no attempt spent.
    pub async fn claim(&self, limit: u32, lease: Duration) -> Result<Claim> {
        let claim = self.claim_statement(limit, lease)?;
        let rows = self.inner.db.query(claim.statement()).await?;
        Ok(claim.read(&rows))
    }

    /// The claim as a statement, to send in a batch of the caller's choosing.
    ///
    /// # Errors
    /// As [`claim`](Outbox::claim), without the database errors.
    pub(crate) fn claim_statement(&self, limit: u32, lease: Duration) -> Result<ClaimStatement> {
        if !(1..=Self::MAX_CLAIM).contains(&limit) {
            return Err(Error::invalid(
                "batch size",
                format!("{limit} is outside 1 ..= {}", Self::MAX_CLAIM),
            ));
        }
        check_lease(lease)?;
        let now = self.now();
        let until = now.checked_add(lease)?;
        let token = self.new_ulid(now);
        let table = self.table_name();
        let max_attempts = i64::from(self.inner.retry.max_attempts());

        let exhausted = || Expr::col(col::ATTEMPTS).gte(max_attempts);
        let when_exhausted = |dead: Expr, leased: Expr| -> Expr {
            Expr::case(exhausted(), dead).finally(leased).into()
        };
        // A token left on a due row means its last lease expired unsettled.
        let lease_expired = || Expr::col(col::LEASE_TOKEN).is_not_null();
        let last_error = || Expr::col(col::LAST_ERROR).if_null("none");
        let exhausted_error = Expr::case(
            lease_expired(),
            Expr::val(format!(
                "attempts exhausted ({max_attempts} of {max_attempts}): the lease of the last attempt, \
                 delivered alone, expired without a settle, so its outcome is unknown (the delivery \
                 may have crashed its drainer, or succeeded and its settle was lost); last receiver error: "
            ))
            .binary(BinOper::Custom("||"), last_error()),
        )
        .finally(
            Expr::val(format!(
                "attempts exhausted: the retry policy allows {max_attempts}; last error: "
            ))
            .binary(BinOper::Custom("||"), last_error()),
        );

        let mut update = Query::update();
        update
            .table(table.clone())
            .value(
                col::STATE,
                when_exhausted(state::DEAD.into(), state::READY.into()),
            )
            .value(
                col::DUE_AT,
                when_exhausted(now.as_unix_millis().into(), until.as_unix_millis().into()),
            )
            .value(
                col::LEASE_TOKEN,
                when_exhausted(Expr::val(Option::<String>::None), token.as_str().into()),
            )
            .value(
                col::UNSETTLED_LEASES,
                Expr::case(lease_expired(), Expr::col(col::UNSETTLED_LEASES).add(1))
                    .finally(Expr::col(col::UNSETTLED_LEASES)),
            )
            .value(
                col::LAST_ERROR,
                when_exhausted(exhausted_error.into(), Expr::col(col::LAST_ERROR)),
            )
            .and_where(Expr::col((table.clone(), col::STATE)).eq(state::READY));
        let mut due = Query::select();
        due.columns([col::DUE_AT, col::ID])
            .from(table.clone())
            .and_where(Expr::col(col::STATE).eq(state::READY))
            .and_where(Expr::col(col::DUE_AT).lte(now.as_unix_millis()))
            .order_by(col::DUE_AT, Order::Asc)
            .order_by(col::ID, Order::Asc);
        match self.inner.dialect {
            Dialect::Sqlite => Self::bound_to_boundary(&mut update, due, limit, now),
            Dialect::Postgres => Self::lock_due_rows(&mut update, due, &table, limit),
        }
        Ok(ClaimStatement {
            statement: self.render(&update)?,
            token,
            until,
            table,
            dialect: self.inner.dialect,
        })
    }

    /// SQLite: writers are serialized, so the claim needs no locks, only a
    /// bound. The `limit`-th due row in claim order, if there are that many,
    /// is computed first (a materialized CTE), and the update takes every due
    /// row up to and including it: a row-value bound, so SQLite walks the
    /// primary key once, reading only the rows it leases (about 4 reads a
    /// row), and stops at the boundary even when thousands of rows share its
    /// due time. With fewer due rows than `limit` there is no boundary: every
    /// due row (`due_at` up to now, any id; text sorts before any blob).
    fn bound_to_boundary(
        update: &mut UpdateStatement,
        mut due: SelectStatement,
        limit: u32,
        now: Timestamp,
    ) {
        due.limit(1).offset(u64::from(limit - 1));
        let boundary = CommonTableExpression::new()
            .query(due)
            .columns(["last_due", "last_id"])
            .table_name("boundary")
            .materialized(true)
            .to_owned();
        let from_boundary = |column: &'static str| -> Expr {
            Query::select()
                .column(column)
                .from("boundary")
                .to_owned()
                .into()
        };
        update
            .and_where(
                Expr::tuple([Expr::col(col::DUE_AT), Expr::col(col::ID)]).lte(Expr::tuple([
                    from_boundary("last_due").if_null(now.as_unix_millis()),
                    from_boundary("last_id").if_null(Vec::<u8>::new()),
                ])),
            )
            .returning(Query::returning().columns(RETURNED))
            .with_cte(WithClause::new().cte(boundary).to_owned());
    }

    /// Postgres: concurrent drainers each lock the first `limit` due rows no
    /// one else holds (`FOR UPDATE SKIP LOCKED`, in a materialized CTE so it
    /// runs once), and update exactly those. No drainer waits on another,
    /// and no row is leased twice. `RETURNING` has no order in Postgres, so
    /// the claim also returns each row's due time before the lease, to read
    /// the rows back in claim order.
    fn lock_due_rows(
        update: &mut UpdateStatement,
        mut due: SelectStatement,
        table: &str,
        limit: u32,
    ) {
        due.limit(u64::from(limit))
            .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        let picked = CommonTableExpression::new()
            .query(due)
            .columns([CLAIMED_DUE, "claimed_id"])
            .table_name("picked")
            .materialized(true)
            .to_owned();
        update
            .from("picked")
            .and_where(Expr::col((table.to_owned(), col::DUE_AT)).equals(("picked", CLAIMED_DUE)))
            .and_where(Expr::col((table.to_owned(), col::ID)).equals(("picked", "claimed_id")))
            .returning(
                Query::returning().exprs(
                    RETURNED
                        .iter()
                        .map(|column| Expr::col(*column))
                        .chain([Expr::col(("picked", CLAIMED_DUE))]),
                ),
            )
            .with_cte(WithClause::new().cte(picked).to_owned());
    }
}

/// The due time a Postgres claim returns beside each row (see
/// [`Outbox::lock_due_rows`]).
const CLAIMED_DUE: &str = "claimed_due";

impl Outbox {
    /// Re-leases a suspect on its own, spending its attempt up front: if its
    /// delivery kills the drainer again, the attempt is gone, and a message
    /// that always does dies after the policy's attempts. Fenced by the
    /// current lease (0 rows when it no longer holds).
    pub(crate) fn isolate_statement(
        &self,
        current: &LeaseHandle,
        lease: Duration,
    ) -> Result<(Statement, LeaseHandle)> {
        check_lease(lease)?;
        let now = self.now();
        let alone = LeaseHandle {
            token: self.new_ulid(now),
            until: now.checked_add(lease)?,
            ..current.clone()
        };
        let mut update = Query::update();
        update
            .table(self.table_name())
            .value(col::DUE_AT, alone.until.as_unix_millis())
            .value(col::LEASE_TOKEN, alone.token.as_str())
            .value(col::ATTEMPTS, i64::from(alone.attempt))
            // Matching the new lease too makes the statement safe to send
            // again: a repeat after it committed confirms it, spending nothing.
            .and_where(Self::held_by(current).or(Self::held_by(&alone)));
        Ok((self.render(&update)?, alone))
    }
}
