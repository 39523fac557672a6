//! One entry into the run layer: what a command asks (the binary's flags, Python's keywords),
//! resolved in one call into the [`RunPlan`] it runs, with the project file it read and what the
//! output rule must know the run reads. The precedence is the same everywhere: preset <
//! credit.toml < flags (or keywords).

use crate::error::{Error, Result};
use crate::ingest::{IngestOptions, IngestReport, DEFAULT_SUCCESS_THRESHOLD};
use crate::plan::{ParamValue, Plan, Setting};
use crate::profile::Profile;
use crate::project::{column_map, ProjectFile};
use crate::run::RunPlan;
use credit_output::Inputs;
use std::path::PathBuf;

/// What a command asks. Absent values take credit.toml's, then the defaults.
#[derive(Clone, Debug, Default)]
pub struct Request {
    /// The logs (files and folders); none: credit.toml's `inputs`, else `./logs`.
    pub paths: Vec<PathBuf>,
    /// The project file; none: `./credit.toml` when present.
    pub config: Option<PathBuf>,
    /// A column-mapping file (`--schema`), over credit.toml's `[columns]`.
    pub schema: Option<PathBuf>,
    /// `source = canonical` pairs over the mapping file (Python's `columns=`).
    pub columns: Vec<(String, String)>,
    pub lenient: bool,
    pub success_threshold: Option<f64>,
    /// `--methods`: a list, `all` or `verl`; none: credit.toml's, else the command's default.
    pub methods: Option<String>,
    pub preset: Option<Profile>,
    pub invalid_penalty: Option<f64>,
    pub gamma: Option<f64>,
    pub seed: Option<u64>,
    /// `--set METHOD.PARAM=VALUE` as text, parsed as each parameter's type.
    pub set: Vec<String>,
    /// `--against METHOD`: added to the run when not among the methods.
    pub against: Option<String>,
    /// Files the run reads besides the logs and settings (models, rule files).
    pub reads: Vec<PathBuf>,
}

/// A request resolved: the run, and what it was resolved from.
pub struct Resolved {
    pub project: ProjectFile,
    pub run: RunPlan,
    /// Every setting given, in the order it applies (credit.toml, flags, `--set`).
    pub settings: Vec<Setting>,
    /// Whether the preset was chosen (flag or credit.toml) rather than defaulted.
    pub preset_chosen: bool,
}

impl Request {
    /// The run of this request: its methods are `methods`, else credit.toml's, else
    /// `default_methods` (no methods when that is `None`: a run that only reads the logs); `all`
    /// runs `logged` too where the logs carry an advantage column.
    pub fn resolve(&self, default_methods: Option<&str>) -> Result<Resolved> {
        let project = self.project()?;
        let settings = self.settings(&project)?;
        let profile = self.preset.or(project.preset).unwrap_or_default();
        let paths = project.inputs(&self.paths);
        if self.paths.is_empty() && project.inputs.is_empty() && !paths[0].exists() {
            // The user named no `logs`: say what was looked for, and how to name them.
            return Err(Error::Config(
                "no logs named, and ./logs (read when none are) does not exist: name the logs' files or folders (`credit analyze runs/`), or list them as `inputs = [\"runs/\"]` in a credit.toml here".into(),
            ));
        }
        let ingest = self.ingest_options(&project)?;
        let (methods, against) = match default_methods {
            Some(default) => {
                self.methods(&project, default, profile, &paths, &ingest, &settings)?
            }
            None => (Plan::empty(profile), None),
        };
        let hisr = Plan::hisr(profile, &settings)?;
        Ok(Resolved {
            preset_chosen: self.preset.is_some() || project.preset.is_some(),
            run: RunPlan {
                paths,
                ingest,
                methods,
                hisr,
                against,
            },
            settings,
            project,
        })
    }

    /// The project file: `config`, else `./credit.toml` when present.
    pub fn project(&self) -> Result<ProjectFile> {
        ProjectFile::load(self.config.as_deref())
    }

    /// The logs the request reads (credit.toml's `inputs`, else `./logs`, when none are given),
    /// for a command that waits for them before resolving the run (`credit watch`).
    pub fn logs(&self) -> Result<Vec<PathBuf>> {
        Ok(self.project()?.inputs(&self.paths))
    }

    /// The planned methods and `--against`'s label.
    fn methods(
        &self,
        project: &ProjectFile,
        default_methods: &str,
        profile: Profile,
        paths: &[PathBuf],
        ingest: &IngestOptions,
        settings: &[Setting],
    ) -> Result<(Plan, Option<String>)> {
        let list = match (&self.methods, &project.methods) {
            (Some(list), _) => list.clone(),
            (None, Some(list)) => list.join(","),
            (None, None) => default_list(default_methods, paths, ingest)?,
        };
        let (against, list) = match &self.against {
            Some(name) => {
                let (label, list) = crate::plan::with_reference(&list, name, profile)?;
                (Some(label), list)
            }
            None => (None, list),
        };
        let list =
            crate::plan::for_logs(&list, paths, ingest).map_err(|e| Error::Reading(Box::new(e)))?;
        Ok((Plan::new(profile, &list, settings)?, against))
    }

    /// `--schema`, `columns`, `--lenient` and `--success-threshold` over credit.toml's.
    fn ingest_options(&self, project: &ProjectFile) -> Result<IngestOptions> {
        let mut map = column_map(project, self.schema.as_deref())?;
        for (source, target) in &self.columns {
            map.origins.remove(source);
            map.user.insert(source.clone(), target.clone());
        }
        let success_threshold = self
            .success_threshold
            .or(project.success_threshold)
            .unwrap_or(DEFAULT_SUCCESS_THRESHOLD);
        IngestOptions::new(map, self.lenient, success_threshold)
    }

    /// Every setting in the order it applies: credit.toml's shared keys, the flags' shared keys
    /// (typed), credit.toml's `[params]`, then `--set` (text, parsed as each parameter's type).
    fn settings(&self, project: &ProjectFile) -> Result<Vec<Setting>> {
        let number = |v: Option<f64>| v.map(ParamValue::Number);
        let integer = |v: Option<u64>| v.map(ParamValue::Integer);
        let mut settings = Vec::new();
        for (key, file, flag) in [
            (
                "invalid_penalty",
                number(project.invalid_penalty),
                number(self.invalid_penalty),
            ),
            ("gamma", number(project.gamma), number(self.gamma)),
            ("seed", integer(project.seed), integer(self.seed)),
        ] {
            settings.extend(
                [file, flag]
                    .into_iter()
                    .flatten()
                    .map(|v| (key.to_string(), v)),
            );
        }
        settings.extend(project.param_settings()?);
        for item in &self.set {
            let (key, value) = item.split_once('=').ok_or_else(|| {
                Error::Param(format!(
                    "`--set {item}`: expected METHOD.PARAM=VALUE, e.g. `--set gigpo.omega=0.5`"
                ))
            })?;
            settings.push((
                key.trim().to_string(),
                ParamValue::Text(value.trim().to_string()),
            ));
        }
        Ok(settings)
    }
}

impl Resolved {
    /// `methods: grpo, gigpo (preset paper; gigpo.omega = 0.5)`: the methods, the preset and
    /// every setting given (credit.toml, flags, `--set`).
    pub fn methods_line(&self) -> String {
        let plan = &self.run.methods;
        let mut line = format!(
            "methods: {} (preset {}",
            plan.labels().join(", "),
            plan.profile
        );
        if !self.settings.is_empty() {
            let said: Vec<String> = self
                .settings
                .iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect();
            line.push_str(&format!("; {}", said.join(", ")));
        }
        line.push(')');
        line
    }

    /// When the preset was not chosen and the logs (`report`: what reading them saw) carry
    /// verl-agent's own columns, what `--preset verl` would change: numbers that differ from the
    /// run's with nothing said are the surprise it prevents.
    pub fn preset_note(&self, report: &IngestReport) -> Option<&'static str> {
        let verl_agent = report
            .columns
            .iter()
            .any(|u| matches!(u.column.as_str(), "traj_uid" | "anchor_obs"));
        (!self.preset_chosen && verl_agent).then_some("`paper` is the default preset; these logs have verl-agent's columns, and `--preset verl` gives what its training code computed")
    }

    /// What the run reads, for the output rule: the logs (every file of a log folder by its
    /// inode too), the settings files given, and the request's other reads. Finding them walks a
    /// log folder and looks up each file (10k files: a tenth of a second), so only runs that
    /// write ask.
    pub fn inputs(&self, request: &Request) -> Result<Inputs> {
        let logs = &self.run.paths;
        let mut inputs = Inputs::new(logs);
        let ids = crate::ingest::input_file_ids(logs).map_err(|e| Error::Reading(Box::new(e)))?;
        inputs.add_file_ids(ids);
        for path in request
            .schema
            .iter()
            .chain(&request.config)
            .chain(&request.reads)
        {
            inputs.add(path);
        }
        Ok(inputs)
    }
}

/// The methods a command runs when neither the request nor credit.toml names any: its own list,
/// or on single-turn logs (a verl dump of one row per rollout), where the step-level methods
/// equal GRPO by construction, the outcome estimators.
fn default_list(default: &str, paths: &[PathBuf], ingest: &IngestOptions) -> Result<String> {
    let single_turn = crate::plan::turns_to_single(default)
        && crate::ingest::first_rows_single_turn(paths, ingest)
            .map_err(|e| Error::Reading(Box::new(e)))?;
    Ok(if single_turn {
        crate::plan::SINGLE_TURN
    } else {
        default
    }
    .to_string())
}
