//! The tenant portal's links: a token the application mints for one
//! endpoint owner, signed and expiring, which grants the console scoped to
//! that owner (see [`Portal`]).

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, KeyInit, Mac};
use http::request::Parts;
use sha2::Sha256;

use super::access::{Authorizer, Grant, Role};
use crate::endpoint::model::check_owner;
use crate::error::{Error, Result};
use crate::future::BoxFuture;
use crate::time::{Clock, SystemClock, Timestamp};

/// The header the portal's page sends its token in.
pub const PORTAL_HEADER: &str = "x-outbox-portal";

/// What a token's MAC covers, before the owner and the expiry.
const CONTEXT: &[u8] = b"workers-outbox portal v1\n";

/// The longest a link may live.
pub const MAX_LINK_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The tenant portal: links the application mints for one endpoint owner
/// (a customer), each granting the console scoped to that owner until it
/// expires. A portal request sees and changes only that owner's endpoints,
/// their deliveries and attempts: every other route is refused (403), and
/// an id of another owner's is not found. Give it to
/// [`ConsoleBuilder::portal`](super::ConsoleBuilder::portal), then mint
/// links with [`Console::portal_link`](super::Console::portal_link).
///
/// A link carries its token in the URL's fragment (`#portal=…`), which the
/// browser never sends: the page keeps it for the tab and sends it in the
/// [`PORTAL_HEADER`] header. Tokens are `<owner>.<expiry>.<HMAC-SHA256>`,
/// checked in constant time; anyone holding a link is the owner until it
/// expires, so mint short-lived ones, to a signed-in customer.
#[derive(Clone)]
pub struct Portal {
    key: Vec<u8>,
    clock: std::sync::Arc<dyn Clock>,
}

impl std::fmt::Debug for Portal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Portal").finish_non_exhaustive()
    }
}

impl Portal {
    /// A portal signing with `key` (32 bytes or more, from a secret).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a shorter key.
    pub fn new(key: &[u8]) -> Result<Self> {
        if key.len() < 32 {
            return Err(Error::invalid(
                "portal key",
                format!("{} bytes; at least 32", key.len()),
            ));
        }
        Ok(Portal {
            key: key.to_vec(),
            clock: std::sync::Arc::new(SystemClock),
        })
    }

    /// Where "now" comes from (default: the system's clock).
    #[must_use]
    pub fn clock(mut self, clock: std::sync::Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// A token for `owner`, valid for `ttl` (at most [`MAX_LINK_TTL`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an owner that is no endpoint owner, or a
    /// ttl of zero or over the most.
    pub fn token(&self, owner: &str, ttl: Duration) -> Result<String> {
        check_owner(owner)?;
        if ttl.is_zero() || ttl > MAX_LINK_TTL {
            return Err(Error::invalid(
                "portal link ttl",
                format!("1 ms ..= {} s", MAX_LINK_TTL.as_secs()),
            ));
        }
        let expires = self.clock.now().checked_add(ttl)?.as_unix_millis();
        let owner = URL_SAFE_NO_PAD.encode(owner);
        let mac = URL_SAFE_NO_PAD.encode(self.keyed(&owner, expires).finalize().into_bytes());
        Ok(format!("{owner}.{expires}.{mac}"))
    }

    /// The owner `token` names, if it is one of this portal's and has not
    /// expired.
    pub(crate) fn owner_of(&self, token: &str) -> Option<String> {
        let mut parts = token.split('.');
        let (Some(owner), Some(expires), Some(mac), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        // One spelling per expiry: the digits the MAC was made over.
        if expires.is_empty()
            || expires.starts_with('0')
            || !expires.bytes().all(|b| b.is_ascii_digit())
        {
            return None;
        }
        let expires: i64 = expires.parse().ok()?;
        let given = URL_SAFE_NO_PAD.decode(mac).ok()?;
        self.keyed(owner, expires).verify_slice(&given).ok()?;
        if expires <= self.clock.now().as_unix_millis() {
            return None;
        }
        String::from_utf8(URL_SAFE_NO_PAD.decode(owner).ok()?).ok()
    }

    /// The MAC over a token's owner (as written in it) and expiry, to
    /// finalize or verify.
    fn keyed(&self, owner: &str, expires: i64) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        mac.update(CONTEXT);
        mac.update(owner.as_bytes());
        mac.update(b"\n");
        mac.update(expires.to_string().as_bytes());
        mac
    }

    /// When a token expires, if it parses (for the page to say).
    pub(crate) fn expiry_of(token: &str) -> Option<Timestamp> {
        let expires = token.split('.').nth(1)?.parse().ok()?;
        Timestamp::from_unix_millis(expires).ok()
    }
}

impl Authorizer for Portal {
    fn authorize<'a>(&'a self, request: &'a Parts) -> BoxFuture<'a, Option<Grant>> {
        let owner = request
            .headers
            .get(PORTAL_HEADER)
            .and_then(|value| value.to_str().ok())
            .and_then(|token| self.owner_of(token.trim()));
        Box::pin(std::future::ready(owner.map(|owner| {
            Grant::for_owner(Role::Operator, format!("portal link of {owner}"), owner)
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manual_clock::ManualClock;

    fn portal(clock: &ManualClock) -> Portal {
        Portal::new(&[7; 32])
            .unwrap()
            .clock(std::sync::Arc::new(clock.clone()))
    }

    #[test]
    fn a_token_names_its_owner_until_it_expires_and_not_when_altered() {
        let clock = ManualClock::new(Timestamp::from_unix_millis(1_000_000).unwrap());
        let portal = portal(&clock);
        let token = portal.token("acme", Duration::from_secs(60)).unwrap();
        assert_eq!(portal.owner_of(&token).as_deref(), Some("acme"));
        assert_eq!(
            Portal::expiry_of(&token),
            Timestamp::from_unix_millis(1_060_000).ok()
        );
        // Another owner, a later expiry, another key: refused.
        let (_, rest) = token.split_once('.').unwrap();
        let other = format!("{}.{rest}", URL_SAFE_NO_PAD.encode("globex"));
        assert_eq!(portal.owner_of(&other), None);
        let later = token.replacen("1060000", "9060000", 1);
        assert_eq!(portal.owner_of(&later), None);
        let stranger = Portal::new(&[8; 32]).unwrap();
        assert_eq!(stranger.owner_of(&token), None);
        for bad in ["", "a.b", "a.b.c.d", "YWNtZQ.x.y"] {
            assert_eq!(portal.owner_of(bad), None, "{bad}");
        }
        // Another spelling of the same expiry, under the same MAC: refused.
        for spelling in ["+1060000", "01060000"] {
            let respelled = token.replacen("1060000", spelling, 1);
            assert_eq!(portal.owner_of(&respelled), None, "{respelled}");
        }
        clock.advance(Duration::from_secs(60));
        assert_eq!(portal.owner_of(&token), None, "expired");
        assert!(Portal::new(&[1; 31]).is_err());
        assert!(portal.token("acme", Duration::ZERO).is_err());
        assert!(portal.token("acme", MAX_LINK_TTL * 2).is_err());
        assert!(portal.token("", Duration::from_secs(1)).is_err());
    }
}
