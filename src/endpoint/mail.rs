//! The mail a `mailto:` endpoint receives for an event.

use crate::email::{Mail, Refusal};
use crate::outbox::operational::EVENT_ID_PREFIX;
use crate::verdict::Delivery;

/// Whose a mail endpoint's failed delivery is to fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The endpoint's: its address, or the mail service for now.
    Endpoint,
    /// The application's (a sender the binding refuses): the delivery
    /// waits, and nothing counts against the endpoint.
    Application,
}

/// A mail endpoint's verdict once the binding refused with `refusal`
/// saying `error`: a refused recipient is the endpoint's receiver gone (it
/// is disabled, as by a `410`); a refused sender is the application's to
/// fix (the delivery waits, no attempt spent); the rest as any mail's.
pub(crate) fn refused(refusal: Refusal, verdict: Delivery) -> (Delivery, Fault) {
    let error = verdict.error().unwrap_or_default().to_owned();
    match refusal {
        Refusal::Recipient => (Delivery::gone(error), Fault::Endpoint),
        Refusal::Sender => (Delivery::unavailable(error, None), Fault::Application),
        _ => (verdict, Fault::Endpoint),
    }
}

/// The mail from `from` to `to` for the event `event_id` with `payload`
/// (its JSON): the subject names the event (an operational event by its
/// type), the text is the payload, indented.
pub(crate) fn mail(from: &str, to: &str, event_id: &str, payload: &str) -> Mail {
    let value = serde_json::from_str::<serde_json::Value>(payload).ok();
    let what = value
        .as_ref()
        .filter(|_| event_id.starts_with(EVENT_ID_PREFIX))
        .and_then(|value| value.get("type"))
        .and_then(serde_json::Value::as_str)
        .unwrap_or("Event");
    let text = value
        .as_ref()
        .and_then(|value| serde_json::to_string_pretty(value).ok())
        .unwrap_or_else(|| payload.to_owned());
    // A subject is one line: whatever the event's type holds stays on it.
    let subject: String = format!("{what} {event_id}")
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    Mail::new(from, to, subject).text(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_address_is_the_endpoint_s_and_a_refused_sender_the_application_s() {
        let said = |refusal: Refusal| refused(refusal, refusal.verdict("no".into()));
        assert!(matches!(
            said(Refusal::Recipient),
            (Delivery::Gone { .. }, Fault::Endpoint)
        ));
        assert!(matches!(
            said(Refusal::Sender),
            (Delivery::Unavailable { .. }, Fault::Application)
        ));
        assert!(matches!(
            said(Refusal::Mail),
            (Delivery::Permanent { .. }, Fault::Endpoint)
        ));
        assert!(matches!(
            said(Refusal::Throttled),
            (Delivery::Unavailable { .. }, Fault::Endpoint)
        ));
        assert!(matches!(
            said(Refusal::Transient),
            (Delivery::Retry { .. }, Fault::Endpoint)
        ));
    }

    #[test]
    fn an_event_s_mail_names_it_and_carries_its_payload() {
        let event = mail(
            "ops@app.example",
            "a@b.example",
            "evt_1",
            r#"{"order":"o-1"}"#,
        );
        assert_eq!(event.subject, "Event evt_1");
        assert_eq!(event.text.as_deref(), Some("{\n  \"order\": \"o-1\"\n}"));
        let told = mail(
            "ops@app.example",
            "a@b.example",
            "evt_outbox_1",
            r#"{"type":"outbox.message.dead\r\nBcc: x"}"#,
        );
        assert_eq!(told.subject, "outbox.message.dead  Bcc: x evt_outbox_1");
        assert!(
            told.to_mime("evt_outbox_1:ep_1", crate::time::Timestamp::MAX)
                .is_ok()
        );
    }
}
