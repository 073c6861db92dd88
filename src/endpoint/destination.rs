//! Where an endpoint's deliveries go, read from its URL: an HTTPS URL, or
//! one of the platform's own destinations the application allows.

use serde::Serialize;

use crate::error::{Error, Result};

/// The kind of an endpoint's destination, by the scheme of its URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EndpointKind {
    /// `https://…` (or `http://…` where allowed): a signed POST.
    Https,
    /// `mailto:ops@acme.example`: a mail through the deliverer's
    /// `send_email` binding.
    Email,
    /// `service://BILLING/path`: a signed POST to another Worker through the
    /// service binding the deliverer names `BILLING`.
    Service,
    /// `workflow://ONBOARDING`: an instance of the Workflow the deliverer
    /// names `ONBOARDING`, its id derived from the delivery's.
    Workflow,
    /// `queue://EVENTS`: a message into the Queue the deliverer names
    /// `EVENTS`, as the Queue relay sends it.
    Queue,
}

impl EndpointKind {
    /// Whether its deliveries are HTTP requests, signed with the endpoint's
    /// secrets (which it must then have).
    pub fn signs(self) -> bool {
        matches!(self, EndpointKind::Https | EndpointKind::Service)
    }
}

/// An endpoint's URL, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Destination<'a> {
    Https,
    Email { address: &'a str },
    Service { binding: &'a str, path: &'a str },
    Workflow { binding: &'a str },
    Queue { binding: &'a str },
}

impl<'a> Destination<'a> {
    /// The destination `url` names; any other scheme is an HTTP(S) URL,
    /// checked as one elsewhere.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] ("endpoint URL") for a platform URL whose
    /// binding name or address is malformed.
    pub(crate) fn of(url: &'a str) -> Result<Self> {
        if let Some(address) = url.strip_prefix("mailto:") {
            crate::email::check_address("to", address)
                .map_err(|error| Error::invalid("endpoint URL", error.to_string()))?;
            return Ok(Destination::Email { address });
        }
        for (scheme, make) in [("service://", 0), ("workflow://", 1), ("queue://", 2)] {
            let Some(rest) = url.strip_prefix(scheme) else {
                continue;
            };
            let end = rest.find(['/', '?']).unwrap_or(rest.len());
            let (binding, path) = rest.split_at(end);
            check_binding(binding)?;
            return match make {
                0 => Ok(Destination::Service {
                    binding,
                    path: if path.is_empty() { "/" } else { path },
                }),
                _ if !path.is_empty() && path != "/" => Err(Error::invalid(
                    "endpoint URL",
                    format!("a {scheme} URL names its binding only, not {path:?}"),
                )),
                1 => Ok(Destination::Workflow { binding }),
                _ => Ok(Destination::Queue { binding }),
            };
        }
        Ok(Destination::Https)
    }

    pub(crate) fn kind(&self) -> EndpointKind {
        match self {
            Destination::Https => EndpointKind::Https,
            Destination::Email { .. } => EndpointKind::Email,
            Destination::Service { .. } => EndpointKind::Service,
            Destination::Workflow { .. } => EndpointKind::Workflow,
            Destination::Queue { .. } => EndpointKind::Queue,
        }
    }
}

/// A binding name as `wrangler.toml` writes one: a letter or `_`, then
/// letters, digits and `_`, at most 64.
fn check_binding(name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if valid {
        Ok(())
    } else {
        Err(Error::invalid(
            "endpoint URL",
            format!("{name:?} is not a binding name (letters, digits and _, at most 64)"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_their_destinations() {
        assert_eq!(
            Destination::of("https://a.example/x").unwrap(),
            Destination::Https
        );
        assert_eq!(
            Destination::of("mailto:ops@acme.example").unwrap(),
            Destination::Email {
                address: "ops@acme.example"
            }
        );
        assert_eq!(
            Destination::of("service://BILLING/hooks/in?x=1").unwrap(),
            Destination::Service {
                binding: "BILLING",
                path: "/hooks/in?x=1"
            }
        );
        assert_eq!(
            Destination::of("service://BILLING").unwrap(),
            Destination::Service {
                binding: "BILLING",
                path: "/"
            }
        );
        assert_eq!(
            Destination::of("workflow://ONBOARDING").unwrap(),
            Destination::Workflow {
                binding: "ONBOARDING"
            }
        );
        assert_eq!(
            Destination::of("queue://EVENTS/").unwrap(),
            Destination::Queue { binding: "EVENTS" }
        );
    }

    #[test]
    fn malformed_platform_urls_are_refused() {
        for url in [
            "mailto:nobody",
            "mailto:a@b.example,c@d.example",
            "service://",
            "service://BIL LING/x",
            "workflow://1FLOW",
            "workflow://FLOW/extra",
            "queue://EVENTS?x",
        ] {
            let error = Destination::of(url).unwrap_err().to_string();
            assert!(error.contains("endpoint URL"), "{url}: {error}");
        }
    }
}
