//! The Slack-compatible body: `{"text": …}`, one line saying what happened,
//! for an endpoint that is a chat's incoming webhook (Slack, and the chats
//! that take Slack's format).

use crate::outbox::operational::{
    ALERT, ENDPOINT_DISABLED, ENDPOINT_ENABLED, ENDPOINT_TEST, EVENT_ID_PREFIX, MESSAGE_DEAD,
    RECEIVER_FAILING, RECEIVER_RECOVERED,
};

/// The most bytes of the text: a line to read, not the payload to process.
pub(crate) const MAX_TEXT_BYTES: usize = 3_000;

/// The body of the event `event_id` with `payload` (its JSON) for a chat's
/// incoming webhook. The outbox's own [operational events](crate::outbox::operational)
/// (told by their ids, which no application event has) read as sentences;
/// any other event as its id and compact JSON. Every value is escaped as
/// Slack asks (`&`, `<`, `>`), `@` and `://` are broken with a zero-width
/// space (so neither a mention nor a link forms, in Slack or in the chats
/// that read plain `@channel` or URLs), previews are off, and the text is
/// cut at [`MAX_TEXT_BYTES`].
pub(crate) fn body(event_id: &str, payload: &str) -> String {
    let value = serde_json::from_str::<serde_json::Value>(payload).ok();
    let text = match &value {
        Some(value) if event_id.starts_with(EVENT_ID_PREFIX) => operational(value),
        Some(value) => format!("`{}` {}", quiet(event_id), quiet(&value.to_string())),
        None => format!("`{}` {}", quiet(event_id), quiet(payload)),
    };
    serde_json::json!({ "text": cut(text), "unfurl_links": false, "unfurl_media": false })
        .to_string()
}

fn operational(value: &serde_json::Value) -> String {
    let field = |name: &str| match value.get(name) {
        Some(serde_json::Value::String(text)) => quiet(text),
        Some(other) => quiet(&other.to_string()),
        None => "?".to_owned(),
    };
    match value.get("type").and_then(serde_json::Value::as_str) {
        Some(ENDPOINT_DISABLED) => format!(
            ":no_entry: Endpoint `{}` disabled: {}",
            field("endpoint_id"),
            field("reason")
        ),
        Some(ENDPOINT_ENABLED) => {
            format!(
                ":white_check_mark: Endpoint `{}` enabled",
                field("endpoint_id")
            )
        }
        Some(ALERT) => format!(
            ":rotating_light: Alert `{}` holds (since {})",
            field("rule"),
            field("window_start_ms")
        ),
        Some(ENDPOINT_TEST) => format!(
            ":test_tube: Test event for endpoint `{}`",
            field("endpoint_id")
        ),
        Some(MESSAGE_DEAD) => format!(
            ":skull: Message `{}` of `{}` is dead: {}",
            field("message_id"),
            field("topic"),
            field("error")
        ),
        Some(RECEIVER_FAILING) => format!(
            ":warning: Receiver `{}` has failed for {} min; last error: {}",
            field("receiver"),
            field("failing_minutes"),
            field("error")
        ),
        Some(RECEIVER_RECOVERED) => format!(
            ":large_green_circle: Receiver `{}` answers again",
            field("receiver")
        ),
        _ => quiet(&value.to_string()),
    }
}

/// `text` that cannot format, mention or link: Slack's three control
/// characters escaped as it asks, and `@` and `://` broken by a zero-width
/// space.
fn quiet(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('@', "@\u{200B}")
        .replace("://", ":\u{200B}//")
}

fn cut(mut text: String) -> String {
    if text.len() > MAX_TEXT_BYTES {
        let mut end = MAX_TEXT_BYTES - '…'.len_utf8();
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPERATIONAL: &str = "evt_outbox_01J0000000000000000000000";

    fn text(event_id: &str, payload: &serde_json::Value) -> String {
        let body: serde_json::Value =
            serde_json::from_str(&body(event_id, &payload.to_string())).unwrap();
        assert_eq!(body["unfurl_links"], false);
        body["text"].as_str().unwrap().to_owned()
    }

    #[test]
    fn an_operational_event_reads_as_a_sentence_with_its_values_made_quiet() {
        let disabled = text(
            OPERATIONAL,
            &serde_json::json!({
                "type": ENDPOINT_DISABLED,
                "endpoint_id": "ep_1",
                "reason": "410: <!channel> @here see https://evil.example & more",
            }),
        );
        assert_eq!(
            disabled,
            ":no_entry: Endpoint `ep_1` disabled: 410: &lt;!channel&gt; @\u{200B}here see \
             https:\u{200B}//evil.example &amp; more"
        );
        let dead = text(
            OPERATIONAL,
            &serde_json::json!({
                "type": MESSAGE_DEAD, "message_id": "m1", "topic": "mail", "error": "400",
            }),
        );
        assert_eq!(dead, ":skull: Message `m1` of `mail` is dead: 400");
        let failing = text(
            OPERATIONAL,
            &serde_json::json!({
                "type": RECEIVER_FAILING, "receiver": "mail", "failing_minutes": 15, "error": "503",
            }),
        );
        assert_eq!(
            failing,
            ":warning: Receiver `mail` has failed for 15 min; last error: 503"
        );
    }

    #[test]
    fn an_application_event_reads_as_its_id_and_json_whatever_its_payload_claims() {
        let forged = serde_json::json!({"type": MESSAGE_DEAD, "message_id": "m1"});
        let shown = text("evt_01J1", &forged);
        assert!(
            shown.starts_with("`evt_01J1` {") && !shown.contains(":skull:"),
            "{shown}"
        );
        let paid = text("evt_01J2", &serde_json::json!({"order": "<o-1>"}));
        assert_eq!(paid, r#"`evt_01J2` {"order":"&lt;o-1&gt;"}"#);
        let long = text("evt_01J3", &serde_json::json!({"note": "é".repeat(4_000)}));
        assert!(
            long.len() <= MAX_TEXT_BYTES && long.ends_with('…'),
            "{}",
            long.len()
        );
    }
}
