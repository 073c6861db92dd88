//! An operator console: one web page and the JSON API it uses, over every
//! outbox and inbox registered with it, served by the application itself
//! under a path prefix (feature `console`).
//!
//! ```no_run
//! # use workers_outbox::console::{BearerToken, Console};
//! # fn mount(outbox: workers_outbox::Outbox, inbox: workers_outbox::Inbox) -> workers_outbox::Result<Console> {
//! let console = Console::builder()
//!     .prefix("/admin/outbox")
//!     .outbox("mail", outbox)
//!     .inbox("webhooks", inbox)
//!     .authorize(BearerToken::operator("a long random token"))
//!     .build()?;
//! // Then, for each request under the prefix:
//! // let response = console.handle(request).await;  // http::Request -> http::Response
//! # Ok(console) }
//! ```
//!
//! One implementation over the `http` crate's `Request` and `Response`, so
//! the same console serves D1, Durable Object, SQLite and Postgres
//! outboxes: on Workers through `Console::handle_worker` (wasm32), natively from
//! any framework that speaks `http` (axum, hyper), and with feature `tower`
//! as a `tower::Service` (`axum::Router::route_service`). The page's script and
//! style are in the crate: nothing is fetched from elsewhere.
//!
//! # Guarantees
//! - No authorizer, no data: every API request needs a role from an
//!   [`Authorizer`] ([`BearerToken`]; on Workers `CloudflareAccess`, which
//!   verifies Cloudflare Access's `Cf-Access-Jwt-Assertion`; or one of your
//!   own). The page and its
//!   assets hold no data and are served to anyone.
//! - Viewers read; only operators replay, purge, reschedule, pause and
//!   resume, change an endpoint, and export or erase a subject. Every
//!   request that changes something is refused when it comes from another
//!   site (`Sec-Fetch-Site`, `Origin`) or lacks the
//!   [`MUTATION_HEADER`] (which a cross-site page cannot send).
//! - Every response carries a strict `Content-Security-Policy` (scripts and
//!   styles of the console's own origin only, `frame-ancestors 'none'`),
//!   and the page writes every text a receiver or a payload controls as
//!   text, never as markup.
//! - Every request reads a bounded number of rows, however large the
//!   table: counts stop at a cap (and say so), lists walk at most a scan
//!   bound of the primary key per page, group actions act on at most
//!   [`MAX_SELECTION`](crate::outbox::MAX_SELECTION) messages per request.
//!   The exception: a subject's export and erasure read the subject's rows,
//!   which on SQLite and D1 (no `subject` index on their outboxes) means
//!   reading the outbox tables whole.
//!   Payloads, dedup keys and ordering keys are shown only where
//!   [`ConsoleBuilder::show_payloads`] is on; otherwise a payload's size,
//!   and the keys not at all (the application chooses them, and an e-mail
//!   address is a common dedup key); an endpoint's URL shows its origin
//!   only, and its metadata not at all. Secrets are never shown. Subjects
//!   are shown: they are how an
//!   operator finds a subject's data to export or erase, so make them
//!   opaque ids.

mod access;
#[cfg(any(test, all(feature = "workers", target_arch = "wasm32")))]
mod access_token;
mod api;
mod audit;
mod call;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod cloudflare_access;
mod endpoints;
mod fleet;
mod page;
mod portal;
mod router;
mod routes;
mod subjects;
#[cfg(all(feature = "tower", not(target_arch = "wasm32")))]
mod tower;
mod views;
mod wire;
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod workers;

use std::sync::Arc;

pub use access::{Authorizer, BearerToken, Grant, MUTATION_HEADER, Role};
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use cloudflare_access::CloudflareAccess;
pub use portal::{MAX_LINK_TTL, PORTAL_HEADER, Portal};
pub use subjects::SubjectRows;

use router::Admission;

use crate::endpoint::Endpoints;
use crate::error::{Error, Result};
use crate::fleet::Fleet;
use crate::inbox::Inbox;
use crate::outbox::{MAX_SCAN, Outbox};

/// The console: build it once (see [`Console::builder`]) and hand it each
/// request under its prefix.
#[derive(Clone)]
pub struct Console {
    inner: Arc<Inner>,
}

/// What a console serves, as its builder gathered it.
struct Inner {
    prefix: String,
    outboxes: Vec<(String, Outbox)>,
    inboxes: Vec<(String, Inbox)>,
    /// The endpoints of outboxes above, under their outbox's name.
    endpoints: Vec<(String, Endpoints)>,
    /// The tenant portal, if served.
    portal: Option<Portal>,
    /// The fleet view, if served.
    fleet: Option<fleet::FleetView>,
    authorizers: Vec<Box<dyn Authorizer>>,
    subject_rows: Option<Box<dyn SubjectRows>>,
    show_payloads: bool,
    count_cap: u32,
    scan: u32,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let outboxes: Vec<&str> = self
            .inner
            .outboxes
            .iter()
            .map(|(n, _)| n.as_str())
            .collect();
        let inboxes: Vec<&str> = self.inner.inboxes.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("Console")
            .field("prefix", &self.inner.prefix)
            .field("outboxes", &outboxes)
            .field("inboxes", &inboxes)
            .field("authorizers", &self.inner.authorizers.len())
            .field("subject_rows", &self.inner.subject_rows.is_some())
            .finish_non_exhaustive()
    }
}

/// Configures a [`Console`].
#[must_use = "a console builder serves nothing until it is built"]
pub struct ConsoleBuilder {
    inner: Inner,
    /// The fleet and its console link, checked by `build`.
    fleet: Option<(Fleet, String)>,
}

/// Counts stop here unless [`ConsoleBuilder::count_cap`] says otherwise:
/// an overview walks at most about four times this many rows (one walk per
/// state), 1,000 rows whatever the table's size, so a page view stays
/// cheap on D1's free plan.
pub const DEFAULT_COUNT_CAP: u32 = 200;

/// An auto-refresh counts the messages due now up to this many (at most
/// 51 rows read, and the paused topics).
pub const LIVE_DUE_CAP: u32 = 50;
/// A list's page walks this many rows unless [`ConsoleBuilder::scan`] says
/// otherwise.
pub const DEFAULT_SCAN: u32 = 1_000;

impl Console {
    /// A console with no outbox, no inbox, no authorizer, at `/outbox`.
    pub fn builder() -> ConsoleBuilder {
        ConsoleBuilder {
            inner: Inner {
                prefix: "/outbox".into(),
                outboxes: Vec::new(),
                inboxes: Vec::new(),
                endpoints: Vec::new(),
                portal: None,
                fleet: None,
                authorizers: Vec::new(),
                subject_rows: None,
                show_payloads: false,
                count_cap: DEFAULT_COUNT_CAP,
                scan: DEFAULT_SCAN,
            },
            fleet: None,
        }
    }

    /// Its path prefix (no trailing slash).
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// A link to the tenant portal for `owner`, valid for `ttl` (at most
    /// [`MAX_LINK_TTL`]): the console's page under its prefix, the token in
    /// the fragment (`/admin/outbox/#portal=…`). Give it to that owner,
    /// signed in to your application; whoever holds it is that owner until
    /// it expires.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] without a [`portal`](ConsoleBuilder::portal),
    /// for an owner that is no endpoint owner or is an outbox's operator
    /// (its [operational events](crate::outbox::OutboxBuilder::operational_events)
    /// tell of every owner), or a ttl out of range.
    pub fn portal_link(&self, owner: &str, ttl: std::time::Duration) -> Result<String> {
        let portal = self.inner.portal.as_ref().ok_or_else(|| {
            Error::invalid("portal", "the console serves no portal: give .portal(…)")
        })?;
        if self
            .inner
            .endpoints
            .iter()
            .any(|(_, endpoints)| endpoints.outbox().operational_owner() == Some(owner))
        {
            return Err(Error::invalid(
                "portal link owner",
                format!("{owner} is an outbox's operator: its events tell of every owner"),
            ));
        }
        Ok(format!(
            "{}/#portal={}",
            self.inner.prefix,
            portal.token(owner, ttl)?
        ))
    }

    /// Whether `path` is the console's to answer: the prefix itself or a
    /// path under it.
    pub fn serves(&self, path: &str) -> bool {
        path.strip_prefix(self.inner.prefix.as_str())
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    }

    /// Answers `request`: the page, its assets, or the JSON API. Never
    /// fails: an error is a response with its status and a JSON body
    /// `{"error": "…"}` (404 for a path outside the prefix, 413 for a
    /// change's body over 64 KiB). A body is looked at only after the
    /// request's credentials, role and origin passed; on Workers
    /// (`Console::handle_worker`) and as a `tower::Service` it is not
    /// even read before.
    pub async fn handle<B: AsRef<[u8]>>(
        &self,
        request: http::Request<B>,
    ) -> http::Response<String> {
        let (parts, body) = request.into_parts();
        match router::admit(self, &parts).await {
            Admission::Answered(response) => response,
            Admission::Api { grant, changes } => {
                let body = if changes { body.as_ref() } else { &[] };
                if body.len() > router::MAX_BODY {
                    return router::too_large();
                }
                router::answer(self, &parts, &grant, body).await
            }
        }
    }
}

impl ConsoleBuilder {
    /// Serves under `prefix` (`/admin/outbox`, say): a path of its own,
    /// starting with `/`, without a trailing one.
    pub fn prefix(mut self, prefix: &str) -> Self {
        self.inner.prefix = prefix.to_owned();
        self
    }

    /// Shows `outbox` as `name` (letters, digits, `-` and `_`).
    pub fn outbox(mut self, name: &str, outbox: Outbox) -> Self {
        self.inner.outboxes.push((name.to_owned(), outbox));
        self
    }

    /// Shows `inbox` as `name` (letters, digits, `-` and `_`).
    pub fn inbox(mut self, name: &str, inbox: Inbox) -> Self {
        self.inner.inboxes.push((name.to_owned(), inbox));
        self
    }

    /// Shows `endpoints`, the endpoints of the outbox shown as `outbox`:
    /// every owner's, each with its recent attempts, and lets an operator
    /// enable, disable or pause one, rotate its secret, recover its events
    /// since a time and send it a test event.
    pub fn endpoints(mut self, outbox: &str, endpoints: Endpoints) -> Self {
        self.inner.endpoints.push((outbox.to_owned(), endpoints));
        self
    }

    /// Shows `fleet` (see [`crate::fleet`]): every member's outbox as it
    /// last reported, each linking to its own console at `console_link`, a
    /// path of this host with `{member}` once, where the member's name goes
    /// percent-encoded (`/admin/customers/{member}/console/`). Viewers may
    /// read it; a portal link never reaches it.
    ///
    /// # Errors
    /// [`build`](Self::build) refuses a link that is not such a path.
    pub fn fleet(mut self, fleet: Fleet, console_link: &str) -> Self {
        self.fleet = Some((fleet, console_link.to_owned()));
        self
    }

    /// Serves the tenant portal (see [`Portal`]): its links, minted with
    /// [`Console::portal_link`], grant the console scoped to one endpoint
    /// owner.
    pub fn portal(mut self, portal: Portal) -> Self {
        self.inner.authorizers.push(Box::new(portal.clone()));
        self.inner.portal = Some(portal);
        self
    }

    /// Adds an authorizer: a request gets the grant with the highest role
    /// any gives.
    pub fn authorize(mut self, authorizer: impl Authorizer + 'static) -> Self {
        self.inner.authorizers.push(Box::new(authorizer));
        self
    }

    /// Adds the application's own rows of a subject to the console's
    /// subject export, and to its erasure's atomic batch.
    pub fn subject_rows(mut self, rows: impl SubjectRows + 'static) -> Self {
        self.inner.subject_rows = Some(Box::new(rows));
        self
    }

    /// Shows payloads, dedup keys and ordering keys in lists and exports,
    /// and endpoints' whole URLs and metadata (off by default: a payload's
    /// size is shown instead, the keys and metadata not at all, a URL's
    /// origin only, since they often hold personal data or a token).
    pub fn show_payloads(mut self, on: bool) -> Self {
        self.inner.show_payloads = on;
        self
    }

    /// Counts per state stop at `cap` rows each (1 ..= 100,000; default
    /// [`DEFAULT_COUNT_CAP`]).
    pub fn count_cap(mut self, cap: u32) -> Self {
        self.inner.count_cap = cap;
        self
    }

    /// A list's page, and a grouping of dead letters, walk at most `rows`
    /// (1 ..= 100,000; default [`DEFAULT_SCAN`]).
    pub fn scan(mut self, rows: u32) -> Self {
        self.inner.scan = rows;
        self
    }

    /// The console.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a prefix that is not a path, a name that
    /// is empty, has other characters or is given twice, or a cap or scan
    /// out of range.
    pub fn build(self) -> Result<Console> {
        // A path of this host: not `//host` (a redirect there would leave it).
        let prefix = &self.inner.prefix;
        let prefix_ok =
            wire::is_own_path(prefix) && !prefix.ends_with('/') && !prefix.contains('?');
        if !prefix_ok {
            return Err(Error::invalid(
                "console prefix",
                format!(
                    "{:?} must start with / and not end with one (\"/admin/outbox\")",
                    self.inner.prefix
                ),
            ));
        }
        let mut names: Vec<&str> = Vec::new();
        for (kind, name) in self
            .inner
            .outboxes
            .iter()
            .map(|(n, _)| ("outbox", n))
            .chain(self.inner.inboxes.iter().map(|(n, _)| ("inbox", n)))
        {
            let valid = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !valid {
                return Err(Error::invalid(
                    "console name",
                    format!("{kind} name {name:?}: 1 to 64 letters, digits, - or _"),
                ));
            }
            if names.contains(&name.as_str()) {
                return Err(Error::invalid(
                    "console name",
                    format!("{name:?} is given twice"),
                ));
            }
            names.push(name);
        }
        for (outbox, endpoints) in &self.inner.endpoints {
            let shown = self.inner.outboxes.iter().find(|(name, _)| name == outbox);
            if shown.is_none_or(|(_, shown)| shown.table() != endpoints.outbox().table()) {
                return Err(Error::invalid(
                    "console endpoints",
                    format!(
                        "{outbox:?} names no outbox shown whose endpoints these are: \
                         give it with .outbox({outbox:?}, …) first"
                    ),
                ));
            }
            if self
                .inner
                .endpoints
                .iter()
                .filter(|(n, _)| n == outbox)
                .count()
                > 1
            {
                return Err(Error::invalid(
                    "console endpoints",
                    format!("{outbox:?} is given twice"),
                ));
            }
        }
        for (what, value) in [
            ("count cap", self.inner.count_cap),
            ("scan bound", self.inner.scan),
        ] {
            if !(1..=MAX_SCAN).contains(&value) {
                return Err(Error::invalid(
                    what,
                    format!("{value} is outside 1 ..= {MAX_SCAN}"),
                ));
            }
        }
        let mut inner = self.inner;
        if let Some((fleet, link)) = self.fleet {
            inner.fleet = Some(fleet::FleetView::new(fleet, &link)?);
        }
        Ok(Console {
            inner: Arc::new(inner),
        })
    }
}
