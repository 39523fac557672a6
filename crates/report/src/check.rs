//! CI gates: rules over `summary.json` keys from a `thresholds.toml`, each a dotted key and a
//! bound; the report marks which fail and the binary exits 1 when any does.
//!
//! ```toml
//! [[rule]]
//! key = "headline.singleton_step_share"   # a dotted path into summary.json (array indices allowed)
//! max = 0.4
//!
//! [[rule]]
//! name = "MGR never rewards an invalid action"
//! key = "headline.invalid_positive_share.mgr"
//! max = 0.0
//! ```

use crate::Error;
use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    rule: Vec<Rule>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub key: String,
    pub name: Option<String>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RuleResult {
    pub name: String,
    pub key: String,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub value: f64,
    /// The same key in `--baseline`'s summary, if given and present.
    pub baseline: Option<f64>,
    pub passed: bool,
}

impl RuleResult {
    /// The bound as people read it: `≤ 0.4`, `≥ 1`, `0 ≤ x ≤ 1`.
    pub fn bound(&self) -> String {
        match (self.min, self.max) {
            (Some(a), Some(b)) => format!("{a} ≤ x ≤ {b}"),
            (Some(a), None) => format!("≥ {a}"),
            (None, Some(b)) => format!("≤ {b}"),
            (None, None) => String::new(),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Outcome {
    pub passed: bool,
    pub rules: Vec<RuleResult>,
}

/// The value at a dotted path (`a.b.0.c`) of a JSON document.
pub fn lookup<'a>(doc: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    key.split('.').try_fold(doc, |v, part| match v {
        serde_json::Value::Object(m) => m.get(part),
        serde_json::Value::Array(a) => part.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

pub fn parse(text: &str, source: &str) -> Result<Vec<Rule>, Error> {
    let file: File = toml::from_str(text).map_err(|e| Error::Check(format!("{source}: {e}")))?;
    for rule in &file.rule {
        if rule.min.is_none() && rule.max.is_none() {
            return Err(Error::Check(format!(
                "{source}: rule `{}` needs `min`, `max` or both",
                rule.key
            )));
        }
    }
    Ok(file.rule)
}

/// Applies `rules` to `summary`; a key that is missing or not a number is an error naming it.
pub fn evaluate(
    rules: &[Rule],
    summary: &serde_json::Value,
    baseline: Option<&serde_json::Value>,
) -> Result<Outcome, Error> {
    let mut results = Vec::new();
    for rule in rules {
        let value = lookup(summary, &rule.key)
            .and_then(|v| v.as_f64())
            .ok_or_else(|| {
                let top: Vec<String> = lookup(summary, "headline")
                    .and_then(|h| h.as_object())
                    .map(|m| m.keys().cloned().collect())
                    .unwrap_or_default();
                Error::Check(format!(
                    "threshold key `{}` is not a number in summary.json (headline keys: {})",
                    rule.key,
                    top.join(", ")
                ))
            })?;
        let passed = rule.min.is_none_or(|m| value >= m) && rule.max.is_none_or(|m| value <= m);
        results.push(RuleResult {
            name: rule.name.clone().unwrap_or_else(|| rule.key.clone()),
            key: rule.key.clone(),
            min: rule.min,
            max: rule.max,
            value,
            baseline: baseline
                .and_then(|b| lookup(b, &rule.key))
                .and_then(|v| v.as_f64()),
            passed,
        });
    }
    Ok(Outcome {
        passed: results.iter().all(|r| r.passed),
        rules: results,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_pass_and_fail() {
        let summary =
            serde_json::json!({"headline": {"a": 0.3, "m": {"mgr": 0.0}}, "list": [1.0, 5.0]});
        let rules = parse("[[rule]]\nkey = \"headline.a\"\nmax = 0.4\n[[rule]]\nkey = \"list.1\"\nmin = 6\n[[rule]]\nkey = \"headline.m.mgr\"\nmax = 0\n", "t.toml").unwrap();
        let out = evaluate(&rules, &summary, None).unwrap();
        assert_eq!(
            out.rules.iter().map(|r| r.passed).collect::<Vec<_>>(),
            vec![true, false, true]
        );
        assert!(!out.passed);
        let missing = parse("[[rule]]\nkey = \"headline.nope\"\nmax = 1\n", "t.toml").unwrap();
        assert!(evaluate(&missing, &summary, None)
            .unwrap_err()
            .to_string()
            .contains("headline.nope"));
        assert!(parse("[[rule]]\nkey = \"x\"\n", "t.toml").is_err());
    }
}
