//! Typed topics: a payload type declares its topic once (the
//! [`Topic`](crate::Topic) trait, at the crate's root); enqueue and delivery
//! use the type, and nobody spells a topic string or decodes JSON by hand.

mod router;
pub(crate) mod typed;

pub use router::Router;
