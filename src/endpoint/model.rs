//! What an endpoint is, as the application gives it and as it is read
//! back, and the checks that keep a bad one out.

use std::fmt;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::destination::{Destination, EndpointKind};
use crate::error::{Error, Result};
use crate::http::is_private;
use crate::outbox::check_key;
use crate::outbox::operational::RESERVED_PREFIX;
use crate::sql::endpoints::EVERY_TYPE;
use crate::time::Timestamp;
use crate::webhook::Secret;

/// The most bytes of an endpoint's metadata (its JSON text).
pub const MAX_METADATA_BYTES: usize = 4096;
/// The most event types one endpoint subscribes to.
pub const MAX_EVENT_TYPES: usize = 64;
/// The most bytes of an event type.
pub const MAX_EVENT_TYPE_BYTES: usize = 128;

/// An endpoint to create: whose it is, where its events go, which it
/// wants, and the secret they are signed with.
#[derive(Clone)]
pub struct NewEndpoint {
    pub(crate) owner: String,
    pub(crate) url: String,
    pub(crate) secret: String,
    pub(crate) event_types: Vec<String>,
    pub(crate) metadata: serde_json::Value,
    pub(crate) filter: Option<(String, String)>,
    pub(crate) rate_limit: Option<u32>,
    pub(crate) body: BodyFormat,
}

impl fmt::Debug for NewEndpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NewEndpoint")
            .field("owner", &self.owner)
            .field("url", &shown_url(&self.url))
            .field("event_types", &self.event_types)
            .finish_non_exhaustive()
    }
}

impl NewEndpoint {
    /// An endpoint of `owner` (the tenant the application names) at `url`,
    /// signing with `secret` (`whsec_…` or bare base64; make it with a
    /// cryptographic generator, 24 bytes or more), subscribed to every
    /// event type until [`event_types`](Self::event_types) says otherwise.
    pub fn new(
        owner: impl Into<String>,
        url: impl Into<String>,
        secret: impl Into<String>,
    ) -> Self {
        NewEndpoint {
            owner: owner.into(),
            url: url.into(),
            secret: secret.into(),
            event_types: vec![EVERY_TYPE.to_owned()],
            metadata: serde_json::Value::Object(serde_json::Map::new()),
            filter: None,
            rate_limit: None,
            body: BodyFormat::Payload,
        }
    }

    /// An endpoint of `owner` whose deliveries are not HTTP requests, so
    /// need no secret: `mailto:…`, `workflow://…` or `queue://…` (see
    /// [`EndpointKind`]); an `https://` or `service://` endpoint made with
    /// it is refused for its missing secret.
    pub fn unsigned(owner: impl Into<String>, url: impl Into<String>) -> Self {
        Self::new(owner, url, "")
    }

    /// How its deliveries' bodies are written (default: the event's
    /// payload); [`BodyFormat::Slack`] for a chat's incoming webhook.
    #[must_use]
    pub fn body(mut self, body: BodyFormat) -> Self {
        self.body = body;
        self
    }

    /// Delivers to it at most `per_second` requests a second, evenly
    /// spaced (1 ..= [`MAX_RATE_LIMIT`]), in every drain: its deliveries
    /// past the rate wait in the drain, no attempt spent (see
    /// [`Deliver::destination_rate`](crate::drain::Deliver::destination_rate)).
    /// Without it, the drainer's
    /// [`DestinationLimits`](crate::drain::DestinationLimits) apply.
    #[must_use]
    pub fn rate_limit(mut self, per_second: u32) -> Self {
        self.rate_limit = Some(per_second);
        self
    }

    /// Lets through only events whose payload holds `equals` at `field` (a
    /// dot-separated path, `customer.region`): a string as it is, a number
    /// as it is written.
    #[must_use]
    pub fn filter(mut self, field: impl Into<String>, equals: impl Into<String>) -> Self {
        self.filter = Some((field.into(), equals.into()));
        self
    }

    /// The event types it receives (`"*"`: every type).
    #[must_use]
    pub fn event_types<T: Into<String>>(mut self, types: impl IntoIterator<Item = T>) -> Self {
        self.event_types = types.into_iter().map(Into::into).collect();
        self
    }

    /// The application's own data about the endpoint (a JSON object, at
    /// most [`MAX_METADATA_BYTES`]).
    #[must_use]
    pub fn metadata(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = metadata;
        self
    }
}

/// What changes in an endpoint (what is `None` stays).
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct EndpointUpdate {
    /// A new URL.
    pub url: Option<String>,
    /// New event types (replacing the old ones).
    pub event_types: Option<Vec<String>>,
    /// New metadata.
    pub metadata: Option<serde_json::Value>,
    /// A new filter (`Some(None)`: none any more).
    pub filter: Option<Option<(String, String)>>,
    /// A new rate limit (`Some(None)`: none any more).
    pub rate_limit: Option<Option<u32>>,
    /// A new body format.
    pub body: Option<BodyFormat>,
}

impl fmt::Debug for EndpointUpdate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EndpointUpdate")
            .field("url", &self.url.as_deref().map(shown_url))
            .field("event_types", &self.event_types)
            .finish_non_exhaustive()
    }
}

impl EndpointUpdate {
    /// A new URL.
    #[must_use]
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// New event types (replacing the old ones).
    #[must_use]
    pub fn event_types<T: Into<String>>(mut self, types: impl IntoIterator<Item = T>) -> Self {
        self.event_types = Some(types.into_iter().map(Into::into).collect());
        self
    }

    /// New metadata.
    #[must_use]
    pub fn metadata(mut self, metadata: serde_json::Value) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// A new filter (see [`NewEndpoint::filter`]).
    #[must_use]
    pub fn filter(mut self, field: impl Into<String>, equals: impl Into<String>) -> Self {
        self.filter = Some(Some((field.into(), equals.into())));
        self
    }

    /// No filter any more: every event of its types.
    #[must_use]
    pub fn without_filter(mut self) -> Self {
        self.filter = Some(None);
        self
    }

    /// A new rate limit (see [`NewEndpoint::rate_limit`]).
    #[must_use]
    pub fn rate_limit(mut self, per_second: u32) -> Self {
        self.rate_limit = Some(Some(per_second));
        self
    }

    /// No rate limit of its own any more.
    #[must_use]
    pub fn without_rate_limit(mut self) -> Self {
        self.rate_limit = Some(None);
        self
    }

    /// A new body format (see [`NewEndpoint::body`]).
    #[must_use]
    pub fn body(mut self, body: BodyFormat) -> Self {
        self.body = Some(body);
        self
    }
}

/// How an endpoint's deliveries' bodies are written. The headers are the
/// same whatever the format (`webhook-id`, the signature over the body as
/// sent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BodyFormat {
    /// The event's payload, as published.
    #[default]
    Payload,
    /// `{"text": "…"}`, as Slack's incoming webhooks take (and the chats
    /// that take Slack's format): an [operational event](crate::outbox::operational)
    /// as a sentence, any other event as its id and JSON; every value
    /// escaped (`&`, `<`, `>`) and `@` and `://` broken by a zero-width
    /// space, so that text a receiver or an application chose mentions
    /// nobody and makes no link; previews off; cut at 3,000 bytes.
    Slack,
}

impl BodyFormat {
    fn is_payload(&self) -> bool {
        *self == BodyFormat::Payload
    }
}

/// The highest rate limit an endpoint may have, in requests a second.
pub const MAX_RATE_LIMIT: u32 = crate::drain::DestinationLimits::MOST_PER_SECOND;

/// A rate limit is 1 ..= [`MAX_RATE_LIMIT`] requests a second.
pub(crate) fn check_rate_limit(per_second: Option<u32>) -> Result<()> {
    match per_second {
        Some(rate) if rate == 0 || rate > MAX_RATE_LIMIT => Err(Error::invalid(
            "endpoint rate limit",
            format!("{rate} a second; it is 1 ..= {MAX_RATE_LIMIT} (or none)"),
        )),
        _ => Ok(()),
    }
}

/// An endpoint's filter: only events whose payload holds `equals` at
/// `field`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct EndpointFilter {
    /// A dot-separated path into the payload.
    pub field: String,
    /// The text it must hold.
    pub equals: String,
}

/// Whether `payload` (JSON text) holds `equals` at the dot-separated path
/// `field`, read as text as `dialect`'s SQL filter reads it: a string as it
/// is, a number as written, a boolean as `1`/`0` (SQLite's `json_extract`)
/// or `true`/`false` (Postgres's `#>>`), an object or array as JSON; never
/// a missing field or `null`. (An object's text may differ from the
/// database's in key order or spacing: filter on a scalar.)
pub(crate) fn filter_lets_through(
    dialect: crate::database::Dialect,
    payload: &str,
    field: &str,
    equals: &str,
) -> bool {
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(payload) else {
        return false;
    };
    for name in field.split('.') {
        match value.get_mut(name) {
            Some(inner) => value = inner.take(),
            None => return false,
        }
    }
    match value {
        serde_json::Value::Null => false,
        serde_json::Value::String(text) => text == equals,
        serde_json::Value::Bool(yes) if dialect == crate::database::Dialect::Sqlite => {
            equals == if yes { "1" } else { "0" }
        }
        // A number as written, `true`, an object or array as JSON.
        other => serde_json::to_string(&other).is_ok_and(|written| written == equals),
    }
}

/// The most bytes of a filter's field path or value.
pub const MAX_FILTER_BYTES: usize = 256;

/// A filter's field is a dot-separated path of names of letters, digits,
/// `_` and `-`; its value at most [`MAX_FILTER_BYTES`].
pub(crate) fn check_filter(field: &str, equals: &str) -> Result<()> {
    let named = |part: &str| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    if field.len() > MAX_FILTER_BYTES || !field.split('.').all(named) {
        return Err(Error::invalid(
            "endpoint filter",
            format!("field {field:?}: a dot-separated path of names (letters, digits, _ and -)"),
        ));
    }
    if equals.len() > MAX_FILTER_BYTES {
        return Err(Error::invalid(
            "endpoint filter",
            format!(
                "its value is {} bytes; at most {MAX_FILTER_BYTES}",
                equals.len()
            ),
        ));
    }
    Ok(())
}

/// Whether an endpoint receives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EndpointState {
    /// Its deliveries go out.
    Enabled,
    /// Disabled by the application, an operator, or its receiver (a `410
    /// Gone`): it is given no new events, and its pending deliveries are
    /// held (no attempt spent, none dead) until it is enabled again.
    Disabled {
        /// Why: the receiver's answer or the operator's words.
        reason: String,
        /// Since when, in Unix ms.
        #[serde(rename = "since_ms", serialize_with = "millis")]
        since: Timestamp,
    },
    /// Paused by an operator: new events still reach it, and wait with its
    /// pending deliveries until it is enabled again.
    Paused {
        /// The operator's words.
        reason: String,
        /// Since when, in Unix ms.
        #[serde(rename = "since_ms", serialize_with = "millis")]
        since: Timestamp,
    },
}

fn millis<S: serde::Serializer>(
    at: &Timestamp,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    serializer.serialize_i64(at.as_unix_millis())
}

/// An endpoint as stored. Its secrets are never shown: only when the
/// previous one (during a rotation) stops signing. `Debug` shows its URL's
/// origin only (a path or query may hold a token); its JSON, for its owner,
/// the whole URL.
#[derive(Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Endpoint {
    /// Its id (`ep_…`): the topic of its deliveries.
    pub id: String,
    /// The tenant it belongs to.
    pub owner: String,
    /// Where its deliveries go: an HTTPS URL, or a platform destination
    /// (`mailto:`, `service://`, `workflow://`, `queue://`).
    pub url: String,
    /// What its URL names.
    pub kind: EndpointKind,
    /// The event types it receives (`"*"`: every type).
    pub event_types: Vec<String>,
    /// Only events whose payload matches it, if set.
    pub filter: Option<EndpointFilter>,
    /// The most requests a second it is sent, if it has a limit of its own.
    #[serde(rename = "rate_limit_per_second")]
    pub rate_limit: Option<u32>,
    /// How its deliveries' bodies are written.
    pub body: BodyFormat,
    /// Whether it receives (as JSON, `state` and, unless enabled, `reason`
    /// and `since_ms` beside the other fields).
    #[serde(flatten)]
    pub state: EndpointState,
    /// The application's data about it.
    pub metadata: serde_json::Value,
    /// While a rotation overlaps: when the previous secret stops signing.
    #[serde(rename = "previous_secret_expires_ms", serialize_with = "maybe_millis")]
    pub previous_secret_expires: Option<Timestamp>,
    /// When it was created.
    #[serde(rename = "created_ms", serialize_with = "millis")]
    pub created_at: Timestamp,
    /// When it last changed.
    #[serde(rename = "updated_ms", serialize_with = "millis")]
    pub updated_at: Timestamp,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Endpoint")
            .field("id", &self.id)
            .field("owner", &self.owner)
            .field("url", &shown_url(&self.url))
            .field("event_types", &self.event_types)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

fn maybe_millis<S: serde::Serializer>(
    at: &Option<Timestamp>,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    match at {
        Some(at) => serializer.serialize_i64(at.as_unix_millis()),
        None => serializer.serialize_none(),
    }
}

/// What a delivery reads of its endpoint at each attempt: stored as JSON in
/// the endpoint's row and returned by the claim beside the delivery.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Target {
    pub(crate) url: String,
    /// The current secret first, then the previous one while it overlaps.
    pub(crate) secrets: Vec<StoredSecret>,
    /// Requests a second, if the endpoint limits its own rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rate_limit: Option<u32>,
    #[serde(default, skip_serializing_if = "BodyFormat::is_payload")]
    pub(crate) body: BodyFormat,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("url", &shown_url(&self.url))
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

/// A secret as stored, and until when it signs (`None`: until replaced).
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredSecret {
    pub(crate) key: String,
    pub(crate) until_ms: Option<i64>,
}

impl Target {
    /// The secrets that sign at `now`: the current one, and the previous
    /// one until it expires.
    #[cfg(any(
        feature = "conformance",
        test,
        all(feature = "workers", target_arch = "wasm32"),
        all(feature = "native-http", not(target_arch = "wasm32"))
    ))]
    pub(crate) fn signing_at(&self, now: Timestamp) -> Result<Vec<Secret>> {
        self.secrets
            .iter()
            .filter(|secret| {
                secret
                    .until_ms
                    .is_none_or(|until| until > now.as_unix_millis())
            })
            .map(|secret| Secret::parse(&secret.key))
            .collect()
    }

    /// When the previous secret stops signing, if one overlaps at `now`.
    pub(crate) fn previous_expires(&self, now: Timestamp) -> Option<Timestamp> {
        self.secrets
            .iter()
            .filter_map(|secret| secret.until_ms)
            .filter(|until| *until > now.as_unix_millis())
            .max()
            .and_then(|until| Timestamp::from_unix_millis(until).ok())
    }

    pub(crate) fn to_json(&self) -> Result<String> {
        crate::sql::json_text(self, "endpoint target")
    }

    pub(crate) fn from_json(text: &str) -> Result<Target> {
        serde_json::from_str(text).map_err(|error| Error::MalformedRow {
            table: None,
            row: None,
            column: "target".into(),
            reason: error.to_string(),
        })
    }
}

/// Only a URL's origin is shown (its path or query may hold a token); of a
/// platform destination, its kind and binding (of an address, its domain).
pub(crate) fn shown_url(url: &str) -> String {
    match Destination::of(url) {
        Ok(Destination::Email { address }) => {
            return format!(
                "mailto:…@{}",
                address.rsplit_once('@').map_or("", |(_, d)| d)
            );
        }
        Ok(Destination::Service { binding, .. }) => return format!("service://{binding}"),
        Ok(Destination::Workflow { binding }) => return format!("workflow://{binding}"),
        Ok(Destination::Queue { binding }) => return format!("queue://{binding}"),
        Ok(Destination::Https) | Err(_) => {}
    }
    url::Url::parse(url).map_or_else(
        |_| "(unparsable)".to_owned(),
        |url| url.origin().ascii_serialization(),
    )
}

/// What an application allows its endpoints beyond public HTTPS.
#[derive(Debug, Clone, Default)]
pub(crate) struct Rules {
    pub(crate) allow_http: bool,
    pub(crate) allow_private: bool,
    /// The domains `mailto:` endpoints may mail (lower case; `*`: any).
    pub(crate) email_domains: Vec<String>,
    /// The bindings `service://`, `workflow://` and `queue://` endpoints
    /// may name, each as `NAME` or, for a service, `NAME/path-prefix`.
    pub(crate) bindings: Vec<String>,
    /// The event types the application publishes, if it names them.
    pub(crate) known_types: Option<Vec<String>>,
}

impl Rules {
    /// `url` as an endpoint may have it, and what it names.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] ("endpoint URL") for a URL that does not
    /// parse, is not HTTPS (unless allowed), holds credentials, or names a
    /// loopback, private, link-local or unspecified address (unless
    /// allowed); a `mailto:` URL to a domain not allowed; a platform URL
    /// naming a binding, or a service path, the application does not allow.
    pub(crate) fn check_url(&self, url: &str) -> Result<EndpointKind> {
        let destination = Destination::of(url)?;
        let refused = |why: String| Err(Error::invalid("endpoint URL", why));
        match &destination {
            Destination::Https => self.check_http_url(url)?,
            Destination::Email { address } => {
                let domain = address
                    .rsplit_once('@')
                    .map_or("", |(_, d)| d)
                    .to_ascii_lowercase();
                if !self.email_domains.iter().any(|d| d == "*" || *d == domain) {
                    return refused(format!(
                        "mail to {domain:?} is not allowed (`Endpoints::allow_email_to`)"
                    ));
                }
            }
            Destination::Service { binding, path } => {
                // The path as the deliverer will send it: dot segments and
                // their encodings resolved.
                let sent = url::Url::parse(&format!("https://{binding}{path}"))
                    .map_err(|error| Error::invalid("endpoint URL", error.to_string()))?;
                let path = sent.path();
                // An encoded slash or backslash may be decoded by the other
                // Worker's router: a path the prefix check cannot vouch for.
                let lower = path.to_ascii_lowercase();
                if lower.contains("%2f") || lower.contains("%5c") {
                    return refused(format!(
                        "service path {path:?} holds an encoded slash or backslash"
                    ));
                }
                let allowed = self
                    .bindings
                    .iter()
                    .any(|entry| match entry.split_once('/') {
                        None => entry == binding,
                        Some((name, prefix)) => {
                            let prefix = format!("/{}", prefix.trim_end_matches('/'));
                            name == *binding
                                && (path == prefix || path.starts_with(&format!("{prefix}/")))
                        }
                    });
                if !allowed {
                    return refused(format!(
                        "service {binding:?} at {path:?} is not one the application allows \
                         (`Endpoints::allow_bindings`)"
                    ));
                }
            }
            Destination::Workflow { binding } | Destination::Queue { binding } => {
                if !self.bindings.iter().any(|entry| entry == binding) {
                    return refused(format!(
                        "binding {binding:?} is not one the application allows \
                         (`Endpoints::allow_bindings`)"
                    ));
                }
            }
        }
        Ok(destination.kind())
    }

    fn check_http_url(&self, url: &str) -> Result<()> {
        let parsed = url::Url::parse(url)
            .map_err(|error| Error::invalid("endpoint URL", error.to_string()))?;
        match parsed.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            "http" => {
                return Err(Error::invalid(
                    "endpoint URL",
                    "it is not HTTPS (allow plain HTTP with `Endpoints::allow_http`)",
                ));
            }
            other => {
                return Err(Error::invalid(
                    "endpoint URL",
                    format!("scheme {other:?} is not https"),
                ));
            }
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(Error::invalid("endpoint URL", "it holds credentials"));
        }
        let private = match parsed.host() {
            None => return Err(Error::invalid("endpoint URL", "it names no host")),
            Some(url::Host::Domain(name)) => {
                let name = name.trim_end_matches('.').to_ascii_lowercase();
                name == "localhost" || name.ends_with(".localhost")
            }
            Some(url::Host::Ipv4(ip)) => is_private(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => is_private(IpAddr::V6(ip)),
        };
        if private && !self.allow_private {
            return Err(Error::invalid(
                "endpoint URL",
                "it names a loopback, private or link-local address (allow it with \
                 `Endpoints::allow_private`)",
            ));
        }
        Ok(())
    }

    /// `types` as an endpoint may subscribe to them.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] ("event types") for none, too many, an empty
    /// or over-long one, or (when the application named its types) one it
    /// does not publish.
    pub(crate) fn check_subscriptions(&self, types: &[String]) -> Result<()> {
        if types.is_empty() {
            return Err(Error::invalid(
                "event types",
                "none given (\"*\" subscribes to every type)",
            ));
        }
        if types.len() > MAX_EVENT_TYPES {
            return Err(Error::invalid(
                "event types",
                format!("{} given; at most {MAX_EVENT_TYPES}", types.len()),
            ));
        }
        for event_type in types.iter().filter(|t| *t != EVERY_TYPE) {
            // The operational events' reserved types may be subscribed to.
            if !event_type.starts_with(RESERVED_PREFIX) {
                self.check_type(event_type)?;
            }
        }
        Ok(())
    }

    /// One event type, as published or subscribed to.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] ("event type").
    pub(crate) fn check_type(&self, event_type: &str) -> Result<()> {
        if event_type.is_empty()
            || event_type.len() > MAX_EVENT_TYPE_BYTES
            || event_type == EVERY_TYPE
        {
            return Err(Error::invalid(
                "event type",
                format!(
                    "{event_type:?}: types are 1 ..= {MAX_EVENT_TYPE_BYTES} bytes, and not \"*\""
                ),
            ));
        }
        if let Some(bad) = event_type.chars().find(|c| !c.is_ascii_graphic()) {
            return Err(Error::invalid(
                "event type",
                format!("{event_type:?} contains {bad:?}; types are printable ASCII"),
            ));
        }
        if event_type.starts_with(RESERVED_PREFIX) {
            return Err(Error::invalid(
                "event type",
                format!(
                    "{event_type:?}: types starting with {RESERVED_PREFIX:?} are the outbox's own"
                ),
            ));
        }
        if let Some(known) = &self.known_types
            && !known.iter().any(|k| k == event_type)
        {
            return Err(Error::invalid(
                "event type",
                format!("{event_type:?} is not one of the application's event types"),
            ));
        }
        Ok(())
    }
}

/// An owner as the application names it.
pub(crate) fn check_owner(owner: &str) -> Result<()> {
    check_key("endpoint owner", Some(owner))
}

/// A secret that signs: it parses, and is long enough.
pub(crate) fn check_secret(secret: &str) -> Result<()> {
    crate::webhook::Signer::new(vec![Secret::parse(secret)?]).map(|_| ())
}

/// Metadata: a JSON object of at most [`MAX_METADATA_BYTES`].
pub(crate) fn metadata_text(metadata: &serde_json::Value) -> Result<String> {
    if !metadata.is_object() {
        return Err(Error::invalid(
            "endpoint metadata",
            "it is not a JSON object",
        ));
    }
    let text = crate::sql::json_text(metadata, "endpoint metadata")?;
    if text.len() > MAX_METADATA_BYTES {
        return Err(Error::invalid(
            "endpoint metadata",
            format!("it is {} bytes; at most {MAX_METADATA_BYTES}", text.len()),
        ));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_filter_reads_an_opened_payload_as_the_sql_filter_reads_a_clear_one() {
        use crate::database::Dialect::{Postgres, Sqlite};
        let payload = r#"{"customer":{"region":"eu","vip":true},"total":42,"note":null}"#;
        for dialect in [Sqlite, Postgres] {
            let through = |field, equals| filter_lets_through(dialect, payload, field, equals);
            assert!(through("customer.region", "eu"));
            assert!(!through("customer.region", "us"));
            assert!(through("total", "42"));
            assert!(!through("note", "null"));
            assert!(!through("customer.city", "eu"));
            assert!(!through("total.x", "42"));
            assert!(!filter_lets_through(
                dialect,
                "sealed:1:r:k:AAAA",
                "total",
                "42"
            ));
        }
        // As json_extract and #>> read a boolean.
        assert!(filter_lets_through(Sqlite, payload, "customer.vip", "1"));
        assert!(!filter_lets_through(
            Sqlite,
            payload,
            "customer.vip",
            "true"
        ));
        assert!(filter_lets_through(
            Postgres,
            payload,
            "customer.vip",
            "true"
        ));
    }
    use super::*;

    fn refused(rules: &Rules, url: &str) -> String {
        match rules.check_url(url) {
            Err(Error::InvalidInput { what, reason }) => {
                assert_eq!(what, "endpoint URL");
                reason
            }
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn only_public_https_urls_without_credentials_pass_by_default() {
        let rules = Rules::default();
        assert!(
            rules
                .check_url("https://hooks.example.com/in?token=x")
                .is_ok()
        );
        assert!(refused(&rules, "http://hooks.example.com/").contains("not HTTPS"));
        assert!(refused(&rules, "ftp://hooks.example.com/").contains("not https"));
        assert!(refused(&rules, "https://user:pw@hooks.example.com/").contains("credentials"));
        for private in [
            "https://localhost/",
            "https://api.localhost./",
            "https://127.0.0.1/",
            "https://10.1.2.3/",
            "https://192.168.0.1:8443/",
            "https://172.16.0.1/",
            "https://169.254.169.254/latest/meta-data",
            "https://100.64.0.1/",
            "https://0.0.0.0/",
            "https://[::1]/",
            "https://[fd00::1]/",
            "https://[fe80::1]/",
            "https://[::ffff:127.0.0.1]/",
            "https://[64:ff9b::a00:1]/",
            "https://[2002:c0a8:101::1]/",
            "https://[::127.0.0.1]/",
        ] {
            assert!(refused(&rules, private).contains("loopback"), "{private}");
        }
        assert!(rules.check_url("https://8.8.8.8/").is_ok());
        assert!(rules.check_url("https://[2606:4700::1111]/").is_ok());
        let open = Rules {
            allow_http: true,
            allow_private: true,
            ..Rules::default()
        };
        assert!(open.check_url("http://127.0.0.1:8080/hook").is_ok());
        assert!(refused(&open, "not a url").contains("relative URL"));
    }

    #[test]
    fn platform_destinations_need_the_application_s_leave() {
        let closed = Rules::default();
        assert!(refused(&closed, "mailto:ops@acme.example").contains("allow_email_to"));
        assert!(refused(&closed, "service://BILLING/in").contains("allow_bindings"));
        assert!(refused(&closed, "workflow://FLOW").contains("allow_bindings"));
        assert!(refused(&closed, "queue://EVENTS").contains("allow_bindings"));
        let open = Rules {
            email_domains: vec!["acme.example".into()],
            bindings: vec!["BILLING".into(), "FLOW".into(), "LEDGER/hooks/".into()],
            ..Rules::default()
        };
        assert_eq!(
            open.check_url("mailto:ops@ACME.example").unwrap(),
            EndpointKind::Email
        );
        assert!(refused(&open, "mailto:ops@other.example").contains("\"other.example\""));
        // A service allowed under a prefix only: the path as it will be sent.
        assert!(open.check_url("service://LEDGER/hooks/in").is_ok());
        assert!(open.check_url("service://LEDGER/hooks").is_ok());
        assert!(open.check_url("service://LEDGER/hooks?x=1").is_ok());
        let no_slash = Rules {
            bindings: vec!["LEDGER/hooks".into()],
            ..Rules::default()
        };
        assert!(no_slash.check_url("service://LEDGER/hooks/in").is_ok());
        assert!(refused(&no_slash, "service://LEDGER/hooks-admin").contains("allow_bindings"));
        assert!(refused(&open, "service://LEDGER/hooks/a%2Fb").contains("encoded slash"));
        for escaping in [
            "service://LEDGER/admin",
            "service://LEDGER/hooks/../admin",
            "service://LEDGER/hooks/%2e%2e/admin",
            "service://LEDGER/hooksx",
        ] {
            assert!(
                refused(&open, escaping).contains("allow_bindings"),
                "{escaping}"
            );
        }
        assert_eq!(
            open.check_url("service://BILLING/in").unwrap(),
            EndpointKind::Service
        );
        assert_eq!(
            open.check_url("workflow://FLOW").unwrap(),
            EndpointKind::Workflow
        );
        assert!(refused(&open, "queue://EVENTS").contains("\"EVENTS\""));
        assert!(EndpointKind::Service.signs() && !EndpointKind::Workflow.signs());
    }

    #[test]
    fn event_types_are_checked_against_the_catalogue_when_there_is_one() {
        let rules = Rules::default();
        let types = |list: &[&str]| list.iter().map(|t| (*t).to_owned()).collect::<Vec<_>>();
        assert!(rules.check_subscriptions(&types(&["*"])).is_ok());
        assert!(rules.check_subscriptions(&types(&["order.paid"])).is_ok());
        assert!(rules.check_subscriptions(&[]).is_err());
        assert!(rules.check_subscriptions(&types(&["has space"])).is_err());
        assert!(
            rules.check_type("*").is_err(),
            "an event's own type is never \"*\""
        );
        let catalogue = Rules {
            known_types: Some(types(&["order.paid"])),
            ..Rules::default()
        };
        assert!(
            catalogue
                .check_subscriptions(&types(&["order.paid", "*"]))
                .is_ok()
        );
        let unknown = catalogue
            .check_subscriptions(&types(&["order.lost"]))
            .unwrap_err();
        assert!(unknown.to_string().contains("not one of"), "{unknown}");
    }

    #[test]
    fn a_target_signs_with_the_previous_secret_until_it_expires() {
        let at = |ms| Timestamp::from_unix_millis(ms).unwrap();
        let target = Target {
            url: "https://hooks.example.com/".into(),
            secrets: vec![
                StoredSecret {
                    key: "whsec_bmV3LXNlY3JldC1rZXktb2YtMjQtYnl0ZXM=".into(),
                    until_ms: None,
                },
                StoredSecret {
                    key: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
                    until_ms: Some(1_000),
                },
            ],
            rate_limit: None,
            body: BodyFormat::Payload,
        };
        assert_eq!(target.signing_at(at(999)).unwrap().len(), 2);
        assert_eq!(target.previous_expires(at(999)), Some(at(1_000)));
        assert_eq!(target.signing_at(at(1_000)).unwrap().len(), 1);
        assert_eq!(target.previous_expires(at(1_000)), None);
        let shown = format!("{target:?}");
        assert!(
            !shown.contains("whsec") && !shown.contains("MfKQ"),
            "{shown}"
        );
        assert_eq!(
            Target::from_json(&target.to_json().unwrap()).unwrap(),
            target
        );
    }

    #[test]
    fn metadata_is_a_bounded_object() {
        assert!(metadata_text(&serde_json::json!({"plan": "pro"})).is_ok());
        assert!(metadata_text(&serde_json::json!([1])).is_err());
        let big = serde_json::json!({"x": "y".repeat(MAX_METADATA_BYTES)});
        assert!(metadata_text(&big).is_err());
        assert!(
            check_secret("whsec_c3RyYW5nZXI=").is_err(),
            "too short to sign with"
        );
        assert!(check_owner("").is_err());
    }

    #[test]
    fn a_rate_limit_is_one_to_the_most_a_second_and_a_target_without_one_reads() {
        assert!(check_rate_limit(None).is_ok());
        assert!(check_rate_limit(Some(1)).is_ok());
        assert!(check_rate_limit(Some(MAX_RATE_LIMIT)).is_ok());
        for bad in [0, MAX_RATE_LIMIT + 1] {
            let error = check_rate_limit(Some(bad)).unwrap_err();
            assert!(error.to_string().contains("rate limit"), "{error}");
        }
        // Targets written before rate limits existed read as unlimited.
        let old = Target::from_json(r#"{"url":"https://a.example/","secrets":[]}"#).unwrap();
        assert_eq!(old.rate_limit, None);
        assert_eq!(old.body, BodyFormat::Payload);
        let limited = Target {
            rate_limit: Some(5),
            body: BodyFormat::Slack,
            ..old
        };
        let json = limited.to_json().unwrap();
        assert!(json.contains(r#""rate_limit":5"#), "{json}");
        assert!(json.contains(r#""body":"slack""#), "{json}");
    }
}
