//! Who may use the console, and what they may do.

use std::sync::Arc;

use hmac::{Hmac, KeyInit, Mac};
use http::request::Parts;
use sha2::Sha256;

use crate::future::{BoxFuture, MaybeSend, MaybeSync};

/// What a caller may do in the console.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Reads counts, lists, charts and inbox keys.
    Viewer,
    /// Also replays, purges, reschedules, pauses and resumes, and exports
    /// or erases a subject's data.
    Operator,
}

/// What an authorizer grants a request: a role, and who it is.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grant {
    /// What it may do.
    pub role: Role,
    /// Who it is, as the authorizer knows it (an e-mail, a token's name):
    /// what the console's logs of a change name.
    pub identity: String,
    /// The one endpoint owner it is scoped to, if any (a tenant): it may
    /// use the endpoint routes for that owner's endpoints, and no other.
    pub owner: Option<String>,
}

impl Grant {
    /// `role`, granted to `identity`, over everything the console shows.
    pub fn new(role: Role, identity: impl Into<String>) -> Self {
        Grant {
            role,
            identity: identity.into(),
            owner: None,
        }
    }

    /// `role`, granted to `identity` over `owner`'s endpoints, their
    /// deliveries and attempts only (a tenant's portal).
    pub fn for_owner(role: Role, identity: impl Into<String>, owner: impl Into<String>) -> Self {
        Grant {
            role,
            identity: identity.into(),
            owner: Some(owner.into()),
        }
    }
}

/// Decides who a request is and what it may do, from its method, URI and
/// headers (a bearer token, Cloudflare Access's `Cf-Access-Jwt-Assertion`,
/// a session cookie of the host application…).
///
/// # Contract
/// `None` refuses the request (401). A console asks each of its
/// authorizers and takes the grant with the highest role (the first of
/// equals); a console with none refuses every request for data.
pub trait Authorizer: MaybeSend + MaybeSync {
    /// What `request` is granted, if anything.
    fn authorize<'a>(&'a self, request: &'a Parts) -> BoxFuture<'a, Option<Grant>>;
}

impl<A: Authorizer + ?Sized> Authorizer for Arc<A> {
    fn authorize<'a>(&'a self, request: &'a Parts) -> BoxFuture<'a, Option<Grant>> {
        (**self).authorize(request)
    }
}

/// Grants `role` to requests with `Authorization: Bearer <token>` (the
/// scheme in any case), compared in constant time. An empty token grants
/// nothing. Its identity is `bearer token (<role>)` unless
/// [`named`](Self::named) says whose it is.
pub struct BearerToken {
    /// The token's MAC under a key of its own: comparing MACs takes the same
    /// time whatever the given token's length or content.
    expected: Option<[u8; 32]>,
    key: [u8; 32],
    role: Role,
    identity: String,
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BearerToken")
            .field("role", &self.role)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl BearerToken {
    /// A token that grants `role`.
    pub fn new(token: &str, role: Role) -> Self {
        let mut key = [0u8; 32];
        fastrand::fill(&mut key);
        let expected = (!token.is_empty()).then(|| mac(&key, token.as_bytes()));
        let identity = match role {
            Role::Viewer => "bearer token (viewer)",
            Role::Operator => "bearer token (operator)",
        };
        BearerToken {
            expected,
            key,
            role,
            identity: identity.to_owned(),
        }
    }

    /// Names whose token it is (`"ops-alice"`, `"deploy bot"`), as the
    /// console's logs of a change will say.
    #[must_use]
    pub fn named(mut self, identity: impl Into<String>) -> Self {
        self.identity = identity.into();
        self
    }

    /// A token that grants [`Role::Operator`].
    pub fn operator(token: &str) -> Self {
        Self::new(token, Role::Operator)
    }

    /// A token that grants [`Role::Viewer`].
    pub fn viewer(token: &str) -> Self {
        Self::new(token, Role::Viewer)
    }

    fn grants(&self, given: &str) -> bool {
        let Some(expected) = self.expected else {
            return false;
        };
        let mut check = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
        check.update(given.as_bytes());
        check.verify_slice(&expected).is_ok()
    }
}

fn mac(key: &[u8; 32], data: &[u8]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes a key of any length"));
    mac.update(data);
    mac.finalize().into_bytes().into()
}

impl Authorizer for BearerToken {
    fn authorize<'a>(&'a self, request: &'a Parts) -> BoxFuture<'a, Option<Grant>> {
        let granted = bearer(request).is_some_and(|given| self.grants(given));
        Box::pin(std::future::ready(
            granted.then(|| Grant::new(self.role, self.identity.clone())),
        ))
    }
}

/// The credentials of an `Authorization: Bearer …` header.
pub(crate) fn bearer(request: &Parts) -> Option<&str> {
    let header = request
        .headers
        .get(http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    header
        .split_once(' ')
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, credentials)| credentials.trim())
}

/// The header every request that changes something must carry. A page of
/// another site cannot send it without a CORS preflight, which the
/// console never grants.
pub const MUTATION_HEADER: &str = "x-outbox-console";

/// Why a request that changes something is refused as cross-site, if it is:
/// a browser's `Sec-Fetch-Site` other than `same-origin` (or `none`, typed
/// by the user), an `Origin` whose host is not the request's own, or no
/// [`MUTATION_HEADER`].
pub(crate) fn cross_site(request: &Parts) -> Option<&'static str> {
    let header = |name: &str| {
        request
            .headers
            .get(name)
            .map(|value| value.to_str().unwrap_or("\u{fffd}"))
    };
    if let Some(site) = header("sec-fetch-site")
        && !matches!(site, "same-origin" | "none")
    {
        return Some("a cross-site request (Sec-Fetch-Site) may not change anything");
    }
    if let Some(origin) = header("origin") {
        let origin_host = origin
            .split_once("://")
            .map(|(_, rest)| rest.trim_end_matches('/'));
        let host = header("host").or_else(|| request.uri.authority().map(|a| a.as_str()));
        if origin_host.is_none() || origin_host != host {
            return Some("a request from another origin may not change anything");
        }
    }
    if header(MUTATION_HEADER).is_none() {
        return Some("a request that changes something must carry the X-Outbox-Console header");
    }
    None
}
