//! What the API reads from requests: the query, a JSON body, a name the
//! path gives, a bounded number.

use crate::error::{Error, Result};

/// Refuses text with a NUL (Postgres cannot store one: it would be a 500).
pub(super) fn no_nul(what: &'static str, text: &str) -> Result<()> {
    if text.contains('\0') {
        return Err(Error::invalid(what, "holds a NUL character"));
    }
    Ok(())
}

/// A request's query: its parameters, decoded, as given.
#[derive(Debug, Default)]
pub(super) struct Query {
    pairs: Vec<(String, String)>,
}

impl Query {
    /// Reads `query` (`a=1&b=x`).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a value that holds a NUL.
    pub(super) fn parse(query: &str) -> Result<Self> {
        let pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect();
        if let Some((name, _)) = pairs.iter().find(|(_, value)| value.contains('\0')) {
            return Err(Error::invalid(
                "query",
                format!("{name} holds a NUL character"),
            ));
        }
        Ok(Query { pairs })
    }

    /// The first value of `name`, unless it is missing or empty.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
            .filter(|value| !value.is_empty())
    }
}

pub(super) fn read_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|error| Error::invalid("request body", error.to_string()))
}

/// The item of `list` called `name` (`what` names it when it is not found).
pub(super) fn named<'a, T>(
    list: &'a [(String, T)],
    name: &str,
    what: &'static str,
) -> Result<&'a T> {
    list.iter()
        .find(|(known, _)| known == name)
        .map(|(_, item)| item)
        .ok_or_else(|| Error::NotFound {
            what,
            id: name.to_owned(),
        })
}

/// A query parameter that is a whole number in `1 ..= most`; `default`
/// when it is not given.
pub(super) fn whole(
    name: &'static str,
    text: Option<&str>,
    default: u32,
    most: u32,
) -> Result<u32> {
    match text.map(str::parse::<u32>) {
        None => Ok(default),
        Some(Ok(number)) if (1..=most).contains(&number) => Ok(number),
        Some(_) => Err(Error::invalid(
            name,
            format!("a whole number in 1 ..= {most}"),
        )),
    }
}

/// Whether `text` is a path of this host: it starts with one `/` (not
/// `//host`, which a browser would leave the host for) and holds no
/// control character, whitespace, `"`, `<`, `>`, `\\` or `#`.
pub(super) fn is_own_path(text: &str) -> bool {
    text.starts_with('/')
        && !text.starts_with("//")
        && !text
            .chars()
            .any(|c| c.is_control() || c.is_whitespace() || ['"', '<', '>', '\\', '#'].contains(&c))
}
