//! The mail a `mailto:` endpoint receives for an event.

use crate::email::Mail;
use crate::outbox::operational::EVENT_ID_PREFIX;

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
