//! Reading an outbox the way an operator does, at a bounded cost whatever
//! its size: counts per state that stop at a cap, pages of messages found
//! by a bounded walk of the primary key, dead letters grouped by topic and
//! error class, and replay or purge of a selection.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Serialize, Serializer};

use super::pause::timestamp_millis;
use super::records::{StoredMessage, decode, state_of};
use super::stats::age_millis;
use super::{Outbox, col};
use crate::database::Row;
use crate::erasure::as_strs;
use crate::error::{Error, Result};
use crate::sql::browse::{self as sql_browse, CLASS_READ, DeadWalk, Page, WALKED, Walked};
use crate::time::Timestamp;
use crate::trace::TraceContext;

/// Which messages a [`browse`](Outbox::browse) lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Listed {
    /// Deliverable now (an expired lease included), most overdue first.
    Due,
    /// Waiting for their time (a retry's backoff, or `not_before`).
    Scheduled,
    /// Leased to a drainer right now, by lease end.
    Leased,
    /// Queued behind an earlier message of their ordering key.
    Waiting,
    /// Dead letters, in the order they died.
    Dead,
}

impl Listed {
    /// Every kind, in the order a console shows them.
    pub const ALL: [Listed; 5] = [
        Listed::Due,
        Listed::Scheduled,
        Listed::Leased,
        Listed::Waiting,
        Listed::Dead,
    ];

    /// Its name in URLs and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Listed::Due => "due",
            Listed::Scheduled => "scheduled",
            Listed::Leased => "leased",
            Listed::Waiting => "waiting",
            Listed::Dead => "dead",
        }
    }

    /// The kind named `name`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for any other name.
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|listed| listed.as_str() == name)
            .ok_or_else(|| {
                Error::invalid(
                    "state",
                    format!("{name:?} is not one of due, scheduled, leased, waiting, dead"),
                )
            })
    }
}

/// A count that stopped at a cap: `count` is exact unless `capped`, when
/// there are at least that many.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CappedCount {
    /// Rows counted.
    pub count: u64,
    /// Whether counting stopped at the cap.
    pub capped: bool,
}

/// The messages due now, as a console's auto-refresh reads them
/// ([`Outbox::due_now`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DueNow {
    /// Messages deliverable now (expired leases included), counted up to
    /// the cap.
    pub due: CappedCount,
    /// How far behind schedule the most overdue is; `None` when nothing is
    /// due.
    pub oldest_due_age: Option<Duration>,
}

/// An outbox's counts per state, each read no further than a cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Overview {
    /// Deliverable now.
    pub due: CappedCount,
    /// Due later.
    pub scheduled: CappedCount,
    /// In a drainer's hands.
    pub leased: CappedCount,
    /// Behind their ordering key.
    pub waiting: CappedCount,
    /// Dead letters.
    pub dead: CappedCount,
    /// How overdue the most overdue message is; `None` when none is due.
    #[serde(rename = "oldest_due_age_ms", serialize_with = "age_millis")]
    pub oldest_due_age: Option<Duration>,
}

/// What a [`browse`](Outbox::browse) looks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowseFilter {
    /// Which messages.
    pub listed: Listed,
    /// Only this topic.
    pub topic: Option<String>,
    /// Only this subject.
    pub subject: Option<String>,
    /// Only ids that start with this.
    pub id_prefix: Option<String>,
}

impl BrowseFilter {
    /// Every message of `listed`.
    pub fn new(listed: Listed) -> Self {
        BrowseFilter {
            listed,
            topic: None,
            subject: None,
            id_prefix: None,
        }
    }
}

/// Where a browse goes on: after the row at (`due_at`, `id`) of the
/// primary key. Written as text `"<due_at ms>.<id>"`; `"<due_at ms>."`
/// (no id) starts at that time, the rows due at it included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowseCursor {
    due_at: i64,
    id: String,
}

impl BrowseCursor {
    /// The cursor written by [`Display`](std::fmt::Display).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for text that is not a cursor.
    pub fn parse(text: &str) -> Result<Self> {
        text.split_once('.')
            .and_then(|(due_at, id)| {
                let due_at = due_at.parse().ok()?;
                Some(BrowseCursor {
                    due_at,
                    id: id.to_owned(),
                })
            })
            .ok_or_else(|| {
                Error::invalid("cursor", format!("{text:?} is not a cursor of a browse"))
            })
    }
}

/// A browse from `at` on: the rows due at or after it.
impl From<Timestamp> for BrowseCursor {
    fn from(at: Timestamp) -> Self {
        // No id is empty: every row due at `at` comes after this one.
        BrowseCursor {
            due_at: at.as_unix_millis(),
            id: String::new(),
        }
    }
}

impl BrowseCursor {
    /// The key of `message`: a browse from it goes on after it, and
    /// [`Outbox::reschedule_now`] finds it by it.
    pub fn of(message: &StoredMessage) -> Self {
        BrowseCursor {
            due_at: message.due_at.as_unix_millis(),
            id: message.id.clone(),
        }
    }

    /// The key of the row with `id` due at `due_at` (Unix ms).
    #[cfg(feature = "conformance")]
    pub(crate) fn from_parts(due_at: i64, id: &str) -> Self {
        BrowseCursor {
            due_at,
            id: id.to_owned(),
        }
    }
}

impl std::fmt::Display for BrowseCursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.due_at, self.id)
    }
}

impl Serialize for BrowseCursor {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// A message as a browse lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BrowsedMessage {
    /// The stored row.
    #[serde(flatten)]
    pub message: StoredMessage,
    /// The W3C trace id it was enqueued with, if any.
    pub trace_id: Option<String>,
    /// For a message waiting behind its ordering key: the key's head, the
    /// message it waits on.
    pub waits_on: Option<Head>,
}

/// The head of an ordering key: the earliest of its messages still stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Head {
    /// Its id.
    pub id: String,
    /// Its state: a dead head holds its key until it is replayed or purged.
    pub state: super::MessageState,
}

/// One page of a browse.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BrowsePage {
    /// The messages found, in primary-key order.
    pub messages: Vec<BrowsedMessage>,
    /// Where to go on; `None` at the end of the state's rows. With fewer
    /// messages than asked for, the walk stopped at its bound: no more
    /// matched among the rows walked, and more may match after them.
    pub next: Option<BrowseCursor>,
}

/// Dead letters of one topic and error class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetterGroup {
    /// Their topic.
    pub topic: String,
    /// Their [`error_class`]: the status and the start of the answer.
    pub error_class: String,
    /// How many among the rows read.
    pub count: u64,
    /// When the first of them died.
    #[serde(rename = "first_died_at_ms", serialize_with = "timestamp_millis")]
    pub first_died_at: Timestamp,
}

/// Which dead letters a bulk action takes: those of every criterion given
/// (none given: every dead letter).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadFilter {
    /// Of this topic (an endpoint's deliveries: the endpoint's id).
    pub topic: Option<String>,
    /// Of this [`error_class`].
    pub error_class: Option<String>,
    /// About this subject.
    pub subject: Option<String>,
    /// That died at or after this time.
    pub died_from: Option<Timestamp>,
    /// That died at or before this time (give the time of the count an
    /// operator confirmed: what dies since is left alone).
    pub died_by: Option<Timestamp>,
}

/// How many dead letters match a [`DeadFilter`] among those a bounded walk
/// read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DeadCount {
    /// Dead letters that match.
    pub count: u64,
    /// Dead letters read (from the oldest that may match).
    pub scanned: u64,
    /// Whether the walk read every dead letter that may match: otherwise
    /// `count` is a lower bound.
    pub complete: bool,
    /// When it was counted: give it as [`DeadFilter::died_by`] to act on
    /// what was counted, and not on what died since.
    #[serde(rename = "read_at_ms", serialize_with = "timestamp_millis")]
    pub read_at: Timestamp,
}

/// Dead letters grouped, from the oldest `scanned` of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeadLetterGroups {
    /// The groups, largest first.
    pub groups: Vec<DeadLetterGroup>,
    /// Dead letters read.
    pub scanned: u64,
    /// Whether every dead letter was read (else there are more than the
    /// bound, and the counts are of the oldest).
    pub complete: bool,
    /// When they were read: acting on a group up to this time
    /// ([`dead_letters_of_group`](Outbox::dead_letters_of_group)'s
    /// `died_by`) leaves alone what died since.
    #[serde(rename = "read_at_ms", serialize_with = "timestamp_millis")]
    pub read_at: Timestamp,
}

/// The error class of a dead letter's `last_error`: the text before its
/// first colon (at most 80 characters: a status, such as `receiver answered
/// 400`), then `": "` and the start of what follows (the receiver's answer:
/// its first 40 characters, each run of whitespace one space and each run
/// of digits `#`, so answers that differ only in an id or a count share a
/// class). `"none"` for no error.
pub fn error_class(last_error: Option<&str>) -> String {
    // What a grouping reads of an error, so a class computed here matches
    // the class a filter matches.
    let read: Option<String> =
        last_error.map(|error| error.chars().take(CLASS_READ as usize).collect());
    let Some(error) = read.as_deref().map(str::trim).filter(|e| !e.is_empty()) else {
        return "none".to_owned();
    };
    let (head, rest) = error.split_once(':').unwrap_or((error, ""));
    let mut class: String = head.trim().chars().take(80).collect();
    let mut answer = String::new();
    for c in rest.trim().chars() {
        let c = if c.is_ascii_digit() {
            '#'
        } else if c.is_whitespace() {
            ' '
        } else {
            c
        };
        if (c == '#' || c == ' ') && answer.ends_with(c) {
            continue;
        }
        answer.push(c);
        if answer.chars().count() == CLASS_ANSWER {
            break;
        }
    }
    let answer = answer.trim_end();
    if !answer.is_empty() {
        class.push_str(": ");
        class.push_str(answer);
    }
    if class.is_empty() {
        return "none".to_owned();
    }
    class
}

/// How much of the receiver's answer an error class keeps.
const CLASS_ANSWER: usize = 40;

/// The most messages one selection may name.
pub const MAX_SELECTION: usize = 100;

/// The most rows one read walks (a count, a page, a grouping).
pub const MAX_SCAN: u32 = 100_000;

impl Outbox {
    /// Counts per state, each reading no more than `cap` rows of the
    /// primary key (1 ..= [`MAX_SCAN`]): one query, about `4 × cap` rows
    /// at most, whatever the table's size.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a cap out of range; any database error.
    pub async fn overview(&self, cap: u32) -> Result<Overview> {
        check_scan("count cap", cap)?;
        let statement = sql_browse::overview(self.table(), self.dialect(), self.now(), cap);
        let rows = self.inner.db.query(&statement).await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::database("an aggregate query returned no row"))?;
        let in_table = |error: Error| error.in_row(self.table().as_str(), None);
        let count = |name: &str| -> Result<CappedCount> {
            let count: u64 = row.get(name).map_err(in_table)?;
            Ok(CappedCount {
                count,
                capped: count >= u64::from(cap),
            })
        };
        let oldest: Option<Timestamp> = row.get("oldest_due_at").map_err(in_table)?;
        let later: u64 = row.get("later").map_err(in_table)?;
        let leased: u64 = row.get("leased").map_err(in_table)?;
        let later_capped = later >= u64::from(cap);
        Ok(Overview {
            due: count("due")?,
            scheduled: CappedCount {
                count: later.saturating_sub(leased),
                capped: later_capped,
            },
            leased: CappedCount {
                count: leased,
                capped: later_capped,
            },
            waiting: count("waiting")?,
            dead: count("dead")?,
            oldest_due_age: oldest.map(|at| self.now().duration_since(at)),
        })
    }

    /// The messages due now, counted up to `cap` (1 ..= [`MAX_SCAN`]), and
    /// how overdue the oldest is: one query reading at most `cap + 1` rows
    /// (a console's auto-refresh, where [`overview`](Outbox::overview)
    /// reads about four times its cap).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a cap out of range; any database error.
    pub async fn due_now(&self, cap: u32) -> Result<DueNow> {
        check_scan("count cap", cap)?;
        let statement = sql_browse::due_now(self.table(), self.dialect(), self.now(), cap);
        let rows = self.inner.db.query(&statement).await?;
        let row = rows
            .first()
            .ok_or_else(|| Error::database("an aggregate query returned no row"))?;
        let in_table = |error: Error| error.in_row(self.table().as_str(), None);
        let due: u64 = row.get("due").map_err(in_table)?;
        let oldest: Option<Timestamp> = row.get("oldest_due_at").map_err(in_table)?;
        Ok(DueNow {
            due: CappedCount {
                count: due,
                capped: due >= u64::from(cap),
            },
            oldest_due_age: oldest.map(|at| self.now().duration_since(at)),
        })
    }

    /// A page of at most `limit` messages (1 ..= 500) that match `filter`,
    /// after `after`, walking at most `scan` rows of their state (1 ..=
    /// [`MAX_SCAN`]) in primary-key order: one call, `limit` rows read
    /// without a filter, about `2 × scan` with one (the page's walk, and a
    /// key-only walk for where it stopped), however large the table; a page
    /// of waiting messages takes one more call, reading the head of each of
    /// their ordering keys. When the walk ends before the page fills, `next`
    /// says where it stopped, so a caller can go on.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a limit or scan out of range;
    /// [`Error::MalformedRow`] naming an undecodable row; database errors.
    pub async fn browse(
        &self,
        filter: &BrowseFilter,
        after: Option<&BrowseCursor>,
        limit: u32,
        scan: u32,
    ) -> Result<BrowsePage> {
        if !(1..=Self::MAX_CLAIM).contains(&limit) {
            return Err(Error::invalid(
                "page size",
                format!("{limit} is outside 1 ..= {}", Self::MAX_CLAIM),
            ));
        }
        check_scan("scan bound", scan)?;
        let now = self.now();
        let statements = self.browse_statements(filter, after, limit, scan, now)?;
        let outcomes = self.inner.db.batch_atomic(&statements).await?;
        let (Some(page), last_walked) = (outcomes.first(), outcomes.get(1)) else {
            return Err(Error::database("a browse's read did not answer"));
        };
        let table = self.table().as_str();
        let messages = page
            .rows
            .iter()
            .map(|row| {
                let message = decode(row, table, now)?;
                let trace = trace_of(row).map_err(|e| e.in_row(table, Some(&message.id)))?;
                Ok(BrowsedMessage {
                    message,
                    trace_id: trace.map(|trace| trace.trace_id().to_owned()),
                    waits_on: None,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let mut messages = self.with_heads(messages, now).await?;
        self.open_stored(messages.iter_mut().map(|browsed| &mut browsed.message))
            .await?;
        let in_table = |error: Error| error.in_row(table, None);
        let next = if messages.len() == limit as usize {
            messages.last().map(|last| BrowseCursor {
                due_at: last.message.due_at.as_unix_millis(),
                id: last.message.id.clone(),
            })
        } else {
            // The walk's last row, if the walk was cut at its bound.
            match last_walked.and_then(|walked| walked.rows.first()) {
                Some(row) => Some(BrowseCursor {
                    due_at: row.get(col::DUE_AT).map_err(in_table)?,
                    id: row.get(col::ID).map_err(in_table)?,
                }),
                None => None,
            }
        };
        Ok(BrowsePage { messages, next })
    }

    /// The message at `key` (as a list gave it: [`BrowseCursor::of`]), in
    /// whatever state, with its trace and, when it waits, the head it waits
    /// on; `None` once it moved on (delivered, purged, or due at another
    /// time: a claim moves a message to its lease's end). One call of three primary-key lookups (one per state),
    /// and one more for a waiting message's head.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a key without an id;
    /// [`Error::MalformedRow`] naming an undecodable row; database errors.
    pub async fn message_at(&self, key: &BrowseCursor) -> Result<Option<BrowsedMessage>> {
        if key.id.is_empty() {
            return Err(Error::invalid("message key", "names no message (no id)"));
        }
        let statement = sql_browse::message_at(self.table(), self.dialect(), key.due_at, &key.id)?;
        let rows = self.inner.db.query(&statement).await?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        let now = self.now();
        let table = self.table().as_str();
        let message = decode(row, table, now)?;
        let trace = trace_of(row).map_err(|e| e.in_row(table, Some(&message.id)))?;
        let found = BrowsedMessage {
            message,
            trace_id: trace.map(|trace| trace.trace_id().to_owned()),
            waits_on: None,
        };
        let mut found = self.with_heads(vec![found], now).await?;
        self.open_stored(found.iter_mut().map(|browsed| &mut browsed.message))
            .await?;
        Ok(found.pop())
    }

    fn browse_statements(
        &self,
        filter: &BrowseFilter,
        after: Option<&BrowseCursor>,
        limit: u32,
        scan: u32,
        now: Timestamp,
    ) -> Result<Vec<crate::database::Statement>> {
        let forms = filter
            .subject
            .as_deref()
            .map(|subject| self.subject_forms(subject));
        let forms = forms.as_deref().map(as_strs);
        let walked = match filter.listed {
            Listed::Due => Walked::Due,
            Listed::Scheduled => Walked::Scheduled,
            Listed::Leased => Walked::Leased,
            Listed::Waiting => Walked::Waiting,
            Listed::Dead => Walked::Dead,
        };
        let page = Page {
            walked,
            after: after.map(|after| (after.due_at, after.id.as_str())),
            limit,
            scan,
            topic: filter.topic.as_deref(),
            subject_forms: forms.as_deref(),
            id_prefix: filter.id_prefix.as_deref(),
        };
        sql_browse::page(self.table(), self.dialect(), &page, now.as_unix_millis())
    }

    /// Dead letters grouped by topic and [`error_class`], from the oldest
    /// `scan` of them (1 ..= [`MAX_SCAN`]): one read of at most `scan`
    /// rows, of their topic and the start of their last error.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a scan out of range;
    /// [`Error::MalformedRow`] naming an undecodable row; database errors.
    pub async fn dead_letter_groups(&self, scan: u32) -> Result<DeadLetterGroups> {
        check_scan("scan bound", scan)?;
        let read_at = self.now();
        let filter = DeadFilter {
            died_by: Some(read_at),
            ..DeadFilter::default()
        };
        let statement = self.dead_scan(&filter, scan)?;
        let rows = self.inner.db.query(&statement).await?;
        let mut groups: BTreeMap<(String, String), DeadLetterGroup> = BTreeMap::new();
        let mut scanned = 0;
        for row in rows.iter() {
            scanned += 1;
            let (topic, class, died) = self.dead_row(row)?;
            groups
                .entry((topic.clone(), class.clone()))
                .and_modify(|group| group.count += 1)
                .or_insert(DeadLetterGroup {
                    topic,
                    error_class: class,
                    count: 1,
                    first_died_at: died,
                });
        }
        let mut groups: Vec<DeadLetterGroup> = groups.into_values().collect();
        groups.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then(a.first_died_at.cmp(&b.first_died_at))
        });
        Ok(DeadLetterGroups {
            groups,
            scanned,
            complete: scanned < u64::from(scan),
            read_at,
        })
    }

    /// Ids of up to `limit` dead letters of `topic` and `error_class` that
    /// died by `died_by` (if given), the oldest first, among the oldest
    /// `scan` dead letters (1 ..= [`MAX_SCAN`]): one read of at most `scan`
    /// rows, as [`dead_letter_groups`](Outbox::dead_letter_groups) counted
    /// them. ([`dead_letters_matching`](Outbox::dead_letters_matching) with
    /// those two criteria.)
    ///
    /// # Errors
    /// As [`dead_letter_groups`](Outbox::dead_letter_groups).
    pub async fn dead_letters_of_group(
        &self,
        topic: &str,
        error_class: &str,
        limit: usize,
        scan: u32,
        died_by: Option<Timestamp>,
    ) -> Result<Vec<String>> {
        let filter = DeadFilter {
            topic: Some(topic.to_owned()),
            error_class: Some(error_class.to_owned()),
            died_by,
            ..DeadFilter::default()
        };
        self.dead_letters_matching(&filter, limit, scan).await
    }

    /// Ids of up to `limit` dead letters that match `filter`, the oldest
    /// first, among the oldest `scan` (1 ..= [`MAX_SCAN`]) dead letters that
    /// died in its time range: one read of at most `scan` rows. Acting on
    /// them (a replay, a purge) takes them out of the next call's walk, so
    /// calls in turn go through every match, a bounded batch at a time.
    ///
    /// # Errors
    /// As [`dead_letter_groups`](Outbox::dead_letter_groups).
    pub async fn dead_letters_matching(
        &self,
        filter: &DeadFilter,
        limit: usize,
        scan: u32,
    ) -> Result<Vec<String>> {
        check_scan("scan bound", scan)?;
        let statement = self.dead_scan(filter, scan)?;
        let rows = self.inner.db.query(&statement).await?;
        let mut ids = Vec::new();
        for row in rows.iter() {
            if ids.len() >= limit {
                break;
            }
            let (_, class, _) = self.dead_row(row)?;
            if filter
                .error_class
                .as_ref()
                .is_none_or(|wanted| *wanted == class)
            {
                ids.push(
                    row.get::<String>(col::ID)
                        .map_err(|e| e.in_row(self.table().as_str(), None))?,
                );
            }
        }
        Ok(ids)
    }

    /// How many dead letters match `filter` among the oldest `scan` (1 ..=
    /// [`MAX_SCAN`]) that died in its time range (by now, if it gives no
    /// end): one read of at most `scan` rows. What an operator confirms
    /// before a bulk action.
    ///
    /// # Errors
    /// As [`dead_letter_groups`](Outbox::dead_letter_groups).
    pub async fn count_dead_matching(&self, filter: &DeadFilter, scan: u32) -> Result<DeadCount> {
        check_scan("scan bound", scan)?;
        let read_at = self.now();
        let mut filter = filter.clone();
        filter.died_by = Some(filter.died_by.map_or(read_at, |by| by.min(read_at)));
        // The walk, unfiltered but for time, counted: how many it read.
        let mut walked = filter.clone();
        (walked.topic, walked.subject, walked.error_class) = (None, None, None);
        let statements = [
            self.dead_scan(&filter, scan)?,
            sql_browse::dead_walk_count(self.table(), self.dialect(), &dead_walk(&walked), scan)?,
        ];
        let outcomes = self.inner.db.batch_atomic(&statements).await?;
        let (Some(rows), Some(end)) = (outcomes.first(), outcomes.get(1)) else {
            return Err(Error::database("a count's reads did not answer"));
        };
        let mut count = 0;
        for row in rows.rows.iter() {
            let (_, class, _) = self.dead_row(row)?;
            if filter
                .error_class
                .as_ref()
                .is_none_or(|wanted| *wanted == class)
            {
                count += 1;
            }
        }
        let scanned: u64 = match end.rows.first() {
            Some(row) => row
                .get(WALKED)
                .map_err(|e| e.in_row(self.table().as_str(), None))?,
            None => 0,
        };
        Ok(DeadCount {
            count,
            scanned,
            complete: scanned < u64::from(scan),
            read_at,
        })
    }

    /// The oldest `scan` dead letters that died in `filter`'s time range,
    /// of its topic and subject among them if given: the walk is bounded
    /// whatever the topic or subject. (The error class is matched on the
    /// rows read.)
    fn dead_scan(&self, filter: &DeadFilter, scan: u32) -> Result<crate::database::Statement> {
        let forms = filter
            .subject
            .as_deref()
            .map(|subject| self.subject_forms(subject));
        let forms = forms.as_deref().map(as_strs);
        let walk = DeadWalk {
            topic: filter.topic.as_deref(),
            subject_forms: forms.as_deref(),
            ..dead_walk(filter)
        };
        sql_browse::dead_scan(self.table(), self.dialect(), &walk, scan)
    }

    fn dead_row(&self, row: Row<'_>) -> Result<(String, String, Timestamp)> {
        let table = self.table().as_str();
        let id: String = row.get(col::ID).map_err(|e| e.in_row(table, None))?;
        let read = || -> Result<(String, String, Timestamp)> {
            let error: Option<String> = row.get(col::LAST_ERROR)?;
            Ok((
                row.get(col::TOPIC)?,
                error_class(error.as_deref()),
                row.get(col::DUE_AT)?,
            ))
        };
        read().map_err(|e| e.in_row(table, Some(&id)))
    }

    /// Makes the dead letters `ids` (at most [`MAX_SELECTION`])
    /// deliverable again now, with fresh attempts, in one atomic call;
    /// returns how many were dead (ids that were not are skipped).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for too many ids; database errors (nothing
    /// changed then, or, for an error after commit, all of it: replaying
    /// again is safe).
    pub async fn replay_selected(&self, ids: &[String]) -> Result<u64> {
        check_selection(ids.len())?;
        let statements = ids
            .iter()
            .map(|id| self.replay_statement(Some(id)))
            .collect::<Result<Vec<_>>>()?;
        let outcomes = self.inner.db.batch_atomic(&statements).await?;
        Ok(outcomes.iter().map(|outcome| outcome.rows_affected).sum())
    }

    /// Fills in what each waiting message waits on: one more call when the
    /// page has any, reading one index entry and row per ordering key.
    async fn with_heads(
        &self,
        mut messages: Vec<BrowsedMessage>,
        now: crate::time::Timestamp,
    ) -> Result<Vec<BrowsedMessage>> {
        let mut keys: Vec<&str> = messages
            .iter()
            .filter(|m| m.message.state == super::MessageState::Waiting)
            .filter_map(|m| m.message.ordering_key.as_deref())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return Ok(messages);
        }
        let t = self.table().as_str();
        let statements = sql_browse::heads(self.table(), self.dialect(), &keys);
        let outcomes = self.inner.db.batch_atomic(&statements).await?;
        let mut heads: Vec<(String, String, super::MessageState)> = Vec::new();
        for row in outcomes.iter().flat_map(|outcome| outcome.rows.iter()) {
            let head = (|| {
                let (state, _) = state_of(row, now)?;
                Ok::<_, Error>((row.get(col::ORDERING_KEY)?, row.get(col::ID)?, state))
            })()
            .map_err(|e| e.in_row(t, None))?;
            heads.push(head);
        }
        for browsed in &mut messages {
            if browsed.message.state != super::MessageState::Waiting {
                continue;
            }
            browsed.waits_on = heads
                .iter()
                .find(|(key, id, _)| {
                    Some(key) == browsed.message.ordering_key.as_ref() && *id != browsed.message.id
                })
                .map(|(_, id, state)| Head {
                    id: id.clone(),
                    state: *state,
                });
        }
        Ok(messages)
    }

    /// Makes the scheduled messages at `keys` (at most [`MAX_SELECTION`],
    /// each as a list gave it: [`BrowseCursor::of`]) due now, in one atomic
    /// call: a retry's backoff or a `not_before` is cut short, attempts are
    /// kept. Returns how many were scheduled there; a message that is due,
    /// leased, waiting behind its ordering key, dead, gone or due at another
    /// time than its key says is left as it is. Each key is one lookup of
    /// the primary key.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for too many keys or a key without an id;
    /// database errors (nothing changed then, or, for an error after
    /// commit, all of it: rescheduling again is safe).
    pub async fn reschedule_now(&self, keys: &[BrowseCursor]) -> Result<u64> {
        check_selection(keys.len())?;
        if keys.iter().any(|key| key.id.is_empty()) {
            return Err(Error::invalid("message key", "names no message (no id)"));
        }
        let now = self.now().as_unix_millis();
        let statements = keys
            .iter()
            .map(|key| {
                sql_browse::reschedule_now(self.table(), self.dialect(), now, key.due_at, &key.id)
            })
            .collect::<Result<Vec<_>>>()?;
        let outcomes = self.inner.db.batch_atomic(&statements).await?;
        Ok(outcomes.iter().map(|outcome| outcome.rows_affected).sum())
    }

    /// Deletes the dead letters `ids` (at most [`MAX_SELECTION`]) in one
    /// atomic call; returns how many were dead. Rows their ordering keys
    /// held back become ready.
    ///
    /// # Errors
    /// As [`replay_selected`](Outbox::replay_selected).
    pub async fn purge_selected(&self, ids: &[String]) -> Result<u64> {
        check_selection(ids.len())?;
        // Their ordering keys first (at most one index lookup per id): each
        // key's next row is made the head after the deletes, and no other
        // key's rows are read.
        let keys = sql_browse::dead_keys(self.table(), self.dialect(), ids)?;
        let keys: Vec<String> = self
            .inner
            .db
            .query(&keys)
            .await?
            .iter()
            .map(|row| row.get(col::ORDERING_KEY))
            .collect::<Result<_>>()
            .map_err(|e| e.in_row(self.table().as_str(), None))?;
        let mut statements = ids
            .iter()
            .map(|id| sql_browse::purge_one(self.table(), self.dialect(), id))
            .collect::<Result<Vec<_>>>()?;
        for key in &keys {
            statements.push(self.promote_next(key)?);
        }
        let outcomes = self.inner.db.batch_atomic(&statements).await?;
        Ok(outcomes
            .iter()
            .take(ids.len())
            .map(|outcome| outcome.rows.len() as u64)
            .sum())
    }
}

/// The walk of `filter`'s time range.
fn dead_walk(filter: &DeadFilter) -> DeadWalk<'static> {
    DeadWalk {
        died_from: filter.died_from.map(Timestamp::as_unix_millis),
        died_by: filter.died_by.map(Timestamp::as_unix_millis),
        ..DeadWalk::default()
    }
}

fn trace_of(row: Row<'_>) -> Result<Option<TraceContext>> {
    Ok(TraceContext::read(
        row.get::<Option<String>>(col::TRACEPARENT)?.as_deref(),
        row.get::<Option<String>>(col::TRACESTATE)?.as_deref(),
    ))
}

pub(crate) fn check_scan(what: &'static str, scan: u32) -> Result<()> {
    if !(1..=MAX_SCAN).contains(&scan) {
        return Err(Error::invalid(
            what,
            format!("{scan} is outside 1 ..= {MAX_SCAN}"),
        ));
    }
    Ok(())
}

fn check_selection(count: usize) -> Result<()> {
    if count == 0 || count > MAX_SELECTION {
        return Err(Error::invalid(
            "selection",
            format!("{count} messages is outside 1 ..= {MAX_SELECTION}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::error_class;

    #[test]
    fn an_error_class_keeps_the_status_and_the_start_of_the_answer() {
        assert_eq!(error_class(None), "none");
        assert_eq!(error_class(Some("  ")), "none");
        assert_eq!(error_class(Some("no route")), "no route");
        assert_eq!(error_class(Some("HTTP 500:")), "HTTP 500");
        assert_eq!(
            error_class(Some(
                "receiver answered 400: invalid  recipient\n(id 1234, try 2)"
            )),
            "receiver answered 400: invalid recipient (id #, try #)"
        );
        assert_eq!(
            error_class(Some(
                "receiver answered 400: invalid recipient (id 98, try 3)"
            )),
            error_class(Some(
                "receiver answered 400: invalid recipient (id 1234, try 2)"
            )),
            "answers differing in numbers share a class"
        );
        assert_ne!(
            error_class(Some("receiver answered 400: unknown template")),
            error_class(Some("receiver answered 400: invalid recipient")),
            "what the receiver said splits a status"
        );
        assert_eq!(error_class(Some("  :  ")), "none");
        assert_eq!(
            error_class(Some(&format!("HTTP 400: {} b", "a".repeat(39)))),
            format!("HTTP 400: {}", "a".repeat(39)),
            "a cut on a space keeps no trailing space"
        );
        let deep = format!("{}: x", " ".repeat(250));
        assert_eq!(
            error_class(Some(&deep)),
            "none",
            "only what a grouping reads counts"
        );
        let long = format!("{}: {}", "s".repeat(100), "a".repeat(100));
        assert_eq!(
            error_class(Some(&long)),
            format!("{}: {}", "s".repeat(80), "a".repeat(40))
        );
    }
}
