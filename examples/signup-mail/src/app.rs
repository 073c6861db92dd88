//! What every handler needs, read from the Worker's environment.

use std::sync::Arc;
use std::time::Duration;

use worker::Env;
use workers_outbox::database::d1::D1Database;
use workers_outbox::drain::{CircuitBreaker, DrainLimits, Drainer};
use workers_outbox::http::HttpDeliverer;
use workers_outbox::{Database, ExponentialBackoff, Inbox, Outbox, RetryPolicy, WorkersTimer};

/// Tunables, each an optional `[vars]` entry in `wrangler.toml`.
pub(crate) struct Settings {
    pub(crate) mail_api_url: String,
    pub(crate) admin_token: Option<String>,
    /// How long the pre-leased row of a signup belongs to its `wait_until`.
    pub(crate) lease: Duration,
    pub(crate) after_response: DrainLimits,
    pub(crate) scheduled: DrainLimits,
    pub(crate) retry: RetryPolicy,
}

pub(crate) struct App {
    pub(crate) db: Arc<dyn Database>,
    pub(crate) outbox: Outbox,
    pub(crate) inbox: Inbox,
    pub(crate) settings: Settings,
}

impl App {
    pub(crate) fn from_env(env: &Env) -> Result<Self, String> {
        let settings = Settings::from_env(env)?;
        let binding = env.d1("DB").map_err(|e| format!("D1 binding DB: {e}"))?;
        let db = D1Database::shared(binding);
        let outbox = Outbox::builder(db.clone(), "outbox")
            .retry_policy(settings.retry.clone())
            .build()
            .map_err(|e| e.to_string())?;
        let inbox = Inbox::new(db.clone(), "inbox").map_err(|e| e.to_string())?;
        Ok(App {
            db,
            outbox,
            inbox,
            settings,
        })
    }

    pub(crate) fn drainer(&self, limits: DrainLimits) -> workers_outbox::Result<Drainer> {
        let mail_api =
            HttpDeliverer::new(&self.settings.mail_api_url)?.timeout(limits.delivery_timeout);
        Drainer::new(
            self.outbox.clone(),
            Arc::new(mail_api),
            Arc::new(WorkersTimer),
            limits,
        )
    }
}

impl Settings {
    fn from_env(env: &Env) -> Result<Self, String> {
        let mail_api_url =
            text(env, "MAIL_API_URL")?.ok_or("MAIL_API_URL is not set: where should mail go?")?;
        let admin_token = env
            .secret("ADMIN_TOKEN")
            .ok()
            .map(|secret| secret.to_string())
            .filter(|token| !token.is_empty());
        let millis = |name, default| -> Result<Duration, String> {
            Ok(Duration::from_millis(number(env, name)?.unwrap_or(default)))
        };
        let delivery_timeout = millis("DELIVERY_TIMEOUT_MS", 10_000)?;
        let lease = millis("LEASE_MS", 60_000)?;
        let settle_margin = millis("SETTLE_MARGIN_MS", 5_000)?;
        let breaker = match count(env, "BREAKER_FAILURES", CircuitBreaker::default().failures)? {
            0 => None,
            failures => Some(CircuitBreaker {
                failures,
                ..CircuitBreaker::default()
            }),
        };
        let scheduled = DrainLimits {
            delivery_timeout,
            lease,
            settle_margin,
            breaker,
            deadline: millis("DRAIN_DEADLINE_MS", 45_000)?,
            batch_size: count(env, "DRAIN_BATCH_SIZE", 100)?,
            max_queries: count(env, "DRAIN_MAX_QUERIES", 900)?,
            ..DrainLimits::scheduled()
        };
        let after_response = DrainLimits {
            delivery_timeout,
            lease,
            settle_margin,
            breaker,
            ..DrainLimits::after_response()
        };
        for limits in [&scheduled, &after_response] {
            limits.validate().map_err(|e| e.to_string())?;
        }
        let backoff = ExponentialBackoff {
            base: millis("BACKOFF_BASE_MS", 1_000)?,
            cap: millis("BACKOFF_CAP_MS", 3_600_000)?,
        };
        let retry = RetryPolicy::new(count(env, "MAX_ATTEMPTS", 16)?, backoff)
            .map_err(|e| e.to_string())?;
        Ok(Settings {
            mail_api_url,
            admin_token,
            lease,
            after_response,
            scheduled,
            retry,
        })
    }
}

fn text(env: &Env, name: &str) -> Result<Option<String>, String> {
    Ok(env
        .var(name)
        .ok()
        .map(|var| var.to_string())
        .filter(|value| !value.is_empty()))
}

fn number(env: &Env, name: &str) -> Result<Option<u64>, String> {
    text(env, name)?
        .map(|value| {
            value
                .trim()
                .parse()
                .map_err(|_| format!("{name}={value:?} is not a whole number"))
        })
        .transpose()
}

fn count(env: &Env, name: &str, default: u32) -> Result<u32, String> {
    match number(env, name)? {
        None => Ok(default),
        Some(value) => u32::try_from(value).map_err(|_| format!("{name}={value} is too large")),
    }
}
