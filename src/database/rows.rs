//! Rows returned by a statement, with typed access that fails loudly.

use std::sync::Arc;

use super::value::Value;
use crate::error::{Error, Result};
use crate::time::Timestamp;

/// The rows a statement returned, all with the same columns.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rows {
    columns: Arc<[String]>,
    rows: Vec<Vec<Value>>,
}

impl Rows {
    /// Rows with the given column names.
    ///
    /// # Errors
    /// [`Error::Database`] if a row's length differs from the column count:
    /// an adapter bug, reported rather than hidden.
    pub fn new(columns: Vec<String>, rows: Vec<Vec<Value>>) -> Result<Self> {
        if let Some(bad) = rows.iter().find(|row| row.len() != columns.len()) {
            return Err(Error::database(format!(
                "an adapter bug: a row has {} values for {} columns",
                bad.len(),
                columns.len()
            )));
        }
        Ok(Rows {
            columns: columns.into(),
            rows,
        })
    }

    /// The column names, in order.
    pub fn columns(&self) -> &[String] {
        &self.columns
    }

    /// How many rows there are.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The rows, in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Row<'_>> {
        self.rows.iter().map(|values| Row {
            columns: &self.columns,
            values,
        })
    }

    /// The first row, if any.
    pub fn first(&self) -> Option<Row<'_>> {
        self.iter().next()
    }
}

/// One row of [`Rows`].
#[derive(Debug, Clone, Copy)]
pub struct Row<'a> {
    columns: &'a [String],
    values: &'a [Value],
}

impl<'a> Row<'a> {
    /// The raw value of `column`, if the row has that column.
    pub fn value(&self, column: &str) -> Option<&'a Value> {
        self.columns
            .iter()
            .position(|name| name == column)
            .map(|index| &self.values[index])
    }

    /// The value of `column`, decoded as `T`.
    ///
    /// # Errors
    /// [`Error::MalformedRow`] if the column is missing, or its value is NULL
    /// (unless `T` is an `Option`), of another type, or out of `T`'s range.
    pub fn get<T: FromValue>(&self, column: &str) -> Result<T> {
        let value = self.value(column).ok_or_else(|| Error::MalformedRow {
            table: None,
            row: None,
            column: column.to_owned(),
            reason: "no such column in the result".into(),
        })?;
        T::from_value(value).map_err(|reason| Error::MalformedRow {
            table: None,
            row: None,
            column: column.to_owned(),
            reason,
        })
    }
}

/// A Rust type a [`Value`] decodes into.
pub trait FromValue: Sized {
    /// Decodes `value`, or says why it cannot.
    ///
    /// # Errors
    /// A sentence describing the mismatch.
    fn from_value(value: &Value) -> Result<Self, String>;
}

fn mismatch(expected: &str, found: &Value) -> String {
    if *found == Value::Null {
        format!("NULL where {expected} is required")
    } else {
        format!("expected {expected}, found {}", found.type_name())
    }
}

impl FromValue for Value {
    fn from_value(value: &Value) -> Result<Self, String> {
        Ok(value.clone())
    }
}

impl FromValue for i64 {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Integer(integer) => Ok(*integer),
            other => Err(mismatch("an integer", other)),
        }
    }
}

impl FromValue for u32 {
    fn from_value(value: &Value) -> Result<Self, String> {
        let integer = i64::from_value(value)?;
        u32::try_from(integer).map_err(|_| format!("{integer} is outside 0 ..= {}", u32::MAX))
    }
}

impl FromValue for u64 {
    fn from_value(value: &Value) -> Result<Self, String> {
        let integer = i64::from_value(value)?;
        u64::try_from(integer).map_err(|_| format!("{integer} is negative"))
    }
}

impl FromValue for bool {
    fn from_value(value: &Value) -> Result<Self, String> {
        match i64::from_value(value)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(format!("{other} is not a boolean (0 or 1)")),
        }
    }
}

impl FromValue for f64 {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Real(real) => Ok(*real),
            #[allow(clippy::cast_precision_loss)]
            Value::Integer(integer) => Ok(*integer as f64),
            other => Err(mismatch("a number", other)),
        }
    }
}

impl FromValue for String {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Text(text) => Ok(text.clone()),
            other => Err(mismatch("text", other)),
        }
    }
}

impl FromValue for Vec<u8> {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Blob(bytes) => Ok(bytes.clone()),
            other => Err(mismatch("a blob", other)),
        }
    }
}

impl FromValue for Timestamp {
    fn from_value(value: &Value) -> Result<Self, String> {
        let millis = i64::from_value(value)?;
        Timestamp::from_unix_millis(millis).map_err(|_| {
            format!(
                "{millis} ms is outside 0 ..= {} ms",
                Timestamp::MAX.as_unix_millis()
            )
        })
    }
}

impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: &Value) -> Result<Self, String> {
        match value {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Rows {
        Rows::new(
            vec!["id".into(), "n".into(), "note".into()],
            vec![vec![
                Value::Text("a".into()),
                Value::Integer(-1),
                Value::Null,
            ]],
        )
        .unwrap()
    }

    #[test]
    fn typed_access_decodes_matching_values() {
        let rows = rows();
        let row = rows.first().unwrap();
        assert_eq!(row.get::<String>("id").unwrap(), "a");
        assert_eq!(row.get::<i64>("n").unwrap(), -1);
        assert_eq!(row.get::<Option<String>>("note").unwrap(), None);
    }

    #[test]
    fn typed_access_reports_missing_columns_nulls_and_wrong_types() {
        let rows = rows();
        let row = rows.first().unwrap();
        let errors = [
            row.get::<String>("absent").unwrap_err(),
            row.get::<String>("note").unwrap_err(),
            row.get::<i64>("id").unwrap_err(),
            row.get::<u32>("n").unwrap_err(),
        ];
        let reasons: Vec<String> = errors
            .iter()
            .map(|error| match error {
                Error::MalformedRow { reason, .. } => reason.clone(),
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            reasons,
            [
                "no such column in the result",
                "NULL where text is required",
                "expected an integer, found text",
                "-1 is outside 0 ..= 4294967295",
            ]
        );
    }

    #[test]
    fn rows_reject_ragged_input() {
        assert!(Rows::new(vec!["a".into()], vec![vec![]]).is_err());
    }
}
