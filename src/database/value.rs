//! Values bound to statements and read from rows: SQLite's five storage
//! classes, which D1 shares.

use crate::error::{Error, Result};
use crate::time::Timestamp;

/// One SQL value.
///
/// Booleans are stored as `Integer` 0 or 1, as SQLite and D1 store them.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL `NULL`.
    Null,
    /// A 64-bit signed integer.
    Integer(i64),
    /// A finite 64-bit float.
    Real(f64),
    /// UTF-8 text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

impl Value {
    /// The storage class's name, as SQLite's `typeof()` spells it.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Null => "null",
            Value::Integer(_) => "integer",
            Value::Real(_) => "real",
            Value::Text(_) => "text",
            Value::Blob(_) => "blob",
        }
    }

    /// Rejects values no database here stores faithfully: SQLite turns NaN
    /// into NULL, and infinities do not survive JSON on their way to D1.
    pub(crate) fn check_storable(&self) -> Result<()> {
        match self {
            Value::Real(real) if !real.is_finite() => Err(Error::invalid(
                "value",
                format!("{real} is not a finite number"),
            )),
            _ => Ok(()),
        }
    }
}

impl From<i64> for Value {
    fn from(value: i64) -> Self {
        Value::Integer(value)
    }
}

impl From<u32> for Value {
    fn from(value: u32) -> Self {
        Value::Integer(i64::from(value))
    }
}

impl From<bool> for Value {
    fn from(value: bool) -> Self {
        Value::Integer(i64::from(value))
    }
}

impl From<f64> for Value {
    fn from(value: f64) -> Self {
        Value::Real(value)
    }
}

impl From<&str> for Value {
    fn from(value: &str) -> Self {
        Value::Text(value.to_owned())
    }
}

impl From<String> for Value {
    fn from(value: String) -> Self {
        Value::Text(value)
    }
}

impl From<Vec<u8>> for Value {
    fn from(value: Vec<u8>) -> Self {
        Value::Blob(value)
    }
}

impl From<Timestamp> for Value {
    fn from(value: Timestamp) -> Self {
        Value::Integer(value.as_unix_millis())
    }
}

impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(value: Option<T>) -> Self {
        value.map_or(Value::Null, Into::into)
    }
}

/// Converts a sea-query value into one of SQLite's storage classes.
///
/// # Errors
/// [`Error::InvalidInput`] for values SQLite cannot hold exactly: unsigned
/// integers above `i64::MAX`, and types sea-query supports but SQLite lacks.
pub(crate) fn from_sea_query(value: sea_query::Value) -> Result<Value> {
    use sea_query::Value as Sea;
    #[allow(unreachable_patterns)]
    let converted = match value {
        Sea::Bool(v) => v.into(),
        Sea::TinyInt(v) => v.map(i64::from).into(),
        Sea::SmallInt(v) => v.map(i64::from).into(),
        Sea::Int(v) => v.map(i64::from).into(),
        Sea::BigInt(v) => v.into(),
        Sea::TinyUnsigned(v) => v.map(i64::from).into(),
        Sea::SmallUnsigned(v) => v.map(i64::from).into(),
        Sea::Unsigned(v) => v.map(i64::from).into(),
        Sea::BigUnsigned(None) => Value::Null,
        Sea::BigUnsigned(Some(v)) => Value::Integer(i64::try_from(v).map_err(|_| {
            Error::invalid("value", format!("{v} does not fit a signed 64-bit integer"))
        })?),
        Sea::Float(v) => v.map(f64::from).into(),
        Sea::Double(v) => v.into(),
        Sea::String(v) => v.into(),
        Sea::Char(v) => v.map(String::from).into(),
        Sea::Bytes(v) => v.into(),
        Sea::Enum(sea_query::OptionEnum::Some(e)) => Value::Text(e.value.into_owned()),
        Sea::Enum(sea_query::OptionEnum::None(_)) => Value::Null,
        other => {
            return Err(Error::invalid(
                "value",
                format!("{other:?} has no SQLite storage class"),
            ));
        }
    };
    converted.check_storable()?;
    Ok(converted)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sea_query_values_map_to_storage_classes() {
        use sea_query::Value as Sea;
        assert_eq!(
            from_sea_query(Sea::Bool(Some(true))).unwrap(),
            Value::Integer(1)
        );
        assert_eq!(from_sea_query(Sea::Int(None)).unwrap(), Value::Null);
        assert_eq!(
            from_sea_query(Sea::String(Some("x".into()))).unwrap(),
            Value::Text("x".into())
        );
        assert_eq!(
            from_sea_query(Sea::Bytes(Some(vec![1, 2]))).unwrap(),
            Value::Blob(vec![1, 2])
        );
        assert!(from_sea_query(Sea::BigUnsigned(Some(u64::MAX))).is_err());
        assert!(from_sea_query(Sea::Double(Some(f64::NAN))).is_err());
    }
}
