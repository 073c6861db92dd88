//! The endpoints handle: create, read, change and delete an outbox's
//! endpoints, every call scoped by owner.

use std::collections::BTreeMap;
use std::time::Duration;

use super::destination::{Destination, EndpointKind};
use super::model::{
    Endpoint, EndpointFilter, EndpointState, EndpointUpdate, NewEndpoint, Rules, StoredSecret,
    Target, check_filter, check_owner, check_rate_limit, check_secret, metadata_text,
};
use crate::database::{Row, Statement};
use crate::error::{Error, Result};
use crate::outbox::{Outbox, check_key, operational};
use crate::sql::endpoints::{
    self, EndpointRow, Rewrite, Scope, endpoint_col, endpoint_state, endpoints_table,
    subscription_col,
};
use crate::sql::events::Filtered;
use crate::time::Timestamp;

/// The endpoints of one [`Outbox`], stored in its database beside it
/// (`<table>_endpoints`), so an event fans out to them inside the
/// application's own batch ([`Batch::publish`](crate::Batch::publish)).
///
/// Every call names the owner (the tenant the application names): an
/// endpoint of another owner is [`Error::NotFound`], and nothing of it is
/// read or changed. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Endpoints {
    pub(crate) outbox: Outbox,
    pub(crate) rules: Rules,
}

impl Endpoints {
    /// The endpoints of `outbox`: public HTTPS URLs only, any event type.
    pub fn new(outbox: &Outbox) -> Self {
        Endpoints {
            outbox: outbox.clone(),
            rules: Rules::default(),
        }
    }

    /// Allows plain `http://` URLs (for local development).
    #[must_use]
    pub fn allow_http(mut self, allow: bool) -> Self {
        self.rules.allow_http = allow;
        self
    }

    /// Allows URLs naming loopback, private or link-local addresses and
    /// `localhost` (refused by default: a tenant must not reach the
    /// application's own network through its endpoint).
    #[must_use]
    pub fn allow_private(mut self, allow: bool) -> Self {
        self.rules.allow_private = allow;
        self
    }

    /// Allows `mailto:` endpoints to addresses in `domains` (`"*"`: any
    /// domain), each delivery a mail from the application's sender through
    /// the deliverer's `send_email` binding (`EndpointDeliverer::email`).
    /// None by default: a tenant must not mail whom it pleases from the
    /// application's address; `"*"` lets every tenant do just that.
    #[must_use]
    pub fn allow_email_to<T: Into<String>>(mut self, domains: impl IntoIterator<Item = T>) -> Self {
        self.rules.email_domains = domains
            .into_iter()
            .map(|domain| domain.into().to_ascii_lowercase())
            .collect();
        self
    }

    /// The bindings `service://NAME/…`, `workflow://NAME` and `queue://NAME`
    /// endpoints may name (none by default): the names the deliverer is
    /// given with `EndpointDeliverer::service`, `workflow` and `queue`. An
    /// entry `NAME/prefix/` allows that service under the path `/prefix/`
    /// only (as the request will carry it, `..` resolved); `NAME` allows
    /// every path. Checked when an endpoint is created or its URL changes:
    /// narrowing the list later leaves stored endpoints as they are
    /// (update or delete them).
    #[must_use]
    pub fn allow_bindings<T: Into<String>>(mut self, names: impl IntoIterator<Item = T>) -> Self {
        self.rules.bindings = names.into_iter().map(Into::into).collect();
        self
    }

    /// The event types the application publishes: an endpoint subscribing
    /// to another, or an event published with another, is refused.
    #[must_use]
    pub fn event_types<T: Into<String>>(mut self, types: impl IntoIterator<Item = T>) -> Self {
        self.rules.known_types = Some(types.into_iter().map(Into::into).collect());
        self
    }

    /// A handle to these endpoints whose next call that writes also writes
    /// `audit`'s entry into the outbox's audit log, in the same atomic call
    /// (see [`Outbox::audited`]).
    ///
    /// # Errors
    /// As [`Outbox::audited`].
    pub fn audited(
        &self,
        audit: &crate::outbox::Audit,
    ) -> Result<(Endpoints, crate::outbox::AuditKey)> {
        let (outbox, key) = self.outbox.audited(audit)?;
        Ok((
            Endpoints {
                outbox,
                rules: self.rules.clone(),
            },
            key,
        ))
    }

    /// The outbox whose endpoints these are.
    pub fn outbox(&self) -> &Outbox {
        &self.outbox
    }

    /// Creates an endpoint; it is enabled at once. Returns it, with its id.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the bad field: the owner, the URL
    /// (see [`allow_http`](Self::allow_http), [`allow_private`](Self::allow_private)),
    /// the secret (it must parse and hold 24 bytes or more), the event types,
    /// the metadata. Database errors.
    pub async fn create(&self, new: NewEndpoint) -> Result<Endpoint> {
        check_owner(&new.owner)?;
        let kind = self.rules.check_url(&new.url)?;
        let secrets = if new.secret.is_empty() && !kind.signs() {
            Vec::new()
        } else {
            check_secret(&new.secret)?;
            vec![StoredSecret {
                key: new.secret,
                until_ms: None,
            }]
        };
        self.rules.check_subscriptions(&new.event_types)?;
        let metadata = metadata_text(&new.metadata)?;
        if let Some((field, equals)) = &new.filter {
            check_filter(field, equals)?;
        }
        check_rate_limit(new.rate_limit)?;
        let now = self.outbox.now();
        let id = format!("ep_{}", self.outbox.new_ulid(now));
        let target = Target {
            url: new.url,
            secrets,
            rate_limit: new.rate_limit,
            body: new.body,
        }
        .to_json()?;
        let (table, dialect) = (self.outbox.table(), self.outbox.dialect());
        let mut statements = vec![endpoints::insert(
            table,
            dialect,
            &EndpointRow {
                id: &id,
                owner: &new.owner,
                target: &target,
                metadata: &metadata,
                state: endpoint_state::ENABLED,
                filter: new.filter.as_ref().map(|(f, v)| (f.as_str(), v.as_str())),
                at: now,
                most: Self::MAX_PER_OWNER,
            },
        )?];
        for event_type in &new.event_types {
            statements.push(endpoints::subscribe(
                table, dialect, &new.owner, &id, event_type,
            )?);
        }
        let outcomes = self.outbox.database().batch_atomic(&statements).await?;
        if outcomes
            .first()
            .is_none_or(|written| written.rows_affected == 0)
        {
            return Err(Error::invalid(
                "endpoint owner",
                format!(
                    "{:?} has {} endpoints already, the most one owner may have",
                    new.owner,
                    Self::MAX_PER_OWNER
                ),
            ));
        }
        self.get(&new.owner, &id).await
    }

    /// `owner`'s endpoint `id`.
    ///
    /// # Errors
    /// [`Error::NotFound`] if `owner` has no endpoint `id`; database errors.
    pub async fn get(&self, owner: &str, id: &str) -> Result<Endpoint> {
        Ok(self.read_one(owner, id).await?.0)
    }

    /// `owner`'s endpoints, in id order.
    ///
    /// # Errors
    /// Database errors; [`Error::MalformedRow`] for a row that does not
    /// decode.
    pub async fn list(&self, owner: &str) -> Result<Vec<Endpoint>> {
        check_owner(owner)?;
        let endpoints = self.read(Scope::Owner { owner, id: None }).await?;
        Ok(endpoints
            .into_iter()
            .map(|(endpoint, _)| endpoint)
            .collect())
    }

    /// Every owner's endpoints, a page at a time: the first `limit` (1 ..=
    /// [`MAX_PAGE`](Self::MAX_PAGE)) in id order after `after` (an id a
    /// previous page ended with; `None`: from the first). For an operator
    /// of the application, never for a tenant: it reads across owners.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a limit out of range or an id that is
    /// no key; database errors; [`Error::MalformedRow`].
    pub async fn list_all(&self, after: Option<&str>, limit: u32) -> Result<EndpointPage> {
        if !(1..=Self::MAX_PAGE).contains(&limit) {
            return Err(Error::invalid(
                "endpoint page limit",
                format!("{limit} is outside 1 ..= {}", Self::MAX_PAGE),
            ));
        }
        check_key("endpoint id", after)?;
        let endpoints: Vec<Endpoint> = self
            .read(Scope::Page { after, limit })
            .await?
            .into_iter()
            .map(|(endpoint, _)| endpoint)
            .collect();
        let next_after = endpoints
            .last()
            .filter(|_| endpoints.len() == limit as usize)
            .map(|last| last.id.clone());
        Ok(EndpointPage {
            endpoints,
            next_after,
        })
    }

    /// The most endpoints one [`list_all`](Self::list_all) page holds.
    pub const MAX_PAGE: u32 = 100;

    /// Changes the URL, event types, filter, rate limit, body format or
    /// metadata of `owner`'s endpoint `id`.
    /// Its pending deliveries go to the new URL from their next attempt.
    ///
    /// # Errors
    /// As [`create`](Self::create) for the fields changed;
    /// [`Error::NotFound`].
    pub async fn update(&self, owner: &str, id: &str, update: EndpointUpdate) -> Result<Endpoint> {
        let (current, mut target) = self.read_one(owner, id).await?;
        if let Some(url) = update.url {
            if self.rules.check_url(&url)?.signs() && target.secrets.is_empty() {
                return Err(Error::invalid(
                    "endpoint secret",
                    "an HTTPS or service endpoint signs its deliveries: give it a secret \
                     (`rotate_secret`) before its URL",
                ));
            }
            target.url = url;
        }
        if let Some(types) = &update.event_types {
            self.rules.check_subscriptions(types)?;
        }
        if let Some(rate_limit) = update.rate_limit {
            check_rate_limit(rate_limit)?;
            target.rate_limit = rate_limit;
        }
        if let Some(body) = update.body {
            target.body = body;
        }
        let metadata = metadata_text(update.metadata.as_ref().unwrap_or(&current.metadata))?;
        let (table, dialect, now) = self.at_now();
        let filter = match &update.filter {
            Some(Some((field, equals))) => {
                check_filter(field, equals)?;
                Some((field.as_str(), equals.as_str()))
            }
            Some(None) => None,
            None => current
                .filter
                .as_ref()
                .map(|f| (f.field.as_str(), f.equals.as_str())),
        };
        let target = target.to_json()?;
        let rewrite = Rewrite {
            target: &target,
            metadata: &metadata,
            filter,
        };
        let mut statements = vec![endpoints::update(
            table,
            dialect,
            (owner, id),
            &rewrite,
            now,
        )?];
        if let Some(types) = &update.event_types {
            statements.push(endpoints::unsubscribe(table, dialect, owner, id)?);
            for event_type in types {
                statements.push(endpoints::subscribe(table, dialect, owner, id, event_type)?);
            }
        }
        self.write(id, &statements, 0).await?;
        self.get(owner, id).await
    }

    /// Rotates the secret of `owner`'s endpoint `id`: `secret` signs from
    /// now on, and the one it replaces signs beside it for `overlap`, so a
    /// receiver can switch within that time without refusing a delivery.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a secret that does not parse or is too
    /// short to sign with; [`Error::NotFound`].
    pub async fn rotate_secret(
        &self,
        owner: &str,
        id: &str,
        secret: &str,
        overlap: Duration,
    ) -> Result<Endpoint> {
        check_secret(secret)?;
        let (current, mut target) = self.read_one(owner, id).await?;
        let now = self.outbox.now();
        let until = now.checked_add(overlap)?.as_unix_millis();
        let previous = target.secrets.first().cloned();
        target.secrets = std::iter::once(StoredSecret {
            key: secret.to_owned(),
            until_ms: None,
        })
        .chain(previous.map(|old| StoredSecret {
            key: old.key,
            until_ms: Some(until),
        }))
        .filter(|stored| {
            stored
                .until_ms
                .is_none_or(|until| until > now.as_unix_millis())
        })
        .collect();
        let metadata = metadata_text(&current.metadata)?;
        let target = target.to_json()?;
        let rewrite = Rewrite {
            target: &target,
            metadata: &metadata,
            filter: current
                .filter
                .as_ref()
                .map(|f| (f.field.as_str(), f.equals.as_str())),
        };
        let statement = endpoints::update(
            self.outbox.table(),
            self.outbox.dialect(),
            (owner, id),
            &rewrite,
            now,
        )?;
        self.write(id, &[statement], 0).await?;
        self.get(owner, id).await
    }

    /// Gives `owner`'s endpoint `id` the events since `since` that it
    /// subscribes to (as Svix's recover does): a delivery of each, due at
    /// once, except of those still pending for it. For an endpoint that
    /// missed events while it was failing or disabled, or a new one that
    /// should see the recent past. Events are kept for the outbox's
    /// [event retention](crate::outbox::OutboxBuilder::event_retention). At most
    /// [`RECOVERED_PER_CALL`](Self::RECOVERED_PER_CALL) events a call
    /// ([`RECOVERED_OPENED_PER_CALL`](Self::RECOVERED_OPENED_PER_CALL) for an
    /// endpoint with a filter in an outbox that seals, whose events are
    /// opened here to read the filter): [`Recovered::next_since`] says where
    /// the next call starts.
    ///
    /// # Errors
    /// [`Error::NotFound`]; database errors.
    pub async fn recover(&self, owner: &str, id: &str, since: Timestamp) -> Result<Recovered> {
        let endpoint = self.get(owner, id).await?;
        let (table, dialect, now) = self.at_now();
        let sealed = self.outbox.key_ring().is_some();
        // SQL cannot read a sealed payload (nor must it try: a filter's
        // JSON read of sealed text fails the statement). With a filter, it
        // is read here, from the payloads opened, among fewer events.
        let opened = match (&endpoint.filter, sealed) {
            (Some(filter), true) => Some(self.recoverable_opened(owner, id, since, filter).await?),
            _ => None,
        };
        let limit = if opened.is_some() {
            Self::RECOVERED_OPENED_PER_CALL
        } else {
            Self::RECOVERED_PER_CALL
        };
        let ids: Vec<&str> = opened
            .iter()
            .flat_map(|(ids, _)| ids.iter().map(String::as_str))
            .collect();
        let through = match (&opened, sealed) {
            (Some(_), _) => Filtered::Only(&ids),
            (None, true) => Filtered::Unfiltered,
            (None, false) => Filtered::InSql,
        };
        let mut statements = vec![
            crate::sql::events::forget_dead_deliveries(table, dialect, owner, id, since)?,
            crate::sql::events::recover(table, dialect, (owner, id), since, (now, limit), through)?,
        ];
        if opened.is_none() {
            statements.push(crate::sql::events::recover_next(
                table,
                dialect,
                (owner, id),
                since,
                limit,
                through,
            )?);
        }
        let outcomes = self.outbox.database().run_atomic(&statements).await?;
        let Some(written) = outcomes.get(1) else {
            return Err(Error::database(
                "the database returned fewer outcomes than statements",
            ));
        };
        let next_since = match (opened, outcomes.get(2)) {
            (Some((_, next)), _) => next,
            (None, Some(next)) => match next.rows.first() {
                Some(row) => Some(row.get(crate::sql::endpoints::event_col::CREATED_AT)?),
                None => None,
            },
            (None, None) => {
                return Err(Error::database(
                    "the database returned fewer outcomes than statements",
                ));
            }
        };
        Ok(Recovered {
            deliveries: written.rows_affected,
            next_since,
        })
    }

    /// Of the next [`RECOVERED_OPENED_PER_CALL`](Self::RECOVERED_OPENED_PER_CALL)
    /// events `owner`'s endpoint `id` subscribes to since `since`, the ids
    /// of those whose opened payloads `filter` lets through (read as this
    /// database's SQL filter reads a clear payload), and the time of the
    /// event after them, if any.
    async fn recoverable_opened(
        &self,
        owner: &str,
        id: &str,
        since: Timestamp,
        filter: &super::model::EndpointFilter,
    ) -> Result<(Vec<String>, Option<Timestamp>)> {
        use crate::sql::endpoints::event_col;
        let (table, dialect, _) = self.at_now();
        let limit = Self::RECOVERED_OPENED_PER_CALL;
        let statement = crate::sql::events::recoverable_events(
            table,
            dialect,
            (owner, id),
            since,
            limit.saturating_add(1),
        )?;
        let rows = self.outbox.database().query(&statement).await?;
        let events_table = crate::sql::endpoints::events_table(table);
        let mut events = rows
            .iter()
            .map(|row| {
                let read = || -> Result<(String, String, Option<String>, Timestamp)> {
                    Ok((
                        row.get(event_col::ID)?,
                        row.get(event_col::PAYLOAD)?,
                        row.get(event_col::SUBJECT)?,
                        row.get(event_col::CREATED_AT)?,
                    ))
                };
                read().map_err(|error| error.in_row(&events_table, None))
            })
            .collect::<Result<Vec<_>>>()?;
        let next = if events.len() > limit as usize {
            events.pop().map(|(.., at)| at)
        } else {
            None
        };
        let keys = self
            .outbox
            .data_keys_of(
                events
                    .iter()
                    .map(|(_, payload, subject, _)| (subject.as_deref(), payload.as_str())),
            )
            .await?;
        let mut through = Vec::new();
        for (event, payload, ..) in events {
            let key = crate::seal::Envelope::parse(&payload)
                .ok()
                .flatten()
                .and_then(|envelope| keys.get(envelope.key));
            // One that does not open cannot be matched: it is not sent (its
            // delivery would be held anyway).
            let Ok(opened) = self.outbox.open_payload(&payload, key) else {
                continue;
            };
            if super::model::filter_lets_through(dialect, &opened, &filter.field, &filter.equals) {
                through.push(event);
            }
        }
        Ok((through, next))
    }

    /// The `limit` latest logged attempts of `owner`'s endpoint `id`, newest
    /// first (see [`AttemptLog`](crate::drain::AttemptLog)).
    ///
    /// # Errors
    /// [`Error::NotFound`]; database errors.
    pub async fn attempts(
        &self,
        owner: &str,
        id: &str,
        limit: u32,
    ) -> Result<Vec<crate::outbox::LoggedAttempt>> {
        self.get(owner, id).await?;
        self.outbox
            .attempts_of_topic(id, limit.min(Self::MOST_ATTEMPTS_READ))
            .await
    }

    /// Sends `owner`'s endpoint `id` a test event of type
    /// [`ENDPOINT_TEST`](operational::ENDPOINT_TEST), whatever it
    /// subscribes to and filters, due at once, signed and logged as any
    /// other delivery: `{"type", "endpoint_id", "owner", "at_ms"}`. It
    /// goes to that endpoint alone and is not kept for recovery. Returns
    /// its event id (its `webhook-id`).
    ///
    /// # Errors
    /// [`Error::NotFound`]; [`Error::InvalidInput`] if the endpoint is
    /// disabled (it takes no events; enable it first); database errors.
    pub async fn send_test(&self, owner: &str, id: &str) -> Result<String> {
        self.get(owner, id).await?;
        let (table, dialect, now) = self.at_now();
        let event_id = format!(
            "{}{}",
            operational::EVENT_ID_PREFIX,
            self.outbox.new_ulid(now)
        );
        let payload = crate::sql::json_text(
            &serde_json::json!({
                "type": operational::ENDPOINT_TEST,
                "endpoint_id": id, "owner": owner, "at_ms": now.as_unix_millis(),
            }),
            "test event",
        )?;
        let event = crate::sql::events::EventRow {
            id: &event_id,
            owner,
            event_type: operational::ENDPOINT_TEST,
            payload: &payload,
            filtered: &payload,
            subject: None,
            ordering_key: None,
            at: now,
        };
        let statement = crate::sql::events::deliver_test(table, dialect, &event, id)?;
        let outcomes = self.outbox.database().batch_atomic(&[statement]).await?;
        if outcomes
            .first()
            .is_none_or(|written| written.rows_affected == 0)
        {
            return Err(Error::invalid(
                "endpoint",
                format!("{id} is disabled and takes no events: enable it first"),
            ));
        }
        Ok(event_id)
    }

    /// The most attempts one [`attempts`](Self::attempts) call reads.
    pub const MOST_ATTEMPTS_READ: u32 = 500;

    /// The most endpoints one owner may have.
    pub const MAX_PER_OWNER: u32 = 100;

    /// The most events one [`recover`](Self::recover) call goes through.
    pub const RECOVERED_PER_CALL: u32 = 1000;

    /// The most events one [`recover`](Self::recover) call goes through for
    /// an endpoint with a filter in an outbox that seals: each is read and
    /// opened in the Worker (100 payloads of at most 64 KiB fit its memory).
    pub const RECOVERED_OPENED_PER_CALL: u32 = 100;

    /// Disables `owner`'s endpoint `id`: it is given no new events, and its
    /// pending deliveries are held (no attempt spent, none dead) until it
    /// is [enabled](Self::enable) again.
    ///
    /// # Errors
    /// [`Error::NotFound`]; database errors.
    pub async fn disable(&self, owner: &str, id: &str, reason: &str) -> Result<()> {
        self.hold(owner, id, endpoint_state::DISABLED, reason).await
    }

    /// Pauses `owner`'s endpoint `id`: new events still reach it, and wait
    /// with its pending deliveries until it is [enabled](Self::enable).
    ///
    /// # Errors
    /// [`Error::NotFound`]; database errors.
    pub async fn pause(&self, owner: &str, id: &str, reason: &str) -> Result<()> {
        self.hold(owner, id, endpoint_state::PAUSED, reason).await
    }

    /// Enables `owner`'s endpoint `id` (disabled by anyone, its receiver's
    /// `410` included, or paused): its held deliveries are due at once.
    ///
    /// # Errors
    /// [`Error::NotFound`]; database errors.
    pub async fn enable(&self, owner: &str, id: &str) -> Result<()> {
        self.get(owner, id).await?;
        let (table, dialect, now) = self.at_now();
        let mut statements = vec![
            endpoints::set_state(table, dialect, owner, id, endpoint_state::ENABLED, now)?,
            endpoints::unhold(table, dialect, owner, id)?,
            crate::sql::settle::release_held_topic(table, dialect, id, now)?,
        ];
        statements.extend(crate::sql::dialects::of(dialect).resume_topic(table, id));
        let payload = serde_json::json!({
            "type": operational::ENDPOINT_ENABLED,
            "endpoint_id": id, "owner": owner, "at_ms": now.as_unix_millis(),
        });
        statements.extend(self.outbox.report_endpoint(
            (owner, id),
            operational::ENDPOINT_ENABLED,
            &payload,
            now,
        )?);
        self.write(id, &statements, 0).await
    }

    /// Deletes `owner`'s endpoint `id`, its subscriptions and its
    /// deliveries (a delivery under way finds its lease lost).
    ///
    /// # Errors
    /// [`Error::NotFound`]; database errors.
    pub async fn delete(&self, owner: &str, id: &str) -> Result<()> {
        self.get(owner, id).await?;
        let (table, dialect) = (self.outbox.table(), self.outbox.dialect());
        let statements = [
            endpoints::delete_deliveries(table, dialect, owner, id)?,
            endpoints::unsubscribe(table, dialect, owner, id)?,
            endpoints::unhold(table, dialect, owner, id)?,
            endpoints::delete(table, dialect, owner, id)?,
        ];
        self.write(id, &statements, 3).await
    }

    async fn hold(&self, owner: &str, id: &str, state: &'static str, reason: &str) -> Result<()> {
        check_key("reason", Some(reason))?;
        self.get(owner, id).await?;
        let (table, dialect, now) = self.at_now();
        let mut statements = vec![
            endpoints::set_state(table, dialect, owner, id, state, now)?,
            endpoints::hold(table, dialect, owner, id, reason, now)?,
        ];
        if state == endpoint_state::DISABLED {
            let payload = serde_json::json!({
                "type": operational::ENDPOINT_DISABLED,
                "endpoint_id": id, "owner": owner, "reason": reason, "at_ms": now.as_unix_millis(),
            });
            statements.extend(self.outbox.report_endpoint(
                (owner, id),
                operational::ENDPOINT_DISABLED,
                &payload,
                now,
            )?);
        }
        self.write(id, &statements, 0).await
    }

    /// The outbox's table and dialect, and the time now.
    fn at_now(
        &self,
    ) -> (
        &crate::identifier::TableName,
        crate::database::Dialect,
        Timestamp,
    ) {
        (
            self.outbox.table(),
            self.outbox.dialect(),
            self.outbox.now(),
        )
    }

    /// Runs `statements`, of which the one at `naming` writes the endpoint's
    /// own row (by id and owner): `NotFound` when it matched none (deleted
    /// since it was read).
    async fn write(&self, id: &str, statements: &[Statement], naming: usize) -> Result<()> {
        let outcomes = self.outbox.database().batch_atomic(statements).await?;
        match outcomes.get(naming) {
            Some(outcome) if outcome.rows_affected > 0 => Ok(()),
            _ => Err(not_found(id)),
        }
    }

    /// `owner`'s endpoint `id`, and its stored target.
    async fn read_one(&self, owner: &str, id: &str) -> Result<(Endpoint, Target)> {
        check_owner(owner)?;
        check_key("endpoint id", Some(id))?;
        self.read(Scope::Owner {
            owner,
            id: Some(id),
        })
        .await?
        .pop()
        .ok_or_else(|| not_found(id))
    }

    /// The endpoints of `scope`, with their subscriptions and stored
    /// targets, in one call.
    async fn read(&self, scope: Scope<'_>) -> Result<Vec<(Endpoint, Target)>> {
        let (table, dialect) = (self.outbox.table(), self.outbox.dialect());
        let statements = [
            endpoints::select(table, dialect, scope)?,
            endpoints::select_subscriptions(table, dialect, scope)?,
        ];
        let outcomes = self.outbox.database().run_atomic(&statements).await?;
        let (Some(rows), Some(subscriptions)) = (outcomes.first(), outcomes.get(1)) else {
            return Err(Error::database(
                "the database returned fewer outcomes than statements",
            ));
        };
        let name = endpoints_table(table);
        let mut types: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for row in subscriptions.rows.iter() {
            types
                .entry(row.get(subscription_col::ENDPOINT)?)
                .or_default()
                .push(row.get(subscription_col::EVENT_TYPE)?);
        }
        let now = self.outbox.now();
        rows.rows
            .iter()
            .map(|row| {
                let id: String = row
                    .get(endpoint_col::ID)
                    .map_err(|e| e.in_row(&name, None))?;
                decode(&row, types.remove(&id).unwrap_or_default(), now)
                    .map_err(|error| error.in_row(&name, Some(&id)))
            })
            .collect()
    }
}

/// One endpoint's row, its hold and its subscriptions; and its target.
fn decode(row: &Row<'_>, event_types: Vec<String>, now: Timestamp) -> Result<(Endpoint, Target)> {
    let target = Target::from_json(&row.get::<String>(endpoint_col::TARGET)?)?;
    let metadata =
        serde_json::from_str(&row.get::<String>(endpoint_col::METADATA)?).map_err(|error| {
            Error::MalformedRow {
                table: None,
                row: None,
                column: endpoint_col::METADATA.into(),
                reason: error.to_string(),
            }
        })?;
    let held: Option<String> = row.get(endpoint_col::HELD_REASON)?;
    let held_at: Option<Timestamp> = row.get(endpoint_col::HELD_AT)?;
    let updated_at: Timestamp = row.get(endpoint_col::UPDATED_AT)?;
    let state = match (
        row.get::<String>(endpoint_col::STATE)?.as_str(),
        held,
        held_at,
    ) {
        (endpoint_state::PAUSED, Some(reason), Some(since)) => {
            EndpointState::Paused { reason, since }
        }
        // Disabled by the application, or by its receiver while the state
        // still says enabled.
        (_, Some(reason), Some(since)) => EndpointState::Disabled { reason, since },
        // Its hold lifted by `Outbox::resume_topic`: still given no events.
        (endpoint_state::DISABLED, _, _) => EndpointState::Disabled {
            reason: "disabled".to_owned(),
            since: updated_at,
        },
        _ => EndpointState::Enabled,
    };
    let filter = match (
        row.get::<Option<String>>(endpoint_col::FILTER_FIELD)?,
        row.get::<Option<String>>(endpoint_col::FILTER_VALUE)?,
    ) {
        (Some(field), Some(equals)) => Some(EndpointFilter { field, equals }),
        _ => None,
    };
    let endpoint = Endpoint {
        filter,
        id: row.get(endpoint_col::ID)?,
        owner: row.get(endpoint_col::OWNER)?,
        previous_secret_expires: target.previous_expires(now),
        kind: Destination::of(&target.url).map_or(EndpointKind::Https, |d| d.kind()),
        url: target.url.clone(),
        rate_limit: target.rate_limit,
        body: target.body,
        event_types,
        state,
        metadata,
        created_at: row.get(endpoint_col::CREATED_AT)?,
        updated_at,
    };
    Ok((endpoint, target))
}

/// A page of every owner's endpoints ([`Endpoints::list_all`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct EndpointPage {
    /// The page's endpoints, in id order.
    pub endpoints: Vec<Endpoint>,
    /// The id to give the next call, if the page was full.
    pub next_after: Option<String>,
}

/// What a [`recover`](Endpoints::recover) call wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Recovered {
    /// Deliveries written (events still pending for the endpoint are not
    /// written again).
    pub deliveries: u64,
    /// When more events remain past this call's: call again with this time.
    pub next_since: Option<Timestamp>,
}

fn not_found(id: &str) -> Error {
    Error::NotFound {
        what: "endpoint",
        id: id.to_owned(),
    }
}

#[cfg(all(test, feature = "sqlite", not(target_arch = "wasm32")))]
mod tests {
    use std::sync::Arc;

    use futures_util::FutureExt;

    use super::*;
    use crate::database::sqlite::SqliteDatabase;

    #[test]
    fn an_owner_has_at_most_its_share_of_endpoints() {
        let db = Arc::new(SqliteDatabase::open_in_memory().expect("SQLite"));
        let outbox = Outbox::new(db, "outbox").expect("outbox");
        let endpoints = Endpoints::new(&outbox);
        let run = |future: crate::future::BoxFuture<'_, Result<Endpoint>>| {
            future
                .now_or_never()
                .expect("SQLite futures complete at once")
        };
        outbox
            .create_schema()
            .now_or_never()
            .expect("sync")
            .expect("schema");
        let new = |owner: &str| {
            NewEndpoint::new(
                owner,
                "https://hooks.example/in",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            )
        };
        for _ in 0..Endpoints::MAX_PER_OWNER {
            assert!(run(Box::pin(endpoints.create(new("acme")))).is_ok());
        }
        let refused = run(Box::pin(endpoints.create(new("acme")))).unwrap_err();
        assert!(
            refused.to_string().contains("endpoints already"),
            "{refused}"
        );
        assert!(
            run(Box::pin(endpoints.create(new("globex")))).is_ok(),
            "another owner's share"
        );
        let listed = endpoints
            .list("acme")
            .now_or_never()
            .expect("sync")
            .expect("list");
        assert_eq!(listed.len(), Endpoints::MAX_PER_OWNER as usize);
        assert!(
            !format!("{:?}", listed[0]).contains("/in"),
            "Debug shows the origin only"
        );
    }
}
