//! Every place where the library's statements differ between SQLite (D1, a
//! Durable Object's storage) and Postgres. SQLite serializes writers, so a
//! statement there can read and write without locks; Postgres runs them
//! concurrently under read committed, so the same promise needs a lock or
//! a conflict on a key.

use sea_query::{
    CommonTableExpression, Expr, ExprTrait, LockBehavior, LockType, Order, Query, SelectStatement,
    UnionType, UpdateStatement, WithClause,
};

use super::tombstone_col::{ERASED_AT, GUARD_MARK, SUBJECT};
use super::{claim_floor, col, json_text, state};
use crate::database::value::Value;
use crate::database::{Dialect, Statement, query_error};
use crate::error::{Result, SETTLE_NOT_EXACT};
use crate::identifier::TableName;
use crate::time::Timestamp;

/// The due time a Postgres claim returns beside each row, to sort by.
pub(crate) const CLAIMED_DUE: &str = "claimed_due";

/// Bounds a claim's `update` of due rows to the first `limit` of `due` (the
/// due rows in claim order), returning `returned` of each.
///
/// - **SQLite**: no locks, only a bound. The `limit`-th due row, if there
///   are that many, is computed first (a materialized CTE), and the update
///   takes every due row up to and including it: a row-value bound, so
///   SQLite walks the primary key once, reading only the rows it leases, and
///   stops at the boundary even when thousands of rows share its due time.
///   With fewer due rows than `limit` there is no boundary: every due row
///   (`due_at` up to now, any id; text sorts before any blob).
/// - **Postgres**: concurrent drainers each lock the first `limit` due rows
///   no one else holds (`FOR UPDATE SKIP LOCKED`, in materialized CTEs so
///   they run once) and update exactly those: no drainer waits on another
///   and no row is leased twice. The due rows are walked from the claim
///   floor, beside the few marked late (see [`claim_floor`]). `RETURNING`
///   has no order there, so each row also returns its due time before the
///   lease, [`CLAIMED_DUE`].
pub(crate) fn bound_claim(
    dialect: Dialect,
    update: &mut UpdateStatement,
    mut due: SelectStatement,
    table: &TableName,
    limit: u32,
    now: Timestamp,
    returned: Vec<Expr>,
) {
    match dialect {
        Dialect::Sqlite => {
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
        Dialect::Postgres => {
            // The due rows at or above the claim floor, and the few written
            // behind it (see `claim_floor`): each locked in order, the first
            // `limit` of the two taken. A row locked past them stays locked
            // until this statement's transaction ends, unleased.
            let late = claim_floor::behind_floor(table, now);
            claim_floor::bound_due(table, &mut due);
            // Each row's version is joined by its `ctid` (stable while this
            // transaction holds the row locked): a plan that depends on no
            // estimate, right even where the table's statistics are those
            // of its creation, empty.
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
    }
}

/// Whether a claim's rows come back in no order, each carrying its
/// [`CLAIMED_DUE`] to be sorted by (Postgres).
pub(crate) fn claim_returns_unordered(dialect: Dialect) -> bool {
    dialect == Dialect::Postgres
}

/// The newest sequence number of ordering key `key`, as a one-row select
/// of `latest` (null when the key has no row).
///
/// - **SQLite**: the newest row cannot change before the insert commits.
/// - **Postgres**: the key's newest row is locked, so a concurrent
///   completion of it waits for the insert and then promotes it (or, if the
///   row went first, the insert sees it gone). Two enqueues racing for the
///   same place fail the later one on the unique ordering index.
pub(crate) fn latest_of_key(dialect: Dialect, table: &TableName, key: &str) -> SelectStatement {
    let table = table.as_str().to_owned();
    let mut latest = Query::select();
    latest.expr_as(Expr::col(col::SEQ).max(), "latest");
    match dialect {
        Dialect::Sqlite => {
            latest
                .from(table)
                .and_where(Expr::col(col::ORDERING_KEY).eq(key));
        }
        Dialect::Postgres => {
            let mut newest = Query::select();
            newest
                .column(col::SEQ)
                .from(table)
                .and_where(Expr::col(col::ORDERING_KEY).eq(key))
                .order_by(col::SEQ, Order::Desc)
                .limit(1)
                .lock(LockType::Update);
            latest.from_subquery(newest, "newest");
        }
    }
    latest
}

/// `text` as a JSON string's text (quoted and escaped), for a payload
/// built in SQL from a row's columns.
pub(crate) fn json_string(dialect: Dialect, text: Expr) -> Expr {
    match dialect {
        Dialect::Sqlite => Expr::cust_with_exprs("json_quote(?)", [text]),
        Dialect::Postgres => {
            Expr::cust_with_exprs("CAST(to_json(CAST($1 AS TEXT)) AS TEXT)", [text])
        }
    }
}

/// Whether `payload` (JSON text) matches an endpoint's filter: its field
/// `field` (a dot-separated path) read as text equals `value`; true without
/// a filter (`field` null). Strings compare as they are, numbers as they
/// are written.
pub(crate) fn filter_matches(dialect: Dialect, payload: Expr, field: Expr, value: Expr) -> Expr {
    let read = match dialect {
        Dialect::Sqlite => Expr::cust_with_exprs(
            "CAST(json_extract(?, '$.' || ?) AS TEXT)",
            [payload, field.clone()],
        ),
        Dialect::Postgres => Expr::cust_with_exprs(
            "(CAST($1 AS jsonb) #>> string_to_array($2, '.'))",
            [payload, field.clone()],
        ),
    };
    field.is_null().or(read.eq(value))
}

/// Whether a drain's sweep must make ready the head of every ordering key
/// left waiting. Under Postgres's read committed, a completion and an
/// erasure (or purge) of one key's rows committing at once can each miss
/// the other's delete and promote nothing; SQLite serializes writers, so
/// that never happens there.
pub(crate) fn sweep_promotes_heads(dialect: Dialect) -> bool {
    dialect == Dialect::Postgres
}

/// Statements that fail their batch on the primary key of the tombstone of
/// `subject` in `table` if one exists from `remembered_from` on, and change
/// nothing else.
///
/// - **SQLite**: a copy of the tombstone onto itself conflicts exactly when
///   one exists.
/// - **Postgres** would not see an erasure committing meanwhile: the guard
///   deletes an expired tombstone of the subject, inserts a row of its own
///   and deletes it again, so an erasure's tombstone and the guard wait for
///   each other on the key, and the later one either conflicts (the guard)
///   or runs after the guarded batch committed (the erasure, whose deletes
///   then see its rows).
///
/// `before` is how the subject was written before a key ring was given (its
/// tombstones from then are committed: a copy of each onto itself, in
/// both dialects, refuses on them).
pub(crate) fn erasure_guard(
    dialect: Dialect,
    table: &TableName,
    subject: &str,
    before: Option<&str>,
    remembered_from: Timestamp,
) -> Result<Vec<Statement>> {
    let table = table.as_str().to_owned();
    let remembered_from = remembered_from.as_unix_millis();
    let copy_onto_itself = |forms: &[&str]| -> Result<Statement> {
        let mut tombstone = Query::select();
        tombstone
            .columns([SUBJECT, ERASED_AT])
            .from(table.clone())
            .and_where(super::one_of(SUBJECT, forms))
            .and_where(Expr::col(ERASED_AT).gte(remembered_from));
        let mut copy = Query::insert();
        copy.into_table(table.clone())
            .columns([SUBJECT, ERASED_AT])
            .select_from(tombstone)
            .map_err(query_error)?;
        dialect.render(&copy)
    };
    match dialect {
        Dialect::Sqlite => {
            let forms: Vec<&str> = std::iter::once(subject).chain(before).collect();
            Ok(vec![copy_onto_itself(&forms)?])
        }
        Dialect::Postgres => {
            let mut expired = Query::delete();
            expired
                .from_table(table.clone())
                .and_where(Expr::col(SUBJECT).eq(subject))
                .and_where(Expr::col(ERASED_AT).lt(remembered_from));
            let mut take = Query::insert();
            take.into_table(table.clone())
                .columns([SUBJECT, ERASED_AT])
                .values([subject.into(), GUARD_MARK.into()])
                .map_err(query_error)?;
            let mut give_back = Query::delete();
            give_back
                .from_table(table.clone())
                .and_where(Expr::col(SUBJECT).eq(subject))
                .and_where(Expr::col(ERASED_AT).eq(GUARD_MARK));
            let mut statements = vec![
                dialect.render(&expired)?,
                dialect.render(&take)?,
                dialect.render(&give_back)?,
            ];
            if let Some(before) = before {
                statements.push(copy_onto_itself(&[before])?);
            }
            Ok(statements)
        }
    }
}

/// The lease groups of a settle, bound as one JSON text: a table of one
/// row per group, `g`.
pub(crate) fn entries_from(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "json_each(?) AS g",
        // Bound as text: a JSON parameter would need a JSON-typed value.
        Dialect::Postgres => "json_array_elements(CAST(? AS TEXT)::json) AS g(entry)",
    }
}

/// Membership in the texts of a JSON array bound as one parameter: a
/// column followed by this is true when it equals one of them.
///
/// On Postgres the array is read once, into an array the index scan
/// filters by: as `IN (SELECT json_array_elements_text(…))` a planner that
/// expects one row from the index re-parses the whole JSON for every row
/// it finds (a settle of 100 ids: 10,000 elements, ~3 ms instead of 0.4).
pub(crate) fn in_texts_listed(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite => "IN (SELECT value FROM json_each(?))",
        Dialect::Postgres => "= ANY(ARRAY(SELECT json_array_elements_text(CAST(? AS TEXT)::json)))",
    }
}

/// `column` (SQL text: a validated, quoted name) is one of the texts of the
/// JSON array `listed`, bound as one value (as [`in_texts_listed`]), for a
/// statement built with sea-query.
pub(crate) fn listed_in(dialect: Dialect, column: &str, listed: String) -> Expr {
    match dialect {
        Dialect::Sqlite => Expr::cust_with_exprs(
            format!("{column} IN (SELECT value FROM json_each(?))"),
            [Expr::val(listed)],
        ),
        Dialect::Postgres => Expr::cust_with_exprs(
            format!(
                "{column} = ANY(ARRAY(SELECT json_array_elements_text(CAST($1 AS TEXT)::json)))"
            ),
            [Expr::val(listed)],
        ),
    }
}

/// Whether a settle statement's changes are counted by the statement right
/// after it, with `changes()`.
///
/// - **SQLite**: yes. A batch runs its statements one after another on one
///   connection (the [`Database`](crate::database::Database) contract), so `changes()`
///   in the count is the number of rows the settle before it changed: a
///   count that rides on what the fenced statement did, reading no row.
/// - **Postgres**: no (it has no `changes()`, and a count per settle
///   statement would lock rollup rows in no fixed order); the settle's
///   count reads and locks its rows first ([`held_leases`]).
pub(crate) fn counts_by_changes(dialect: Dialect) -> bool {
    match dialect {
        Dialect::Sqlite => true,
        Dialect::Postgres => false,
    }
}

/// The most unsettled leases a settle's count reads from one row.
pub(crate) const MAX_COUNTED_UNSETTLED: i64 = 65_535;

/// The common table expressions that end in `held`: per group of `groups`
/// (topic, token, until, signature and ids), the leases that still hold in
/// `outbox`, counted: rows of `topic`, `signature`, `leases` (how many hold)
/// and `lost` (their unsettled leases).
///
/// - **SQLite** (and D1, which bills every row read, a sorter's too): one
///   correlated sum per group, no sort. Both counts ride in one integer:
///   each lease adds 1 to the low 32 bits and its unsettled leases to the
///   high ones. Both dialects count a row's unsettled leases as at most
///   [`MAX_COUNTED_UNSETTLED`] (a real row has a handful): with fewer than
///   2¹⁵ leases in a group, neither half can overflow.
/// - **Postgres**: the matched rows are locked (`FOR UPDATE`), so no other
///   drainer's claim takes one between the count and the settle; a lock
///   cannot sit under an aggregate, so the locked rows are grouped outside.
///   Each row is looked up on its own (a lateral subquery per id): one
///   index probe each, whatever the planner believes of the table (a
///   join would scan every ready row where its statistics are stale).
pub(crate) fn held_leases(dialect: Dialect, outbox: &str) -> String {
    let (state_col, due, id, token, unsettled) = (
        col::STATE,
        col::DUE_AT,
        col::ID,
        col::LEASE_TOKEN,
        col::UNSETTLED_LEASES,
    );
    // Unaliased: a plan names the table it searches.
    let fenced = format!(
        "{outbox}.{state_col} = '{ready}' AND {outbox}.{due} = groups.until \
         AND {outbox}.{id} = {{id}} AND {outbox}.{token} = groups.token",
        ready = state::READY,
    );
    let clamp = |least: &str, greatest: &str| {
        format!("{least}({greatest}({outbox}.{unsettled}, 0), {MAX_COUNTED_UNSETTLED})")
    };
    match dialect {
        // Materialized first: the packed sum is computed once, not once
        // per use.
        Dialect::Sqlite => format!(
            "packed AS MATERIALIZED (SELECT groups.topic AS topic, groups.signature AS signature, \
             (SELECT COALESCE(SUM(1 + ({unsettled_counted} << 32)), 0) \
             FROM json_each(groups.ids) AS i CROSS JOIN {outbox} WHERE {fenced}) AS packed \
             FROM groups), \
             held AS MATERIALIZED (SELECT topic, signature, packed & 4294967295 AS leases, \
             packed >> 32 AS lost FROM packed)",
            fenced = fenced.replace("{id}", "i.value"),
            unsettled_counted = clamp("MIN", "MAX"),
        ),
        Dialect::Postgres => format!(
            "held AS MATERIALIZED (SELECT topic, signature, COUNT(*) AS leases, SUM(unsettled) AS lost \
             FROM (SELECT groups.topic AS topic, groups.signature AS signature, o.unsettled \
             FROM groups CROSS JOIN LATERAL json_array_elements_text(groups.ids) AS i(id) \
             CROSS JOIN LATERAL (SELECT {unsettled_counted} AS unsettled FROM {outbox} \
             WHERE {fenced} FOR UPDATE) AS o) AS locked GROUP BY 1, 2)",
            fenced = fenced.replace("{id}", "i.id"),
            unsettled_counted = clamp("LEAST", "GREATEST"),
        ),
    }
}

/// Field `index` of a group's JSON array, as JSON (for its ids).
pub(crate) fn entry_json(dialect: Dialect, alias: &str, index: usize) -> String {
    match dialect {
        Dialect::Sqlite => format!("json_extract({alias}.value, '$[{index}]')"),
        Dialect::Postgres => format!("({alias}.entry -> {index})"),
    }
}

/// Field `index` of the JSON array `alias` (a lease group `g`, or a
/// signature's row `m`), as an integer or text.
pub(crate) fn entry_field(dialect: Dialect, alias: &str, index: usize, integer: bool) -> String {
    match (dialect, integer) {
        (Dialect::Sqlite, _) => format!("json_extract({alias}.value, '$[{index}]')"),
        (Dialect::Postgres, true) => format!("({alias}.entry ->> {index})::bigint"),
        (Dialect::Postgres, false) => format!("({alias}.entry ->> {index})"),
    }
}

/// The rollup rows of signature `signature` (a column), bound as one JSON
/// text (an array of arrays of rows): a table `m` of only that
/// signature's rows, read by position.
pub(crate) fn signature_rows_of(dialect: Dialect, signature: &str) -> String {
    match dialect {
        Dialect::Sqlite => format!("json_each(?, '$[' || {signature} || ']') AS m"),
        Dialect::Postgres => format!(
            "LATERAL json_array_elements(CAST(? AS TEXT)::json -> CAST({signature} AS INTEGER)) AS m(entry)"
        ),
    }
}

/// Moves the rollups of `rollups` matching `matching` into coarser periods:
/// `insert` (an `INSERT … SELECT` of the moved rows' aggregates) followed by
/// `grouped` (its `GROUP BY` and conflict clause); every statement binds
/// `matching`'s one parameter.
///
/// - **SQLite**: the insert, then a delete of the same rows; writers are
///   serialized, so no other statement sees the rows in between.
/// - **Postgres**: one statement whose insert reads what its delete
///   removed: two sweeps at once cannot both fold the same rows (the second
///   delete finds them gone).
pub(crate) fn period_fold(
    dialect: Dialect,
    rollups: &str,
    matching: &str,
    insert: &str,
    grouped: &str,
) -> Vec<String> {
    match dialect {
        Dialect::Sqlite => vec![
            format!("{insert} FROM {rollups} WHERE {matching} {grouped}"),
            format!("DELETE FROM {rollups} WHERE {matching}"),
        ],
        Dialect::Postgres => vec![format!(
            "WITH folded AS (DELETE FROM {rollups} WHERE {matching} RETURNING *) \
             {insert} FROM folded {grouped}"
        )],
    }
}

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

/// Deletes the delivered rows `ids` of one claim (its `token` and lease end
/// `until`) and checks that it deleted exactly those: the batch commits
/// only if each id was deleted, and otherwise fails with an error whose
/// text holds [`SETTLE_NOT_EXACT`](crate::error::SETTLE_NOT_EXACT) (it
/// then changed nothing, and is sent again with [`complete_all`](super::settle::complete_all), which
/// tells each row apart). Nothing is returned, so nothing is read twice.
///
/// - **SQLite** (two statements): the delete walks only the claim's rows
///   between the least and the greatest of the ids, one read each, where
///   D1 bills a JSON list four times over (the JSON's row, the list's, the
///   lookup and `RETURNING`'s copy); the check reads `changes()`.
/// - **Postgres** (one): the delete's returned rows are counted in the
///   same statement.
///
/// The check's error is an invalid JSON path (SQLite) or integer (Postgres)
/// built from the count, so no planner raises it before the count is known.
pub(crate) fn complete_listed(
    table: &TableName,
    dialect: Dialect,
    token: &str,
    until: Timestamp,
    ids: &[&str],
) -> Result<Vec<Statement>> {
    let (state_col, due, id, token_col) = (col::STATE, col::DUE_AT, col::ID, col::LEASE_TOKEN);
    let (table, ready) = (table.as_str(), state::READY);
    let listed = i64::try_from(ids.len()).unwrap_or(i64::MAX);
    Ok(match dialect {
        Dialect::Sqlite => {
            let least = ids.iter().min().copied().unwrap_or_default();
            let greatest = ids.iter().max().copied().unwrap_or_default();
            vec![
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
            ]
        }
        Dialect::Postgres => vec![Statement::new(
            dialect.number_placeholders(&format!(
                "WITH deleted AS (DELETE FROM \"{table}\" WHERE {state_col} = '{ready}' \
                 AND {due} = ? AND {token_col} = ? AND {id} {listed_ids} RETURNING 1) \
                 SELECT CASE WHEN COUNT(*) = ? THEN 0 \
                 ELSE CAST(COUNT(*) || ' {SETTLE_NOT_EXACT}' AS INTEGER) END AS exact FROM deleted",
                listed_ids = in_texts_listed(dialect),
            )),
            vec![
                Value::Integer(until.as_unix_millis()),
                Value::Text(token.to_owned()),
                Value::Text(json_text(&ids, "a settle's ids")?),
                Value::Integer(listed),
            ],
        )],
    })
}
