//! Postgres's part of every statement that differs between the dialects
//! (natively and through Hyperdrive): statements run concurrently under
//! read committed, so a promise SQLite keeps by serializing writers needs
//! a lock or a conflict on a key here; and the parts only Postgres needs,
//! its claim floor and its planner settings.

pub(crate) mod claim_floor;
pub(crate) mod planner;

use sea_query::{
    CommonTableExpression, Expr, ExprTrait, LockBehavior, LockType, Order, Query, SelectStatement,
    UnionType, UpdateStatement, WithClause,
};

use super::differences::{CLAIMED_DUE, Differences, MAX_COUNTED_UNSETTLED};
use super::tombstone_col::{ERASED_AT, GUARD_MARK, SUBJECT};
use super::{col, json_text, state, tombstones};
use crate::database::value::Value;
use crate::database::{Dialect, Statement, query_error};
use crate::error::{Result, SETTLE_NOT_EXACT};
use crate::identifier::TableName;
use crate::time::Timestamp;

/// Postgres's statements.
pub(crate) struct Postgres;

impl Differences for Postgres {
    /// Concurrent drainers each lock the first `limit` due rows no one
    /// else holds (`FOR UPDATE SKIP LOCKED`, in materialized CTEs so they
    /// run once) and update exactly those: no drainer waits on another and
    /// no row is leased twice. The due rows are walked from the claim
    /// floor, beside the few marked late (see [`claim_floor`]).
    /// `RETURNING` has no order here, so each row also returns its due time
    /// before the lease, [`CLAIMED_DUE`].
    fn bound_claim(
        &self,
        update: &mut UpdateStatement,
        mut due: SelectStatement,
        table: &TableName,
        limit: u32,
        now: Timestamp,
        returned: Vec<Expr>,
    ) {
        // The due rows at or above the claim floor, and the few written
        // behind it (see `claim_floor`): each locked in order, the first
        // `limit` of the two taken. A row locked past them stays locked
        // until this statement's transaction ends, unleased.
        let late = claim_floor::behind_floor(table, now);
        claim_floor::bound_due(table, &mut due);
        // Each row's version is joined by its `ctid` (stable while this
        // transaction holds the row locked): a plan that depends on no
        // estimate, right even where the table's statistics are those of
        // its creation, empty.
        let locked = |mut select: SelectStatement, name: &'static str| {
            select
                .column("ctid")
                .limit(u64::from(limit))
                .lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
            CommonTableExpression::new()
                .query(select)
                .columns([CLAIMED_DUE, "claimed_id", "claimed_row"])
                .table_name(name)
                .materialized(true)
                .to_owned()
        };
        let both = || -> SelectStatement {
            Query::select()
                .columns([CLAIMED_DUE, "claimed_id", "claimed_row"])
                .from("ahead")
                .union(
                    UnionType::All,
                    Query::select()
                        .columns([CLAIMED_DUE, "claimed_id", "claimed_row"])
                        .from("behind")
                        .to_owned(),
                )
                .to_owned()
        };
        let mut first = Query::select();
        first
            .columns([CLAIMED_DUE, "claimed_id", "claimed_row"])
            .from_subquery(both(), "candidates")
            .order_by(CLAIMED_DUE, Order::Asc)
            .order_by("claimed_id", Order::Asc)
            .limit(u64::from(limit));
        let picked = CommonTableExpression::new()
            .query(first)
            .table_name("picked")
            .to_owned();
        let table = table.as_str().to_owned();
        update
            .from("picked")
            .and_where(Expr::col((table, "ctid")).equals(("picked", "claimed_row")))
            .returning(
                Query::returning().exprs(
                    returned
                        .into_iter()
                        .chain([Expr::col(("picked", CLAIMED_DUE))]),
                ),
            )
            .with_cte(
                WithClause::new()
                    .cte(locked(due, "ahead"))
                    .cte(locked(late, "behind"))
                    .cte(picked)
                    .to_owned(),
            );
    }

    fn claim_returns_unordered(&self) -> bool {
        true
    }

    /// The key's newest row is locked, so a concurrent completion of it
    /// waits for the insert and then promotes it (or, if the row went
    /// first, the insert sees it gone). Two enqueues racing for the same
    /// place fail the later one on the unique ordering index.
    fn latest_of_key(&self, table: &TableName, key: &str) -> SelectStatement {
        let mut newest = Query::select();
        newest
            .column(col::SEQ)
            .from(table.as_str().to_owned())
            .and_where(Expr::col(col::ORDERING_KEY).eq(key))
            .order_by(col::SEQ, Order::Desc)
            .limit(1)
            .lock(LockType::Update);
        let mut latest = Query::select();
        latest
            .expr_as(Expr::col(col::SEQ).max(), "latest")
            .from_subquery(newest, "newest");
        latest
    }

    fn json_string(&self, text: Expr) -> Expr {
        Expr::cust_with_exprs("CAST(to_json(CAST($1 AS TEXT)) AS TEXT)", [text])
    }

    fn json_field(&self, payload: Expr, field: Expr) -> Expr {
        Expr::cust_with_exprs(
            "(CAST($1 AS jsonb) #>> string_to_array($2, '.'))",
            [payload, field],
        )
    }

    /// Always: under read committed, a completion and an erasure (or purge)
    /// of one key's rows committing at once can each miss the other's
    /// delete and promote nothing.
    fn sweep_promotes_heads(&self) -> bool {
        true
    }

    /// A copy would not see an erasure committing meanwhile: the guard
    /// deletes an expired tombstone of the subject, inserts a row of its
    /// own and deletes it again, so an erasure's tombstone and the guard
    /// wait for each other on the key, and the later one either conflicts
    /// (the guard) or runs after the guarded batch committed (the erasure,
    /// whose deletes then see its rows). Tombstones written before a ring
    /// are committed: a copy of each onto itself refuses on them.
    fn erasure_guard(
        &self,
        table: &TableName,
        subject: &str,
        before: Option<&str>,
        remembered_from: Timestamp,
    ) -> Result<Vec<Statement>> {
        let remembered_from = remembered_from.as_unix_millis();
        let name = table.as_str().to_owned();
        let mut expired = Query::delete();
        expired
            .from_table(name.clone())
            .and_where(Expr::col(SUBJECT).eq(subject))
            .and_where(Expr::col(ERASED_AT).lt(remembered_from));
        let mut take = Query::insert();
        take.into_table(name.clone())
            .columns([SUBJECT, ERASED_AT])
            .values([subject.into(), GUARD_MARK.into()])
            .map_err(query_error)?;
        let mut give_back = Query::delete();
        give_back
            .from_table(name)
            .and_where(Expr::col(SUBJECT).eq(subject))
            .and_where(Expr::col(ERASED_AT).eq(GUARD_MARK));
        let dialect = Dialect::Postgres;
        let mut statements = vec![
            dialect.render(&expired)?,
            dialect.render(&take)?,
            dialect.render(&give_back)?,
        ];
        if let Some(before) = before {
            statements.push(tombstones::copy_onto_themselves(
                dialect,
                table,
                &[before],
                remembered_from,
            )?);
        }
        Ok(statements)
    }

    /// Bound as text: a JSON parameter would need a JSON-typed value.
    fn entries_from(&self) -> &'static str {
        "json_array_elements(CAST(? AS TEXT)::json) AS g(entry)"
    }

    /// The array is read once, into an array the index scan filters by: as
    /// `IN (SELECT json_array_elements_text(…))` a planner that expects one
    /// row from the index re-parses the whole JSON for every row it finds
    /// (a settle of 100 ids: 10,000 elements, ~3 ms instead of 0.4).
    fn in_texts_listed(&self) -> &'static str {
        "= ANY(ARRAY(SELECT json_array_elements_text(CAST(? AS TEXT)::json)))"
    }

    fn listed_in(&self, column: &str, listed: String) -> Expr {
        Expr::cust_with_exprs(
            format!(
                "{column} = ANY(ARRAY(SELECT json_array_elements_text(CAST($1 AS TEXT)::json)))"
            ),
            [Expr::val(listed)],
        )
    }

    /// No: Postgres has no `changes()`, and a count per settle statement
    /// would lock rollup rows in no fixed order.
    fn counts_by_changes(&self) -> bool {
        false
    }

    /// The matched rows are locked (`FOR UPDATE`), so no other drainer's
    /// claim takes one between the count and the settle; a lock cannot sit
    /// under an aggregate, so the locked rows are grouped outside. Each row
    /// is looked up on its own (a lateral subquery per id): one index probe
    /// each, whatever the planner believes of the table (a join would scan
    /// every ready row where its statistics are stale).
    fn held_leases(&self, outbox: &str) -> String {
        let (state_col, due, id, token, unsettled) = (
            col::STATE,
            col::DUE_AT,
            col::ID,
            col::LEASE_TOKEN,
            col::UNSETTLED_LEASES,
        );
        let ready = state::READY;
        // Unaliased: a plan names the table it searches.
        format!(
            "held AS MATERIALIZED (SELECT topic, signature, COUNT(*) AS leases, SUM(unsettled) AS lost \
             FROM (SELECT groups.topic AS topic, groups.signature AS signature, o.unsettled \
             FROM groups CROSS JOIN LATERAL json_array_elements_text(groups.ids) AS i(id) \
             CROSS JOIN LATERAL (SELECT LEAST(GREATEST({outbox}.{unsettled}, 0), {MAX_COUNTED_UNSETTLED}) \
             AS unsettled FROM {outbox} WHERE {outbox}.{state_col} = '{ready}' \
             AND {outbox}.{due} = groups.until AND {outbox}.{id} = i.id \
             AND {outbox}.{token} = groups.token FOR UPDATE) AS o) AS locked GROUP BY 1, 2)"
        )
    }

    fn entry_json(&self, alias: &str, index: usize) -> String {
        format!("({alias}.entry -> {index})")
    }

    fn entry_field(&self, alias: &str, index: usize, integer: bool) -> String {
        if integer {
            format!("({alias}.entry ->> {index})::bigint")
        } else {
            format!("({alias}.entry ->> {index})")
        }
    }

    fn signature_rows_of(&self, signature: &str) -> String {
        format!(
            "LATERAL json_array_elements(CAST(? AS TEXT)::json -> CAST({signature} AS INTEGER)) AS m(entry)"
        )
    }

    /// One statement whose insert reads what its delete removed: two sweeps
    /// at once cannot both fold the same rows (the second delete finds them
    /// gone).
    fn period_fold(
        &self,
        rollups: &str,
        matching: &str,
        insert: &str,
        grouped: &str,
    ) -> Vec<String> {
        vec![format!(
            "WITH folded AS (DELETE FROM {rollups} WHERE {matching} RETURNING *) \
             {insert} FROM folded {grouped}"
        )]
    }

    /// One statement: the delete's returned rows are counted in it, and its
    /// error is an invalid integer.
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
        Ok(vec![Statement::new(
            Dialect::Postgres.number_placeholders(&format!(
                "WITH deleted AS (DELETE FROM \"{table}\" WHERE {state_col} = '{ready}' \
                 AND {due} = ? AND {token_col} = ? AND {id} {listed_ids} RETURNING 1) \
                 SELECT CASE WHEN COUNT(*) = ? THEN 0 \
                 ELSE CAST(COUNT(*) || ' {SETTLE_NOT_EXACT}' AS INTEGER) END AS exact FROM deleted",
                listed_ids = self.in_texts_listed(),
            )),
            vec![
                Value::Integer(until.as_unix_millis()),
                Value::Text(token.to_owned()),
                Value::Text(json_text(&ids, "a settle's ids")?),
                Value::Integer(listed),
            ],
        )])
    }

    fn late_due(&self, table: &TableName, due: Expr) -> Option<Expr> {
        Some(claim_floor::late_due(table, due))
    }

    fn clear_late(&self, update: &mut UpdateStatement) {
        update.value(col::LATE_DUE, Option::<i64>::None);
    }

    /// The planner's settings, then the claim floor's two steps (see
    /// [`claim_floor::advance`]).
    fn before_claim(&self, table: &TableName, now: Timestamp) -> Result<Vec<Statement>> {
        claim_floor::advance(table, now)
    }

    #[cfg(any(test, feature = "conformance"))]
    fn statements_before_claim(&self) -> u64 {
        3
    }

    fn resume_topic(&self, table: &TableName, topic: &str) -> Vec<Statement> {
        claim_floor::resume(table, topic)
    }

    fn planner_settings(&self) -> Option<Statement> {
        Some(planner::settings())
    }

    /// No: its rows come locked, and ready, from the claim's own pick (a
    /// condition here would let its planner scan every ready row).
    fn claim_checks_ready(&self) -> bool {
        false
    }

    /// No: Postgres plans on statistics and compares text by its
    /// collation, where a range by bytes is not one.
    fn held_by_range(&self) -> bool {
        false
    }
}
