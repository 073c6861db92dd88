//! What a Cloudflare Access token says, read and checked without its
//! signature (which [`CloudflareAccess`](super) checks with WebCrypto): the
//! parts of the JWT, its algorithm, audience, issuer and times, and the role
//! its e-mail gives.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::Deserialize;

use super::access::Role;

/// Clock skew allowed on `exp` and `nbf`, in seconds.
const LEEWAY_S: f64 = 60.0;

/// A JWT split into what is signed, the key that signed it, and the
/// signature.
#[derive(Debug)]
pub(crate) struct Token<'a> {
    /// `<header>.<payload>`, as signed.
    pub(crate) signed: &'a str,
    /// The payload, base64url.
    payload: &'a str,
    /// The id of the team's key that signed it.
    pub(crate) kid: String,
    pub(crate) signature: Vec<u8>,
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: String,
}

/// The claims a console cares for.
#[derive(Debug, Deserialize)]
pub(crate) struct Claims {
    /// A string, or a list of them.
    #[serde(default)]
    aud: serde_json::Value,
    iss: String,
    exp: f64,
    #[serde(default)]
    nbf: Option<f64>,
    /// The signed-in identity's e-mail, if it has one (a service token has
    /// none).
    #[serde(default)]
    pub(crate) email: Option<String>,
    /// A service token's client id (it has no e-mail).
    #[serde(default)]
    common_name: Option<String>,
    /// The identity's id.
    #[serde(default)]
    sub: Option<String>,
}

fn decode(part: &str) -> Result<Vec<u8>, String> {
    URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|error| format!("not base64url: {error}"))
}

impl<'a> Token<'a> {
    /// Splits `token`, refusing any algorithm but RS256 (Access signs with
    /// it; `none` and HMAC are how forgeries try).
    pub(crate) fn parse(token: &'a str) -> Result<Self, String> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("not a JWT".into());
        };
        let head: Header = serde_json::from_slice(&decode(header)?)
            .map_err(|error| format!("its header: {error}"))?;
        if head.alg != "RS256" {
            return Err(format!("algorithm {:?} is not RS256", head.alg));
        }
        Ok(Token {
            signed: &token[..header.len() + 1 + payload.len()],
            payload,
            kid: head.kid,
            signature: decode(signature)?,
        })
    }

    /// Its claims, once its signature held, if they are for `audience` of
    /// the team at `team_domain` and valid at `now_s` (seconds since 1970).
    pub(crate) fn claims(
        &self,
        team_domain: &str,
        audience: &str,
        now_s: f64,
    ) -> Result<Claims, String> {
        let claims: Claims = serde_json::from_slice(&decode(self.payload)?)
            .map_err(|error| format!("its claims: {error}"))?;
        let for_audience = match &claims.aud {
            serde_json::Value::String(aud) => aud == audience,
            serde_json::Value::Array(auds) => auds.iter().any(|aud| aud == audience),
            _ => false,
        };
        if !for_audience {
            return Err("for another application (aud)".into());
        }
        if claims.iss != format!("https://{team_domain}") {
            return Err("from another team (iss)".into());
        }
        if claims.exp + LEEWAY_S < now_s {
            return Err("expired".into());
        }
        if claims.nbf.is_some_and(|nbf| nbf - LEEWAY_S > now_s) {
            return Err("not yet valid".into());
        }
        Ok(claims)
    }
}

impl Claims {
    /// An operator if its e-mail is among `operators` (lower case), else a
    /// viewer.
    pub(crate) fn role(&self, operators: &[String]) -> Role {
        match self.email.as_deref().map(str::to_ascii_lowercase) {
            Some(email) if operators.contains(&email) => Role::Operator,
            _ => Role::Viewer,
        }
    }

    /// Who it is: its e-mail, a service token's client id, or its subject.
    pub(crate) fn identity(&self) -> String {
        self.email
            .as_ref()
            .or(self.common_name.as_ref())
            .map_or_else(
                || format!("access subject {}", self.sub.as_deref().unwrap_or("?")),
                Clone::clone,
            )
    }
}

/// Whether `domain` is a team domain as Access names it: a host name
/// (`<team>.cloudflareaccess.com`), no scheme, no path.
pub(crate) fn is_team_domain(domain: &str) -> bool {
    !domain.is_empty()
        && domain.len() <= 253
        && domain.contains('.')
        && domain.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEAM: &str = "team.cloudflareaccess.com";
    const AUD: &str = "app-aud";
    const NOW: f64 = 1_800_000_000.0;

    fn b64(json: serde_json::Value) -> String {
        URL_SAFE_NO_PAD.encode(json.to_string())
    }

    fn token(header: serde_json::Value, claims: serde_json::Value) -> String {
        format!(
            "{}.{}.{}",
            b64(header),
            b64(claims),
            URL_SAFE_NO_PAD.encode(b"sig")
        )
    }

    fn rs256() -> serde_json::Value {
        serde_json::json!({ "alg": "RS256", "kid": "k1" })
    }

    fn valid() -> serde_json::Value {
        serde_json::json!({ "aud": [AUD], "iss": format!("https://{TEAM}"), "exp": NOW + 600.0, "email": "Ops@Example.com" })
    }

    fn check(token: &str) -> Result<Claims, String> {
        Token::parse(token)?.claims(TEAM, AUD, NOW)
    }

    #[test]
    fn a_token_of_the_team_and_application_gives_a_role_by_its_email() {
        let text = token(rs256(), valid());
        let parsed = Token::parse(&text).unwrap();
        assert_eq!(parsed.kid, "k1");
        assert_eq!(parsed.signature, b"sig");
        assert_eq!(parsed.signed, text.rsplit_once('.').unwrap().0);
        let claims = check(&text).unwrap();
        assert_eq!(claims.role(&["ops@example.com".into()]), Role::Operator);
        assert_eq!(claims.role(&[]), Role::Viewer);
        assert_eq!(claims.identity(), "Ops@Example.com");
        // A service token names its client id; a token with neither, its subject.
        let mut service = valid();
        service["email"] = serde_json::Value::Null;
        service["common_name"] = "ci.access".into();
        assert_eq!(
            check(&token(rs256(), service.clone())).unwrap().identity(),
            "ci.access"
        );
        service["common_name"] = serde_json::Value::Null;
        service["sub"] = "u-1".into();
        assert_eq!(
            check(&token(rs256(), service)).unwrap().identity(),
            "access subject u-1"
        );
        let mut one = valid();
        one["aud"] = AUD.into();
        assert!(check(&token(rs256(), one)).is_ok(), "aud may be one string");
    }

    #[test]
    fn forged_misdirected_and_stale_tokens_are_refused() {
        let now = NOW;
        let with = |key: &str, value: serde_json::Value| {
            let mut claims = valid();
            claims[key] = value;
            token(rs256(), claims)
        };
        let mut no_aud = valid();
        no_aud.as_object_mut().unwrap().remove("aud");
        let cases = [
            ("garbage".to_owned(), "not a JWT"),
            ("a.b".to_owned(), "not a JWT"),
            ("a.b.c.d".to_owned(), "not a JWT"),
            (
                token(serde_json::json!({ "alg": "none", "kid": "k1" }), valid()),
                "algorithm",
            ),
            (
                token(serde_json::json!({ "alg": "HS256", "kid": "k1" }), valid()),
                "algorithm",
            ),
            (
                token(serde_json::json!({ "alg": "RS256" }), valid()),
                "header",
            ),
            (with("aud", serde_json::json!(["someone-else"])), "aud"),
            (token(rs256(), no_aud), "aud"),
            (
                with("iss", "https://evil.cloudflareaccess.com".into()),
                "iss",
            ),
            (with("exp", (now - 3600.0).into()), "expired"),
            (with("nbf", (now + 3600.0).into()), "not yet valid"),
            (format!("{}.@@@.{}", b64(rs256()), "c2ln"), "base64url"),
        ];
        for (text, why) in cases {
            let refused = check(&text).expect_err(&text);
            assert!(refused.contains(why), "{text}: {refused}");
        }
        let skewed = with("exp", (now - 30.0).into());
        assert!(check(&skewed).is_ok(), "a minute of clock skew is allowed");
    }

    #[test]
    fn a_team_domain_is_a_host_name() {
        assert!(is_team_domain(TEAM));
        for bad in [
            "",
            "https://team.cloudflareaccess.com",
            "team",
            "team.com/x",
            "-a.com",
            "a..com",
        ] {
            assert!(!is_team_domain(bad), "{bad}");
        }
    }
}
