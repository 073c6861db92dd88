//! Values between Rust and the JavaScript SQL APIs of Workers (D1, and a
//! Durable Object's SQL storage).
//!
//! Both pass every number as a JavaScript double, so integers are exact only
//! within ±2^53. Outside that range a value is refused both ways: rounding
//! an id or a time silently is worse than failing.

use js_sys::{Array, ArrayBuffer, Uint8Array};
use wasm_bindgen::{JsCast, JsValue};

use crate::database::d1::classify::classify_message;
use crate::database::value::Value;
use crate::error::{Error, Result};

/// The largest integer a double holds exactly: 2^53 - 1.
pub(crate) const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// A value to bind to a statement.
///
/// # Errors
/// [`Error::InvalidInput`] for integers beyond ±(2^53 - 1) and non-finite
/// reals.
pub(crate) fn to_js(value: &Value) -> Result<JsValue> {
    value.check_storable()?;
    Ok(match value {
        Value::Null => JsValue::NULL,
        Value::Integer(integer) => {
            if integer.unsigned_abs() > MAX_SAFE_INTEGER.unsigned_abs() {
                return Err(Error::invalid(
                    "value",
                    format!("{integer} is beyond ±2^53; a JavaScript number would round it"),
                ));
            }
            #[allow(clippy::cast_precision_loss)]
            JsValue::from_f64(*integer as f64)
        }
        Value::Real(real) => JsValue::from_f64(*real),
        Value::Text(text) => JsValue::from_str(text),
        Value::Blob(bytes) => Uint8Array::from(bytes.as_slice()).buffer().into(),
    })
}

/// A value read from a result row.
///
/// Integral numbers within ±2^53 read as `Integer`, other finite numbers as
/// `Real` (the API does not say which column type a number came from); blobs
/// arrive as arrays of bytes or array buffers.
///
/// # Errors
/// A sentence describing a value that cannot be read exactly.
pub(crate) fn from_js(value: &JsValue) -> Result<Value, String> {
    if value.is_null() || value.is_undefined() {
        return Ok(Value::Null);
    }
    if let Some(number) = value.as_f64() {
        return number_value(number);
    }
    if let Some(text) = value.as_string() {
        return Ok(Value::Text(text));
    }
    if let Some(flag) = value.as_bool() {
        return Ok(Value::Integer(i64::from(flag)));
    }
    if let Some(buffer) = value.dyn_ref::<ArrayBuffer>() {
        return Ok(Value::Blob(Uint8Array::new(buffer).to_vec()));
    }
    if let Some(bytes) = value.dyn_ref::<Uint8Array>() {
        return Ok(Value::Blob(bytes.to_vec()));
    }
    if let Some(array) = value.dyn_ref::<Array>() {
        return array
            .iter()
            .map(|byte| match byte.as_f64() {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                Some(n) if n.fract() == 0.0 && (0.0..=255.0).contains(&n) => Ok(n as u8),
                _ => Err(format!("blob element {byte:?} is not a byte")),
            })
            .collect::<Result<Vec<u8>, String>>()
            .map(Value::Blob);
    }
    Err(format!("unsupported JavaScript value {value:?}"))
}

fn number_value(number: f64) -> Result<Value, String> {
    if !number.is_finite() {
        return Err(format!("{number} is not a finite number"));
    }
    if number.fract() != 0.0 {
        return Ok(Value::Real(number));
    }
    #[allow(clippy::cast_precision_loss)]
    let limit = MAX_SAFE_INTEGER as f64;
    if number.abs() > limit {
        return Err(format!(
            "{number} is beyond ±2^53 and may have been rounded"
        ));
    }
    #[allow(clippy::cast_possible_truncation)]
    Ok(Value::Integer(number as i64))
}

/// A result cell of `column`, as [`from_js`] reads it, or a
/// [`Error::MalformedRow`] naming the column.
pub(crate) fn cell(value: &JsValue, column: &str) -> Result<Value> {
    from_js(value).map_err(|reason| Error::MalformedRow {
        table: None,
        row: None,
        column: column.to_owned(),
        reason,
    })
}

/// A JavaScript exception from D1 or SQL storage, classified by its
/// message (and its cause's).
pub(crate) fn js_error(error: JsValue) -> Error {
    let message = error
        .dyn_ref::<js_sys::Error>()
        .map(|error| {
            let mut message = String::from(error.message());
            if let Some(cause) = error.cause().dyn_ref::<js_sys::Error>() {
                message.push_str(": ");
                message.push_str(&String::from(cause.message()));
            }
            message
        })
        .or_else(|| error.as_string())
        .unwrap_or_else(|| format!("{error:?}"));
    classify_message(&message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    #[wasm_bindgen_test]
    fn every_value_type_round_trips_through_javascript() {
        let values = [
            Value::Null,
            Value::Integer(0),
            Value::Integer(MAX_SAFE_INTEGER),
            Value::Integer(-MAX_SAFE_INTEGER),
            Value::Real(-2.5),
            Value::Text("ünï ' \" 🦀".into()),
            Value::Blob(vec![0, 7, 255]),
            Value::from(true),
        ];
        for value in values {
            let js = to_js(&value).unwrap();
            assert_eq!(from_js(&js).unwrap(), value);
        }
    }

    #[wasm_bindgen_test]
    fn integers_beyond_2_pow_53_are_refused_both_ways() {
        for integer in [
            MAX_SAFE_INTEGER + 1,
            -MAX_SAFE_INTEGER - 1,
            i64::MAX,
            i64::MIN,
        ] {
            assert!(matches!(
                to_js(&Value::Integer(integer)),
                Err(Error::InvalidInput { what: "value", .. })
            ));
        }
        assert!(from_js(&JsValue::from_f64(9_007_199_254_740_993.0)).is_err());
        assert!(to_js(&Value::Real(f64::NAN)).is_err());
    }

    #[wasm_bindgen_test]
    fn blobs_arrive_as_arrays_or_buffers() {
        let array: Array = [1u8, 2, 3].iter().map(|b| JsValue::from(*b)).collect();
        assert_eq!(from_js(&array.into()).unwrap(), Value::Blob(vec![1, 2, 3]));
        let bad: Array = [JsValue::from(300)].into_iter().collect();
        assert!(from_js(&bad.into()).is_err());
        assert_eq!(
            from_js(&JsValue::from_bool(false)).unwrap(),
            Value::Integer(0)
        );
        assert!(from_js(&js_sys::Object::new().into()).is_err());
    }
}
