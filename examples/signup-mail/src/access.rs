//! Console access for people behind Cloudflare Access: the JWT Access puts
//! in `Cf-Access-Jwt-Assertion`, verified with WebCrypto against the team's
//! published keys.
//!
//! Set `ACCESS_TEAM_DOMAIN` (`<team>.cloudflareaccess.com`) and `ACCESS_AUD`
//! (the Access application's audience tag). A verified identity is a
//! viewer; an email in `ACCESS_OPERATORS` (comma-separated) is an operator.
//! Unconfigured, it grants nothing (the bearer token still works).

use std::cell::RefCell;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use http::request::Parts;
use js_sys::{Array, Function, Object, Reflect, Uint8Array};
use serde::Deserialize;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use workers_outbox::console::{Authorizer, Role};
use workers_outbox::future::BoxFuture;

/// How long the team's keys are used before they are fetched again.
const KEYS_KEPT_MS: f64 = 10.0 * 60.0 * 1000.0;
/// The least time between two fetches of the keys: a token naming a key
/// not among them fetches them again (keys rotate), but no more often.
const REFETCH_AFTER_MS: f64 = 60.0 * 1000.0;
/// Clock skew allowed on `exp` and `nbf`, in seconds.
const LEEWAY_S: f64 = 60.0;

pub(crate) struct CloudflareAccess {
    /// `None`: not configured, grants nothing.
    team: Option<Team>,
}

struct Team {
    domain: String,
    audience: String,
    operators: Vec<String>,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: String,
}

#[derive(Deserialize)]
struct Claims {
    #[serde(default)]
    aud: Audience,
    iss: String,
    exp: f64,
    #[serde(default)]
    nbf: Option<f64>,
    #[serde(default)]
    email: Option<String>,
}

/// `aud` is a string or a list of them.
#[derive(Deserialize, Default)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
    #[default]
    None,
}

#[derive(Deserialize)]
struct Keys {
    keys: Vec<serde_json::Value>,
}

/// The team's keys (JWK JSON), per isolate.
#[derive(Default)]
struct KeyCache {
    keys: Vec<serde_json::Value>,
    fetched_at: f64,
    tried_at: f64,
}

thread_local! {
    static KEYS: RefCell<KeyCache> = RefCell::default();
}

impl CloudflareAccess {
    pub(crate) fn from_vars(vars: &impl Fn(&str) -> Option<String>) -> Self {
        let team = match (vars("ACCESS_TEAM_DOMAIN"), vars("ACCESS_AUD")) {
            (Some(domain), Some(audience)) if !domain.is_empty() && !audience.is_empty() => {
                Some(Team {
                    domain,
                    audience,
                    operators: vars("ACCESS_OPERATORS")
                        .unwrap_or_default()
                        .split(',')
                        .map(|email| email.trim().to_ascii_lowercase())
                        .filter(|email| !email.is_empty())
                        .collect(),
                })
            }
            _ => None,
        };
        CloudflareAccess { team }
    }
}

impl Authorizer for CloudflareAccess {
    fn authorize<'a>(&'a self, request: &'a Parts) -> BoxFuture<'a, Option<Role>> {
        Box::pin(async move {
            let team = self.team.as_ref()?;
            let token = request
                .headers
                .get("cf-access-jwt-assertion")?
                .to_str()
                .ok()?;
            match team.verify(token).await {
                Ok(claims) => Some(team.role_of(&claims)),
                Err(why) => {
                    log::warn!("Cloudflare Access token refused: {why}");
                    None
                }
            }
        })
    }
}

impl Team {
    fn role_of(&self, claims: &Claims) -> Role {
        let email = claims.email.as_deref().unwrap_or("").to_ascii_lowercase();
        if !email.is_empty() && self.operators.contains(&email) {
            Role::Operator
        } else {
            Role::Viewer
        }
    }

    /// The token's claims, if its signature, issuer, audience and times hold.
    async fn verify(&self, token: &str) -> Result<Claims, String> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("not a JWT".into());
        };
        let decode = |part: &str| URL_SAFE_NO_PAD.decode(part).map_err(|e| e.to_string());
        let head: Header = serde_json::from_slice(&decode(header)?).map_err(|e| e.to_string())?;
        if head.alg != "RS256" {
            return Err(format!("algorithm {:?} is not RS256", head.alg));
        }
        let key = self.key(&head.kid).await?;
        let signed = format!("{header}.{payload}");
        if !verify_rs256(&key, signed.as_bytes(), &decode(signature)?).await? {
            return Err("bad signature".into());
        }
        let claims: Claims =
            serde_json::from_slice(&decode(payload)?).map_err(|e| e.to_string())?;
        let now = js_sys::Date::now() / 1000.0;
        let audience_ok = match &claims.aud {
            Audience::One(aud) => *aud == self.audience,
            Audience::Many(auds) => auds.contains(&self.audience),
            Audience::None => false,
        };
        if !audience_ok {
            return Err("wrong audience".into());
        }
        if claims.iss != format!("https://{}", self.domain) {
            return Err("wrong issuer".into());
        }
        if claims.exp + LEEWAY_S < now || claims.nbf.is_some_and(|nbf| nbf - LEEWAY_S > now) {
            return Err("expired or not yet valid".into());
        }
        Ok(claims)
    }

    /// The team's key `kid`: from the keys kept, fetched again when they
    /// are old or lack it (at most once a minute); a failed fetch keeps
    /// the keys there were.
    async fn key(&self, kid: &str) -> Result<serde_json::Value, String> {
        let find = |cache: &KeyCache| {
            cache
                .keys
                .iter()
                .find(|key| key["kid"].as_str() == Some(kid))
                .cloned()
        };
        let now = js_sys::Date::now();
        let (kept, fresh, may_fetch) = KEYS.with_borrow(|cache| {
            (
                find(cache),
                now - cache.fetched_at < KEYS_KEPT_MS,
                now - cache.tried_at >= REFETCH_AFTER_MS,
            )
        });
        match kept {
            Some(key) if fresh || !may_fetch => return Ok(key),
            None if !may_fetch => return Err(format!("no key {kid:?} among the team's")),
            _ => {}
        }
        KEYS.with_borrow_mut(|cache| cache.tried_at = now);
        match self.fetch_keys().await {
            Ok(keys) => KEYS.with_borrow_mut(|cache| {
                cache.keys = keys;
                cache.fetched_at = now;
            }),
            Err(why) => log::warn!("the team's keys could not be fetched: {why}"),
        }
        KEYS.with_borrow(|cache| find(cache))
            .ok_or_else(|| format!("no key {kid:?} among the team's"))
    }

    async fn fetch_keys(&self) -> Result<Vec<serde_json::Value>, String> {
        let url = format!("https://{}/cdn-cgi/access/certs", self.domain);
        let url = worker::Url::parse(&url).map_err(|e| e.to_string())?;
        let mut response = worker::Fetch::Url(url)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if response.status_code() != 200 {
            return Err(format!("they answered {}", response.status_code()));
        }
        let Keys { keys } = response.json().await.map_err(|e| e.to_string())?;
        Ok(keys)
    }
}

/// Verifies an RSASSA-PKCS1-v1_5 SHA-256 signature with WebCrypto.
async fn verify_rs256(
    jwk: &serde_json::Value,
    data: &[u8],
    signature: &[u8],
) -> Result<bool, String> {
    let js = |error: JsValue| format!("WebCrypto: {error:?}");
    let subtle = Reflect::get(&js_sys::global(), &"crypto".into())
        .and_then(|crypto| Reflect::get(&crypto, &"subtle".into()))
        .map_err(js)?;
    let method = |name: &str| -> Result<Function, String> {
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
