//! The advantage estimators: one module per method, each a pure function from the batch to
//! columns (`advantages(&StepBatch, &Params) -> Result<Advantages>`), its presets (`Params::paper()`,
//! `Params::verl()`) beside the equations they set. [`Method`] is the closed set the CLI dispatches on.

pub mod empg;
mod exp;
pub mod gigpo;
pub mod graphgpo;
pub mod group_stats;
pub mod grpo;
pub mod hgpo;
pub mod hisr;
pub mod logged;
pub mod mgr;
pub mod oracle;
pub mod proxmo;
pub mod rloo;
pub mod sequence_matcher;
pub mod spa;
pub mod step_rl;
pub mod tfidf;
pub mod verl_batch;
pub mod verl_registry;

use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::plan::ParamValue;
use crate::profile::Profile;
use serde::{de::DeserializeOwned, Serialize};

/// One output column of a method.
#[derive(Clone, Debug)]
pub struct Output {
    pub name: String,
    pub values: Values,
}

#[derive(Clone, Debug)]
pub enum Values {
    F64(Vec<f64>),
    I64(Vec<i64>),
}

/// A method's result: `adv_<label>` first, then its parts (`<label>_<part>`), one value per row,
/// in batch order; `notes` says what the caller should know (e.g. no TF-IDF vocabulary).
#[derive(Clone, Debug)]
pub struct Advantages {
    pub columns: Vec<Output>,
    pub notes: Vec<String>,
}

impl Advantages {
    pub fn advantage(&self) -> &[f64] {
        match &self.columns[0].values {
            Values::F64(v) => v,
            Values::I64(_) => unreachable!("the advantage column is f64"),
        }
    }

    pub(crate) fn new(label: &str, advantage: Vec<f64>) -> Self {
        Advantages {
            columns: vec![Output {
                name: format!("adv_{label}"),
                values: Values::F64(advantage),
            }],
            notes: Vec::new(),
        }
    }

    pub(crate) fn part(mut self, label: &str, part: &str, values: Values) -> Self {
        self.columns.push(Output {
            name: format!("{label}_{part}"),
            values,
        });
        self
    }

    /// The column `name`, if this result has it (tests and analyses).
    pub fn column(&self, name: &str) -> Option<&Values> {
        self.columns
            .iter()
            .find(|c| c.name == name)
            .map(|c| &c.values)
    }
}

/// The agentic methods (and `logged`), in the order `--methods all` runs them (less
/// [`LOGGED_SIGNALS`]); verl's registry is [`VERL`] and [`verl_registry`].
pub const ALL: &[&str] = &[
    "logged", "grpo", "drgrpo", "rloo", "gigpo", "hgpo", "proxmo", "graphgpo", "mgr", "spa",
    "hisr", "empg", "oracle",
];

/// Methods that need signals beyond the rewards (`advantage`, `progress`, `segment_reward`,
/// `entropy`), and `oracle`, the reference the others are scored against (`--against`): `--methods
/// all` leaves them out, so that it runs on any logs; name them to run them. `all` takes `logged`
/// back where the logs carry the column ([`crate::plan::for_logs`]).
pub const LOGGED_SIGNALS: &[&str] = &["logged", "spa", "hisr", "empg", "oracle"];

/// verl's advantage registry (`algorithm.adv_estimator`) under its own names, in the order
/// `--methods verl` runs them: every entry computed from the rewards alone. `remax` and `gae` read
/// logged signals (`reward_baseline`, `value`) and run when named; `optimal_token_baseline` and
/// `tir_optimal_token_baseline` are refused ([`verl_registry::refusal`]).
pub const VERL: &[&str] = &[
    "grpo",
    "grpo_vectorized",
    "grpo_passk",
    "rloo",
    "rloo_vectorized",
    "opo",
    "gpg",
    "reinforce_plus_plus",
    "reinforce_plus_plus_baseline",
    "gdpo",
];

/// Every method name `--methods` and `--set` take: [`ALL`], then verl's registry.
pub fn known() -> impl Iterator<Item = &'static str> {
    ALL.iter()
        .copied()
        .chain(verl_registry::Estimator::ALL.iter().map(|e| e.name()))
}

fn known_list() -> String {
    known().collect::<Vec<_>>().join(", ")
}

/// A configured estimator.
#[derive(Clone, Debug)]
pub enum Method {
    Logged,
    Grpo {
        label: &'static str,
        params: grpo::Params,
    },
    Rloo(rloo::Params),
    Gigpo(gigpo::Params),
    Hgpo(hgpo::Params),
    Graphgpo(graphgpo::Params),
    Proxmo(proxmo::Params),
    Mgr(mgr::Params),
    Spa(spa::Params),
    Hisr(hisr::Params),
    Empg(empg::Params),
    Oracle(oracle::Params),
    /// An estimator of verl's registry (`verl_registry.rs`).
    Verl {
        estimator: verl_registry::Estimator,
        params: verl_registry::Params,
    },
}

impl Method {
    /// The method `name` with the preset of `profile`.
    pub fn preset(name: &str, profile: Profile) -> Result<Method> {
        Ok(match name {
            "logged" => Method::Logged,
            "grpo" => Method::Grpo {
                label: "grpo",
                params: grpo::Params::preset(profile),
            },
            "drgrpo" | "dr_grpo" | "dr-grpo" => Method::Grpo {
                label: "drgrpo",
                params: grpo::Params {
                    norm: group_stats::Norm::Mean,
                    ..grpo::Params::preset(profile)
                },
            },
            "rloo" => Method::Rloo(rloo::Params::preset(profile)),
            "gigpo" => Method::Gigpo(gigpo::Params::preset(profile)),
            "hgpo" => Method::Hgpo(hgpo::Params::preset(profile)),
            "empg" => Method::Empg(empg::Params::preset(profile)),
            "graphgpo" => Method::Graphgpo(graphgpo::Params::preset(profile)),
            "proxmo" => Method::Proxmo(proxmo::Params::preset(profile)),
            "mgr" => Method::Mgr(mgr::Params::preset(profile)),
            "spa" => Method::Spa(spa::Params::preset(profile)),
            "hisr" => Method::Hisr(hisr::Params::preset(profile)),
            "oracle" => Method::Oracle(oracle::Params::preset(profile)),
            other => {
                if let Some(estimator) = verl_registry::Estimator::from_name(other) {
                    return Ok(Method::Verl {
                        estimator,
                        params: verl_registry::Params::preset(estimator, profile),
                    });
                }
                return Err(Error::Param(verl_registry::refusal(other).unwrap_or_else(
                    || {
                        format!(
                            "unknown method `{other}` (expected one of {}, `all` or `verl`)",
                            known_list()
                        )
                    },
                )));
            }
        })
    }

    /// The name used in column names (`adv_<label>`) and in `--set <label>.param=value`.
    pub fn label(&self) -> &'static str {
        match self {
            Method::Logged => "logged",
            Method::Grpo { label, .. } => label,
            Method::Rloo(_) => "rloo",
            Method::Gigpo(_) => "gigpo",
            Method::Hgpo(_) => "hgpo",
            Method::Empg(_) => "empg",
            Method::Graphgpo(_) => "graphgpo",
            Method::Proxmo(_) => "proxmo",
            Method::Mgr(_) => "mgr",
            Method::Spa(_) => "spa",
            Method::Hisr(_) => "hisr",
            Method::Oracle(_) => "oracle",
            Method::Verl { estimator, .. } => estimator.name(),
        }
    }

    /// Sets one parameter (`--gamma 0.9` typed, `--set gigpo.omega=0.5` as text).
    pub fn set(&mut self, key: &str, value: &ParamValue) -> Result<()> {
        let label = self.label();
        match self {
            Method::Logged => Err(Error::Param(format!(
                "unknown parameter `{label}.{key}` (`logged` has no parameters: it reads the logged advantages as they are)"
            ))),
            Method::Grpo { params, .. } => set_field(params, label, key, value),
            Method::Rloo(p) => set_field(p, label, key, value),
            Method::Gigpo(p) => set_field(p, label, key, value),
            Method::Hgpo(p) => set_field(p, label, key, value),
            Method::Empg(p) => set_field(p, label, key, value),
            Method::Graphgpo(p) => set_field(p, label, key, value),
            Method::Proxmo(p) => set_field(p, label, key, value),
            Method::Mgr(p) => set_field(p, label, key, value),
            Method::Spa(p) => set_field(p, label, key, value),
            Method::Hisr(p) => set_field(p, label, key, value),
            Method::Oracle(p) => set_field(p, label, key, value),
            Method::Verl { params, .. } => set_field(params, label, key, value),
        }
    }

    /// Whether the method has a parameter `key` (for flags shared by several methods). The
    /// `oracle` takes none of them: a reference moves only when it is set by name
    /// (`--set oracle.gamma=0.9`), not with the step returns' `--gamma`.
    pub fn has_param(&self, key: &str) -> bool {
        !matches!(self, Method::Oracle(_)) && self.params_json().get(key).is_some()
    }

    /// Every parameter in use, for the output's metadata.
    pub fn params_json(&self) -> serde_json::Value {
        let v = match self {
            Method::Logged => Ok(serde_json::json!({})),
            Method::Grpo { params, .. } => serde_json::to_value(params),
            Method::Rloo(p) => serde_json::to_value(p),
            Method::Gigpo(p) => serde_json::to_value(p),
            Method::Hgpo(p) => serde_json::to_value(p),
            Method::Empg(p) => serde_json::to_value(p),
            Method::Graphgpo(p) => serde_json::to_value(p),
            Method::Proxmo(p) => serde_json::to_value(p),
            Method::Mgr(p) => serde_json::to_value(p),
            Method::Spa(p) => serde_json::to_value(p),
            Method::Hisr(p) => serde_json::to_value(p),
            Method::Oracle(p) => serde_json::to_value(p),
            Method::Verl { params, .. } => serde_json::to_value(params),
        };
        v.unwrap_or(serde_json::Value::Null)
    }

    /// Whether the method takes statistics over the whole training batch (an iteration) rather
    /// than within each group: ProxMO's TF-IDF fit, MGR's batch completion and validity rates,
    /// SPA's and HISR's whitening, EMPG's entropy range and mean, GPG's α and the whitening of
    /// REINFORCE++, GDPO and GAE, and the `oracle`'s states (keyed by iteration, not group). Such a
    /// method needs every group of an iteration at once.
    pub fn batch_scoped(&self) -> bool {
        match self {
            Method::Verl { estimator, .. } => estimator.batch_scoped(),
            _ => matches!(
                self,
                Method::Proxmo(_)
                    | Method::Mgr(_)
                    | Method::Spa(_)
                    | Method::Hisr(_)
                    | Method::Empg(_)
                    | Method::Oracle(_)
            ),
        }
    }

    /// Checks the parameters once; estimators then assume them valid.
    pub fn check(&self) -> Result<()> {
        let label = self.label();
        let json = self.params_json();
        for key in ["gamma", "omega", "tau", "eps"] {
            if let Some(x) = json.get(key).and_then(|v| v.as_f64()) {
                if let Some(message) = out_of_range(&format!("{label}.{key}"), key, x) {
                    return Err(Error::Param(message));
                }
            }
        }
        match self {
            Method::Gigpo(p) => p.check(),
            Method::Hgpo(p) => p.check(),
            Method::Empg(p) => p.check(),
            Method::Proxmo(p) => p.check(),
            Method::Mgr(p) => p.check(),
            Method::Spa(p) => p.check(),
            Method::Hisr(p) => p.check(),
            Method::Verl { params, .. } => params.check(label),
            _ => Ok(()),
        }
    }

    /// Runs the estimator. A value that is not finite in any of its columns is an error naming
    /// the row (rewards near the float limits overflow the sums and squares of every method).
    pub fn advantages(&self, batch: &StepBatch) -> Result<Advantages> {
        let out = match self {
            Method::Logged => logged::advantages(batch),
            Method::Grpo { label, params } => grpo::advantages(batch, params, label),
            Method::Rloo(p) => rloo::advantages(batch, p),
            Method::Gigpo(p) => gigpo::advantages(batch, p),
            Method::Hgpo(p) => hgpo::advantages(batch, p),
            Method::Empg(p) => empg::advantages(batch, p),
            Method::Graphgpo(p) => graphgpo::advantages(batch, p),
            Method::Proxmo(p) => proxmo::advantages(batch, p),
            Method::Mgr(p) => mgr::advantages(batch, p),
            Method::Spa(p) => spa::advantages(batch, p),
            Method::Hisr(p) => hisr::advantages(batch, p),
            Method::Oracle(p) => oracle::advantages(batch, p),
            Method::Verl { estimator, params } => {
                verl_registry::advantages(batch, *estimator, params)
            }
        }?;
        check_finite(batch, self.label(), &out)?;
        Ok(out)
    }
}

/// Every float of a method's result is finite, or the error says where it is not and why.
fn check_finite(batch: &StepBatch, label: &str, out: &Advantages) -> Result<()> {
    for column in &out.columns {
        let Values::F64(values) = &column.values else {
            continue;
        };
        let Some(r) = values.iter().position(|v| !v.is_finite()) else {
            continue;
        };
        let traj = &batch.trajs[batch.traj_of_row[r] as usize];
        let group = &batch.groups[traj.group as usize];
        let step = batch
            .opt_i64s(crate::schema::columns::STEP)
            .and_then(|s| s.get(r))
            .unwrap_or_default();
        let rewards = batch.f64s(crate::schema::columns::REWARD)?;
        let largest = batch
            .group_rows(traj.group as usize)
            .map(|row| rewards[row as usize].abs())
            .fold(0.0f64, f64::max);
        return Err(Error::Numbers(format!(
            "{label}: `{}` is {} at step {step} of trajectory `{}` (group `{}`): the group's rewards (largest |r| = {largest:e}) overflow the method's sums and squares; rescale the rewards",
            column.name, values[r], traj.id, group.id
        )));
    }
    Ok(())
}

/// A uniform number in [0, 1) from the seed and a key (splitmix64 over FNV-1a): a seeded draw that
/// depends on what is drawn for (the key, e.g. a trajectory id), not on row order (MGR's gate,
/// SPA's `random` contributions).
pub(crate) fn uniform(seed: u64, key: &str, salt: u64) -> f64 {
    let mut hasher = fnv::FnvHasher::default();
    std::hash::Hasher::write(&mut hasher, key.as_bytes());
    let h = std::hash::Hasher::finish(&hasher);
    let mut z = h ^ seed.wrapping_mul(0x9e3779b97f4a7c15) ^ salt.wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// A parameter's valid values: (test, the range as text).
type Range = (fn(f64) -> bool, &'static str);

/// The range of a parameter that several methods share, checked by name. Other parameters are
/// checked by their method's `Params::check`.
fn shared_range(param: &str) -> Option<Range> {
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

/// Parses `grpo,gigpo` or `all` into method names, as given: [`crate::plan::Plan::new`] runs a method
/// named twice (`all,grpo`) once.
pub fn parse_list(list: &str) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if name == "all" {
            names.extend(
                ALL.iter()
                    .filter(|m| !LOGGED_SIGNALS.contains(m))
                    .map(|s| s.to_string()),
            );
        } else if name == "verl" {
            names.extend(VERL.iter().map(|s| s.to_string()));
        } else {
            names.push(name.to_string());
        }
    }
    if names.is_empty() {
        return Err(Error::Param(
            "no methods given (e.g. `--methods grpo,gigpo`, `--methods all` or `--methods verl`)"
                .into(),
        ));
    }
    Ok(names)
}

/// Sets one field of a serde-serialisable parameter struct from text, typed by its current value.
fn set_field<P: Serialize + DeserializeOwned>(
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
        let keys: Vec<&String> = map.keys().collect();
        return Err(Error::Param(format!(
            "unknown parameter `{label}.{key}` (known: {})",
            keys.iter()
                .map(|k| k.as_str())
                .collect::<Vec<_>>()
                .join(", ")
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
