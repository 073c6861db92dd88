//! Sealed payloads in the outbox (see [`seal`](crate::seal)): sealing at
//! enqueue, opening what a claim or a read returns, and the reseal pass
//! that moves stored values to the ring's sealing key.

use std::borrow::Cow;
use std::collections::HashMap;

use super::{Outbox, StoredMessage};
use crate::database::Statement;
use crate::error::Result;
use crate::seal::{Envelope, Kind, WrappedKey, is_sealed};
use crate::sql::keys::{self, key_col};
use crate::time::Timestamp;

impl Outbox {
    /// `payload` as a row stores it: sealed under a data key of its own
    /// (whose insert is returned, to go beside the row) when it has a
    /// `subject` (as stored), under the ring's sealing key when not, and as
    /// it is without a ring.
    ///
    /// # Errors
    /// [`Error::Internal`] if the platform has no randomness.
    pub(crate) fn seal_payload<'a>(
        &self,
        payload: &'a str,
        stored_subject: Option<&str>,
        now: Timestamp,
    ) -> Result<(Cow<'a, str>, Option<Statement>)> {
        let Some(ring) = self.key_ring() else {
            return Ok((payload.into(), None));
        };
        match stored_subject {
            None => Ok((ring.seal(payload)?.into(), None)),
            Some(subject) => {
                // A key id of its own, never a row's: ids of messages and
                // events may meet, and a dropped duplicate leaves its key.
                let key = ring.new_data_key(&self.new_ulid(now), subject)?;
                let insert = keys::insert(self.table(), self.dialect(), &key.wrapped, now)?;
                Ok((key.seal(payload)?.into(), Some(insert)))
            }
        }
    }

    /// Opens a stored payload, given its data key if it has one.
    ///
    /// # Errors
    /// [`Error::Unsealable`] if it cannot be opened.
    pub(crate) fn open_payload(&self, stored: &str, key: Option<&WrappedKey>) -> Result<String> {
        crate::seal::open(self.key_ring(), stored, key)
    }

    /// Opens the sealed payloads of `messages` in place (one query for their
    /// data keys, none when no payload has one); one that does not open
    /// stays sealed text and says why in `unopened`.
    ///
    /// # Errors
    /// [`Error::MalformedRow`](crate::error::Error::MalformedRow) for an
    /// undecodable key row; database errors.
    pub(crate) async fn open_stored(
        &self,
        messages: impl Iterator<Item = &mut StoredMessage>,
    ) -> Result<()> {
        let mut sealed: Vec<&mut StoredMessage> = messages
            .filter(|message| is_sealed(&message.payload))
            .collect();
        if sealed.is_empty() {
            return Ok(());
        }
        let keys = self
            .data_keys_of(
                sealed
                    .iter()
                    .map(|message| (message.subject.as_deref(), message.payload.as_str())),
            )
            .await?;
        for message in &mut sealed {
            let key = Envelope::parse(&message.payload)
                .ok()
                .flatten()
                .and_then(|envelope| keys.get(envelope.key));
            match self.open_payload(&message.payload, key) {
                Ok(payload) => message.payload = payload,
                Err(error) => message.unopened = Some(error.to_string()),
            }
        }
        Ok(())
    }

    /// The data keys of the sealed payloads among `rows` (each row's stored
    /// subject and payload), read in one query (none if no payload needs
    /// one).
    ///
    /// # Errors
    /// [`Error::MalformedRow`](crate::error::Error::MalformedRow) for an
    /// undecodable key row; database errors.
    pub(crate) async fn data_keys_of<'a>(
        &self,
        rows: impl Iterator<Item = (Option<&'a str>, &'a str)>,
    ) -> Result<HashMap<String, WrappedKey>> {
        let mut subjects: Vec<&str> = Vec::new();
        let mut ids: Vec<&str> = Vec::new();
        for (subject, payload) in rows {
            let Some(subject) = subject else { continue };
            let Some(envelope) = Envelope::parse(payload).ok().flatten() else {
                continue;
            };
            if envelope.kind == Kind::Data {
                subjects.push(subject);
                ids.push(envelope.key);
            }
        }
        if ids.is_empty() || self.key_ring().is_none() {
            return Ok(HashMap::new());
        }
        subjects.sort_unstable();
        subjects.dedup();
        let statement = keys::of_ids(self.table(), self.dialect(), &subjects, &ids)?;
        let rows = self.database().query(&statement).await?;
        let table = keys::keys_table(self.table());
        rows.iter()
            .map(|row| {
                let read = |column: &str| {
                    row.get::<String>(column)
                        .map_err(|error| error.in_row(&table, None))
                };
                let key = WrappedKey {
                    id: read(key_col::ID)?,
                    subject: read(key_col::SUBJECT)?,
                    ring_key: read(key_col::RING_KEY)?,
                    wrapped: read(key_col::WRAPPED)?,
                };
                Ok((key.id.clone(), key))
            })
            .collect()
    }
}

/// Where a reseal pass stands: give it to the next
/// [`Outbox::reseal`] call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResealCursor {
    stage: Stage,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Stage {
    /// Data keys after this subject and id.
    Keys(String, String),
    /// Messages after this primary key.
    Messages(String, i64, String),
    /// Kept events after this id.
    Events(String),
}

/// What one [`Outbox::reseal`] call did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Resealed {
    /// Data keys wrapped again under the ring's sealing key.
    pub keys: u32,
    /// Payloads (of messages, deliveries and kept events) sealed again
    /// under the ring's sealing key.
    pub payloads: u32,
    /// Values read that no key of the ring opens (left as they are).
    pub unopenable: u32,
    /// Where the pass goes on; `None` once it has read everything.
    pub next: Option<ResealCursor>,
}

impl Outbox {
    /// One step of a reseal pass, at bounded cost: reads at most `limit`
    /// rows (data keys, then messages, then kept events) after `after`
    /// (`None`: the start), and rewrites those not under the ring's sealing
    /// key in one atomic call, each only if unchanged since it was read.
    /// Two calls to the database.
    ///
    /// To rotate: put the new key first in the ring (keep the old one),
    /// call until `next` is `None`, and once a whole pass rewrote nothing,
    /// drop the old key. Rows moved while a pass runs (a claim moves a
    /// message in the table's order) may be missed by it: run passes until
    /// one rewrites nothing. Payloads under a data key are not rewritten:
    /// their key is.
    ///
    /// # Errors
    /// [`Error::InvalidInput`](crate::error::Error::InvalidInput) without a
    /// key ring, or for a `limit` outside 1 ..= 1,000; database errors.
    pub async fn reseal(&self, after: Option<&ResealCursor>, limit: u32) -> Result<Resealed> {
        let Some(ring) = self.key_ring() else {
            return Err(crate::error::Error::invalid(
                "reseal",
                "this outbox has no key ring (OutboxBuilder::key_ring)",
            ));
        };
        if !(1..=1000).contains(&limit) {
            return Err(crate::error::Error::invalid(
                "reseal limit",
                format!("{limit} is outside 1 ..= 1000"),
            ));
        }
        let stage = after.map_or(Stage::Keys(String::new(), String::new()), |cursor| {
            cursor.stage.clone()
        });
        let (table, dialect) = (self.table(), self.dialect());
        let in_row = |error: crate::error::Error| error.in_row(table.as_str(), None);
        let mut done = Resealed::default();
        let mut writes = Vec::new();
        let read = match &stage {
            Stage::Keys(subject, id) => keys::page(table, dialect, (subject, id), limit)?,
            Stage::Messages(state, due, id) => {
                keys::messages_page(table, dialect, (state, *due, id), limit)?
            }
            Stage::Events(after) => keys::events_page(table, dialect, after, limit)?,
        };
        let rows = self.database().query(&read).await?;
        let mut last = None;
        for row in rows.iter() {
            match &stage {
                Stage::Keys(..) => {
                    let subject: String = row.get(key_col::SUBJECT).map_err(in_row)?;
                    let key = WrappedKey {
                        id: row.get(key_col::ID).map_err(in_row)?,
                        subject: subject.clone(),
                        ring_key: row.get(key_col::RING_KEY).map_err(in_row)?,
                        wrapped: row.get(key_col::WRAPPED).map_err(in_row)?,
                    };
                    match ring.rewrap(&key) {
                        Ok(Some(new)) => {
                            writes.push(keys::rewrap(table, dialect, &subject, &key, &new)?);
                            done.keys += 1;
                        }
                        Ok(None) => {}
                        Err(_) => done.unopenable += 1,
                    }
                    last = Some(Stage::Keys(subject, key.id));
                }
                Stage::Messages(..) => {
                    let state: String = row.get(crate::sql::col::STATE).map_err(in_row)?;
                    let due: i64 = row.get(crate::sql::col::DUE_AT).map_err(in_row)?;
                    let id: String = row.get(crate::sql::col::ID).map_err(in_row)?;
                    let payload: String = row.get(crate::sql::col::PAYLOAD).map_err(in_row)?;
                    match ring.reseal(&payload) {
                        Ok(Some(new)) => {
                            writes.push(keys::reseal_message(
                                table,
                                dialect,
                                (&state, due, &id),
                                &payload,
                                &new,
                            )?);
                            done.payloads += 1;
                        }
                        Ok(None) => {}
                        Err(_) => done.unopenable += 1,
                    }
                    last = Some(Stage::Messages(state, due, id));
                }
                Stage::Events(_) => {
                    use crate::sql::endpoints::event_col;
                    let id: String = row.get(event_col::ID).map_err(in_row)?;
                    let payload: String = row.get(event_col::PAYLOAD).map_err(in_row)?;
                    match ring.reseal(&payload) {
                        Ok(Some(new)) => {
                            writes.push(keys::reseal_event(table, dialect, &id, &payload, &new)?);
                            done.payloads += 1;
                        }
                        Ok(None) => {}
                        Err(_) => done.unopenable += 1,
                    }
                    last = Some(Stage::Events(id));
                }
            }
        }
        if !writes.is_empty() {
            self.database().batch_atomic(&writes).await?;
        }
        let full = rows.len() >= limit as usize;
        done.next = match (full, last, stage) {
            (true, Some(last), _) => Some(last),
            // Every state sorts after "": the due time of the start is moot.
            (_, _, Stage::Keys(..)) => Some(Stage::Messages(String::new(), 0, String::new())),
            (_, _, Stage::Messages(..)) => Some(Stage::Events(String::new())),
            (_, _, Stage::Events(_)) => None,
        }
        .map(|stage| ResealCursor { stage });
        Ok(done)
    }
}
