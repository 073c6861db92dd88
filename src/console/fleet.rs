//! The fleet view: every member's outbox as it last reported, most dead
//! letters or most overdue first if asked, each linking to its member's own
//! console.

use serde_json::{Value as Json, json};

use super::call::Call;
use super::views::fleet_entry;
use super::wire::is_own_path;
use crate::error::{Error, Result};
use crate::fleet::{Fleet, FleetCursor, FleetOrder};
use crate::outbox::Outbox;

/// Where `{member}` goes in a fleet view's link to a member's console.
pub(super) const MEMBER: &str = "{member}";

/// What a member's name keeps as it is in a path segment: RFC 3986's
/// unreserved characters.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// The page the view reads unless told otherwise.
const PAGE: u32 = 50;

/// A fleet, and where each member's console is.
pub(super) struct FleetView {
    pub(super) fleet: Fleet,
    /// A path of this host with `{member}` once.
    link: String,
}

impl FleetView {
    /// `fleet`, its members' consoles at `link` (`/admin/customers/{member}/console/`).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] unless `link` is a path of this host
    /// (starting with one `/`) holding `{member}` once.
    pub(super) fn new(fleet: Fleet, link: &str) -> Result<Self> {
        if !is_own_path(link) || link.matches(MEMBER).count() != 1 {
            return Err(Error::invalid(
                "fleet console link",
                format!(
                    "{link:?} must be a path of this host holding {MEMBER} once \
                     (\"/admin/customers/{MEMBER}/console/\")"
                ),
            ));
        }
        Ok(FleetView {
            fleet,
            link: link.to_owned(),
        })
    }

    /// The link to `member`'s console, its name one path segment: every
    /// byte but letters, digits and `-._~` percent-encoded (a `/`, `?` or
    /// `#` in a name stays inside its segment). None for `.` and `..`,
    /// which a browser would read as a step in the path, encoded or not.
    pub(super) fn link_of(&self, member: &str) -> Option<String> {
        if member == "." || member == ".." {
            return None;
        }
        let encoded = percent_encoding::utf8_percent_encode(member, SEGMENT);
        Some(self.link.replace(MEMBER, &encoded.to_string()))
    }
}

/// `GET fleet?order=name|dead|oldest_due&after=<cursor>&limit=`: a page of
/// the members' outboxes.
pub(super) async fn page(call: &mut Call<'_>) -> Result<Json> {
    let Some(view) = &call.console.inner.fleet else {
        return Err(Error::NotFound {
            what: "fleet view (give the console .fleet(…))",
            id: "fleet".into(),
        });
    };
    let query = call.query;
    let param = |name: &str| query.get(name);
    let order: FleetOrder = param("order").map_or(Ok(FleetOrder::Name), str::parse)?;
    let after = param("after").map(FleetCursor::parse).transpose()?;
    let limit = match param("limit") {
        Some(limit) => limit
            .parse()
            .map_err(|_| Error::invalid("limit", format!("is 1 to {}", Fleet::MAX_PAGE)))?,
        None => PAGE,
    };
    let page = view.fleet.list(order, after.as_ref(), limit).await?;
    Ok(json!({
        "order": order.as_str(),
        "members": page
            .entries
            .iter()
            .map(|entry| fleet_entry(entry, view.link_of(&entry.member).as_deref()))
            .collect::<Vec<_>>(),
        "next": page.next.map(|next| next.to_string()),
        "count_cap": Outbox::SUMMARY_CAP,
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::database::sqlite::SqliteDatabase;

    fn fleet() -> Fleet {
        let db = SqliteDatabase::open_in_memory().expect("in-memory SQLite opens");
        Fleet::new(Arc::new(db), "fleet").expect("a plain table name")
    }

    #[test]
    fn a_members_name_stays_inside_its_segment_of_the_link() {
        let view = FleetView::new(fleet(), "/admin/customers/{member}/console/").expect("a path");
        let link = |member| view.link_of(member);
        assert_eq!(
            link("a/../b?c#d").as_deref(),
            Some("/admin/customers/a%2F..%2Fb%3Fc%23d/console/")
        );
        assert_eq!(
            link("acme-co_1.x~").as_deref(),
            Some("/admin/customers/acme-co_1.x~/console/")
        );
        assert_eq!(
            link("zoë 50%").as_deref(),
            Some("/admin/customers/zo%C3%AB%2050%25/console/")
        );
        assert_eq!(link(".."), None);
        assert_eq!(link("."), None);
    }

    #[test]
    fn a_link_elsewhere_or_without_one_member_is_refused() {
        for link in [
            "//evil.example/{member}",
            "https://evil.example/{member}",
            "javascript:alert(1)//{member}",
            "/admin/console/",
            "/{member}/{member}",
            "/a b/{member}",
            "/a#{member}",
        ] {
            assert!(
                matches!(
                    FleetView::new(fleet(), link),
                    Err(Error::InvalidInput { .. })
                ),
                "{link}"
            );
        }
    }
}
