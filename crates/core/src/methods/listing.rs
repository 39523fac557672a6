//! What `credit methods` lists: every method `--methods` takes ([`super::known`]), and each of its
//! settings with its `--set` name, its default under each preset, its type and allowed values,
//! and what it means. Types and defaults come from the methods' own `Params` at each preset,
//! the meanings from the doc comments beside their fields and each module's first sentence (read
//! at build time, `build.rs`): nothing here is a second list of the methods or their settings.

use super::{params::shared_range, Method, METHODS};
use crate::error::Result;
use crate::profile::Profile;
use serde::Serialize;
use serde_json::Value;

include!(concat!(env!("OUT_DIR"), "/method_docs.rs"));

/// One method, as `credit methods` lists it.
#[derive(Clone, Debug, Serialize)]
pub struct MethodInfo {
    pub name: &'static str,
    /// Other names `--methods` takes for it.
    pub aliases: Vec<&'static str>,
    /// What it is: the first sentence of its module's documentation.
    pub meaning: String,
    /// How it is run: `all` (by `--methods all`), `named` (only when named) or `verl` (by
    /// `--methods verl`, verl's registry).
    pub runs: &'static str,
    /// Why it has no settings, when it has none.
    pub without_params: Option<&'static str>,
    pub settings: Vec<SettingInfo>,
}

/// One setting of a method.
#[derive(Clone, Debug, Serialize)]
pub struct SettingInfo {
    /// Its `--set` name: `gigpo.omega`.
    pub key: String,
    /// `number`, `integer`, `true/false`, `choice`, `text`, or `number or unset` (an optional
    /// number whose default is unset).
    pub kind: &'static str,
    /// Its default under `--preset paper` and `--preset verl`.
    pub paper: Value,
    pub verl: Value,
    /// The values a `choice` takes.
    pub values: Vec<String>,
    /// The range a number must lie in, where credit checks one by name.
    pub range: Option<&'static str>,
    /// The first sentence of the field's doc comment (empty where it has none).
    pub meaning: String,
}

/// Every method, or the one named `name` (an unknown name is the error `--methods` gives, with
/// its closest name).
pub fn listing(name: Option<&str>) -> Result<Vec<MethodInfo>> {
    let mut names: Vec<&'static str> = super::known().collect();
    if let Some(name) = name {
        let label = Method::preset(name, Profile::Paper)?.label();
        names.retain(|n| *n == label);
    }
    names.into_iter().map(method).collect()
}

fn method(name: &'static str) -> Result<MethodInfo> {
    let paper = Method::preset(name, Profile::Paper)?;
    let verl = Method::preset(name, Profile::Verl)?;
    let entry = METHODS.iter().find(|m| m.name == name);
    let doc = |module: &str| MODULE_DOCS.iter().find(|(m, _)| *m == module).map(|d| d.1);
    let meaning = doc(name)
        .or_else(|| doc(paper.module()))
        .unwrap_or_default();
    let field_docs = PARAM_DOCS
        .iter()
        .find(|(m, _)| *m == paper.module())
        .map_or(&[][..], |d| d.1);
    let (paper_json, verl_json) = (paper.params_json(), verl.params_json());
    let mut settings = Vec::new();
    if let Some(fields) = paper_json.as_object() {
        for (key, default) in fields {
            let (kind, values) = kind(&paper, key, default);
            settings.push(SettingInfo {
                key: format!("{name}.{key}"),
                kind,
                paper: default.clone(),
                verl: verl_json.get(key).cloned().unwrap_or(Value::Null),
                values,
                range: shared_range(key).map(|(_, range)| range),
                meaning: field_docs
                    .iter()
                    .find(|(field, _)| field == key)
                    .map_or(String::new(), |d| d.1.to_string()),
            });
        }
    }
    Ok(MethodInfo {
        name,
        aliases: entry.map_or(Vec::new(), |e| e.aliases.to_vec()),
        meaning: meaning.to_string(),
        runs: match entry {
            Some(e) if e.in_all => "all",
            Some(_) => "named",
            None => "verl",
        },
        without_params: paper.without_params,
        settings,
    })
}

/// A setting's type from its default, and a choice's values from what the parameter's own
/// type answers to a value it does not take (serde's "expected one of `a`, `b`"), less the
/// aliases it also takes (`mean_std_norm` for `mean_std`: set, it reads back as another value).
fn kind(method: &Method, key: &str, default: &Value) -> (&'static str, Vec<String>) {
    match default {
        Value::Bool(_) => ("true/false", Vec::new()),
        Value::Number(n) if n.is_u64() => ("integer", Vec::new()),
        Value::Number(_) => ("number", Vec::new()),
        Value::Null => ("number or unset", Vec::new()),
        _ => match method.probe(key, "\u{0}") {
            Err(e) => {
                let message = e.to_string();
                let expected = message.split("expected").nth(1).unwrap_or_default();
                let values: Vec<String> = expected
                    .split('`')
                    .skip(1)
                    .step_by(2)
                    .filter(|v| method.probe(key, v).is_ok_and(|set| set == *v))
                    .map(str::to_string)
                    .collect();
                if values.is_empty() {
                    ("text", values)
                } else {
                    ("choice", values)
                }
            }
            Ok(_) => ("text", Vec::new()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_is_listed_with_its_settings_defaults_and_meanings() {
        let all = listing(None).unwrap();
        let names: Vec<&str> = all.iter().map(|m| m.name).collect();
        assert_eq!(names, super::super::known().collect::<Vec<_>>());
        let gigpo = listing(Some("gigpo")).unwrap();
        assert_eq!(gigpo.len(), 1);
        let gigpo = &gigpo[0];
        assert!(
            gigpo
                .meaning
                .starts_with("GiGPO: episode- plus step-level group advantage (Feng et al. 2025"),
            "{}",
            gigpo.meaning
        );
        assert_eq!(gigpo.runs, "all");
        let setting = |key: &str| gigpo.settings.iter().find(|s| s.key == key).unwrap();
        let omega = setting("gigpo.omega");
        assert_eq!((omega.kind, omega.range), ("number", Some("[0, ∞)")));
        assert_eq!(
            (&omega.paper, &omega.verl),
            (&Value::from(1.0), &Value::from(1.0))
        );
        assert_eq!(
            omega.meaning,
            "ω, the weight of the step term (`step_advantage_w`)"
        );
        let mode = setting("gigpo.mode");
        assert_eq!(
            (mode.kind, mode.values.as_slice()),
            ("choice", &["mean_std".to_string(), "mean".to_string()][..])
        );
        let stats = setting("gigpo.stats_over");
        assert_eq!(
            (&stats.paper, &stats.verl),
            (&Value::from("trajectories"), &Value::from("rows"))
        );
        assert_eq!(setting("gigpo.similarity").kind, "number or unset");
        assert_eq!(setting("gigpo.invalid_penalty").verl, Value::from(0.1));
        // An alias names the method; a method without settings says why.
        assert_eq!(listing(Some("dr_grpo")).unwrap()[0].name, "drgrpo");
        let logged = &listing(Some("logged")).unwrap()[0];
        assert!(logged.settings.is_empty() && logged.without_params.is_some());
        assert_eq!(listing(Some("gae")).unwrap()[0].runs, "verl");
        let unknown = listing(Some("gipgo")).unwrap_err().to_string();
        assert!(unknown.ends_with("did you mean `gigpo`?"), "{unknown}");
    }
}
