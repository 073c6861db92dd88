//! Claiming: one statement that leases up to `n` due rows and returns them.

use std::time::Duration;

use serde::de::DeserializeOwned;

use super::{Outbox, col, state};
use crate::database::{Dialect, Row, Rows, Statement};
use crate::error::{Error, Result};
use crate::identifier::TableName;
use crate::seal::KeyRing;
use crate::sql::claim::ClaimSpec;
use crate::sql::dialects;
use crate::sql::differences::CLAIMED_DUE;
use crate::sql::rollups::{Counts, CountsLast};
use crate::sql::{self, Fence};
use crate::time::Timestamp;

/// What a lease holder needs to settle a message, and nothing more.
///
/// The token is fresh for every lease; settling with a lease that no longer
/// holds is refused with [`Error::LeaseLost`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseHandle {
    pub(crate) id: String,
    /// The message's topic (`""` for a row whose topic does not decode).
    pub(crate) topic: String,
    pub(crate) token: String,
    pub(crate) until: Timestamp,
    pub(crate) attempt: u32,
    pub(crate) ordering_key: Option<String>,
    /// Failures so far that spent no attempt: they grow the backoff.
    pub(crate) deferrals: u32,
    /// When the message was enqueued: free deferrals end at the policy's
    /// [`defer_limit`](crate::retry::RetryPolicy::defer_limit) after it.
    pub(crate) created_at: Timestamp,
    /// When the message was due as it was leased: its lateness is counted
    /// from here (unknown for a row that did not decode).
    pub(crate) became_due: Option<Timestamp>,
    /// The row's unsettled leases as this lease left them: no one else
    /// changes them while it holds (unknown for a row that did not decode).
    pub(crate) unsettled: Option<u32>,
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

    /// What fences a statement to this lease.
    pub(crate) fn fence(&self) -> Fence<'_> {
        Fence {
            id: &self.id,
            token: &self.token,
            until: self.until,
        }
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
    /// The trace context it was enqueued with, if any.
    pub trace: Option<crate::trace::TraceContext>,
    /// The event this message delivers to one endpoint (see
    /// [`endpoint`](crate::endpoint)): the `webhook-id` it is signed with, the
    /// same on every endpoint and every retry. `None` for a plain message.
    pub event_id: Option<String>,
    /// The endpoint's delivery target as the claim read it (JSON), for a
    /// delivery to an endpoint that still exists.
    pub(crate) endpoint_target: Option<Secretive>,
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
    /// lost. A drainer delivers such a message in a suspect group, which
    /// halves with each further unsettled lease.
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

/// Text that holds secrets (an endpoint's target: its URL and signing
/// keys): `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Secretive(pub(crate) String);

impl std::fmt::Debug for Secretive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secretive(…)")
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

/// A claimed row whose sealed payload could not be opened (see
/// [`seal`](crate::seal)): a key missing from the ring or wrong, or its data
/// key gone. It is leased like the others; a drain holds it
/// ([`Outbox::hold`]: due again later, no attempt spent, the error kept as
/// its last) until a ring that opens it is deployed. It never dies of this.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldMessage {
    /// Why it did not open ([`Error::Unsealable`]).
    pub error: Error,
    /// The lease.
    pub lease: LeaseHandle,
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
    /// Rows leased whose sealed payloads do not open.
    pub held: Vec<HeldMessage>,
    /// The topics of `exhausted`, in the same order (for the drain's dead
    /// letter lines; empty where a topic did not decode).
    pub(crate) exhausted_topics: Vec<String>,
}

impl Claim {
    /// Whether the claim found no due rows at all.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
            && self.exhausted.is_empty()
            && self.malformed.is_empty()
            && self.held.is_empty()
    }

    /// How many rows the claim touched.
    pub fn len(&self) -> usize {
        self.messages.len() + self.exhausted.len() + self.malformed.len() + self.held.len()
    }
}

/// A prepared claim: the statement, and how to read what it returns. Lets a
/// caller send the claim in the same batch as other statements (for
/// example the previous batch's settle).
#[derive(Debug, Clone)]
#[must_use = "a prepared claim leases nothing until it is sent"]
pub(crate) struct ClaimStatement {
    statement: Statement,
    /// The count of the rows it parks as dead: sent right after it, or
    /// added last in its transaction (Postgres).
    deaths: Option<Counts>,
    /// The operational events of the rows it parks as dead (and their
    /// deliveries), sent after it.
    reports: Vec<Statement>,
    /// Moving the claim floor (Postgres): see [`advance`](ClaimStatement::advance).
    advance: Vec<Statement>,
    token: String,
    until: Timestamp,
    table: TableName,
    dialect: Dialect,
    /// The ring its payloads open with.
    ring: Option<KeyRing>,
}

impl ClaimStatement {
    /// The statements, to send in this order in one atomic batch: the claim
    /// (whose outcome holds the rows) first, then the statements that add
    /// [`last`](Self::last), if any.
    pub(crate) fn statements(&self) -> Vec<Statement> {
        let mut statements: Vec<Statement> = self.leading().cloned().collect();
        statements.extend(self.last().map(CountsLast::statements).unwrap_or_default());
        statements
    }

    /// The statements but those that add [`last`](Self::last): the claim
    /// first.
    pub(crate) fn leading(&self) -> impl Iterator<Item = &Statement> {
        let deaths = match &self.deaths {
            Some(Counts::Now(deaths)) => deaths.as_slice(),
            _ => &[],
        };
        std::iter::once(&self.statement)
            .chain(deaths)
            .chain(&self.reports)
    }

    /// The counts to add after every other statement of its transaction
    /// (Postgres, see [`CountsLast`]).
    pub(crate) fn last(&self) -> Option<&CountsLast> {
        match &self.deaths {
            Some(Counts::Last(deaths)) => Some(deaths),
            _ => None,
        }
    }

    /// The statements that move the claim floor (Postgres; none for
    /// SQLite), to send first in the claim's transaction, before any write
    /// of it: the floor must follow committed rows only, since it stays
    /// where they move it even if the transaction then rolls back.
    pub(crate) fn advance(&self) -> &[Statement] {
        &self.advance
    }

    /// A read of the rows this claim leased, for when the claim may have
    /// committed but its reply was lost: safe to send any number of times,
    /// and read with [`read`](ClaimStatement::read) like the claim's own
    /// rows. (Rows the claim parked as dead are not among them.)
    ///
    /// # Errors
    /// If the statement cannot be built.
    pub(crate) fn recovery(&self) -> Result<Statement> {
        sql::claim::recovery(
            &self.table,
            self.dialect,
            self.until,
            &self.token,
            self.ring.is_some(),
        )
    }

    /// Reads the rows the statement returned.
    pub(crate) fn read(&self, rows: &Rows) -> Claim {
        let mut claim = Claim::default();
        let mut rows: Vec<Row<'_>> = rows.iter().collect();
        if dialects::of(self.dialect).claim_returns_unordered() {
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
                Ok(Returned::Leased(message)) => claim.messages.push(*message),
                Ok(Returned::Held(held)) => claim.held.push(*held),
                Ok(Returned::Exhausted(id, topic)) => {
                    claim.exhausted.push(id);
                    claim.exhausted_topics.push(topic);
                }
                Err(malformed) => claim.malformed.push(*malformed),
            }
        }
        claim
    }

    fn read_row(&self, row: Row<'_>) -> Result<Returned, Box<MalformedMessage>> {
        let id = row.get::<String>(col::ID).map_err(|error| {
            Box::new(MalformedMessage {
                error: error.in_row(self.table.as_str(), None),
                lease: None,
            })
        })?;
        let lease = |topic, attempt, ordering_key, deferrals, created_at, became_due, unsettled| {
            LeaseHandle {
                id: id.clone(),
                topic,
                token: self.token.clone(),
                until: self.until,
                attempt,
                ordering_key,
                deferrals,
                created_at,
                became_due,
                unsettled,
            }
        };
        let decoded = (|| {
            if row.get::<String>(col::STATE)? == state::DEAD {
                let topic = row.get::<String>(col::TOPIC).unwrap_or_default();
                return Ok(Returned::Exhausted(id.clone(), topic));
            }
            // A claim spends no attempt: this lease is attempt `attempts + 1`.
            let attempts: u32 = row.get(col::ATTEMPTS)?;
            let created_at = row.get(col::CREATED_AT)?;
            let topic: String = row.get(col::TOPIC)?;
            let unsettled_leases = row.get(col::UNSETTLED_LEASES)?;
            let stored: String = row.get(col::PAYLOAD)?;
            let subject: Option<String> = row.get(col::SUBJECT)?;
            let key = match (&self.ring, &subject) {
                (Some(_), Some(subject)) => row
                    .get::<Option<String>>(sql::keys::RETURNED_KEY)?
                    .and_then(|text| {
                        let sealed = crate::seal::Envelope::parse(&stored).ok().flatten()?;
                        sql::keys::read_returned(sealed.key, subject, &text)
                    }),
                _ => None,
            };
            let leased = lease(
                topic.clone(),
                attempts.saturating_add(1),
                row.get(col::ORDERING_KEY)?,
                row.get(col::DEFERRALS)?,
                created_at,
                row.get(col::BECAME_DUE)?,
                Some(unsettled_leases),
            );
            let payload = match crate::seal::open(self.ring.as_ref(), &stored, key.as_ref()) {
                Ok(payload) => payload,
                Err(error) => {
                    return Ok(Returned::Held(Box::new(HeldMessage {
                        error,
                        lease: leased,
                    })));
                }
            };
            Ok(Returned::Leased(Box::new(ClaimedMessage {
                id: id.clone(),
                topic: topic.clone(),
                payload,
                subject,
                // A trace that no longer parses is dropped, never the message.
                trace: crate::trace::TraceContext::read(
                    row.get::<Option<String>>(col::TRACEPARENT)?.as_deref(),
                    row.get::<Option<String>>(col::TRACESTATE)?.as_deref(),
                ),
                created_at,
                event_id: row.get(col::EVENT_ID)?,
                endpoint_target: row
                    .get::<Option<String>>(crate::sql::endpoints::RETURNED_TARGET)?
                    .map(Secretive),
                unsettled_leases,
                lease: leased,
            })))
        })();
        decoded.map_err(|error: Error| {
            // Only good for burying the row: an unreadable attempt count
            // counts as the last, so even a retry parks it.
            let attempt = row
                .get::<u32>(col::ATTEMPTS)
                .map_or(u32::MAX, |attempts| attempts.saturating_add(1));
            Box::new(MalformedMessage {
                error: error.in_row(self.table.as_str(), Some(&id)),
                lease: Some(lease(
                    row.get::<String>(col::TOPIC).unwrap_or_default(),
                    attempt,
                    None,
                    0,
                    Timestamp::EPOCH,
                    None,
                    None,
                )),
            })
        })
    }
}

enum Returned {
    Leased(Box<ClaimedMessage>),
    /// Leased, but its payload does not open: hold it.
    Held(Box<HeldMessage>),
    /// Parked as dead: its id and topic.
    Exhausted(String, String),
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
        let mut statements = claim.advance().to_vec();
        statements.extend(claim.statements());
        let outcomes = self.inner.db.batch_atomic(&statements).await?;
        let rows = outcomes
            .into_iter()
            .nth(claim.advance().len())
            .map(|outcome| outcome.rows)
            .unwrap_or_default();
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
        let spec = ClaimSpec {
            limit,
            max_attempts: self.inner.retry.max_attempts(),
            now,
            until,
            token: &token,
            sealed: self.key_ring().is_some(),
        };
        Ok(ClaimStatement {
            statement: sql::claim::claim(self.table(), self.dialect(), &spec)?,
            deaths: self
                .rollup_writes()
                .map(|writes| writes.count_claim_deaths(now, &token)),
            reports: self.report_claim_deaths(&token, now)?,
            advance: crate::sql::dialects::of(self.dialect()).before_claim(self.table(), now)?,
            token,
            until,
            table: self.table().clone(),
            dialect: self.dialect(),
            ring: self.key_ring().cloned(),
        })
    }
}

impl Outbox {
    /// Re-leases a suspect for delivery in its group. Alone (`spend`), its
    /// attempt is spent up front: if its delivery kills the drainer again,
    /// the attempt is gone, and a message that always does dies after the
    /// policy's attempts. In a larger group it spends nothing: a crash is
    /// not yet any one member's fault. Fenced by the current lease (0 rows
    /// when it no longer holds).
    pub(crate) fn isolate_statement(
        &self,
        current: &LeaseHandle,
        lease: Duration,
        spend: bool,
    ) -> Result<(Statement, LeaseHandle)> {
        check_lease(lease)?;
        let now = self.now();
        let alone = LeaseHandle {
            token: self.new_ulid(now),
            until: now.checked_add(lease)?,
            ..current.clone()
        };
        let statement = sql::claim::isolate(
            self.table(),
            self.dialect(),
            &current.fence(),
            &alone.fence(),
            if spend {
                alone.attempt
            } else {
                alone.attempt.saturating_sub(1)
            },
        )?;
        Ok((statement, alone))
    }
}

#[cfg(test)]
impl ClaimedMessage {
    /// A message of `topic` leased until `until`, with `unsettled` leases
    /// ended unsettled before this one: for the drain's unit tests.
    pub(crate) fn leased_for_test(id: &str, topic: &str, until: Timestamp, unsettled: u32) -> Self {
        ClaimedMessage {
            id: id.into(),
            topic: topic.into(),
            payload: "{}".into(),
            subject: None,
            created_at: Timestamp::EPOCH,
            trace: None,
            event_id: None,
            endpoint_target: None,
            unsettled_leases: unsettled,
            lease: LeaseHandle {
                id: id.into(),
                topic: topic.into(),
                token: "token".into(),
                until,
                attempt: 1,
                ordering_key: None,
                deferrals: 0,
                created_at: Timestamp::EPOCH,
                became_due: None,
                unsettled: Some(unsettled),
            },
        }
    }
}
