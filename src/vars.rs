//! Settings from named variables: a Worker's `[vars]`, or the process
//! environment natively. Unset or empty variables keep their defaults.

use std::time::Duration;

use crate::drain::{CircuitBreaker, DrainLimits};
use crate::error::{Error, Result};
use crate::retry::{ExponentialBackoff, RetryPolicy};

/// A whole number from `name`, if set.
fn number(var: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Option<u64>> {
    match var(name).map(|value| value.trim().to_owned()) {
        None => Ok(None),
        Some(value) if value.is_empty() => Ok(None),
        Some(value) => value.parse().map(Some).map_err(|_| {
            Error::invalid(
                "variable",
                format!("{name}={value:?} is not a whole number"),
            )
        }),
    }
}

fn millis(var: &dyn Fn(&str) -> Option<String>, name: &str, default: Duration) -> Result<Duration> {
    Ok(number(var, name)?.map_or(default, Duration::from_millis))
}

fn count<T: TryFrom<u64>>(
    var: &dyn Fn(&str) -> Option<String>,
    name: &str,
    default: T,
) -> Result<T> {
    match number(var, name)? {
        None => Ok(default),
        Some(value) => T::try_from(value)
            .map_err(|_| Error::invalid("variable", format!("{name}={value} is too large"))),
    }
}

impl DrainLimits {
    /// `preset` with every variable that is set applied over it, checked:
    ///
    /// | variable | field |
    /// | --- | --- |
    /// | `DELIVERY_TIMEOUT_MS` | `delivery_timeout` |
    /// | `LEASE_MS` | `lease` |
    /// | `SETTLE_MARGIN_MS` | `settle_margin` |
    /// | `FLUSH_INTERVAL_MS` | `flush_interval` |
    /// | `DRAIN_DEADLINE_MS` | `deadline` |
    /// | `DRAIN_BATCH_SIZE` | `batch_size` |
    /// | `DRAIN_CONCURRENCY` | `concurrency` |
    /// | `DRAIN_MAX_QUERIES` | `max_queries` |
    /// | `DRAIN_MAX_MESSAGES` | `max_messages` |
    /// | `BREAKER_FAILURES` | `breaker.failures` (0 turns the breaker off; otherwise at least 2) |
    /// | `BREAKER_COOLDOWN_MS` | `breaker.cooldown` |
    ///
    /// On Workers, pass `workers_outbox::worker_vars(&env)`;
    /// natively, `|name| std::env::var(name).ok()`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming a variable that is not a whole number,
    /// or limits that do not [validate](DrainLimits::validate).
    pub fn from_vars(preset: DrainLimits, var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let var: &dyn Fn(&str) -> Option<String> = &var;
        let default_breaker = preset.breaker.unwrap_or_default();
        let failures = count(
            var,
            "BREAKER_FAILURES",
            preset.breaker.map_or(0, |b| b.failures),
        )?;
        let cooldown = millis(var, "BREAKER_COOLDOWN_MS", default_breaker.cooldown)?;
        let limits = DrainLimits {
            delivery_timeout: millis(var, "DELIVERY_TIMEOUT_MS", preset.delivery_timeout)?,
            lease: millis(var, "LEASE_MS", preset.lease)?,
            settle_margin: millis(var, "SETTLE_MARGIN_MS", preset.settle_margin)?,
            flush_interval: millis(var, "FLUSH_INTERVAL_MS", preset.flush_interval)?,
            deadline: millis(var, "DRAIN_DEADLINE_MS", preset.deadline)?,
            batch_size: count(var, "DRAIN_BATCH_SIZE", preset.batch_size)?,
            concurrency: count(var, "DRAIN_CONCURRENCY", preset.concurrency)?,
            max_queries: count(var, "DRAIN_MAX_QUERIES", preset.max_queries)?,
            max_messages: count(var, "DRAIN_MAX_MESSAGES", preset.max_messages)?,
            breaker: (failures > 0).then_some(CircuitBreaker { failures, cooldown }),
        };
        limits.validate()?;
        Ok(limits)
    }
}

impl RetryPolicy {
    /// The default policy with every variable that is set applied over it:
    /// `MAX_ATTEMPTS`, `BACKOFF_BASE_MS` and `BACKOFF_CAP_MS` (exponential
    /// backoff with full jitter), `DEFER_LIMIT_MS`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming a variable that is not a whole number,
    /// or a value out of range.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let var: &dyn Fn(&str) -> Option<String> = &var;
        let default_backoff = ExponentialBackoff::default();
        let backoff = ExponentialBackoff {
            base: millis(var, "BACKOFF_BASE_MS", default_backoff.base)?,
            cap: millis(var, "BACKOFF_CAP_MS", default_backoff.cap)?,
        };
        if backoff.base.is_zero() || backoff.cap < backoff.base {
            return Err(Error::invalid(
                "variable",
                "BACKOFF_BASE_MS must be at least 1 and BACKOFF_CAP_MS at least BACKOFF_BASE_MS",
            ));
        }
        let defaults = RetryPolicy::default();
        RetryPolicy::new(
            count(var, "MAX_ATTEMPTS", defaults.max_attempts())?,
            backoff,
        )?
        .with_defer_limit(millis(var, "DEFER_LIMIT_MS", defaults.defer_limit())?)
    }
}

/// A Worker's `[vars]` (and secrets) as a lookup for
/// [`DrainLimits::from_vars`] and [`RetryPolicy::from_vars`]: text as it
/// is, a number (unquoted in `wrangler.toml`) as its decimal text.
#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub fn worker_vars(env: &worker::Env) -> impl Fn(&str) -> Option<String> + '_ {
    move |name| {
        let value = js_sys::Reflect::get(env, &wasm_bindgen::JsValue::from_str(name)).ok()?;
        value
            .as_string()
            .or_else(|| value.as_f64().map(|number| number.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn set_variables_override_the_preset() {
        let limits = DrainLimits::from_vars(
            DrainLimits::scheduled(),
            vars(&[
                ("DRAIN_BATCH_SIZE", "25"),
                ("DELIVERY_TIMEOUT_MS", "2000"),
                ("LEASE_MS", ""),
            ]),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(limits.batch_size, 25);
        assert_eq!(limits.delivery_timeout, Duration::from_secs(2));
        assert_eq!(limits.lease, DrainLimits::scheduled().lease);
        let off =
            DrainLimits::from_vars(DrainLimits::scheduled(), vars(&[("BREAKER_FAILURES", "0")]));
        assert_eq!(off.map(|l| l.breaker), Ok(None));
        let ignored = DrainLimits::from_vars(
            DrainLimits::scheduled(),
            vars(&[("BREAKER_FAILURES", "0"), ("BREAKER_COOLDOWN_MS", "soon")]),
        );
        assert!(ignored.is_err(), "a malformed cooldown was ignored");
        let policy = RetryPolicy::from_vars(vars(&[("MAX_ATTEMPTS", "3")]));
        assert_eq!(policy.map(|p| p.max_attempts()).ok(), Some(3));
    }

    #[test]
    fn bad_variables_are_named() {
        let error = DrainLimits::from_vars(
            DrainLimits::scheduled(),
            vars(&[("DRAIN_BATCH_SIZE", "many")]),
        );
        assert!(
            matches!(&error, Err(Error::InvalidInput { reason, .. }) if reason.contains("DRAIN_BATCH_SIZE")),
            "{error:?}"
        );
        let contradicting =
            DrainLimits::from_vars(DrainLimits::scheduled(), vars(&[("LEASE_MS", "1000")]));
        assert!(matches!(
            contradicting,
            Err(Error::InvalidInput { what: "lease", .. })
        ));
        assert!(RetryPolicy::from_vars(vars(&[("MAX_ATTEMPTS", "0")])).is_err());
        assert!(RetryPolicy::from_vars(vars(&[("BACKOFF_BASE_MS", "0")])).is_err());
        let inverted = vars(&[("BACKOFF_BASE_MS", "5000"), ("BACKOFF_CAP_MS", "10")]);
        assert!(RetryPolicy::from_vars(inverted).is_err());
    }
}
