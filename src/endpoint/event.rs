//! An event, and its fan-out to endpoints inside the publishing batch.

use serde::Serialize;

use crate::outbox::Outbox;
use crate::time::Timestamp;

use super::store::Endpoints;
use crate::erasure::GuardedInsert;
use crate::error::{Error, Result};
use crate::outbox::operational::EVENT_ID_PREFIX;
use crate::outbox::{MessageLimits, check_key};
use crate::sql::events::{self, DELIVERY_ID_SEPARATOR, EventRow};

/// The most bytes of an event id of the caller's: with the separator and
/// an endpoint's id (`ep_` and a ULID), a delivery's id stays within
/// [`MessageLimits::MAX_ID_BYTES`].
pub const MAX_EVENT_ID_BYTES: usize = MessageLimits::MAX_ID_BYTES - 32;

/// Something that happened to an owner, for every endpoint of that owner
/// subscribed to its type. Its id (`evt_…` unless given) is the
/// `webhook-id` every endpoint receives it with, on every retry.
#[derive(Debug, Clone)]
pub struct Event {
    pub(crate) owner: String,
    pub(crate) event_type: String,
    pub(crate) payload: String,
    pub(crate) id: Option<String>,
    pub(crate) subject: Option<String>,
    pub(crate) ordering_key: Option<String>,
}

impl Event {
    /// An event of `event_type` for `owner`'s endpoints, its payload
    /// `payload` as JSON.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] if `payload` does not serialize.
    pub fn new(
        owner: impl Into<String>,
        event_type: impl Into<String>,
        payload: &impl Serialize,
    ) -> Result<Self> {
        let payload = serde_json::to_string(payload)
            .map_err(|error| Error::invalid("payload", format!("not serializable: {error}")))?;
        Ok(Self::raw_json(owner, event_type, payload))
    }

    /// An event whose payload is JSON text already (checked at publish).
    pub fn raw_json(
        owner: impl Into<String>,
        event_type: impl Into<String>,
        payload: impl Into<String>,
    ) -> Self {
        Event {
            owner: owner.into(),
            event_type: event_type.into(),
            payload: payload.into(),
            id: None,
            subject: None,
            ordering_key: None,
        }
    }

    /// Each endpoint receives the events of this key one at a time, in
    /// publish order (its deliveries wait behind its earlier ones), while
    /// other endpoints and keys go on.
    #[must_use]
    pub fn ordering_key(mut self, key: impl Into<String>) -> Self {
        self.ordering_key = Some(key.into());
        self
    }

    /// Uses this id instead of a generated one (printable ASCII without
    /// `.`, at most [`MAX_EVENT_ID_BYTES`]): publishing the same id twice
    /// fails the second batch with [`Error::Conflict`].
    #[must_use]
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The data subject the event is about: the event and its deliveries
    /// are erased with the subject, and refused once it is erased.
    #[must_use]
    pub fn subject(mut self, subject: impl Into<String>) -> Self {
        self.subject = Some(subject.into());
        self
    }
}

/// An event's statements for a batch: kept, then fanned out.
#[derive(Debug, Clone)]
pub(crate) struct Publish {
    pub(crate) id: String,
    /// The event's row, behind its subject's guard.
    pub(crate) kept: GuardedInsert,
    /// One delivery row per endpoint, behind the same guard.
    pub(crate) fan_out: GuardedInsert,
}

impl Endpoints {
    /// The statements that publish `event` (see
    /// [`Batch::publish`](crate::Batch::publish)).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the bad field.
    pub(crate) fn publish_statements(&self, event: Event) -> Result<Publish> {
        let outbox = &self.outbox;
        super::model::check_owner(&event.owner)?;
        self.rules.check_type(&event.event_type)?;
        check_key("subject", event.subject.as_deref())?;
        check_key("ordering key", event.ordering_key.as_deref())?;
        outbox.message_limits().check_payload(&event.payload)?;
        let now = outbox.now();
        let id = match event.id {
            Some(id) => {
                check_event_id(&id)?;
                id
            }
            None => format!("evt_{}", outbox.new_ulid(now)),
        };
        let subject = event
            .subject
            .as_deref()
            .map(|subject| outbox.stored_subject(subject));
        let ordering_key = event
            .ordering_key
            .as_deref()
            .map(|key| outbox.stored_key(key));
        // Sealed once: every delivery carries the event's sealed payload,
        // opened with the event's data key.
        let (payload, key) = outbox.seal_payload(&event.payload, subject.as_deref(), now)?;
        let row = EventRow {
            id: &id,
            owner: &event.owner,
            event_type: &event.event_type,
            payload: &payload,
            filtered: &event.payload,
            subject: subject.as_deref(),
            ordering_key: ordering_key.as_deref(),
            at: now,
        };
        let (table, dialect) = (outbox.table(), outbox.dialect());
        let raw_subject = event.subject.as_deref();
        Ok(Publish {
            kept: GuardedInsert::with(
                outbox.tombstones(),
                raw_subject,
                now,
                key,
                events::insert_event(table, dialect, &row)?,
            )?,
            fan_out: GuardedInsert::new(
                outbox.tombstones(),
                raw_subject,
                now,
                events::fan_out(table, dialect, &row)?,
            )?,
            id,
        })
    }
}

fn check_event_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_EVENT_ID_BYTES {
        return Err(Error::invalid(
            "event id",
            format!(
                "it is {} bytes; ids are 1 ..= {MAX_EVENT_ID_BYTES} bytes",
                id.len()
            ),
        ));
    }
    if let Some(bad) = id
        .chars()
        .find(|c| !c.is_ascii_graphic() || *c == '.' || DELIVERY_ID_SEPARATOR.contains(*c))
    {
        return Err(Error::invalid(
            "event id",
            format!("{id:?} contains {bad:?}; ids are printable ASCII without spaces, '.' or ':'"),
        ));
    }
    if id.starts_with(EVENT_ID_PREFIX) {
        return Err(Error::invalid(
            "event id",
            format!("{id:?}: ids starting {EVENT_ID_PREFIX:?} are the outbox's own"),
        ));
    }
    Ok(())
}

/// An event as kept (for recovery, and a subject's export).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct PublishedEvent {
    /// Its id: the `webhook-id` its endpoints received.
    pub id: String,
    /// Whose it is.
    pub owner: String,
    /// Its type.
    pub event_type: String,
    /// Its payload's JSON text.
    pub payload: String,
    /// The subject it is about.
    pub subject: Option<String>,
    /// When it was published, in Unix ms.
    #[serde(rename = "created_ms", serialize_with = "millis")]
    pub created_at: Timestamp,
}

fn millis<S: serde::Serializer>(
    at: &Timestamp,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    serializer.serialize_i64(at.as_unix_millis())
}

/// The events of `subject` kept by `outbox`, oldest first.
pub(crate) async fn events_of_subject(
    outbox: &Outbox,
    subject: &str,
) -> Result<Vec<PublishedEvent>> {
    use crate::sql::endpoints::event_col;
    let forms = outbox.subject_forms(subject);
    let statement = events::events_of_subject(
        outbox.table(),
        outbox.dialect(),
        &crate::erasure::as_strs(&forms),
    )?;
    let rows = outbox.database().query(&statement).await?;
    let table = crate::sql::endpoints::events_table(outbox.table());
    let mut events = rows
        .iter()
        .map(|row| {
            let read = || -> Result<PublishedEvent> {
                Ok(PublishedEvent {
                    id: row.get(event_col::ID)?,
                    owner: row.get(event_col::OWNER)?,
                    event_type: row.get(event_col::EVENT_TYPE)?,
                    payload: row.get(event_col::PAYLOAD)?,
                    // Named as asked, also where the table holds its hash.
                    subject: Some(subject.to_owned()),
                    created_at: row.get(event_col::CREATED_AT)?,
                })
            };
            read().map_err(|error| error.in_row(&table, None))
        })
        .collect::<Result<Vec<_>>>()?;
    let keys = outbox
        .data_keys_of(
            events
                .iter()
                .map(|event| (Some(forms[0].as_str()), event.payload.as_str())),
        )
        .await?;
    for event in &mut events {
        let key = crate::seal::Envelope::parse(&event.payload)
            .ok()
            .flatten()
            .and_then(|envelope| keys.get(envelope.key));
        // One that does not open is exported as stored, sealed.
        if let Ok(payload) = outbox.open_payload(&event.payload, key) {
            event.payload = payload;
        }
    }
    Ok(events)
}
