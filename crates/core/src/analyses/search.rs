//! Which configuration the trainer ran: a fixed list of candidates (the planned methods, each
//! cheap group method's settings changed one at a time, and the cheap methods under both
//! presets) run on the windows where no planned method reproduces the logged column, each
//! candidate's rows beyond the tolerance and max |logged − candidate| accumulated window by window
//! ([`Searched`]). The one with the fewest such rows (then the smallest max) is the trainer's
//! configuration, or the closest tried: fewest rows first, so that a column with one trajectory
//! flipped names the method that matches everywhere else, not one that is off everywhere by less.
//!
//! Bounded: at most ~30 runs of group methods (GRPO, Dr.GRPO, RLOO, GiGPO) per searched window,
//! nothing kept per row. A window that a planned method reproduces is not searched: there the
//! trainer ran that method, and the search would add nothing but time (a healthy run searches
//! nothing).

use super::patterns::TOLERANCE;
use crate::methods::Method;
use crate::plan::ParamValue;
use crate::profile::Profile;
use crate::StepBatch;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The methods cheap enough to run many times (group statistics, exact anchor states).
const CHEAP: [&str; 4] = ["grpo", "drgrpo", "rloo", "gigpo"];

/// The settings a trainer can differ in, by method family, under their `--set` names, each with
/// the values tried. GRPO's `norm` is GiGPO's `mode`; RLOO has no std (no ddof, eps or norm); GRPO
/// and RLOO have a `gamma` they never use (outcome rewards), so it is not varied there; `omega`
/// and `similarity` are GiGPO's alone.
fn settings(label: &str) -> &'static [(&'static str, &'static [&'static str])] {
    const STATS: (&str, &[&str]) = ("stats_over", &["rows", "trajectories"]);
    const DDOF: (&str, &[&str]) = ("std_ddof", &["0", "1"]);
    const EPS: (&str, &[&str]) = ("eps", &["1e-8", "1e-6", "1e-4"]);
    const PENALTY: (&str, &[&str]) = ("invalid_penalty", &["0", "0.1"]);
    match label {
        "grpo" | "drgrpo" => &[STATS, DDOF, EPS, PENALTY, ("norm", &["mean_std", "mean"])],
        "rloo" => &[STATS, PENALTY],
        "gigpo" => &[
            STATS,
            DDOF,
            EPS,
            PENALTY,
            ("gamma", &["0.95", "0.99", "1"]),
            ("omega", &["0.5", "1"]),
            ("mode", &["mean_std", "mean"]),
            // verl-agent's `similarity_thresh` default; an unset θ is exact anchor states.
            ("similarity", &["0.95"]),
        ],
        _ => &[],
    }
}

/// The candidates, built once for a run that plans `logged`.
#[derive(Debug)]
pub struct Search {
    pub profile: Profile,
    candidates: Vec<Candidate>,
}

#[derive(Debug)]
struct Candidate {
    method: Method,
    /// Its index among the planned methods when it is one (its results are reused).
    planned: Option<usize>,
}

/// Each candidate's fit over the windows searched so far (`None`: it could not run there), and
/// how many windows and rows were searched of how many.
#[derive(Clone, Debug, Default)]
pub struct Searched {
    fits: Vec<Option<Fit>>,
    pub windows: usize,
    pub rows: usize,
    pub windows_seen: usize,
}

/// How far a candidate is from the logged column: rows beyond the tolerance, max |Δ|.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Fit {
    beyond: usize,
    max: f64,
}

impl Fit {
    fn of(logged: &[f64], values: &[f64]) -> Fit {
        Fit {
            beyond: logged
                .iter()
                .zip(values)
                .map(|(l, v)| (l - v).abs())
                .filter(|d| *d > TOLERANCE || d.is_nan())
                .count(),
            max: max_abs_diff(logged, values),
        }
    }

    fn add(self, other: Fit) -> Fit {
        Fit {
            beyond: self.beyond + other.beyond,
            max: self.max.max(other.max),
        }
    }
}

/// The configuration that comes closest to the logged column.
#[derive(Clone, Debug, Serialize)]
pub struct Configuration {
    pub method: String,
    pub preset: Profile,
    /// Every setting that differs from the preset's, under its `--set` name without the method.
    pub settings: BTreeMap<String, serde_json::Value>,
    /// max |logged − this configuration| over the rows searched.
    pub max_abs_diff: f64,
    /// Rows searched where |logged − this configuration| exceeds the tolerance.
    pub rows_differing: usize,
    /// Whether it reproduces the logged column (max |Δ| within the tolerance).
    pub reproduces: bool,
    /// What was searched: the candidates, and the windows and rows they ran on.
    pub searched: Scope,
}

#[derive(Clone, Debug, Serialize)]
pub struct Scope {
    pub candidates: usize,
    pub windows: usize,
    pub of_windows: usize,
    pub rows: usize,
    /// The settings varied, by method.
    pub settings: BTreeMap<String, Vec<String>>,
}

impl Search {
    /// The candidates for `methods` (the planned ones, `logged` among them) under `profile`.
    pub fn new(methods: &[Method], profile: Profile) -> Search {
        let mut candidates: Vec<Candidate> = Vec::new();
        let mut push = |method: Method, planned: Option<usize>| {
            let same = |c: &Candidate| {
                c.method.label() == method.label() && c.method.params_json() == method.params_json()
            };
            if method.check().is_ok() && !candidates.iter().any(same) {
                candidates.push(Candidate { method, planned });
            }
        };
        for (i, m) in methods.iter().enumerate() {
            if m.label() != "logged" {
                push(m.clone(), Some(i));
            }
        }
        for m in methods {
            for (key, values) in settings(m.label()) {
                for value in *values {
                    push(varied(m, key, value), None);
                }
            }
        }
        for label in CHEAP {
            for preset in [profile, other(profile)] {
                if let Ok(m) = Method::preset(label, preset) {
                    push(m, None);
                }
            }
        }
        Search {
            profile,
            candidates,
        }
    }

    /// Every candidate against `logged` on one window's batch, unless a planned method
    /// (`results`, labelled by the plan's order) reproduces it there.
    pub fn window(&self, batch: &StepBatch, logged: &[f64], results: &[&[f64]]) -> Searched {
        let within = |values: &[f64]| max_abs_diff(logged, values) <= TOLERANCE;
        let planned = |c: &Candidate| c.planned.map(|i| results[i]);
        let mut searched = Searched {
            windows_seen: 1,
            ..Searched::default()
        };
        let reproduced = self.candidates.iter().filter_map(planned).any(within);
        if reproduced {
            return searched;
        }
        searched.fits = self
            .candidates
            .iter()
            .map(|c| match planned(c) {
                Some(values) => Some(Fit::of(logged, values)),
                None => c
                    .method
                    .advantages(batch)
                    .ok()
                    .map(|a| Fit::of(logged, a.advantage())),
            })
            .collect();
        searched.windows = 1;
        searched.rows = batch.len();
        searched
    }

    /// The closest candidate over what was searched (`None` when nothing was): the fewest rows
    /// beyond the tolerance, then the smallest max |Δ|, where maxima within the tolerance of
    /// each other tie (float32 rounding must not pick `eps = 1e-8` over the planned method); ties
    /// go to the candidate listed first (a planned method before its variations).
    pub fn best(&self, searched: &Searched) -> Option<Configuration> {
        let fits = || {
            searched
                .fits
                .iter()
                .enumerate()
                .filter_map(|(i, f)| f.map(|f| (i, f)))
        };
        let fewest = fits().map(|(_, f)| f.beyond).min()?;
        let closest = fits()
            .filter(|(_, f)| f.beyond == fewest)
            .map(|(_, f)| f.max)
            .fold(f64::INFINITY, f64::min);
        let (i, fit) = fits().find(|(_, f)| f.beyond == fewest && f.max <= closest + TOLERANCE)?;
        let (preset, settings) = self.describe(&self.candidates[i].method);
        Some(Configuration {
            method: self.candidates[i].method.label().to_string(),
            preset,
            settings,
            max_abs_diff: fit.max,
            rows_differing: fit.beyond,
            reproduces: fit.beyond == 0,
            searched: self.scope(searched),
        })
    }

    /// A planned method as the configuration, with its max |Δ| and rows beyond the tolerance
    /// over every row (it reproduces the column wherever no window was searched).
    pub fn planned(
        &self,
        label: &str,
        (max_abs_diff, rows_differing): (f64, usize),
        searched: &Searched,
    ) -> Option<Configuration> {
        let c = self
            .candidates
            .iter()
            .find(|c| c.planned.is_some() && c.method.label() == label)?;
        let (preset, settings) = self.describe(&c.method);
        Some(Configuration {
            method: label.to_string(),
            preset,
            settings,
            max_abs_diff,
            rows_differing,
            reproduces: rows_differing == 0,
            searched: self.scope(searched),
        })
    }

    /// The preset `method` is closest to (fewer settings apart; the run's on a tie) and the
    /// settings that set it apart.
    fn describe(&self, method: &Method) -> (Profile, BTreeMap<String, serde_json::Value>) {
        let apart = |preset: Profile| -> BTreeMap<String, serde_json::Value> {
            let mine = method.params_json();
            let theirs = Method::preset(method.label(), preset)
                .map(|m| m.params_json())
                .unwrap_or_default();
            mine.as_object()
                .into_iter()
                .flatten()
                .filter(|(k, v)| theirs.get(k.as_str()) != Some(v))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        let (own, others) = (apart(self.profile), apart(other(self.profile)));
        if others.len() < own.len() {
            (other(self.profile), others)
        } else {
            (self.profile, own)
        }
    }

    fn scope(&self, searched: &Searched) -> Scope {
        let mut varied: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for c in &self.candidates {
            let label = c.method.label();
            let keys = settings(label).iter().map(|(k, _)| k.to_string());
            varied.entry(label.to_string()).or_insert(keys.collect());
        }
        Scope {
            candidates: self.candidates.len(),
            windows: searched.windows,
            of_windows: searched.windows_seen,
            rows: searched.rows,
            settings: varied,
        }
    }
}

impl Searched {
    /// Adds another window's search.
    pub fn merge(&mut self, other: Searched) {
        self.windows += other.windows;
        self.windows_seen += other.windows_seen;
        self.rows += other.rows;
        if self.fits.is_empty() {
            self.fits = other.fits;
        } else if !other.fits.is_empty() {
            for (mine, theirs) in self.fits.iter_mut().zip(other.fits) {
                *mine = match (*mine, theirs) {
                    (Some(a), Some(b)) => Some(a.add(b)),
                    _ => None,
                };
            }
        }
    }
}

/// `method` with `key` set to `value` (the method itself where that fails).
fn varied(method: &Method, key: &str, value: &str) -> Method {
    let mut m = method.clone();
    if key == "similarity" {
        // An unset θ cannot be written as a value: a set one is varied to unset.
        if let Some(p) = m.params_mut::<crate::methods::gigpo::Params>() {
            if p.similarity.is_some() {
                p.similarity = None;
                return m;
            }
        }
    }
    match m.set(key, &ParamValue::Text(value.to_string())) {
        Ok(()) => m,
        Err(_) => method.clone(),
    }
}

fn other(profile: Profile) -> Profile {
    match profile {
        Profile::Paper => Profile::Verl,
        Profile::Verl => Profile::Paper,
    }
}

/// max |a − b| over the rows (NaN counts as infinitely far).
pub fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| {
            let d = (x - y).abs();
            if d.is_nan() {
                f64::INFINITY
            } else {
                d
            }
        })
        .fold(0.0, f64::max)
}

/// The search shared by every window of a run (`None` when `logged` is not planned).
pub type Shared = Option<Arc<Search>>;
