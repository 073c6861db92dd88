//! The `Database` contract itself.

use super::{CaseResult, Harness, ensure, ensure_eq};
use crate::database::Statement;
use crate::database::value::Value;
use crate::error::{Error, RetryAdvice};

pub(crate) async fn batch_is_all_or_nothing(h: Harness) -> CaseResult {
    let table = h.table("kv");
    h.sql(
        &format!("CREATE TABLE \"{table}\" (k TEXT PRIMARY KEY, v INTEGER)"),
        vec![],
    )
    .await?;
    let insert = |k: &str| {
        h.statement(
            &format!("INSERT INTO \"{table}\" (k, v) VALUES (?, ?)"),
            vec![k.into(), 1i64.into()],
        )
    };
    let db = h.db();
    let failed = db
        .batch_atomic(&[insert("a"), insert("b"), insert("a")])
        .await;
    ensure_eq!(
        failed,
        Err(Error::Conflict {
            constraint: format!("{table}.k")
        })
    );
    ensure_eq!(h.count(&table).await?, 0);
    let outcomes = db.batch_atomic(&[insert("a"), insert("b")]).await?;
    ensure_eq!(
        outcomes.iter().map(|o| o.rows_affected).collect::<Vec<_>>(),
        vec![1, 1]
    );
    ensure_eq!(h.count(&table).await?, 2);
    Ok(())
}

/// On SQLite, `changes()` in a batch's statement is what the write just
/// before it changed: the rollups count a settle's deletes this way.
pub(crate) async fn a_statement_reads_the_changes_of_the_one_before(h: Harness) -> CaseResult {
    if h.db().dialect() != crate::database::Dialect::Sqlite {
        return Ok(());
    }
    let table = h.table("changed");
    h.sql(
        &format!("CREATE TABLE \"{table}\" (k TEXT PRIMARY KEY, v INTEGER)"),
        vec![],
    )
    .await?;
    let statement = |sql: &str| h.statement(sql, vec![]);
    let outcomes = h
        .db()
        .batch_atomic(&[
            statement(&format!(
                "INSERT INTO \"{table}\" (k, v) VALUES ('a', 1), ('b', 1), ('c', 1)"
            )),
            statement(&format!(
                "DELETE FROM \"{table}\" WHERE k IN ('a', 'b', 'x') RETURNING k"
            )),
            statement(&format!(
                "INSERT INTO \"{table}\" (k, v) SELECT 'deleted', changes() WHERE changes() > 0"
            )),
            statement(&format!("DELETE FROM \"{table}\" WHERE k = 'x'")),
            statement(&format!(
                "INSERT INTO \"{table}\" (k, v) SELECT 'none', changes() WHERE changes() > 0"
            )),
        ])
        .await?;
    ensure_eq!(outcomes[1].rows.len(), 2);
    let rows = h
        .db()
        .query(&h.statement(&format!("SELECT k, v FROM \"{table}\" ORDER BY k"), vec![]))
        .await?;
    let read: Vec<(String, i64)> = rows
        .iter()
        .map(|row| Ok((row.get("k")?, row.get("v")?)))
        .collect::<crate::error::Result<_>>()?;
    ensure_eq!(read, vec![("c".to_owned(), 1), ("deleted".to_owned(), 2)]);
    Ok(())
}

pub(crate) async fn values_round_trip_exactly(h: Harness) -> CaseResult {
    let table = h.table("vals");
    h.sql(
        &format!(
            "CREATE TABLE \"{table}\" (n INTEGER, i INTEGER, r REAL, t TEXT, b BLOB, flag INTEGER)"
        ),
        vec![],
    )
    .await?;
    let db = h.db();
    let big = if h.capabilities().exact_i64 {
        i64::MIN
    } else {
        1 - (1i64 << 53)
    };
    let values = vec![
        Value::Null,
        Value::Integer(big),
        Value::Real(-1.5e-7),
        Value::Text("ünïcödé ' \" ; -- 🦀".into()),
        Value::Blob(vec![0, 1, 254, 255]),
        Value::from(true),
    ];
    let insert = format!("INSERT INTO \"{table}\" (n, i, r, t, b, flag) VALUES (?, ?, ?, ?, ?, ?)");
    ensure_eq!(db.execute(&h.statement(&insert, values.clone())).await?, 1);
    let rows = db
        .query(&h.statement(
            &format!("SELECT n, i, r, t, b, flag FROM \"{table}\""),
            vec![],
        ))
        .await?;
    let row = rows
        .first()
        .ok_or_else(|| super::Failure("no row".into()))?;
    let read: Vec<Value> = ["n", "i", "r", "t", "b", "flag"]
        .iter()
        .map(|column| row.value(column).cloned().unwrap_or(Value::Null))
        .collect();
    ensure_eq!(read, values);
    ensure!(
        row.get::<bool>("flag")?,
        "the flag did not read back as true"
    );

    // Values a backend cannot hold exactly are refused, never rounded.
    let mut refused = vec![Value::Real(f64::NAN), Value::Real(f64::INFINITY)];
    if !h.capabilities().exact_i64 {
        refused.extend([Value::Integer((1i64 << 53) + 1), Value::Integer(i64::MAX)]);
    }
    for value in refused {
        let mut row = values.clone();
        row[1] = if matches!(value, Value::Integer(_)) {
            value.clone()
        } else {
            Value::Null
        };
        row[2] = if matches!(value, Value::Real(_)) {
            value.clone()
        } else {
            Value::Null
        };
        let result = db.execute(&h.statement(&insert, row)).await;
        ensure!(
            matches!(result, Err(Error::InvalidInput { what: "value", .. })),
            "{value:?} gave {result:?}"
        );
    }
    ensure_eq!(h.count(&table).await?, 1);
    Ok(())
}

pub(crate) async fn writes_return_rows(h: Harness) -> CaseResult {
    let table = h.table("ret");
    h.sql(
        &format!("CREATE TABLE \"{table}\" (k TEXT PRIMARY KEY, v INTEGER)"),
        vec![],
    )
    .await?;
    let db = h.db();
    let rows = db
        .query(&h.statement(
            &format!("INSERT INTO \"{table}\" (k, v) VALUES (?, ?), (?, ?) RETURNING k, v"),
            vec!["a".into(), 1i64.into(), "b".into(), 2i64.into()],
        ))
        .await?;
    ensure_eq!(rows.len(), 2);
    let outcomes = db
        .batch_atomic(&[
            h.statement(
                &format!("UPDATE \"{table}\" SET v = v + 10 WHERE k = ? RETURNING v"),
                vec!["a".into()],
            ),
            h.statement(&format!("SELECT k FROM \"{table}\" ORDER BY k"), vec![]),
        ])
        .await?;
    ensure_eq!(outcomes[0].rows_affected, 1);
    ensure_eq!(
        outcomes[0]
            .rows
            .first()
            .map(|r| r.get::<i64>("v"))
            .transpose()?,
        Some(11)
    );
    ensure_eq!(outcomes[1].rows.len(), 2);
    ensure_eq!(outcomes[1].rows_affected, 0);
    Ok(())
}

pub(crate) async fn empty_batch_touches_nothing(h: Harness) -> CaseResult {
    let outcomes = h.db().batch_atomic(&[]).await?;
    ensure!(outcomes.is_empty(), "an empty batch returned {outcomes:?}");
    ensure_eq!(h.counts().round_trips, 0);
    Ok(())
}

pub(crate) async fn errors_say_whether_to_retry(h: Harness) -> CaseResult {
    let db = h.db();
    for sql in ["SELEC 1", "SELECT * FROM no_such_table_anywhere"] {
        let error = db
            .query(&Statement::new(sql, vec![]))
            .await
            .err()
            .ok_or_else(|| super::Failure(format!("{sql} succeeded")))?;
        ensure!(
            matches!(error, Error::Database { .. }) && error.retry_advice() == RetryAdvice::Never,
            "{sql} gave {error:?}"
        );
    }
    Ok(())
}
