//! The Slack-compatible body: `{"text": …}`, one line saying what happened,
//! for an endpoint that is a chat's incoming webhook (Slack, and the chats
//! that take Slack's format).

use crate::outbox::operational::{
    ENDPOINT_DISABLED, ENDPOINT_ENABLED, MESSAGE_DEAD, RECEIVER_FAILING, RECEIVER_RECOVERED,
};

/// The most bytes of the text: a line to read, not the payload to process.
pub(crate) const MAX_TEXT_BYTES: usize = 3_000;

/// The body of `payload` (an event's JSON) for a Slack incoming webhook. An
/// operational event reads as a sentence; any other event as its type and
/// compact JSON. Every value is escaped as Slack asks (`&`, `<`, `>`), so
/// text a receiver or an application chose cannot mention a channel or
/// make a link; the text is cut at [`MAX_TEXT_BYTES`].
pub(crate) fn body(payload: &str) -> String {
    let text = match serde_json::from_str::<serde_json::Value>(payload) {
        Ok(value) => text_of(&value),
        Err(_) => escape(payload),
    };
    serde_json::json!({ "text": cut(text) }).to_string()
}

fn text_of(value: &serde_json::Value) -> String {
    let field = |name: &str| match value.get(name) {
        Some(serde_json::Value::String(text)) => escape(text),
        Some(other) => escape(&other.to_string()),
        None => "?".to_owned(),
    };
    let event_type = value.get("type").and_then(serde_json::Value::as_str);
    match event_type {
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
        Some(other) => format!("`{}` {}", escape(other), escape(&value.to_string())),
        None => escape(&value.to_string()),
    }
}

/// Slack's three control characters, as its formatting guide asks.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
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

    fn text(payload: &serde_json::Value) -> String {
        let body: serde_json::Value = serde_json::from_str(&body(&payload.to_string())).unwrap();
        body["text"].as_str().unwrap().to_owned()
    }

    #[test]
    fn an_operational_event_reads_as_a_sentence_with_its_values_escaped() {
        let disabled = text(&serde_json::json!({
            "type": ENDPOINT_DISABLED,
            "endpoint_id": "ep_1",
            "reason": "receiver answered 410: <!channel> <https://evil.example|click> & more",
        }));
        assert_eq!(
            disabled,
            ":no_entry: Endpoint `ep_1` disabled: receiver answered 410: &lt;!channel&gt; \
             &lt;https://evil.example|click&gt; &amp; more"
        );
        let dead = text(&serde_json::json!({
            "type": MESSAGE_DEAD, "message_id": "m1", "topic": "mail", "error": "400",
        }));
        assert_eq!(dead, ":skull: Message `m1` of `mail` is dead: 400");
        let failing = text(&serde_json::json!({
            "type": RECEIVER_FAILING, "receiver": "mail", "failing_minutes": 15, "error": "503",
        }));
        assert_eq!(
            failing,
            ":warning: Receiver `mail` has failed for 15 min; last error: 503"
        );
    }

    #[test]
    fn any_other_event_reads_as_its_type_and_json_and_a_long_one_is_cut() {
        let paid = text(&serde_json::json!({"type": "order.paid", "order": "<o-1>"}));
        assert_eq!(
            paid,
            r#"`order.paid` {"order":"&lt;o-1&gt;","type":"order.paid"}"#
        );
        assert_eq!(text(&serde_json::json!([1, 2])), "[1,2]");
        let long = text(&serde_json::json!({"note": "é".repeat(4_000)}));
        assert!(
            long.len() <= MAX_TEXT_BYTES && long.ends_with('…'),
            "{}",
            long.len()
        );
    }
}
