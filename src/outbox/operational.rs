//! Operational events: what the outbox tells its operator, published as
//! events of reserved types to the endpoints of the operator's owner (see
//! [`OutboxBuilder::operational_events`](super::OutboxBuilder::operational_events)),
//! in the same atomic call as the change they report.

use super::Outbox;
use super::claim::LeaseHandle;
use crate::database::Statement;
use crate::error::Result;
use crate::sql::events::{self, About, EventRow};
use crate::time::Timestamp;

/// An endpoint was disabled: by its receiver (a `410 Gone`), by failing
/// past [`EndpointDeliverer::disable_after`](crate::endpoint::EndpointDeliverer),
/// or through [`Endpoints::disable`](crate::endpoint::Endpoints::disable).
pub const ENDPOINT_DISABLED: &str = "outbox.endpoint.disabled";
/// An endpoint was enabled again ([`Endpoints::enable`](crate::endpoint::Endpoints::enable)).
pub const ENDPOINT_ENABLED: &str = "outbox.endpoint.enabled";
/// A test event, sent to one endpoint through
/// [`Endpoints::send_test`](crate::endpoint::Endpoints::send_test) (by an
/// operator or its owner) to see it answer.
pub const ENDPOINT_TEST: &str = "outbox.endpoint.test";
/// An [`Alert`](super::Alert) holds: told at most once per rule per
/// window, by the sweep of a drain.
pub const ALERT: &str = "outbox.alert";
/// A message died: of a permanent failure, or its last attempt failed.
pub const MESSAGE_DEAD: &str = crate::sql::events::MESSAGE_DEAD;
/// A receiver has failed for longer than
/// [`OutboxBuilder::receiver_failing_after`](super::OutboxBuilder::receiver_failing_after),
/// every message sent to it failing in turn (its breaker open, drain after
/// drain). Told once per outage.
pub const RECEIVER_FAILING: &str = "outbox.receiver.failing";
/// A receiver told of as failing answers again.
pub const RECEIVER_RECOVERED: &str = "outbox.receiver.recovered";
/// The prefix of the reserved types: an application publishes none of them.
pub const RESERVED_PREFIX: &str = "outbox.";
/// The prefix of the operational events' ids (their `webhook-id`): an
/// application's event ids never start with it, so a delivery whose event
/// id does is the outbox's own report.
pub const EVENT_ID_PREFIX: &str = crate::sql::events::EVENT_ID_PREFIX;

impl Outbox {
    /// The owner whose endpoints receive the operational events, if any.
    pub(crate) fn operational_owner(&self) -> Option<&str> {
        self.inner.operational_owner.as_deref()
    }

    /// The operator owner, a new event id and `payload` as text; `None`
    /// without an operator owner.
    fn operational_parts(
        &self,
        payload: &serde_json::Value,
        now: Timestamp,
    ) -> Result<Option<(&str, String, String)>> {
        let Some(owner) = self.operational_owner() else {
            return Ok(None);
        };
        let payload = crate::sql::json_text(payload, "operational event")?;
        Ok(Some((
            owner,
            format!("{EVENT_ID_PREFIX}{}", self.new_ulid(now)),
            payload,
        )))
    }

    /// Publishes `event_type` with `payload` about the row `lease` holds,
    /// while it holds (and is what `about` says); nothing without an
    /// operator owner.
    pub(crate) fn report_settle(
        &self,
        lease: &LeaseHandle,
        event_type: &'static str,
        payload: &serde_json::Value,
        about: impl FnOnce(&str) -> About<'_>,
        now: Timestamp,
    ) -> Result<Vec<Statement>> {
        let Some((owner, id, payload)) = self.operational_parts(payload, now)? else {
            return Ok(Vec::new());
        };
        let event = operational(&id, owner, event_type, &payload, now);
        Ok(vec![
            events::keep_if_held(
                self.table(),
                self.dialect(),
                &lease.fence(),
                &event,
                about(owner),
            )?,
            events::fan_out_if_kept(self.table(), self.dialect(), &event)?,
        ])
    }

    /// Publishes [`MESSAGE_DEAD`] of each row the claim with `token`
    /// parks as dead at `now` (sent after the claim, in its batch); nothing
    /// without an operator owner.
    pub(crate) fn report_claim_deaths(
        &self,
        token: &str,
        now: Timestamp,
    ) -> Result<Vec<Statement>> {
        let Some(operator) = self.operational_owner() else {
            return Ok(Vec::new());
        };
        let deaths = events::ClaimDeaths {
            token,
            at: now,
            operator,
        };
        Ok(vec![
            events::keep_claim_deaths(self.table(), self.dialect(), &deaths)?,
            events::fan_out_claim_deaths(self.table(), self.dialect(), &deaths)?,
        ])
    }

    /// Publishes `event_type` with `payload` about `owner`'s endpoint
    /// `endpoint` (changed through the API), if it exists; nothing without
    /// an operator owner.
    pub(crate) fn report_endpoint(
        &self,
        (owner, endpoint): (&str, &str),
        event_type: &'static str,
        payload: &serde_json::Value,
        now: Timestamp,
    ) -> Result<Vec<Statement>> {
        let Some((operator, id, payload)) = self.operational_parts(payload, now)? else {
            return Ok(Vec::new());
        };
        let event = operational(&id, operator, event_type, &payload, now);
        let (table, dialect) = (self.table(), self.dialect());
        Ok(vec![
            events::keep_if_endpoint(table, dialect, owner, endpoint, &event)?,
            events::fan_out_if_kept(table, dialect, &event)?,
        ])
    }
}

fn operational<'a>(
    id: &'a str,
    owner: &'a str,
    event_type: &'a str,
    payload: &'a str,
    at: Timestamp,
) -> EventRow<'a> {
    EventRow {
        id,
        owner,
        event_type,
        payload,
        filtered: payload,
        subject: None,
        ordering_key: None,
        at,
    }
}
