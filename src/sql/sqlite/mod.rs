//! SQLite's part of every statement that differs between the dialects (D1
//! and a Durable Object's storage run it too): writers are serialized, so a
//! statement reads and writes without locks, and D1 bills every row read,
//! a sorter's too.

use sea_query::{
    CommonTableExpression, Expr, ExprTrait, Query, SelectStatement, UpdateStatement, WithClause,
};

use super::differences::{Differences, MAX_COUNTED_UNSETTLED};
use super::{col, state, tombstones};
use crate::database::value::Value;
use crate::database::{Dialect, Statement};
use crate::error::{Result, SETTLE_NOT_EXACT};
use crate::identifier::TableName;
use crate::time::Timestamp;

/// SQLite's statements.
pub(crate) struct Sqlite;

/// Where a row's id is one of a space-separated list bound as one text
/// (ids are printable ASCII without spaces; a row whose id has one may
/// match wrongly, which the check after the delete catches).
const LISTED_BETWEEN_SPACES: &str = "instr(?, ' ' || id || ' ') > 0";

/// The ids `ids` as [`LISTED_BETWEEN_SPACES`] reads them.
fn between_spaces(ids: &[&str]) -> String {
    let mut listed = String::with_capacity(ids.iter().map(|id| id.len() + 1).sum::<usize>() + 1);
    listed.push(' ');
    for id in ids {
        listed.push_str(id);
        listed.push(' ');
    }
    listed
}

impl Differences for Sqlite {
    /// No locks, only a bound. The `limit`-th due row, if there are that
    /// many, is computed first (a materialized CTE), and the update takes
    /// every due row up to and including it: a row-value bound, so SQLite
    /// walks the primary key once, reading only the rows it leases, and
    /// stops at the boundary even when thousands of rows share its due
    /// time. With fewer due rows than `limit` there is no boundary: every
    /// due row (`due_at` up to now, any id; text sorts before any blob).
    fn bound_claim(
        &self,
        update: &mut UpdateStatement,
        mut due: SelectStatement,
        _table: &TableName,
        limit: u32,
        now: Timestamp,
        returned: Vec<Expr>,
    ) {
        due.limit(1).offset(u64::from(limit - 1));
        let boundary = CommonTableExpression::new()
            .query(due)
            .columns(["last_due", "last_id"])
            .table_name("boundary")
            .materialized(true)
            .to_owned();
        let from_boundary = |column: &'static str| -> Expr {
            Query::select()
                .column(column)
                .from("boundary")
                .to_owned()
                .into()
        };
        update
            .and_where(
                Expr::tuple([Expr::col(col::DUE_AT), Expr::col(col::ID)]).lte(Expr::tuple([
                    from_boundary("last_due").if_null(now.as_unix_millis()),
                    from_boundary("last_id").if_null(Vec::<u8>::new()),
                ])),
            )
            .returning(Query::returning().exprs(returned))
            .with_cte(WithClause::new().cte(boundary).to_owned());
    }

    /// In claim order.
    fn claim_returns_unordered(&self) -> bool {
        false
    }

    /// The newest row cannot change before the insert commits.
    fn latest_of_key(&self, table: &TableName, key: &str) -> SelectStatement {
        let mut latest = Query::select();
        latest
            .expr_as(Expr::col(col::SEQ).max(), "latest")
            .from(table.as_str().to_owned())
            .and_where(Expr::col(col::ORDERING_KEY).eq(key));
        latest
    }

    fn json_string(&self, text: Expr) -> Expr {
        Expr::cust_with_exprs("json_quote(?)", [text])
    }

    fn json_field(&self, payload: Expr, field: Expr) -> Expr {
        Expr::cust_with_exprs("CAST(json_extract(?, '$.' || ?) AS TEXT)", [payload, field])
    }

    /// Never: writers are serialized, so a completion and an erasure of one
    /// key's rows never miss each other's delete.
    fn sweep_promotes_heads(&self) -> bool {
        false
    }

    /// A copy of the tombstone onto itself conflicts exactly when one
    /// exists.
    fn erasure_guard(
        &self,
        table: &TableName,
        subject: &str,
        before: Option<&str>,
        remembered_from: Timestamp,
    ) -> Result<Vec<Statement>> {
        let forms: Vec<&str> = std::iter::once(subject).chain(before).collect();
        Ok(vec![tombstones::copy_onto_themselves(
            Dialect::Sqlite,
            table,
            &forms,
            remembered_from.as_unix_millis(),
        )?])
    }

    fn entries_from(&self) -> &'static str {
        "json_each(?) AS g"
    }

    fn in_texts_listed(&self) -> &'static str {
        "IN (SELECT value FROM json_each(?))"
    }

    fn listed_in(&self, column: &str, listed: String) -> Expr {
        Expr::cust_with_exprs(
            format!("{column} IN (SELECT value FROM json_each(?))"),
            [Expr::val(listed)],
        )
    }

    /// Yes. A batch runs its statements one after another on one connection
    /// (the [`Database`](crate::database::Database) contract), so
    /// `changes()` in the count is the number of rows the settle before it
    /// changed: a count that rides on what the fenced statement did,
    /// reading no row.
    fn counts_by_changes(&self) -> bool {
        true
    }

    /// One correlated sum per group, no sort. Both counts ride in one
    /// integer: each lease adds 1 to the low 32 bits and its unsettled
    /// leases to the high ones; with fewer than 2¹⁵ leases in a group,
    /// neither half can overflow. Writers are serialized: no claim comes
    /// between the count and the settle.
    fn held_leases(&self, outbox: &str) -> String {
        let (state_col, due, id, token, unsettled) = (
            col::STATE,
            col::DUE_AT,
            col::ID,
            col::LEASE_TOKEN,
            col::UNSETTLED_LEASES,
        );
        let ready = state::READY;
        // Materialized first: the packed sum is computed once, not once
        // per use. Unaliased: a plan names the table it searches.
        format!(
            "packed AS MATERIALIZED (SELECT groups.topic AS topic, groups.signature AS signature, \
             (SELECT COALESCE(SUM(1 + (MIN(MAX({outbox}.{unsettled}, 0), {MAX_COUNTED_UNSETTLED}) << 32)), 0) \
             FROM json_each(groups.ids) AS i CROSS JOIN {outbox} WHERE \
             {outbox}.{state_col} = '{ready}' AND {outbox}.{due} = groups.until \
             AND {outbox}.{id} = i.value AND {outbox}.{token} = groups.token) AS packed \
             FROM groups), \
             held AS MATERIALIZED (SELECT topic, signature, packed & 4294967295 AS leases, \
             packed >> 32 AS lost FROM packed)"
        )
    }

    fn entry_json(&self, alias: &str, index: usize) -> String {
        format!("json_extract({alias}.value, '$[{index}]')")
    }

    fn entry_field(&self, alias: &str, index: usize, _integer: bool) -> String {
        format!("json_extract({alias}.value, '$[{index}]')")
    }

    fn signature_rows_of(&self, signature: &str) -> String {
        format!("json_each(?, '$[' || {signature} || ']') AS m")
    }

    /// The insert, then a delete of the same rows: writers are serialized,
    /// so no other statement sees the rows in between.
    fn period_fold(
        &self,
        rollups: &str,
        matching: &str,
        insert: &str,
        grouped: &str,
    ) -> Vec<String> {
        vec![
            format!("{insert} FROM {rollups} WHERE {matching} {grouped}"),
            format!("DELETE FROM {rollups} WHERE {matching}"),
        ]
    }

    /// Two statements: the delete walks only the claim's rows between the
    /// least and the greatest of the ids, one read each, where D1 bills a
    /// JSON list four times over (the JSON's row, the list's, the lookup and
    /// `RETURNING`'s copy); the check reads `changes()`, and its error is an
    /// invalid JSON path.
    fn complete_listed(
        &self,
        table: &TableName,
        token: &str,
        until: Timestamp,
        ids: &[&str],
    ) -> Result<Vec<Statement>> {
        let (state_col, due, id, token_col) = (col::STATE, col::DUE_AT, col::ID, col::LEASE_TOKEN);
        let (table, ready) = (table.as_str(), state::READY);
        let listed = i64::try_from(ids.len()).unwrap_or(i64::MAX);
        let least = ids.iter().min().copied().unwrap_or_default();
        let greatest = ids.iter().max().copied().unwrap_or_default();
        Ok(vec![
            Statement::new(
                format!(
                    "DELETE FROM \"{table}\" WHERE {state_col} = '{ready}' AND {due} = ? \
                     AND {id} >= ? AND {id} <= ? AND {token_col} = ? AND {LISTED_BETWEEN_SPACES}"
                ),
                vec![
                    Value::Integer(until.as_unix_millis()),
                    Value::Text(least.to_owned()),
                    Value::Text(greatest.to_owned()),
                    Value::Text(token.to_owned()),
                    Value::Text(between_spaces(ids)),
                ],
            ),
            Statement::new(
                format!(
                    "SELECT CASE WHEN changes() = ? THEN 0 \
                     ELSE json_extract('{{}}', '$' || changes() || ' {SETTLE_NOT_EXACT}') END AS exact"
                ),
                vec![Value::Integer(listed)],
            ),
        ])
    }

    /// No claim floor: a claim walks the due rows from the start.
    fn late_due(&self, _table: &TableName, _due: Expr) -> Option<Expr> {
        None
    }

    fn clear_late(&self, _update: &mut UpdateStatement) {}

    fn before_claim(&self, _table: &TableName, _now: Timestamp) -> Result<Vec<Statement>> {
        Ok(Vec::new())
    }

    #[cfg(any(test, feature = "conformance"))]
    fn statements_before_claim(&self) -> u64 {
        0
    }

    fn resume_topic(&self, _table: &TableName, _topic: &str) -> Vec<Statement> {
        Vec::new()
    }

    /// None: SQLite plans without statistics or JIT.
    fn planner_settings(&self) -> Option<Statement> {
        None
    }

    /// Yes: nothing locked the rows before the update.
    fn claim_checks_ready(&self) -> bool {
        true
    }

    /// Yes: SQLite, which has no statistics to plan on, otherwise walks
    /// every ready row by the primary key (half a million on a table of a
    /// million); a range of text is one of bytes here.
    fn held_by_range(&self) -> bool {
        true
    }
}
