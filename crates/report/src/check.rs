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
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    rule: Vec<Spanned<RawRule>>,
}

/// A rule as written, with where each part is, for messages about it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    key: String,
    name: Option<String>,
    min: Option<Spanned<f64>>,
    max: Option<Spanned<f64>>,
}

#[derive(Clone, Debug, Deserialize)]
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
    /// NaN (null in JSON) for a figure these logs do not have.
    pub value: f64,
    /// The same key in `--baseline`'s summary, if given and present.
    pub baseline: Option<f64>,
    /// Whether the value lies within the bound; `None` (null in JSON) when the figure does not
    /// apply to these logs: the rule neither passes nor fails.
    pub passed: Option<bool>,
    /// Why the figure does not apply (`headline.not_applicable` in summary.json).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_applicable: Option<String>,
}

/// A rule's outcome, or all the rules': worded here once for every output (the report's
/// formats, `credit report`'s terminal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail,
    /// The figure does not apply to these logs: neither passed nor failed.
    NotApplicable,
}

impl Verdict {
    /// A rule's outcome in a word.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::NotApplicable => "not applicable",
        }
    }
}

impl RuleResult {
    pub fn verdict(&self) -> Verdict {
        match self.passed {
            Some(true) => Verdict::Pass,
            Some(false) => Verdict::Fail,
            None => Verdict::NotApplicable,
        }
    }

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

impl Outcome {
    /// All the rules' outcome, and in words: `all checks passed` or `checks failed`.
    pub fn verdict(&self) -> (Verdict, &'static str) {
        if self.passed {
            (Verdict::Pass, "all checks passed")
        } else {
            (Verdict::Fail, "checks failed")
        }
    }

    /// `(3 not applicable)` after a verdict, when some rules did not apply.
    pub fn not_applicable_note(&self) -> String {
        match self.rules.iter().filter(|r| r.passed.is_none()).count() {
            0 => String::new(),
            n => format!(" ({n} not applicable)"),
        }
    }
}

/// The value at a dotted path (`a.b.0.c`) of a JSON document.
pub fn lookup<'a>(doc: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    key.split('.').try_fold(doc, |v, part| match v {
        serde_json::Value::Object(m) => m.get(part),
        serde_json::Value::Array(a) => part.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

/// The rules of a thresholds file (`source` names it in messages). A rule without a bound, with
/// a bound that is not a finite number (`max = nan` would fail every run, `max = inf` none) or
/// with `min` above `max` is refused, naming the file, line and column, the rule and the bound.
pub fn parse(text: &str, source: &str) -> Result<Vec<Rule>, Error> {
    let file: File = toml::from_str(text).map_err(|e| Error::Check(format!("{source}: {e}")))?;
    let at = |offset: usize| {
        let before = &text[..offset.min(text.len())];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        format!("{source}:{line}:{column}")
    };
    let mut rules = Vec::with_capacity(file.rule.len());
    for spanned in file.rule {
        let offset = spanned.span().start;
        let raw = spanned.into_inner();
        let label = match &raw.name {
            Some(name) => format!("rule `{name}` (key `{}`)", raw.key),
            None => format!("rule `{}`", raw.key),
        };
        if raw.min.is_none() && raw.max.is_none() {
            return Err(Error::Check(format!(
                "{}: {label} needs `min`, `max` or both",
                at(offset)
            )));
        }
        for (bound, value) in [("min", &raw.min), ("max", &raw.max)] {
            if let Some(v) = value.as_ref().filter(|v| !v.get_ref().is_finite()) {
                return Err(Error::Check(format!(
                    "{}: {label}: `{bound} = {}` must be a finite number",
                    at(v.span().start),
                    v.get_ref()
                )));
            }
        }
        if let (Some(min), Some(max)) = (&raw.min, &raw.max) {
            if min.get_ref() > max.get_ref() {
                return Err(Error::Check(format!(
                    "{}: {label}: `min = {}` is above `max = {}`, so no value could pass",
                    at(min.span().start),
                    min.get_ref(),
                    max.get_ref()
                )));
            }
        }
        rules.push(Rule {
            key: raw.key,
            name: raw.name,
            min: raw.min.map(Spanned::into_inner),
            max: raw.max.map(Spanned::into_inner),
        });
    }
    Ok(rules)
}

/// Applies `rules` to `summary`; a key that is missing or not a number is an error naming it. A
/// key listed in the summary's `headline.not_applicable` (a figure these logs do not have, such
/// as step groups in single-turn logs) gives neither a pass nor a failure.
pub fn evaluate(
    rules: &[Rule],
    summary: &serde_json::Value,
    baseline: Option<&serde_json::Value>,
) -> Result<Outcome, Error> {
    let mut results = Vec::new();
    for rule in rules {
        let not_applicable = lookup(summary, "headline.not_applicable")
            .and_then(|n| crate::Headline::why_not_applicable(n, &rule.key))
            .map(str::to_string);
        // A figure that does not apply is left out of the headline: no value (null), no verdict.
        let value = lookup(summary, &rule.key)
            .and_then(|v| v.as_f64())
            .or(not_applicable.as_ref().map(|_| f64::NAN))
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
        let within = rule.min.is_none_or(|m| value >= m) && rule.max.is_none_or(|m| value <= m);
        let passed = not_applicable.is_none().then_some(within);
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
            not_applicable,
        });
    }
    Ok(Outcome {
        passed: results.iter().all(|r| r.passed != Some(false)),
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
            vec![Some(true), Some(false), Some(true)]
        );
        assert!(!out.passed);
        // A figure the logs do not have: the failing value decides nothing.
        let mut single_turn = summary.clone();
        single_turn["headline"]["not_applicable"] =
            serde_json::json!({"list.1": "no such figure in these logs"});
        let out = evaluate(&rules, &single_turn, None).unwrap();
        assert_eq!(out.rules[1].passed, None);
        assert_eq!(out.rules[1].verdict().word(), "not applicable");
        assert_eq!(out.verdict(), (Verdict::Pass, "all checks passed"));
        assert!(out.passed);
        assert_eq!(out.not_applicable_note(), " (1 not applicable)");
        let missing = parse("[[rule]]\nkey = \"headline.nope\"\nmax = 1\n", "t.toml").unwrap();
        assert!(evaluate(&missing, &summary, None)
            .unwrap_err()
            .to_string()
            .contains("headline.nope"));
        assert!(parse("[[rule]]\nkey = \"x\"\n", "t.toml").is_err());
    }

    #[test]
    fn bounds_that_no_value_could_meet_are_refused_where_they_are_written() {
        let err = |bounds: &str| {
            parse(&format!("[[rule]]\nkey = \"a.b\"\n{bounds}\n"), "t.toml")
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("max = nan"),
            "t.toml:3:7: rule `a.b`: `max = NaN` must be a finite number"
        );
        assert_eq!(
            err("min = -inf"),
            "t.toml:3:7: rule `a.b`: `min = -inf` must be a finite number"
        );
        assert_eq!(
            err("min = 2\nmax = 1"),
            "t.toml:3:7: rule `a.b`: `min = 2` is above `max = 1`, so no value could pass"
        );
        let named = parse(
            "[[rule]]\nname = \"share\"\nkey = \"a\"\nmax = inf\n",
            "t.toml",
        )
        .unwrap_err()
        .to_string();
        assert!(named.contains("rule `share` (key `a`)"), "{named}");
        assert!(parse("[[rule]]\nkey = \"a\"\nmin = 1\nmax = 1\n", "t.toml").is_ok());
    }
}
