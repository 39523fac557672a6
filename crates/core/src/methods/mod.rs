//! The advantage estimators: one module per method, each a pure function from the batch to
//! columns (`advantages(&StepBatch, &Params) -> Result<Advantages>`), its presets (`Params::paper()`,
//! `Params::verl()`) beside the equations they set. [`METHODS`] registers each one, in one entry;
//! verl's registry ([`verl_registry`]) names its own.

pub mod empg;
mod exp;
pub mod gigpo;
pub mod graphgpo;
pub mod group_stats;
pub mod grpo;
pub mod hgpo;
pub mod hisr;
pub mod listing;
pub mod logged;
pub mod mgr;
pub mod oracle;
pub mod params;
pub mod proxmo;
pub mod rloo;
pub mod segments;
pub mod spa;
pub mod step_rl;
pub mod tfidf;
pub mod verl_batch;
pub mod verl_registry;

use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::profile::Profile;
use params::{out_of_range, set_field, ParamValue};
use serde::{de::DeserializeOwned, Serialize};
use std::any::Any;
use std::fmt::Debug;

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

/// A method as `--methods` names it: everything the plan asks of it besides its estimator's own
/// file. Adding a method is an entry in [`METHODS`].
pub struct Descriptor {
    /// Its label: `--methods <name>`, the columns `adv_<name>`, `--set <name>.param=value`.
    pub name: &'static str,
    /// Other names `--methods` takes for it.
    pub aliases: &'static [&'static str],
    /// Whether `--methods all` runs it. Not a method that needs signals beyond the rewards
    /// (`advantage`, `progress`, `segment_reward`, `entropy`), so that `all` runs on any logs, nor
    /// the `oracle`, the reference the others are scored against (`--against`): name them to run
    /// them. `all` takes `logged` back where the logs carry the column ([`crate::plan::for_logs`]).
    pub in_all: bool,
    /// Whether it takes statistics over the whole training batch (an iteration) rather than
    /// within each group (a TF-IDF fit, batch rates, whitening, an entropy range, the `oracle`'s
    /// states keyed by iteration): windows then hold every group of an iteration at once.
    pub batch_scoped: bool,
    /// Whether the shared keys (`--gamma`, `--invalid-penalty`, `--seed`) reach it. Not the
    /// `oracle`: a reference moves only when it is set by name (`--set oracle.gamma=0.9`).
    pub takes_shared_keys: bool,
    /// Why it has no parameters, when it has none: what `--set <name>.x` is told.
    pub without_params: Option<&'static str>,
    /// Its parameters at a preset, with its check and its estimator ([`typed`]).
    preset: fn(Profile) -> Box<dyn Configured>,
}

impl Descriptor {
    /// A method that `--methods all` runs, within each group, that the shared keys reach; the
    /// `const fn`s below say where it differs.
    const fn new(name: &'static str, preset: fn(Profile) -> Box<dyn Configured>) -> Self {
        Descriptor {
            name,
            aliases: &[],
            in_all: true,
            batch_scoped: false,
            takes_shared_keys: true,
            without_params: None,
            preset,
        }
    }

    const fn aliases(self, aliases: &'static [&'static str]) -> Self {
        Descriptor { aliases, ..self }
    }

    /// Run only when named ([`Descriptor::in_all`]).
    const fn when_named(self) -> Self {
        Descriptor {
            in_all: false,
            ..self
        }
    }

    const fn over_the_batch(self) -> Self {
        Descriptor {
            batch_scoped: true,
            ..self
        }
    }

    const fn set_by_name_only(self) -> Self {
        Descriptor {
            takes_shared_keys: false,
            ..self
        }
    }

    const fn no_params(self, why: &'static str) -> Self {
        Descriptor {
            without_params: Some(why),
            ..self
        }
    }
}

/// Every method but verl's registry, in the order `--methods all` runs them (those it runs).
pub const METHODS: &[Descriptor] = &[
    Descriptor::new("logged", |_| {
        typed(NoParams {}, unchecked, |b, _, _| logged::advantages(b))
    })
    .when_named()
    .no_params("it reads the logged advantages as they are"),
    Descriptor::new("grpo", |profile| {
        typed(grpo::Params::preset(profile), unchecked, grpo::advantages)
    }),
    Descriptor::new("drgrpo", |profile| {
        let params = grpo::Params {
            norm: group_stats::Norm::Mean,
            ..grpo::Params::preset(profile)
        };
        typed(params, unchecked, grpo::advantages)
    })
    .aliases(&["dr_grpo", "dr-grpo"]),
    Descriptor::new("rloo", |profile| {
        typed(rloo::Params::preset(profile), unchecked, |b, p, _| {
            rloo::advantages(b, p)
        })
    }),
    Descriptor::new("gigpo", |profile| {
        typed(
            gigpo::Params::preset(profile),
            |p, _| p.check(),
            |b, p, _| gigpo::advantages(b, p),
        )
    }),
    Descriptor::new("hgpo", |profile| {
        typed(
            hgpo::Params::preset(profile),
            |p, _| p.check(),
            |b, p, _| hgpo::advantages(b, p),
        )
    }),
    Descriptor::new("proxmo", |profile| {
        typed(
            proxmo::Params::preset(profile),
            |p, _| p.check(),
            |b, p, _| proxmo::advantages(b, p),
        )
    })
    .over_the_batch(),
    Descriptor::new("graphgpo", |profile| {
        typed(graphgpo::Params::preset(profile), unchecked, |b, p, _| {
            graphgpo::advantages(b, p)
        })
    }),
    Descriptor::new("mgr", |profile| {
        typed(
            mgr::Params::preset(profile),
            |p, _| p.check(),
            |b, p, _| mgr::advantages(b, p),
        )
    })
    .over_the_batch(),
    Descriptor::new("spa", |profile| {
        typed(
            spa::Params::preset(profile),
            |p, _| p.check(),
            |b, p, _| spa::advantages(b, p),
        )
    })
    .when_named()
    .over_the_batch(),
    Descriptor::new("hisr", |profile| {
        typed(
            hisr::Params::preset(profile),
            |p, _| p.check(),
            |b, p, _| hisr::advantages(b, p),
        )
    })
    .when_named()
    .over_the_batch(),
    Descriptor::new("empg", |profile| {
        typed(
            empg::Params::preset(profile),
            |p, _| p.check(),
            |b, p, _| empg::advantages(b, p),
        )
    })
    .when_named()
    .over_the_batch(),
    Descriptor::new("oracle", |profile| {
        typed(oracle::Params::preset(profile), unchecked, |b, p, _| {
            oracle::advantages(b, p)
        })
    })
    .when_named()
    .over_the_batch()
    .set_by_name_only(),
];

/// The names of [`METHODS`], in order.
pub const ALL: [&str; METHODS.len()] = {
    let mut names = [""; METHODS.len()];
    let mut i = 0;
    while i < METHODS.len() {
        names[i] = METHODS[i].name;
        i += 1;
    }
    names
};

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

/// The parameters of a method that has none (`logged`): `{}` in the output's metadata.
#[derive(Clone, Debug, Serialize, serde::Deserialize)]
struct NoParams {}

/// A method's parameters, typed, with the functions of its entry: its check (given its label)
/// and its estimator (given its label, which names its columns).
#[derive(Clone, Debug)]
struct Typed<P> {
    params: P,
    check: fn(&P, &str) -> Result<()>,
    advantages: fn(&StepBatch, &P, &str) -> Result<Advantages>,
}

/// The check of a method whose parameters the shared ranges cover.
fn unchecked<P>(_: &P, _: &str) -> Result<()> {
    Ok(())
}

fn typed<P: Parameters>(
    params: P,
    check: fn(&P, &str) -> Result<()>,
    advantages: fn(&StepBatch, &P, &str) -> Result<Advantages>,
) -> Box<dyn Configured> {
    Box::new(Typed {
        params,
        check,
        advantages,
    })
}

/// What a method's `Params` is: a serde struct (its fields are the `--set` names and the
/// metadata's), plain data shared between the threads of a run.
trait Parameters: Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static {}
impl<P: Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static> Parameters for P {}

/// A method's [`Typed`] parameters behind a pointer: a plan holds methods of every type.
trait Configured: Debug + Send + Sync {
    fn json(&self) -> serde_json::Value;
    fn set(&mut self, label: &str, key: &str, value: &ParamValue) -> Result<()>;
    fn check(&self, label: &str) -> Result<()>;
    fn advantages(&self, batch: &StepBatch, label: &str) -> Result<Advantages>;
    fn params(&self) -> &dyn Any;
    fn params_mut(&mut self) -> &mut dyn Any;
    fn cloned(&self) -> Box<dyn Configured>;
    /// The module the parameters' type is defined in (`gigpo`, `verl_registry`): where
    /// [`listing`] finds their doc comments.
    fn module(&self) -> &'static str;
}

impl<P: Parameters> Configured for Typed<P> {
    fn json(&self) -> serde_json::Value {
        serde_json::to_value(&self.params).unwrap_or(serde_json::Value::Null)
    }

    fn set(&mut self, label: &str, key: &str, value: &ParamValue) -> Result<()> {
        set_field(&mut self.params, label, key, value)
    }

    fn check(&self, label: &str) -> Result<()> {
        (self.check)(&self.params, label)
    }

    fn advantages(&self, batch: &StepBatch, label: &str) -> Result<Advantages> {
        (self.advantages)(batch, &self.params, label)
    }

    fn params(&self) -> &dyn Any {
        &self.params
    }

    fn params_mut(&mut self) -> &mut dyn Any {
        &mut self.params
    }

    fn cloned(&self) -> Box<dyn Configured> {
        Box::new(self.clone())
    }

    fn module(&self) -> &'static str {
        // `credit_core::methods::gigpo::Params`: the segment before the type's name.
        std::any::type_name::<P>()
            .rsplit("::")
            .nth(1)
            .unwrap_or_default()
    }
}

impl Clone for Box<dyn Configured> {
    fn clone(&self) -> Self {
        self.cloned()
    }
}

/// A configured estimator: a method of [`METHODS`] or of verl's registry, and its parameters.
#[derive(Clone, Debug)]
pub struct Method {
    label: &'static str,
    batch_scoped: bool,
    takes_shared_keys: bool,
    without_params: Option<&'static str>,
    params: Box<dyn Configured>,
}

impl Method {
    /// The method `name` with the preset of `profile`.
    pub fn preset(name: &str, profile: Profile) -> Result<Method> {
        if let Some(entry) = METHODS
            .iter()
            .find(|m| m.name == name || m.aliases.contains(&name))
        {
            return Ok(Method {
                label: entry.name,
                batch_scoped: entry.batch_scoped,
                takes_shared_keys: entry.takes_shared_keys,
                without_params: entry.without_params,
                params: (entry.preset)(profile),
            });
        }
        if let Some(estimator) = verl_registry::Estimator::from_name(name) {
            return Ok(Method {
                label: estimator.name(),
                batch_scoped: estimator.batch_scoped(),
                takes_shared_keys: true,
                without_params: None,
                params: typed(
                    verl_registry::Params::preset(estimator, profile),
                    verl_registry::Params::check,
                    |b, p, label| verl_registry::advantages(b, verl_estimator(label), p),
                ),
            });
        }
        Err(Error::Param(verl_registry::refusal(name).unwrap_or_else(
            || {
                let hint = crate::sequence_matcher::did_you_mean(name, known(), "");
                format!(
                    "unknown method `{name}` (expected one of {}, `all` or `verl`){hint}",
                    known_list()
                )
            },
        )))
    }

    /// The name used in column names (`adv_<label>`) and in `--set <label>.param=value`.
    pub fn label(&self) -> &'static str {
        self.label
    }

    /// Sets one parameter (`--gamma 0.9` typed, `--set gigpo.omega=0.5` as text).
    pub fn set(&mut self, key: &str, value: &ParamValue) -> Result<()> {
        let label = self.label;
        if let Some(why) = self.without_params {
            return Err(Error::Param(format!(
                "unknown parameter `{label}.{key}` (`{label}` has no parameters: {why})"
            )));
        }
        self.params.set(label, key, value)
    }

    /// Whether the method takes the shared key `key` (for flags shared by several methods).
    pub fn has_param(&self, key: &str) -> bool {
        self.takes_shared_keys && self.params_json().get(key).is_some()
    }

    /// The module its parameters' type is defined in ([`listing`]).
    pub(crate) fn module(&self) -> &'static str {
        self.params.module()
    }

    /// Sets `key` to the text `value` on a copy of the parameters and gives what the key then
    /// holds: what the parameter's type makes of that text (an alias its canonical value), or
    /// the error it answers (a choice names the values it takes).
    pub(crate) fn probe(&self, key: &str, value: &str) -> Result<serde_json::Value> {
        let mut copy = self.params.cloned();
        copy.set(self.label, key, &ParamValue::Text(value.into()))?;
        Ok(copy.json()[key].clone())
    }

    /// Every parameter in use, for the output's metadata.
    pub fn params_json(&self) -> serde_json::Value {
        self.params.json()
    }

    /// The parameters, when they are `P` (a method's own `Params`).
    pub fn params<P: 'static>(&self) -> Option<&P> {
        self.params.params().downcast_ref()
    }

    /// The parameters to change, when they are `P` (what `set` cannot say: an optional one
    /// unset).
    pub fn params_mut<P: 'static>(&mut self) -> Option<&mut P> {
        self.params.params_mut().downcast_mut()
    }

    /// Whether the method takes statistics over the whole training batch (an iteration) rather
    /// than within each group ([`Descriptor::batch_scoped`]; verl's GPG α and the whitening of
    /// REINFORCE++, GDPO and GAE). Such a method needs every group of an iteration at once.
    pub fn batch_scoped(&self) -> bool {
        self.batch_scoped
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
        self.params.check(label)
    }

    /// Runs the estimator. A value that is not finite in any of its columns is an error naming
    /// the row (rewards near the float limits overflow the sums and squares of every method).
    pub fn advantages(&self, batch: &StepBatch) -> Result<Advantages> {
        let out = self.params.advantages(batch, self.label)?;
        check_finite(batch, self.label(), &out)?;
        Ok(out)
    }
}

/// The estimator of verl's registry a [`Method`] of it is labelled by.
fn verl_estimator(label: &str) -> verl_registry::Estimator {
    verl_registry::Estimator::from_name(label).expect("verl's methods are labelled by their names")
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

/// Parses `grpo,gigpo` or `all` into method names, as given: [`crate::plan::Plan::new`] runs a method
/// named twice (`all,grpo`) once.
pub fn parse_list(list: &str) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if name == "all" {
            names.extend(
                METHODS
                    .iter()
                    .filter(|m| m.in_all)
                    .map(|m| m.name.to_string()),
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

/// A method's float column by name (panics in tests when absent).
#[cfg(test)]
pub(crate) fn part<'a>(a: &'a Advantages, name: &str) -> &'a [f64] {
    match a.column(name) {
        Some(Values::F64(v)) => v,
        _ => panic!("no f64 column {name}"),
    }
}
