//! The methods a command runs, resolved once: each method's preset, then every layer of settings
//! in order (`credit.toml`, then flags; the Python package passes its `params`), each key checked
//! against the method's own parameters and each method's `Params::check` run at the end.
//!
//! A parameter's path: `--set gigpo.omega=0.5` (or `[params.gigpo] omega = 0.5`) becomes the
//! setting `("gigpo.omega", "0.5")`; [`Plan::new`] finds the planned `gigpo`, whose
//! [`Method::set`] parses "0.5" as the type `gigpo::Params::omega` has (unknown keys are errors
//! listing the known ones), and [`Method::check`] validates the whole `gigpo::Params` that
//! `gigpo::advantages` then receives.

use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::ingest::UnitKind;
use crate::methods::params::out_of_range;
pub use crate::methods::params::ParamValue;
use crate::methods::{hisr, known, parse_list, Advantages, Method};
use crate::profile::Profile;

/// Keys every method may have, set on each planned method that has them (`--gamma`,
/// `--invalid-penalty`, `--seed`, or a bare `gamma = 0.9` in `credit.toml`'s `[params]`).
pub const SHARED_KEYS: [&str; 3] = ["invalid_penalty", "gamma", "seed"];

/// `("gigpo.omega", value)` for one method's parameter, or a [`SHARED_KEYS`] key.
pub type Setting = (String, ParamValue);

/// The methods each command runs when none are named (`--methods`; Python's `methods=`).
pub const ADVANTAGES: &str = "all";
pub const COMPARE: &str = "grpo,gigpo,proxmo";
pub const REPORT: &str = "grpo,gigpo,proxmo,graphgpo,mgr";
/// `compare`'s and `report`'s methods for single-turn logs (a verl dump of one row per rollout):
/// the outcome estimators, GRPO's family and verl's registry less its copies (`*_vectorized`). The
/// step-level methods equal GRPO there by construction (one step per rollout, no states).
pub const SINGLE_TURN: &str =
    "grpo,drgrpo,rloo,grpo_passk,opo,gpg,reinforce_plus_plus,reinforce_plus_plus_baseline,gdpo";

/// Whether `default` is a list of multi-turn methods that single-turn logs replace with
/// [`SINGLE_TURN`] (`compare`'s and `report`'s).
pub fn turns_to_single(default: &str) -> bool {
    [COMPARE, REPORT].contains(&default)
}

/// `list` as the logs allow: `all` also runs `logged`, first, where the first rows of the logs
/// carry an advantage column ([`crate::ingest::first_rows_carry`]); other lists are as given
/// (`logged` named without the column is the method's error).
pub fn for_logs(
    list: &str,
    paths: &[std::path::PathBuf],
    options: &crate::ingest::IngestOptions,
) -> Result<String> {
    let all = list.split(',').any(|name| name.trim() == "all");
    if all && crate::ingest::first_rows_carry(paths, options, crate::schema::columns::ADVANTAGE)? {
        Ok(format!("logged,{list}"))
    } else {
        Ok(list.to_string())
    }
}

/// `--against METHOD`: the reference's label, and `list` with the method added when it is not
/// named there (`grpo,gigpo` against `oracle` runs `grpo,gigpo,oracle`). An error lists the
/// methods when `reference` is not one method.
pub fn with_reference(list: &str, reference: &str, profile: Profile) -> Result<(String, String)> {
    let name = reference.trim();
    if name.is_empty() || name.contains(',') || name == "all" || name == "verl" {
        return Err(Error::Param(format!(
            "--against takes one method, e.g. `--against oracle` (got `{reference}`; one of {})",
            known().collect::<Vec<_>>().join(", ")
        )));
    }
    let label = Method::preset(name, profile)
        .map_err(|e| Error::Param(format!("--against: {e}")))?
        .label();
    let named = parse_list(list)?
        .iter()
        .any(|m| Method::preset(m, profile).is_ok_and(|m| m.label() == label));
    let list = if named {
        list.to_string()
    } else {
        format!("{list},{name}")
    };
    Ok((label.to_string(), list))
}

/// The resolved methods.
#[derive(Clone, Debug)]
pub struct Plan {
    pub profile: Profile,
    pub methods: Vec<Method>,
}

impl Plan {
    /// The methods of `list` (`grpo,gigpo`, `all`) under `profile`, then `settings` in order:
    /// `("method.param", value)` for one method, or a [`SHARED_KEYS`] key for every planned
    /// method that has it. A later setting of the same key wins. A setting for a method that does
    /// not run is still checked, so a typo cannot pass silently.
    pub fn new(profile: Profile, list: &str, settings: &[Setting]) -> Result<Plan> {
        let mut methods: Vec<Method> = Vec::new();
        for name in parse_list(list)? {
            let method = Method::preset(&name, profile)?;
            // `all,grpo` or `drgrpo,dr_grpo` name a method twice: it runs once, at its first
            // place, since its column `adv_<label>` can exist only once.
            if !methods.iter().any(|m| m.label() == method.label()) {
                methods.push(method);
            }
        }
        // Shared keys first (they are defaults for every method), then per-method keys.
        for (key, value) in settings.iter().filter(|(k, _)| is_shared(k)) {
            check_range(key, key, value)?;
            for method in methods.iter_mut().filter(|m| m.has_param(key)) {
                method.set(key, value)?;
            }
        }
        for (key, value) in settings.iter().filter(|(k, _)| !is_shared(k)) {
            let (label, param) = key.split_once('.').ok_or_else(|| {
                Error::Param(format!(
                    "`{key}={value}`: expected METHOD.PARAM=VALUE, e.g. `gigpo.omega=0.5`, or one of {}",
                    SHARED_KEYS.join(", ")
                ))
            })?;
            check_range(key, param, value)?;
            let mut matched = false;
            for method in methods.iter_mut().filter(|m| m.label() == label) {
                method.set(param, value)?;
                matched = true;
            }
            if !matched {
                if !known().any(|name| name == label) {
                    return Err(Error::Param(format!(
                        "`{key}={value}`: unknown method `{label}` (expected one of {}){}",
                        known().collect::<Vec<_>>().join(", "),
                        crate::sequence_matcher::did_you_mean(label, known(), "")
                    )));
                }
                let mut probe = Method::preset(label, profile)?;
                probe.set(param, value)?;
                probe.check()?;
            }
        }
        for method in &methods {
            method.check()?;
        }
        Ok(Plan { profile, methods })
    }

    /// HISR's parameters under the same settings, planned or not: the segment statistics of
    /// `analyze`, `compare` and `report` segment the logs as the method does.
    pub fn hisr(profile: Profile, settings: &[Setting]) -> Result<hisr::Params> {
        let plan = Plan::new(profile, "hisr", settings)?;
        let params = plan
            .methods
            .first()
            .and_then(Method::params::<hisr::Params>);
        Ok(params.expect("the list `hisr` plans hisr").clone())
    }

    /// The planned labels, in order.
    /// No methods (a run that only reads and summarises the logs).
    pub fn empty(profile: Profile) -> Plan {
        Plan {
            profile,
            methods: Vec::new(),
        }
    }

    /// ProxMO's parameters, when it is among the planned methods (the report draws its PSC
    /// curve).
    pub fn proxmo(&self) -> Option<crate::methods::proxmo::Params> {
        self.methods.iter().find_map(|m| m.params().cloned())
    }

    pub fn labels(&self) -> Vec<String> {
        self.methods.iter().map(|m| m.label().to_string()).collect()
    }

    /// What every result carries: the version, the preset, every parameter used and the notes
    /// (Parquet metadata, `.meta.json`, `metadata` in JSON output).
    pub fn metadata(&self, notes: &[String]) -> serde_json::Value {
        let params: serde_json::Map<String, serde_json::Value> = self
            .methods
            .iter()
            .map(|m| (m.label().to_string(), m.params_json()))
            .collect();
        serde_json::json!({
            "credit_version": env!("CARGO_PKG_VERSION"),
            "preset": self.profile,
            "params": params,
            "notes": notes,
        })
    }

    /// What a window must hold whole for every planned method.
    pub fn unit(&self) -> UnitKind {
        if self.methods.iter().any(Method::batch_scoped) {
            UnitKind::Iteration
        } else {
            UnitKind::Group
        }
    }

    /// Every planned method's result on one batch; an error names the method.
    pub fn run(&self, batch: &StepBatch) -> Result<Vec<Advantages>> {
        self.methods
            .iter()
            .map(|m| {
                m.advantages(batch).map_err(|e| match e {
                    Error::Param(message) => {
                        Error::Param(format!("computing {}: {message}", m.label()))
                    }
                    other => other,
                })
            })
            .collect()
    }
}

/// The notes of a run, in the order first seen, each once (every window repeats its methods'
/// notes): what [`Plan::metadata`] records.
#[derive(Clone, Default)]
pub struct Notes(Vec<String>);

impl Notes {
    pub fn extend(&mut self, notes: impl IntoIterator<Item = String>) {
        for note in notes {
            if !self.0.contains(&note) {
                self.0.push(note);
            }
        }
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }

    pub fn into_vec(self) -> Vec<String> {
        self.0
    }
}

/// A number outside its parameter's range is refused as the user wrote it (`gamma`,
/// `gigpo.gamma`), before it is mixed with the other layers.
fn check_range(written: &str, param: &str, value: &ParamValue) -> Result<()> {
    let Some(x) = value.number() else {
        return Ok(());
    };
    match out_of_range(written, param, x) {
        Some(message) => Err(Error::Param(message)),
        None => Ok(()),
    }
}

fn is_shared(key: &str) -> bool {
    SHARED_KEYS.contains(&key)
}

/// `--methods`' help (short, long) with a command's `default` list in it: every method the
/// command can run, and what `logged` and `verl` are.
pub fn methods_help(default: &str) -> (String, String) {
    let single = if turns_to_single(default) {
        format!(
            "; on single-turn logs (verl's one row per rollout) {}",
            SINGLE_TURN
        )
    } else {
        String::new()
    };
    let short = format!(
        "Methods, comma-separated, or `all` (grpo, drgrpo, rloo, gigpo, hgpo, proxmo, graphgpo, mgr, and `logged` where the logs carry an advantage column); spa, hisr and empg read logged signals and run when named, as does `oracle` (the empirical-MDP advantage, `--against`'s reference); `verl` runs verl's advantage registry [default: credit.toml's `methods`, else {default}{single}]"
    );
    let long = format!(
        "{short}\n\n`logged` is the advantage the trainer itself computed (an `advantage`, `advantages` or `adv` column, one value per step row): `compare --methods logged,gigpo --preset verl` names the first rows where GiGPO departs from it. `all` looks for the column in the first rows of the first file.\n\n`verl` is verl 0.9.1's registry under its `algorithm.adv_estimator` names: grpo, grpo_vectorized, grpo_passk, rloo, rloo_vectorized, opo, gpg, reinforce_plus_plus, reinforce_plus_plus_baseline, gdpo; remax (a logged `reward_baseline` per group) and gae (a logged step `value`) run when named. `--preset verl` is verl-agent's layout (a batch row per step row, penalty 0.1); `--set <m>.stats_over=trajectories` is verl's own agent loop (a batch row per trajectory). gpg's α and the whitening of reinforce_plus_plus, reinforce_plus_plus_baseline, gdpo and gae depend on the batch: one `iteration` (the whole input without the column). reinforce_plus_plus and gae keep verl's γ = 1."
    );
    (short, long)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(&str, &str)]) -> Vec<Setting> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), ParamValue::Text(v.to_string())))
            .collect()
    }

    #[test]
    fn typed_values_are_taken_as_they_are_and_text_as_the_parameter_s_type() {
        let gamma = |value: ParamValue| {
            let plan = Plan::new(Profile::Paper, "gigpo", &[("gamma".into(), value)]).unwrap();
            plan.methods[0].params_json()["gamma"].as_f64().unwrap()
        };
        // No trip through text: the flag's f64 is the parameter's, bit for bit.
        let x = 0.1 + 0.2;
        assert_eq!(gamma(ParamValue::Number(x)).to_bits(), x.to_bits());
        assert_eq!(gamma(ParamValue::Text("0.3".into())), 0.3);
        assert_eq!(gamma(ParamValue::Integer(1)), 1.0);
        let err = |key: &str, value: ParamValue| {
            Plan::new(Profile::Paper, "mgr", &[(key.into(), value)])
                .unwrap_err()
                .to_string()
        };
        assert!(
            err("mgr.seed", ParamValue::Number(1.5)).contains("expected a non-negative integer")
        );
        assert!(err("mgr.beta_temporal", ParamValue::Bool(true)).contains("expected a number"));
    }

    #[test]
    fn layers_apply_in_order_and_shared_keys_reach_every_method() {
        let plan = Plan::new(
            Profile::Verl,
            "grpo,gigpo",
            &set(&[
                ("gigpo.omega", "0.5"),
                ("gamma", "0.9"),
                ("gigpo.omega", "0.25"),
            ]),
        )
        .unwrap();
        assert_eq!(plan.labels(), ["grpo", "gigpo"]);
        let json = plan.methods[1].params_json();
        assert_eq!(json["omega"], 0.25);
        assert_eq!(json["gamma"], 0.9);
        // The verl preset's penalty stays where no layer set it.
        assert_eq!(json["invalid_penalty"], 0.1);
    }

    #[test]
    fn unknown_keys_methods_and_bad_values_are_errors() {
        let err = |pairs: &[(&str, &str)]| {
            Plan::new(Profile::Paper, "gigpo", &set(pairs))
                .unwrap_err()
                .to_string()
        };
        assert!(err(&[("gigpo.omegaa", "1")]).contains("known:"));
        assert!(err(&[("gipgo.omega", "1")]).contains("unknown method `gipgo`"));
        assert!(err(&[("gipgo.omega", "1")]).ends_with("; did you mean `gigpo`?"));
        assert!(err(&[("gigpo.gama", "0.9")]).ends_with("; did you mean `gigpo.gamma`?"));
        assert!(Method::preset("grop", Profile::Paper)
            .unwrap_err()
            .to_string()
            .ends_with("; did you mean `grpo`?"));
        assert!(err(&[("gigpo.omega", "abc")]).contains("gigpo.omega=abc"));
        // A method that does not run is checked all the same.
        assert!(err(&[("proxmo.tau", "x")]).contains("proxmo.tau=x"));
        assert!(err(&[("omega", "1")]).contains("expected METHOD.PARAM=VALUE"));
    }

    #[test]
    fn a_method_named_twice_runs_once_at_its_first_place() {
        let labels = |list| Plan::new(Profile::Paper, list, &[]).unwrap().labels();
        assert_eq!(labels("all,grpo"), labels("all"));
        assert_eq!(
            labels("gigpo,grpo,dr_grpo,gigpo,drgrpo"),
            ["gigpo", "grpo", "drgrpo"]
        );
    }

    #[test]
    fn out_of_range_and_non_finite_numbers_name_the_key_and_the_range() {
        let err = |list: &str, pairs: &[(&str, &str)]| {
            Plan::new(Profile::Paper, list, &set(pairs))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err("grpo", &[("gamma", "1.5")]),
            "`gamma` = 1.5 is out of range [0, 1]"
        );
        assert_eq!(
            err("gigpo", &[("gigpo.similarity", "nan")]),
            "`gigpo.similarity` = NaN is out of range (0, 1)"
        );
        assert_eq!(
            err("proxmo", &[("proxmo.tau", "inf")]),
            "`proxmo.tau` = inf is out of range (0, ∞)"
        );
        // A method that does not run is checked all the same.
        assert_eq!(
            err("grpo", &[("gigpo.omega", "-1")]),
            "`gigpo.omega` = -1 is out of range [0, ∞)"
        );
        // A number without a shared range is refused by its type or its method's check.
        assert!(err("gigpo", &[("gigpo.invalid_penalty", "NaN")]).contains("a finite number"));
    }

    #[test]
    fn against_adds_its_method_once_and_refuses_a_list() {
        let (label, list) = with_reference("grpo,gigpo", "oracle", Profile::Paper).unwrap();
        assert_eq!(
            (label.as_str(), list.as_str()),
            ("oracle", "grpo,gigpo,oracle")
        );
        let (label, list) = with_reference("grpo,dr_grpo", "drgrpo", Profile::Paper).unwrap();
        assert_eq!((label.as_str(), list.as_str()), ("drgrpo", "grpo,dr_grpo"));
        let e = with_reference("grpo", "nosuch", Profile::Paper).unwrap_err();
        assert!(
            e.to_string().contains("--against: unknown method `nosuch`"),
            "{e}"
        );
        let e = with_reference("grpo", "grpo,gigpo", Profile::Paper).unwrap_err();
        assert!(e.to_string().contains("takes one method"), "{e}");
        // The oracle is a reference: `all` leaves it out, and `--gamma` leaves its γ at 1.
        assert!(!Plan::new(Profile::Paper, "all", &[])
            .unwrap()
            .labels()
            .contains(&"oracle".to_string()));
        let plan = Plan::new(Profile::Paper, "oracle", &set(&[("gamma", "0.5")])).unwrap();
        assert_eq!(plan.methods[0].params_json()["gamma"], 1.0);
        let plan = Plan::new(Profile::Paper, "oracle", &set(&[("oracle.gamma", "0.5")])).unwrap();
        assert_eq!(plan.methods[0].params_json()["gamma"], 0.5);
        assert_eq!(plan.unit(), UnitKind::Iteration);
    }

    #[test]
    fn units_follow_the_methods_scope() {
        let group = Plan::new(Profile::Paper, "grpo,gigpo", &[]).unwrap();
        assert_eq!(group.unit(), UnitKind::Group);
        let iteration = Plan::new(Profile::Paper, "grpo,proxmo", &[]).unwrap();
        assert_eq!(iteration.unit(), UnitKind::Iteration);
        let hisr = Plan::hisr(Profile::Paper, &set(&[("hisr.segments", "rule")])).unwrap();
        assert_eq!(hisr.segments, hisr::Segments::Rule);
    }

    #[test]
    fn verl_runs_the_registry_under_verl_s_names() {
        let plan = Plan::new(Profile::Verl, "verl", &[]).unwrap();
        assert_eq!(plan.labels(), crate::methods::VERL);
        // gpg's α and the whitening of REINFORCE++ and GDPO span the batch.
        assert_eq!(plan.unit(), UnitKind::Iteration);
        let passk = Plan::new(Profile::Verl, "grpo_passk,opo", &[]).unwrap();
        assert_eq!(passk.unit(), UnitKind::Group);
        // verl's γ, not credit's 0.95, until a layer sets it.
        let gamma = |settings: &[Setting]| {
            Plan::new(Profile::Verl, "reinforce_plus_plus", settings)
                .unwrap()
                .methods[0]
                .params_json()["gamma"]
                .as_f64()
                .unwrap()
        };
        assert_eq!(gamma(&[]), 1.0);
        assert_eq!(gamma(&set(&[("reinforce_plus_plus.gamma", "0.95")])), 0.95);
        let err = |list: &str, pairs: &[(&str, &str)]| {
            Plan::new(Profile::Verl, list, &set(pairs))
                .unwrap_err()
                .to_string()
        };
        assert!(err("optimal_token_baseline", &[]).contains("sum_pi_squared"));
        // `norm` is grpo_passk's alone: verl's trainer passes it to no other registry entry.
        assert!(err("gdpo", &[("gdpo.norm", "mean")]).contains("unknown parameter `gdpo.norm`"));
        assert!(err("gae", &[("gae.lambda", "2")]).contains("out of range [0, 1]"));
    }
}
