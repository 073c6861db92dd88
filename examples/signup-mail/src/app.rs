//! What every handler needs, read from the Worker's environment and its
//! `[vars]` (every tunable is optional: see `DrainLimits::from_vars`).

use std::sync::Arc;

use worker::Env;
use workers_outbox::console::{BearerToken, CloudflareAccess, Console, Portal};
use workers_outbox::drain::DrainerBuilder;
use workers_outbox::email::EmailDeliverer;
use workers_outbox::endpoint::{EndpointDeliverer, Endpoints};
use workers_outbox::http::HttpDeliverer;
use workers_outbox::queue::{FanOut, QueueDeliverer};
use workers_outbox::seal::KeyRing;
use workers_outbox::telemetry::{AnalyticsEngineTelemetry, Telemetry};
use workers_outbox::topic::Router;
use workers_outbox::{
    D1Database, Database, DrainLimits, Drainer, Error, Inbox, Outbox, Result, RetryPolicy,
    worker_vars,
};

use crate::accounts::Accounts;
use crate::signup::Confirmation;

/// A cron run's relay of account events: a budget of its own, small beside
/// the mail drain's (a Queue send takes milliseconds).
pub(crate) fn relay_limits() -> DrainLimits {
    DrainLimits {
        delivery_timeout: std::time::Duration::from_secs(3),
        settle_margin: std::time::Duration::from_secs(2),
        lease: std::time::Duration::from_secs(12),
        deadline: std::time::Duration::from_secs(10),
        max_queries: 100,
        ..DrainLimits::scheduled()
    }
}

pub(crate) struct App {
    pub(crate) db: Arc<dyn Database>,
    pub(crate) outbox: Outbox,
    /// The application's integrations (owner `"app"`), beside the mail.
    pub(crate) endpoints: Endpoints,
    /// `account.created` events, relayed into the `ACCOUNT_EVENTS` Queue.
    pub(crate) events: Outbox,
    events_queue: Option<worker::Queue>,
    /// Where the cron run asks for fanned-out mail drains, if bound.
    pub(crate) drain_requests: Option<worker::Queue>,
    pub(crate) fan_out: FanOut,
    pub(crate) inbox: Inbox,
    /// The operator's bearer token for the console (empty: none).
    admin_token: String,
    /// Limits of the immediate attempt (`wait_until`) and of the cron drain.
    pub(crate) after_response: DrainLimits,
    pub(crate) scheduled: DrainLimits,
    /// Where confirmation mails go.
    mail: MailRoute,
    /// The address confirmation mails are sent from (`MAIL_FROM`).
    pub(crate) mail_from: String,
    /// This invocation's drains, written to the `OUTBOX_ANALYTICS` dataset
    /// if bound.
    telemetry: Option<Arc<dyn Telemetry>>,
}

/// The key ring from the secrets `OUTBOX_SEALING_KEYS` (`id:base64` entries,
/// the sealing key first) and `OUTBOX_HASH_KEY` (base64): both or neither.
fn key_ring(env: &Env) -> Result<Option<KeyRing>> {
    let secret = |name: &str| env.secret(name).ok().map(|secret| secret.to_string());
    match (secret("OUTBOX_SEALING_KEYS"), secret("OUTBOX_HASH_KEY")) {
        (None, None) => Ok(None),
        (Some(keys), Some(hash_key)) => KeyRing::from_secrets(&keys, &hash_key).map(Some),
        _ => Err(Error::InvalidInput {
            what: "key ring",
            reason: "set both OUTBOX_SEALING_KEYS and OUTBOX_HASH_KEY, or neither".to_owned(),
        }),
    }
}

impl App {
    pub(crate) fn from_env(env: &Env) -> Result<Self> {
        let vars = worker_vars(env);
        let db = D1Database::shared(env.d1("DB")?);
        let retry = RetryPolicy::from_vars(&vars)?;
        let mail = MailRoute::from_env(env, &vars)?; // before any write
        let mail_from = vars("MAIL_FROM").unwrap_or_else(|| DEFAULT_MAIL_FROM.to_owned());
        // The immediate attempt keeps its own deadline and budget (`wait_until` gets 30 s).
        let delivery_vars = |name: &str| vars(name).filter(|_| !name.starts_with("DRAIN_"));
        let whole = |name: &str, default: u32| -> Result<u32> {
            vars(name).map_or(Ok(default), |text| {
                text.parse().map_err(|_| Error::InvalidInput {
                    what: "fan-out variable",
                    reason: format!("{name} is not a whole number: {text:?}"),
                })
            })
        };
        let fan_out = FanOut {
            max_drains: whole("FANOUT_MAX_DRAINS", FanOut::default().max_drains)?,
            messages_per_drain: whole(
                "FANOUT_MESSAGES_PER_DRAIN",
                FanOut::default().messages_per_drain,
            )?,
        };
        let telemetry = env
            .analytics_engine("OUTBOX_ANALYTICS")
            .ok()
            .map(|dataset| Arc::new(AnalyticsEngineTelemetry::new(dataset)) as Arc<dyn Telemetry>);
        // Sign-up mails carry addresses: sealed at rest when the two secrets are set.
        let ring = key_ring(env)?;
        let sealed = |builder: workers_outbox::outbox::OutboxBuilder| match &ring {
            // The mail's dedup key is the address: hashed too.
            Some(ring) => builder.key_ring(ring.clone()).hash_keys(true),
            None => builder,
        };
        let outbox = sealed(Outbox::builder(db.clone(), "outbox"))
            .retry_policy(retry)
            .build()?;
        // Local receivers (`ENDPOINTS_ALLOW_LOCAL=1`) for development only.
        let local = vars("ENDPOINTS_ALLOW_LOCAL").is_some_and(|v| v == "1");
        let endpoints = Endpoints::new(&outbox)
            .event_types([crate::signup::ACCOUNT_CREATED])
            .allow_http(local)
            .allow_private(local);
        Ok(App {
            endpoints,
            mail,
            mail_from,
            telemetry,
            events: sealed(Outbox::builder(db.clone(), "account_events")).build()?,
            events_queue: env.queue("ACCOUNT_EVENTS").ok(),
            drain_requests: env.queue("DRAIN_REQUESTS").ok(),
            fan_out,
            admin_token: env
                .secret("ADMIN_TOKEN")
                .map_or_else(|_| String::new(), |s| s.to_string()),
            after_response: DrainLimits::from_vars(DrainLimits::after_response(), delivery_vars)?,
            scheduled: DrainLimits::from_vars(DrainLimits::scheduled(), &vars)?,
            inbox: match &ring {
                // The inbox's tombstones are the outboxes': hashed alike.
                Some(ring) => Inbox::new(db.clone(), "inbox")?.with_key_ring(ring.clone(), false),
                None => Inbox::new(db.clone(), "inbox")?,
            },
            outbox,
            db,
        })
    }

    /// A drainer relaying account events into their Queue, 100 to a
    /// subrequest; `None` without the `ACCOUNT_EVENTS` binding.
    pub(crate) fn relay(&self, limits: DrainLimits) -> Result<Option<Drainer>> {
        let Some(queue) = self.events_queue.clone() else {
            return Ok(None);
        };
        self.observed(Drainer::batch_builder(
            self.events.clone(),
            QueueDeliverer::new(queue),
        ))
        .limits(limits)
        .build()
        .map(Some)
    }

    /// The operator console over both outboxes, the mail outbox's
    /// endpoints and the inbox, at `/console/`, reading through a D1 session (replicas, where enabled).
    /// `ADMIN_TOKEN` is an operator's bearer token (none, no access);
    /// people behind Cloudflare Access sign in with its JWT (`access`);
    /// `CONSOLE_SHOW_PAYLOADS = "true"` shows payloads (they hold
    /// addresses: off unless asked for).
    pub(crate) fn console(&self, env: &Env) -> worker::Result<Console> {
        let (vars, reads) = (worker_vars(env), D1Database::replica_reads(env.d1("DB")?)?);
        let console = Console::builder()
            .prefix("/console")
            .outbox("mail", self.outbox.through(reads.clone())?)
            .endpoints("mail", self.endpoints.clone())
            .outbox("account-events", self.events.through(reads.clone())?)
            .inbox("inbox", self.inbox.through(reads.clone())?)
            .subject_rows(Accounts::new(reads))
            .show_payloads(vars("CONSOLE_SHOW_PAYLOADS").as_deref() == Some("true"))
            .authorize(BearerToken::operator(&self.admin_token).named("ADMIN_TOKEN"));
        let console = match access(&vars)? {
            Some(access) => console.authorize(access),
            None => console,
        };
        // A tenant portal when PORTAL_KEY (32 bytes or more) is set: links
        // from /admin/portal-link show one owner its own endpoints.
        Ok(match env.secret("PORTAL_KEY").map(|key| key.to_string()) {
            Ok(key) => console.portal(Portal::new(key.as_bytes())?),
            Err(_) => console,
        }
        .build()?)
    }

    /// Whether the request carries the operator's bearer token.
    pub(crate) fn is_operator(&self, request: &worker::Request) -> worker::Result<bool> {
        let given = request.headers().get("authorization")?;
        Ok(!self.admin_token.is_empty()
            && given.as_deref().and_then(|g| g.strip_prefix("Bearer "))
                == Some(self.admin_token.as_str()))
    }

    /// A drainer sending confirmation mails (through `send_email`, or to
    /// the mail API), and `account.created` to the integrations' endpoints.
    pub(crate) fn drainer(&self, limits: DrainLimits) -> Result<Drainer> {
        let router = match &self.mail {
            MailRoute::Email(binding) => {
                Router::new().route::<Confirmation, _>(EmailDeliverer::new(binding.clone()))
            }
            MailRoute::Api(url) => Router::new().route::<Confirmation, _>(
                HttpDeliverer::new(url)?.timeout(limits.delivery_timeout),
            ),
        };
        let deliver = EndpointDeliverer::new()?
            .timeout(limits.delivery_timeout)
            .or(router);
        self.observed(Drainer::builder(self.outbox.clone(), deliver))
            .limits(limits)
            .build()
    }

    fn observed(&self, drainer: DrainerBuilder) -> DrainerBuilder {
        match &self.telemetry {
            Some(telemetry) => drainer.telemetry(telemetry.clone()),
            None => drainer,
        }
    }
}

/// The sender of confirmation mails unless `MAIL_FROM` says otherwise.
const DEFAULT_MAIL_FROM: &str = "accounts@workers-outbox.example";

/// Where confirmation mails go: Cloudflare Email (the `MAIL` binding), or
/// an HTTP mail API when `MAIL_API_URL` is set.
enum MailRoute {
    Email(worker::SendEmail),
    Api(String),
}

impl MailRoute {
    fn from_env(env: &Env, vars: &impl Fn(&str) -> Option<String>) -> Result<Self> {
        if let Some(url) = vars("MAIL_API_URL").filter(|url| !url.is_empty()) {
            HttpDeliverer::new(&url)?; // a bad URL fails here
            return Ok(MailRoute::Api(url));
        }
        env.send_email("MAIL")
            .map(MailRoute::Email)
            .map_err(|_| Error::InvalidInput {
                what: "mail route",
                reason: "bind send_email as MAIL (`[[send_email]]` in wrangler.toml) or set MAIL_API_URL"
                    .into(),
            })
    }
}

/// Cloudflare Access for the console, when `ACCESS_TEAM_DOMAIN`
/// (`<team>.cloudflareaccess.com`) and `ACCESS_AUD` (the application's
/// audience tag) are set: a verified identity is a viewer, an e-mail in
/// `ACCESS_OPERATORS` (comma-separated) an operator.
fn access(vars: &impl Fn(&str) -> Option<String>) -> Result<Option<CloudflareAccess>> {
    let set = |name| vars(name).filter(|value: &String| !value.is_empty());
    let (Some(team), Some(audience)) = (set("ACCESS_TEAM_DOMAIN"), set("ACCESS_AUD")) else {
        return Ok(None);
    };
    let operators = vars("ACCESS_OPERATORS").unwrap_or_default();
    Ok(Some(
        CloudflareAccess::new(&team, &audience)?.operators(operators.split(',')),
    ))
}
