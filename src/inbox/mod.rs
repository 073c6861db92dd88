//! The inbox: inbound messages whose effects must happen exactly once.
//!
//! A message's key is inserted in the same atomic batch as its effect. The
//! key is the table's primary key, so the first writer wins: a redelivered
//! message's batch fails on the key and rolls back whole, changing nothing.
//! A key recorded for an erased subject fails its batch the same way (see
//! [`subject`](crate::subject)).

pub(crate) mod handle;

pub(crate) use handle::Inbox;
pub use handle::{InboxEntry, KeyStatement, Processed};
