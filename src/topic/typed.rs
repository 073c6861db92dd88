//! A payload type that declares its topic.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::Result;
use crate::outbox::Message;

/// A message payload type and the topic it travels under.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use workers_outbox::{Message, Topic};
///
/// #[derive(Serialize, Deserialize)]
/// struct WelcomeMail { to: String }
///
/// impl Topic for WelcomeMail {
///     const NAME: &'static str = "welcome-mail";
/// }
///
/// let message = Message::of(&WelcomeMail { to: "ada@example.com".into() })?;
/// # Ok::<(), workers_outbox::Error>(())
/// ```
pub trait Topic: Serialize + DeserializeOwned {
    /// The topic's name, as stored with each message.
    const NAME: &'static str;
}

impl Message {
    /// A message of topic `T` carrying `payload` as JSON.
    ///
    /// # Errors
    /// As [`Message::json`].
    pub fn of<T: Topic>(payload: &T) -> Result<Message> {
        Message::json(T::NAME, payload)
    }
}
