//! From an HTTP answer to a delivery verdict.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::time::Timestamp;
use crate::verdict::Delivery;

/// What an HTTP status means for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Treat {
    /// The receiver has it.
    Delivered,
    /// Failed for now; spends an attempt ([`Delivery::Retry`], or
    /// [`Delivery::RetryAfter`] with a `Retry-After`).
    Retry,
    /// The receiver is down or throttling; spends no attempt
    /// ([`Delivery::Unavailable`]).
    Unavailable,
    /// Never succeeds ([`Delivery::Permanent`]).
    Permanent,
    /// The destination is gone: its topic is paused until resumed, the
    /// message spends no attempt ([`Delivery::Gone`]).
    Gone,
}

/// Maps HTTP statuses to [`Treat`]. The defaults:
///
/// | status | treated as |
/// | --- | --- |
/// | 2xx | delivered |
/// | 429, 502, 503, 504, 520–530 | unavailable (throttling, down, unreachable): no attempt spent |
/// | 408, 409 (still in progress), 425, other 5xx | retry |
/// | 3xx (never followed) | retry: a failure, as Standard Webhooks senders treat it |
/// | 410 | gone: the topic is paused until resumed, no attempt spent |
/// | other 4xx, 1xx | permanent |
///
/// Override single statuses with [`treat`](StatusMapping::treat).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StatusMapping {
    overrides: BTreeMap<u16, Treat>,
}

impl StatusMapping {
    /// Treats `status` as `treat`, whatever the default.
    #[must_use]
    pub fn treat(mut self, status: u16, treat: Treat) -> Self {
        self.overrides.insert(status, treat);
        self
    }

    /// How `status` is treated.
    pub fn classify(&self, status: u16) -> Treat {
        if let Some(treat) = self.overrides.get(&status) {
            return *treat;
        }
        match status {
            200..=299 => Treat::Delivered,
            429 | 502..=504 | 520..=530 => Treat::Unavailable,
            300..=399 | 408 | 409 | 425 | 500..=599 => Treat::Retry,
            410 => Treat::Gone,
            _ => Treat::Permanent,
        }
    }

    /// The verdict for an answer with `status`, its `Retry-After` header and
    /// (for failures) an excerpt of its body, at `now`.
    pub fn verdict(
        &self,
        status: u16,
        retry_after: Option<&str>,
        body: &str,
        now: Timestamp,
    ) -> Delivery {
        let excerpt: String = body.chars().take(200).collect();
        let error = if excerpt.trim().is_empty() {
            format!("receiver answered {status}")
        } else {
            format!("receiver answered {status}: {}", excerpt.trim())
        };
        let wait = retry_after.and_then(|value| parse_retry_after(value, now));
        match self.classify(status) {
            Treat::Delivered => Delivery::Delivered,
            Treat::Unavailable => Delivery::Unavailable {
                error,
                retry_after: wait,
            },
            Treat::Retry => match wait {
                Some(delay) => Delivery::RetryAfter { error, delay },
                None => Delivery::Retry { error },
            },
            Treat::Permanent => Delivery::Permanent { error },
            Treat::Gone => Delivery::Gone { error },
        }
    }
}

/// A `Retry-After` value as a wait from `now`: delay-seconds, or an HTTP
/// date (a date in the past is no wait). `None` for anything else.
pub fn parse_retry_after(value: &str, now: Timestamp) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let millis = at.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
    let at = Timestamp::from_unix_millis(i64::try_from(millis).ok()?).ok()?;
    Some(at.duration_since(now))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        // Tue, 14 Nov 2023 22:13:20 GMT
        Timestamp::from_unix_millis(1_700_000_000_000).unwrap_or(Timestamp::EPOCH)
    }

    #[test]
    fn default_statuses_map_as_documented() {
        let mapping = StatusMapping::default();
        let cases = [
            (200, Treat::Delivered),
            (202, Treat::Delivered),
            (204, Treat::Delivered),
            (429, Treat::Unavailable),
            (503, Treat::Unavailable),
            (408, Treat::Retry),
            (409, Treat::Retry),
            (425, Treat::Retry),
            (500, Treat::Retry),
            (502, Treat::Unavailable),
            (504, Treat::Unavailable),
            (522, Treat::Unavailable),
            (501, Treat::Retry),
            (400, Treat::Permanent),
            (401, Treat::Permanent),
            (404, Treat::Permanent),
            (422, Treat::Permanent),
            (301, Treat::Retry),
            (302, Treat::Retry),
            (410, Treat::Gone),
        ];
        for (status, treat) in cases {
            assert_eq!(mapping.classify(status), treat, "{status}");
        }
    }

    #[test]
    fn overrides_win() {
        let mapping = StatusMapping::default()
            .treat(404, Treat::Retry)
            .treat(503, Treat::Retry);
        assert_eq!(mapping.classify(404), Treat::Retry);
        assert_eq!(mapping.classify(503), Treat::Retry);
        assert_eq!(mapping.classify(400), Treat::Permanent);
    }

    #[test]
    fn retry_after_is_seconds_or_a_date() {
        assert_eq!(
            parse_retry_after(" 120 ", now()),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Tue, 14 Nov 2023 22:15:20 GMT", now()),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Tue, 14 Nov 2023 22:00:00 GMT", now()),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon", now()), None);
        assert_eq!(parse_retry_after("-5", now()), None);
    }

    #[test]
    fn verdicts_carry_the_status_and_honour_retry_after() {
        let mapping = StatusMapping::default();
        assert_eq!(mapping.verdict(202, None, "", now()), Delivery::Delivered);
        assert_eq!(
            mapping.verdict(429, Some("1"), "slow down", now()),
            Delivery::Unavailable {
                error: "receiver answered 429: slow down".into(),
                retry_after: Some(Duration::from_secs(1)),
            }
        );
        assert_eq!(
            mapping.verdict(500, Some("30"), "", now()),
            Delivery::RetryAfter {
                error: "receiver answered 500".into(),
                delay: Duration::from_secs(30),
            }
        );
        assert_eq!(
            mapping.verdict(500, None, "", now()),
            Delivery::retry("receiver answered 500")
        );
        assert_eq!(
            mapping.verdict(410, None, "unsubscribed", now()),
            Delivery::gone("receiver answered 410: unsubscribed")
        );
        let long = "x".repeat(1_000);
        match mapping.verdict(400, None, &long, now()) {
            Delivery::Permanent { error } => {
                assert_eq!(error.len(), "receiver answered 400: ".len() + 200)
            }
            other => panic!("{other:?}"),
        }
    }
}
