//! What every handler needs, read from the Worker's environment and its
//! `[vars]` (every tunable is optional: see `DrainLimits::from_vars`).

use std::sync::Arc;

use worker::Env;
use workers_outbox::database::d1::D1Database;
use workers_outbox::drain::{DrainLimits, Drainer};
use workers_outbox::http::HttpDeliverer;
use workers_outbox::topic::Router;
use workers_outbox::{Database, Error, Inbox, Outbox, Result, RetryPolicy, worker_vars};

use crate::signup::Mail;

pub(crate) struct App {
    pub(crate) db: Arc<dyn Database>,
    pub(crate) outbox: Outbox,
    pub(crate) inbox: Inbox,
    pub(crate) admin_token: Option<String>,
    /// Limits of the immediate attempt (`wait_until`) and of the cron drain.
    pub(crate) after_response: DrainLimits,
    pub(crate) scheduled: DrainLimits,
    mail_api: String,
}

impl App {
    pub(crate) fn from_env(env: &Env) -> Result<Self> {
        let vars = worker_vars(env);
        let database = |e: worker::Error| Error::Database {
            message: e.to_string(),
        };
        let db = D1Database::shared(env.d1("DB").map_err(database)?);
        let retry = RetryPolicy::from_vars(&vars)?;
        let mail_api = vars("MAIL_API_URL").unwrap_or_default();
        HttpDeliverer::new(&mail_api)?; // a missing or bad MAIL_API_URL fails here, before any write
        // The immediate attempt keeps its own deadline and budget (`wait_until` gets 30 s).
        let delivery_vars = |name: &str| vars(name).filter(|_| !name.starts_with("DRAIN_"));
        Ok(App {
            mail_api,
            admin_token: env.secret("ADMIN_TOKEN").ok().map(|s| s.to_string()),
            after_response: DrainLimits::from_vars(DrainLimits::after_response(), delivery_vars)?,
            scheduled: DrainLimits::from_vars(DrainLimits::scheduled(), &vars)?,
            inbox: Inbox::new(db.clone(), "inbox")?,
            outbox: Outbox::builder(db.clone(), "outbox")
                .retry_policy(retry)
                .build()?,
            db,
        })
    }

    /// A drainer sending confirmation mails to the mail API.
    pub(crate) fn drainer(&self, limits: DrainLimits) -> Result<Drainer> {
        let mail_api = HttpDeliverer::new(&self.mail_api)?.timeout(limits.delivery_timeout);
        let router = Router::new().route::<Mail, _>(mail_api);
        Drainer::builder(self.outbox.clone(), router)
            .limits(limits)
            .build()
    }
}
