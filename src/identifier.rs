//! Table names: the only text this crate ever places into SQL, and only after
//! validation. Every value is bound.

use std::fmt;

use crate::error::{Error, Result};

/// A validated SQL table name.
///
/// Accepted: 1 to 48 ASCII letters, digits and underscores, not starting with
/// a digit, and not starting with the prefixes SQLite (`sqlite_`) or D1
/// (`_cf_`) reserve. Derived index names (`<table>_due` …) stay within the
/// 63-character limit every supported database shares.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TableName(String);

impl TableName {
    /// The longest accepted name.
    pub const MAX_LEN: usize = 48;

    /// Validates `name`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the rule `name` breaks.
    pub fn new(name: &str) -> Result<Self> {
        let reject = |reason: String| Err(Error::invalid("table name", reason));
        if name.is_empty() {
            return reject("it is empty".into());
        }
        if name.len() > Self::MAX_LEN {
            return reject(format!(
                "it is {} characters long; the limit is {}",
                name.len(),
                Self::MAX_LEN
            ));
        }
        if let Some(bad) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_'))
        {
            return reject(format!(
                "{name:?} contains {bad:?}; only ASCII letters, digits and '_' are allowed"
            ));
        }
        if name.starts_with(|c: char| c.is_ascii_digit()) {
            return reject(format!("{name:?} starts with a digit"));
        }
        let lower = name.to_ascii_lowercase();
        if lower.starts_with("sqlite_") || lower.starts_with("_cf_") {
            return reject(format!(
                "{name:?} uses a prefix reserved by SQLite or D1 ('sqlite_', '_cf_')"
            ));
        }
        Ok(TableName(name.to_owned()))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TableName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for TableName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_identifiers() {
        for name in ["outbox", "mail_outbox", "_private", "Outbox2"] {
            assert_eq!(TableName::new(name).unwrap().as_str(), name);
        }
    }

    #[test]
    fn rejects_everything_that_is_not_a_plain_identifier() {
        let long = "t".repeat(200);
        for name in [
            "",
            "x; DROP TABLE y",
            "\"quoted\"",
            "a-b",
            "1abc",
            "sqlite_master",
            "_cf_KV",
            "tëst",
            long.as_str(),
        ] {
            let error = TableName::new(name).unwrap_err();
            assert!(
                matches!(
                    error,
                    Error::InvalidInput {
                        what: "table name",
                        ..
                    }
                ),
                "{name:?} gave {error:?}"
            );
        }
    }
}
