//! Mail through Cloudflare Email: a [`Mail`] payload (a typed topic), its
//! MIME message, and on Workers the `EmailDeliverer` that sends it over a
//! `send_email` binding.
//!
//! - The MIME is written by [`mail-builder`](https://docs.rs/mail-builder),
//!   with `Message-ID: <message id@sender's domain>`: a mail sent again after
//!   a lost reply carries the same id, so a receiving system (and a person)
//!   can tell it is the same mail.
//! - The binding's errors become verdicts by what they say ([`refusal_of`],
//!   [`verdict_of`]): a sender or recipient the binding refuses, or a mail it
//!   cannot parse, is permanent; a rate limit defers the message (no attempt
//!   spent); anything else is retried.
//! - A mail is dated when its message was created, so a mail sent again is
//!   the same bytes.
//!
//! ```
//! use workers_outbox::Message;
//! use workers_outbox::email::Mail;
//!
//! let mail = Mail::new("hello@app.example", "ada@example.com", "Confirm your address")
//!     .from_name("App")
//!     .text("Open https://app.example/confirm?t=… to confirm.");
//! let message = Message::of(&mail)?; // topic "mail"
//! # Ok::<(), workers_outbox::Error>(())
//! ```

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
mod deliverer;

#[cfg(all(feature = "workers", target_arch = "wasm32"))]
pub use deliverer::EmailDeliverer;

use serde::{Deserialize, Serialize};

use sha2::Digest;

use crate::error::{Error, Result};
use crate::time::Timestamp;
use crate::topic::typed::Topic;
use crate::verdict::Delivery;

/// One mail: who sends it, to whom, and what it says (text, HTML or both).
/// As a payload it is JSON with these field names. `Debug` shows its
/// sender, its recipient's domain and which bodies it has, never what they
/// say (a confirmation link is a secret).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Mail {
    /// The sender's address (`hello@app.example`): the envelope's and the
    /// `From` header's.
    pub from: String,
    /// The sender's display name, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_name: Option<String>,
    /// The recipient's address.
    pub to: String,
    /// Where replies go, if not to the sender.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_to: Option<String>,
    /// The subject line.
    pub subject: String,
    /// The plain-text body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The HTML body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub html: Option<String>,
}

impl std::fmt::Debug for Mail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let domain = self.to.rsplit_once('@').map_or("?", |(_, domain)| domain);
        f.debug_struct("Mail")
            .field("from", &self.from)
            .field("to", &format_args!("…@{domain}"))
            .field("text", &self.text.is_some())
            .field("html", &self.html.is_some())
            .finish_non_exhaustive()
    }
}

impl Topic for Mail {
    const NAME: &'static str = "mail";
}

impl Mail {
    /// A mail from `from` to `to` about `subject`, with no body yet.
    pub fn new(from: impl Into<String>, to: impl Into<String>, subject: impl Into<String>) -> Self {
        Mail {
            from: from.into(),
            from_name: None,
            to: to.into(),
            reply_to: None,
            subject: subject.into(),
            text: None,
            html: None,
        }
    }

    /// With the sender's display name.
    #[must_use]
    pub fn from_name(mut self, name: impl Into<String>) -> Self {
        self.from_name = Some(name.into());
        self
    }

    /// With replies going to `address`.
    #[must_use]
    pub fn reply_to(mut self, address: impl Into<String>) -> Self {
        self.reply_to = Some(address.into());
        self
    }

    /// With a plain-text body.
    #[must_use]
    pub fn text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    /// With an HTML body.
    #[must_use]
    pub fn html(mut self, html: impl Into<String>) -> Self {
        self.html = Some(html.into());
        self
    }

    /// The mail as a MIME message (RFC 5322) with `Message-ID:
    /// <`[`message_id_of`]`(id)@sender's domain>` and `Date:` `at`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] ("mail") for an address that is not
    /// `local@domain`, a name or subject with a line break, or no body.
    pub fn to_mime(&self, id: &str, at: Timestamp) -> Result<String> {
        let from_domain = check_address("from", &self.from)?;
        check_address("to", &self.to)?;
        if let Some(reply_to) = &self.reply_to {
            check_address("reply_to", reply_to)?;
        }
        for (field, value) in [
            ("subject", Some(&self.subject)),
            ("from_name", self.from_name.as_ref()),
        ] {
            if value.is_some_and(|value| value.contains(['\r', '\n'])) {
                return Err(Error::invalid(
                    "mail",
                    format!("its {field} holds a line break"),
                ));
            }
        }
        if self.text.is_none() && self.html.is_none() {
            return Err(Error::invalid("mail", "it has neither text nor HTML"));
        }
        let from = match &self.from_name {
            Some(name) => mail_builder::headers::address::Address::new_address(
                Some(name.as_str()),
                self.from.as_str(),
            ),
            None => self.from.as_str().into(),
        };
        let mut mime = mail_builder::MessageBuilder::new()
            .from(from)
            .to(self.to.as_str())
            .subject(self.subject.as_str())
            .message_id(format!("{}@{from_domain}", message_id_of(id)))
            .date(mail_builder::headers::date::Date::new(
                at.as_unix_millis() / 1000,
            ));
        if let Some(reply_to) = &self.reply_to {
            mime = mime.reply_to(reply_to.as_str());
        }
        mime = match (&self.text, &self.html) {
            (Some(text), Some(html)) => {
                use mail_builder::headers::content_type::ContentType;
                use mail_builder::mime::MimePart;
                // Its own boundary, from what it separates: the crate would
                // read the clock, which wasm32 has not got.
                let boundary = boundary_of(id, text, html);
                let alternative =
                    ContentType::new("multipart/alternative").attribute("boundary", boundary);
                mime.body(MimePart::new(
                    alternative,
                    vec![
                        MimePart::new("text/plain", text.as_str()),
                        MimePart::new("text/html", html.as_str()),
                    ],
                ))
            }
            (Some(text), None) => mime.text_body(text.as_str()),
            (None, Some(html)) => mime.html_body(html.as_str()),
            (None, None) => mime,
        };
        mime.write_to_string()
            .map_err(|error| Error::internal(format!("the mail cannot be written: {error}")))
    }
}

/// The MIME boundary between the text and the HTML of the mail of message
/// `id`: a hash of all three, so neither part can hold it.
fn boundary_of(id: &str, text: &str, html: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for part in [id, text, html] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    let digest = hash.finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("outbox_{hex}")
}

/// The most bytes of an address, and of its local part and of a domain label.
const MAX_ADDRESS_BYTES: usize = 254;
const MAX_LOCAL_BYTES: usize = 64;
const MAX_LABEL_BYTES: usize = 63;

/// Checks `address` is one `local@domain` address (a dot-atom local part, a
/// host name), and returns its domain.
pub(crate) fn check_address<'a>(field: &str, address: &'a str) -> Result<&'a str> {
    let refused = |why: &str| {
        Err(Error::invalid(
            "mail",
            format!("its {field} address {address:?} {why}"),
        ))
    };
    if address.len() > MAX_ADDRESS_BYTES {
        return refused("is too long");
    }
    let Some((local, domain)) = address.rsplit_once('@') else {
        return refused("has no '@'");
    };
    let atext = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c);
    let dot_atom = local.len() <= MAX_LOCAL_BYTES
        && local
            .split('.')
            .all(|atom| !atom.is_empty() && atom.chars().all(atext));
    if !dot_atom {
        return refused("has a local part that is not plain");
    }
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= MAX_LABEL_BYTES
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if !domain.split('.').all(label) {
        return refused("has a domain that is not a host name");
    }
    Ok(domain)
}

/// The id part of the `Message-ID` of the mail of outbox message `id`: the
/// id itself when a message id can hold it (a dot-atom: every generated
/// id); otherwise the id with each other character (an endpoint delivery's
/// `:`) written as `.`, and 16 hex digits of the id's SHA-256. The same
/// message always gets the same id, and two outbox ids never share one (a
/// mapped id holds a `.`, which an outbox id cannot).
pub fn message_id_of(id: &str) -> String {
    let atext = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-/=?^_`{|}~".contains(c);
    if !id.is_empty()
        && id
            .split('.')
            .all(|atom| !atom.is_empty() && atom.chars().all(atext))
    {
        return id.to_owned();
    }
    let mapped: String = id.chars().map(|c| if atext(c) { c } else { '.' }).collect();
    // Dots may neither lead, trail nor repeat in a message id.
    let parts: Vec<&str> = mapped.split('.').filter(|part| !part.is_empty()).collect();
    let digest = sha2::Sha256::digest(id.as_bytes());
    let hash: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
    if parts.is_empty() {
        format!("outbox.{hash}")
    } else {
        format!("{}.{hash}", parts.join("."))
    }
}

/// What a `send_email` binding's error is about, read from what it says
/// (addresses in it left out, so an address cannot steer it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// A rate limit: `rate limit`, `too many requests`, `quota`,
    /// `throttl…`.
    Throttled,
    /// The recipient refused: `not allowed`, `not verified`, `unverified`,
    /// `rejected` or `invalid` said of `email to …`, a recipient or a
    /// destination.
    Recipient,
    /// The sender refused: the same said of `email from …` or a sender
    /// (`email from` is read before `email to`, and both before the
    /// bare words).
    Sender,
    /// The mail itself: `could not parse`, `does not match`, or refused
    /// with no party named.
    Mail,
    /// Anything else: a failure that may pass.
    Transient,
}

impl Refusal {
    /// The verdict of a refusal saying `error`: a rate limit is
    /// [unavailable](Delivery::Unavailable) (no attempt spent); a refused
    /// recipient, sender or mail is [permanent](Delivery::Permanent);
    /// anything else is [retried](Delivery::Retry).
    pub fn verdict(self, error: String) -> Delivery {
        match self {
            Refusal::Throttled => Delivery::unavailable(error, None),
            Refusal::Recipient | Refusal::Sender | Refusal::Mail => Delivery::permanent(error),
            Refusal::Transient => Delivery::retry(error),
        }
    }
}

/// What the `send_email` error `error` is about: see [`Refusal`].
pub fn refusal_of(error: &str) -> Refusal {
    let said: String = error
        .split_whitespace()
        .map(|word| {
            if word.contains('@') {
                "<address>"
            } else {
                word
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
        .to_ascii_lowercase();
    let says = |words: &[&str]| words.iter().any(|word| said.contains(word));
    if says(&["rate limit", "too many requests", "quota", "throttl"]) {
        return Refusal::Throttled;
    }
    // Whom it names, the explicit `email to` / `email from` first.
    let party = if says(&["email from"]) {
        Some(Refusal::Sender)
    } else if says(&["email to"]) {
        Some(Refusal::Recipient)
    } else if says(&["sender"]) {
        Some(Refusal::Sender)
    } else if says(&["recipient", "destination"]) {
        Some(Refusal::Recipient)
    } else {
        None
    };
    if says(&[
        "not allowed",
        "not verified",
        "unverified",
        "rejected",
        "invalid",
    ]) {
        party.unwrap_or(Refusal::Mail)
    } else if says(&["could not parse", "does not match"]) {
        Refusal::Mail
    } else {
        Refusal::Transient
    }
}

/// The verdict of the `send_email` error `error`:
/// [`refusal_of`]`(error)`'s [`verdict`](Refusal::verdict).
pub fn verdict_of(error: &str) -> Delivery {
    refusal_of(error).verdict(format!("send_email refused the mail: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> Timestamp {
        Timestamp::from_unix_millis(1_764_000_000_000).unwrap()
    }

    #[test]
    fn a_mail_is_mime_with_the_message_s_own_id() {
        let mail = Mail::new("hello@app.example", "ada@example.com", "Confirm — now")
            .from_name("App")
            .reply_to("help@app.example")
            .text("Hello Ada")
            .html("<p>Hello Ada</p>");
        let mime = mail.to_mime("01JABC", at()).unwrap();
        assert!(mime.contains("Message-ID: <01JABC@app.example>"), "{mime}");
        assert!(mime.contains("From: \"App\" <hello@app.example>"), "{mime}");
        assert!(mime.contains("To: <ada@example.com>"), "{mime}");
        assert!(mime.contains("Reply-To: <help@app.example>"), "{mime}");
        assert!(mime.contains("multipart/alternative"), "{mime}");
        assert!(mime.contains("Date: "), "{mime}");
        assert!(mime.contains("boundary=\"outbox_"), "{mime}");
        // The same message, the same mail, however often it is sent.
        assert_eq!(mail.to_mime("01JABC", at()).unwrap(), mime);
    }

    #[test]
    fn an_endpoint_delivery_s_id_becomes_a_valid_distinct_message_id() {
        assert_eq!(message_id_of("01JABC"), "01JABC");
        let mapped: Vec<String> = [
            "evt_1:ep_2",
            "order:1",
            "order@1",
            "order/1",
            "::a  b::",
            "",
        ]
        .iter()
        .map(|id| message_id_of(id))
        .collect();
        assert!(mapped[0].starts_with("evt_1.ep_2."), "{}", mapped[0]);
        assert!(mapped[4].starts_with("a.b."), "{}", mapped[4]);
        assert!(mapped[5].starts_with("outbox."), "{}", mapped[5]);
        let distinct: std::collections::HashSet<&String> = mapped.iter().collect();
        assert_eq!(distinct.len(), mapped.len(), "{mapped:?}");
        for id in &mapped {
            let mime = Mail::new("a@b.example", "c@d.example", "s").text("t");
            assert!(mime.to_mime(id, at()).is_ok(), "{id}");
        }
    }

    #[test]
    fn bad_mails_are_refused_with_the_field_named() {
        let good = Mail::new("a.b@b.example", "c@d-e.example", "s").text("t");
        assert!(good.to_mime("m", at()).is_ok());
        for (mail, field) in [
            (
                Mail::new("nobody", "c@d.example", "s").text("t"),
                "its from address",
            ),
            (
                Mail::new("a@b.example", "c@d.example\r\nBcc: x@y.example", "s").text("t"),
                "its to address",
            ),
            (
                Mail::new(".a@b.example", "c@d.example", "s").text("t"),
                "its from address",
            ),
            (
                Mail::new("a..b@b.example", "c@d.example", "s").text("t"),
                "its from address",
            ),
            (
                Mail::new("a@b.example", "c@-d.example", "s").text("t"),
                "its to address",
            ),
            (
                Mail::new("a@b.example", format!("c@{}.example", "d".repeat(64)), "s").text("t"),
                "its to address",
            ),
            (
                Mail::new("a@b.example", "c@d.example", "s\r\nBcc: x").text("t"),
                "subject",
            ),
            (Mail::new("a@b.example", "c@d.example", "s"), "neither"),
            (
                Mail::new("a@b.example", "c@d.example", "s")
                    .text("t")
                    .reply_to("<x>"),
                "reply_to",
            ),
        ] {
            let error = mail.to_mime("m", at()).unwrap_err().to_string();
            assert!(error.contains(field), "{error}");
        }
    }

    #[test]
    fn an_address_in_an_error_does_not_steer_its_verdict() {
        assert_eq!(
            refusal_of("email to quota@acme.example not allowed"),
            Refusal::Recipient
        );
        assert_eq!(
            refusal_of("email from invalid-user@acme.example not allowed"),
            Refusal::Sender
        );
        assert_eq!(
            refusal_of("upstream timeout for invalid@acme.example"),
            Refusal::Transient
        );
        assert_eq!(
            refusal_of("From: header does not match mail from"),
            Refusal::Mail
        );
        assert_eq!(refusal_of("Recipient address invalid"), Refusal::Recipient);
        assert_eq!(
            refusal_of("email from a@b.example not allowed for this destination"),
            Refusal::Sender
        );
        assert_eq!(refusal_of("invalid message-id"), Refusal::Mail);
    }

    #[test]
    fn a_mail_s_debug_hides_what_it_says() {
        let mail = Mail::new("a@b.example", "ada@example.com", "s").text("secret-token");
        let shown = format!("{mail:?}");
        assert!(
            !shown.contains("secret-token") && !shown.contains("ada@"),
            "{shown}"
        );
    }

    #[test]
    fn binding_errors_map_to_verdicts() {
        assert!(matches!(
            verdict_of("email to x@y.example not allowed"),
            Delivery::Permanent { .. }
        ));
        assert!(matches!(
            verdict_of("invalid message-id"),
            Delivery::Permanent { .. }
        ));
        assert!(matches!(
            verdict_of("Rate limit exceeded, try later"),
            Delivery::Unavailable { .. }
        ));
        assert!(matches!(
            verdict_of("internal error; reference = 1234"),
            Delivery::Retry { .. }
        ));
    }

    #[test]
    fn a_mail_reads_back_from_its_json() {
        let mail = Mail::new("a@b.example", "c@d.example", "s").text("t");
        let json = serde_json::to_string(&mail).unwrap();
        assert_eq!(
            json,
            r#"{"from":"a@b.example","to":"c@d.example","subject":"s","text":"t"}"#
        );
        assert_eq!(serde_json::from_str::<Mail>(&json).unwrap(), mail);
    }
}
