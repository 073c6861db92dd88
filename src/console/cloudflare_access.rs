//! People behind Cloudflare Access sign in to the console with the JWT Access
//! puts in `Cf-Access-Jwt-Assertion`, verified with WebCrypto against the
//! team's published keys (Workers only).

use std::cell::RefCell;

use http::request::Parts;
use js_sys::{Array, Function, Object, Reflect, Uint8Array};
use serde::Deserialize;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use super::access::{Authorizer, Grant};
use super::access_token::{Token, is_team_domain};
use crate::error::{Error, Result};
use crate::future::BoxFuture;

/// How long a team's keys are used before they are fetched again.
const KEYS_KEPT_MS: f64 = 10.0 * 60.0 * 1000.0;
/// The least time between two fetches of a team's keys: a token naming a
/// key not among them fetches them again (keys rotate), but no more often.
const REFETCH_AFTER_MS: f64 = 60.0 * 1000.0;

/// An [`Authorizer`] for people behind Cloudflare Access: a request whose
/// `Cf-Access-Jwt-Assertion` is an RS256 JWT signed by one of the team's
/// keys, for the application's audience, issued by the team, and within its
/// times (a minute of skew allowed) is a [`Role::Viewer`](super::Role::Viewer), or a
/// [`Role::Operator`](super::Role::Operator) when its e-mail is among [`operators`](Self::operators).
/// Anything else grants nothing, and says why in a warning log.
///
/// The team's keys (`https://<team domain>/cdn-cgi/access/certs`) are
/// fetched once per isolate and kept ten minutes; a token naming a key not
/// among them fetches them again, at most once a minute (every request may
/// try until a first fetch succeeded). A failed fetch keeps the keys there
/// were.
///
/// ```ignore
/// let console = Console::builder()
///     .authorize(CloudflareAccess::new("team.cloudflareaccess.com", &aud)?
///         .operators(["ops@example.com"]))
///     .build()?;
/// ```
#[derive(Debug, Clone)]
pub struct CloudflareAccess {
    team_domain: String,
    audience: String,
    operators: Vec<String>,
}

impl CloudflareAccess {
    /// Admits the people Access admits to the application with audience tag
    /// `audience` of the team at `team_domain` (`<team>.cloudflareaccess.com`),
    /// as viewers.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a team domain that is not a host name (no
    /// scheme, no path) or an empty audience.
    pub fn new(team_domain: &str, audience: &str) -> Result<Self> {
        if !is_team_domain(team_domain) {
            return Err(Error::invalid(
                "Access team domain",
                format!("{team_domain:?} is not a host name such as team.cloudflareaccess.com"),
            ));
        }
        if audience.trim().is_empty() {
            return Err(Error::invalid(
                "Access audience",
                "is empty: give the application's audience (AUD) tag",
            ));
        }
        Ok(CloudflareAccess {
            // Host names are compared in lower case (`iss` is the team's URL).
            team_domain: team_domain.to_ascii_lowercase(),
            audience: audience.to_owned(),
            operators: Vec::new(),
        })
    }

    /// Makes the identities with these e-mails (in any case; blanks ignored)
    /// operators.
    pub fn operators<I, S>(mut self, emails: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.operators.extend(
            emails
                .into_iter()
                .map(|email| email.as_ref().trim().to_ascii_lowercase())
                .filter(|email| !email.is_empty()),
        );
        self
    }

    async fn grant(&self, token: &str) -> std::result::Result<Grant, String> {
        let token = Token::parse(token)?;
        let key = self.key(&token.kid).await?;
        if !verify_rs256(&key, token.signed.as_bytes(), &token.signature).await? {
            return Err("its signature does not hold".into());
        }
        let now_s = js_sys::Date::now() / 1000.0;
        let claims = token.claims(&self.team_domain, &self.audience, now_s)?;
        Ok(Grant::new(claims.role(&self.operators), claims.identity()))
    }

    /// The team's key `kid`, from the keys kept, or fetched again when they
    /// are old or lack it.
    async fn key(&self, kid: &str) -> std::result::Result<serde_json::Value, String> {
        let now = js_sys::Date::now();
        let (kept, fresh, may_fetch) = with_keys(&self.team_domain, |keys| {
            (
                keys.find(kid),
                now - keys.fetched_at < KEYS_KEPT_MS,
                // Until a fetch succeeds, every request may try: on a cold
                // isolate, concurrent sign-ins must not wait out the limit.
                keys.fetched_at <= 0.0 || now - keys.tried_at >= REFETCH_AFTER_MS,
            )
        });
        match kept {
            Some(key) if fresh || !may_fetch => return Ok(key),
            None if !may_fetch => return Err(format!("no key {kid:?} among the team's")),
            _ => {}
        }
        with_keys(&self.team_domain, |keys| keys.tried_at = now);
        match fetch_keys(&self.team_domain).await {
            Ok(fetched) => with_keys(&self.team_domain, |keys| {
                keys.keys = fetched;
                keys.fetched_at = now;
            }),
            Err(why) => log::warn!("the Access team's keys could not be fetched: {why}"),
        }
        with_keys(&self.team_domain, |keys| keys.find(kid))
            .ok_or_else(|| format!("no key {kid:?} among the team's"))
    }
}

impl Authorizer for CloudflareAccess {
    fn authorize<'a>(&'a self, request: &'a Parts) -> BoxFuture<'a, Option<Grant>> {
        Box::pin(async move {
            let token = request
                .headers
                .get("cf-access-jwt-assertion")?
                .to_str()
                .ok()?;
            match self.grant(token).await {
                Ok(grant) => Some(grant),
                Err(why) => {
                    log::warn!("a Cloudflare Access token was refused: {why}");
                    None
                }
            }
        })
    }
}

/// A team's keys (JWK JSON), kept per isolate.
#[derive(Default)]
struct TeamKeys {
    keys: Vec<serde_json::Value>,
    fetched_at: f64,
    tried_at: f64,
}

impl TeamKeys {
    fn find(&self, kid: &str) -> Option<serde_json::Value> {
        self.keys
            .iter()
            .find(|key| key["kid"].as_str() == Some(kid))
            .cloned()
    }
}

thread_local! {
    /// Per team domain (an application has one or two teams).
    static KEYS: RefCell<Vec<(String, TeamKeys)>> = RefCell::default();
}

fn with_keys<T>(team_domain: &str, f: impl FnOnce(&mut TeamKeys) -> T) -> T {
    KEYS.with_borrow_mut(|teams| {
        let at = match teams.iter().position(|(team, _)| team == team_domain) {
            Some(at) => at,
            None => {
                teams.push((team_domain.to_owned(), TeamKeys::default()));
                teams.len() - 1
            }
        };
        f(&mut teams[at].1)
    })
}

#[derive(Deserialize)]
struct Certs {
    keys: Vec<serde_json::Value>,
}

async fn fetch_keys(team_domain: &str) -> std::result::Result<Vec<serde_json::Value>, String> {
    let url = format!("https://{team_domain}/cdn-cgi/access/certs");
    let url = worker::Url::parse(&url).map_err(|error| error.to_string())?;
    let mut response = worker::Fetch::Url(url)
        .send()
        .await
        .map_err(|error| error.to_string())?;
    if response.status_code() != 200 {
        return Err(format!("they answered {}", response.status_code()));
    }
    let Certs { keys } = response.json().await.map_err(|error| error.to_string())?;
    Ok(keys)
}

/// Verifies an RSASSA-PKCS1-v1_5 SHA-256 signature with WebCrypto.
async fn verify_rs256(
    jwk: &serde_json::Value,
    data: &[u8],
    signature: &[u8],
) -> std::result::Result<bool, String> {
    let js = |error: JsValue| format!("WebCrypto: {error:?}");
    let subtle = Reflect::get(&js_sys::global(), &"crypto".into())
        .and_then(|crypto| Reflect::get(&crypto, &"subtle".into()))
        .map_err(js)?;
    let method = |name: &str| -> std::result::Result<Function, String> {
        Reflect::get(&subtle, &name.into())
            .map_err(js)?
            .dyn_into::<Function>()
            .map_err(|_| format!("no crypto.subtle.{name}"))
    };
    let algorithm = Object::new();
    Reflect::set(&algorithm, &"name".into(), &"RSASSA-PKCS1-v1_5".into()).map_err(js)?;
    Reflect::set(&algorithm, &"hash".into(), &"SHA-256".into()).map_err(js)?;
    let jwk = js_sys::JSON::parse(&jwk.to_string()).map_err(js)?;
    let import = Array::of5(
        &"jwk".into(),
        &jwk,
        &algorithm,
        &false.into(),
        &Array::of1(&"verify".into()),
    );
    let key = method("importKey")?.apply(&subtle, &import).map_err(js)?;
    let key = JsFuture::from(js_sys::Promise::from(key))
        .await
        .map_err(js)?;
    let verify = Array::of4(
        &algorithm,
        &key,
        &Uint8Array::from(signature),
        &Uint8Array::from(data),
    );
    let verified = method("verify")?.apply(&subtle, &verify).map_err(js)?;
    let verified = JsFuture::from(js_sys::Promise::from(verified))
        .await
        .map_err(js)?;
    Ok(verified.as_bool() == Some(true))
}
