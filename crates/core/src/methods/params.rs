//! A method's parameters as settings reach them: a value typed where it comes typed and text
//! where text comes in ([`ParamValue`]), set on a method's serde `Params` as the field's own type
//! ([`set_field`]), and the ranges of the parameters several methods share ([`out_of_range`]).

use crate::error::{Error, Result};
use serde::{de::DeserializeOwned, Serialize};

/// A setting's value: typed where it comes typed (a flag, a TOML number), text where text comes
/// in (`--set`, Python's `params`), parsed then as the parameter's own type.
#[derive(Clone, Debug, PartialEq)]
pub enum ParamValue {
    Number(f64),
    Integer(u64),
    Bool(bool),
    Text(String),
}

impl std::fmt::Display for ParamValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParamValue::Number(x) => write!(f, "{x}"),
            ParamValue::Integer(i) => write!(f, "{i}"),
            ParamValue::Bool(b) => write!(f, "{b}"),
            ParamValue::Text(t) => f.write_str(t),
        }
    }
}

impl ParamValue {
    /// The number it is or says, if any.
    pub(crate) fn number(&self) -> Option<f64> {
        match self {
            ParamValue::Number(x) => Some(*x),
            ParamValue::Integer(i) => Some(*i as f64),
            ParamValue::Bool(_) => None,
            ParamValue::Text(t) => t.trim().parse().ok(),
        }
    }
}

/// A parameter's valid values: (test, the range as text).
pub(crate) type Range = (fn(f64) -> bool, &'static str);

/// The range of a parameter that several methods share, checked by name. Other parameters are
/// checked by their method's `Params::check`.
pub(crate) fn shared_range(param: &str) -> Option<Range> {
    match param {
        "gamma" => Some((|x| (0.0..=1.0).contains(&x), "[0, 1]")),
        "tau" => Some((|x| x > 0.0, "(0, ∞)")),
        "omega" | "eps" => Some((|x| x >= 0.0, "[0, ∞)")),
        "similarity" => Some((|x| x > 0.0 && x < 1.0, "(0, 1)")),
        _ => None,
    }
}

/// The message for a value outside its parameter's range (NaN and infinities included), naming
/// the key as the user wrote it (`gamma`, `gigpo.gamma`); `None` when the value is in range or
/// the parameter has no shared range.
pub(crate) fn out_of_range(written: &str, param: &str, x: f64) -> Option<String> {
    let (ok, range) = shared_range(param)?;
    (!(x.is_finite() && ok(x))).then(|| format!("`{written}` = {x} is out of range {range}"))
}

/// Sets one field of a serde-serialisable parameter struct from text, typed by its current value.
pub(super) fn set_field<P: Serialize + DeserializeOwned>(
    params: &mut P,
    label: &str,
    key: &str,
    value: &ParamValue,
) -> Result<()> {
    use serde_json::Value;
    let mut json = serde_json::to_value(&*params).map_err(|e| Error::Param(e.to_string()))?;
    let Some(map) = json.as_object_mut() else {
        unreachable!("params serialise to objects")
    };
    let Some(current) = map.get(key) else {
        let keys: Vec<&str> = map.keys().map(String::as_str).collect();
        let hint =
            crate::sequence_matcher::did_you_mean(key, keys.iter().copied(), &format!("{label}."));
        return Err(Error::Param(format!(
            "unknown parameter `{label}.{key}` (known: {}){hint}",
            keys.join(", ")
        )));
    };
    let bad = |what: &str| Error::Param(format!("`{label}.{key}={value}`: expected {what}"));
    let finite = |x: f64| {
        if x.is_finite() {
            Ok(Value::from(x))
        } else {
            Err(bad("a finite number"))
        }
    };
    // A typed value is taken as it is; text is parsed as the parameter's own type.
    let parsed = match (current, value) {
        (Value::Number(n), ParamValue::Integer(i)) if n.is_u64() => Value::from(*i),
        (Value::Number(n), ParamValue::Text(t)) if n.is_u64() => Value::from(
            t.parse::<u64>()
                .map_err(|_| bad("a non-negative integer"))?,
        ),
        (Value::Number(n), _) if n.is_u64() => return Err(bad("a non-negative integer")),
        // An unset optional number (`gigpo.similarity`) too: NaN would be stored as unset.
        (Value::Number(_) | Value::Null, ParamValue::Number(x)) => finite(*x)?,
        (Value::Number(_) | Value::Null, ParamValue::Integer(i)) => Value::from(*i as f64),
        (Value::Number(_), ParamValue::Text(t)) => finite(t.parse().map_err(|_| bad("a number"))?)?,
        (Value::Null, ParamValue::Text(t)) => match t.parse::<f64>() {
            Ok(x) => finite(x)?,
            Err(_) => Value::from(t.as_str()),
        },
        (Value::Bool(_), ParamValue::Bool(b)) => Value::from(*b),
        (Value::Bool(_), ParamValue::Text(t)) => {
            Value::from(t.parse::<bool>().map_err(|_| bad("true or false"))?)
        }
        (Value::Number(_) | Value::Bool(_), _) => {
            return Err(bad(if current.is_boolean() {
                "true or false"
            } else {
                "a number"
            }))
        }
        (_, ParamValue::Text(t)) => Value::from(t.as_str()),
        (_, other) => Value::from(other.to_string()),
    };
    map.insert(key.to_string(), parsed);
    *params = serde_json::from_value(json)
        .map_err(|e| Error::Param(format!("`{label}.{key}={value}`: {e}")))?;
    Ok(())
}
