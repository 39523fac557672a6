//! credit-report: every analysis as a picture, and one report for people (HTML, Markdown) and for
//! machines and CI gates (`summary.json`, threshold checks).
//!
//! Data flows one way: credit-core computes, this crate draws and writes. [`figures`] renders the
//! catalogue of plots (SVG strings, and PNG files when a folder is given), [`summary_json`]
//! gathers every number, [`check::evaluate`] applies `thresholds.toml`, [`sections`] lays the
//! results out as a [`doc::Doc`] and [`render`] writes it as HTML, Markdown or terminal text.

pub mod check;
pub mod compared;
pub mod doc;
pub mod dot;
pub mod explorer;
pub mod figures;
pub mod folder;
pub mod follow;
pub mod graphs;
pub mod palette;
pub mod plots;
pub mod render;
pub mod run;
pub mod sections;
pub mod trends;
pub mod watch;

pub use figures::{figures, Scope};

use credit_core::analyses::compare::{Comparison, InvalidCredit};
use credit_core::analyses::summary::{SizeDistribution, Summary};
use credit_core::methods::proxmo;
use credit_core::plan::Plan;
use credit_core::profile::Profile;
use plots::Figure;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("drawing figure `{figure}`: {message}")]
    Plot { figure: String, message: String },
    #[error(transparent)]
    Output(#[from] credit_output::Error),
    #[error("{0}")]
    Check(String),
    /// Graphviz `dot` failed: `what` is the drawing ("the state graph of group `g1` (iteration
    /// 3)"), `message` what went wrong, in Graphviz's words where it gave some.
    #[error("drawing {what}: {message}")]
    Graphviz { what: String, message: String },
}

/// Whether `cause` names the stage it failed in (writing an output, drawing a figure or a
/// graph): an error met while the logs stream through a run is otherwise one of reading them.
pub fn names_its_stage(cause: &(dyn std::error::Error + 'static)) -> bool {
    cause.is::<credit_output::Error>()
        || cause.is::<Error>()
        || matches!(
            cause.downcast_ref::<credit_core::Error>(),
            Some(credit_core::Error::Output(_))
        )
}

/// Everything a report is made of.
pub struct Inputs<'a> {
    pub summary: &'a Summary,
    pub comparison: Option<&'a Comparison>,
    /// (method label, advantage per row)
    pub advantages: &'a [(String, Vec<f64>)],
    /// ProxMO's parameters in use (for the PSC curve), when ProxMO is among the methods.
    pub proxmo: Option<proxmo::Params>,
    /// Preset, parameters and notes, as written with `credit advantages`.
    pub run: RunInfo,
    /// Per-iteration counts for the trends figure (the report's), one column per method of
    /// `advantages`.
    pub trends: Option<&'a trends::Trends>,
    /// Every method scored against `--against`'s reference, when given.
    pub against: Option<&'a credit_core::analyses::against::Against>,
}

impl<'a> Inputs<'a> {
    /// The inputs of `analyze --plots`: the summary alone.
    pub fn summary(summary: &'a Summary, run: RunInfo) -> Inputs<'a> {
        Inputs {
            summary,
            comparison: None,
            advantages: &[],
            proxmo: None,
            run,
            trends: None,
            against: None,
        }
    }
}

/// What a run computed with: `summary.json`'s and `compare --format json`'s `metadata`, the
/// same JSON as `credit advantages` writes beside its tables. Read once from the plan, so the
/// report asks for the preset by name rather than by a JSON key.
// Fields in the order of the JSON objects they come from and go to (serde_json sorts keys).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunInfo {
    pub credit_version: String,
    pub notes: Vec<String>,
    /// Per method label, its parameters.
    pub params: BTreeMap<String, serde_json::Value>,
    pub preset: Profile,
}

impl RunInfo {
    /// The run of `plan`, with its notes.
    pub fn of(plan: &Plan, notes: &[String]) -> RunInfo {
        serde_json::from_value(plan.metadata(notes)).expect("Plan::metadata has RunInfo's fields")
    }
}

/// The headline numbers CI rules usually gate on, with short stable keys: `summary.json`'s
/// `headline`, the reports' headline tables and `--check`'s `headline.*` keys. Keys the logs do
/// not allow are absent, so a rule on them fails loudly rather than on a made-up 0.
#[derive(Clone, Debug, Serialize)]
pub struct Headline {
    pub rows: usize,
    pub groups: usize,
    pub trajectories: usize,
    pub success_rate: f64,
    pub invalid_action_rate: f64,
    pub singleton_step_share: f64,
    pub singleton_cluster_share: f64,
    pub degenerate_group_share: f64,
    pub degenerate_step_share: f64,
    pub graph_progress_share_in_failures: f64,
    pub graph_non_progress_share_in_successes: f64,
    /// Per method (with a comparison).
    pub invalid_positive_share: BTreeMap<String, f64>,
    pub invalid_positive_share_in_success: BTreeMap<String, f64>,
    /// Per method, max |logged − method| (with `logged` among the compared methods): a CI rule
    /// `headline.logged_max_abs_diff.gigpo`, max 1e-4, holds the trainer to the reference.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub logged_max_abs_diff: BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress_negative_share_in_successes: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress_calibration_mse: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress_pearson: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_segment_share_before: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_segment_share_after: Option<f64>,
    /// Single-turn logs: the share of groups whose rewards all equal (GRPO learns nothing there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub zero_std_group_share: Option<f64>,
    /// Figures these logs do not have, by `--check` key, with why: a rule on one is neither
    /// passed nor failed.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub not_applicable: BTreeMap<String, String>,
}

impl Headline {
    pub fn of(summary: &Summary, comparison: Option<&Comparison>) -> Self {
        let per_method = |f: fn(&InvalidCredit) -> f64| -> BTreeMap<String, f64> {
            comparison.map_or_else(BTreeMap::new, |c| {
                c.invalid_credit
                    .iter()
                    .map(|(m, i)| (m.clone(), f(i)))
                    .collect()
            })
        };
        let progress = summary.progress.as_ref();
        let share = summary
            .segments
            .as_ref()
            .and_then(|s| s.reward_share.as_ref());
        Headline {
            rows: summary.rows,
            groups: summary.groups,
            trajectories: summary.trajectories,
            success_rate: summary.success.overall,
            invalid_action_rate: summary.invalid_actions.rate,
            singleton_step_share: summary.step_groups.overall.pct_steps[0] / 100.0,
            singleton_cluster_share: summary.step_groups.overall.pct_clusters[0] / 100.0,
            degenerate_group_share: summary.degenerate.share_of_groups,
            degenerate_step_share: summary.degenerate.share_of_steps,
            graph_progress_share_in_failures: summary.graph.share_progress_in_failures,
            graph_non_progress_share_in_successes: summary.graph.share_non_progress_in_successes,
            invalid_positive_share: per_method(|i| i.invalid_positive_share),
            invalid_positive_share_in_success: per_method(|i| i.invalid_positive_share_in_success),
            logged_max_abs_diff: comparison.map_or_else(BTreeMap::new, |c| {
                c.logged
                    .iter()
                    .map(|l| (l.method.clone(), l.max_abs_diff))
                    .collect()
            }),
            progress_negative_share_in_successes: progress.map(|p| p.share_negative_in_success),
            progress_calibration_mse: progress.map(|p| p.calibration.mse),
            progress_pearson: progress.and_then(|p| p.calibration.pearson),
            first_segment_share_before: share.map(|s| s.raw[0]),
            first_segment_share_after: share.map(|s| s.modulated[0]),
            zero_std_group_share: summary
                .single_turn
                .as_ref()
                .map(|t| 1.0 - t.effective_group_fraction),
            not_applicable: Self::not_applicable(summary),
        }
    }

    /// Single-turn logs (one step per rollout) have no step groups to speak of (every step is its
    /// own) and no state graphs, and, with no `valid` column, no invalid actions: the figures
    /// built on them do not apply. A key listed covers the keys under it
    /// (`headline.invalid_positive_share` its `.mgr`).
    fn not_applicable(summary: &Summary) -> BTreeMap<String, String> {
        if summary.single_turn.is_none() {
            return BTreeMap::new();
        }
        let steps = "single-turn logs: every rollout is one step, so there are no step groups";
        let graphs = "single-turn logs: one step per rollout, so no state graphs";
        let invalid = "single-turn logs without a `valid` column: no action is invalid";
        let validity = [
            ("invalid_action_rate", invalid),
            ("invalid_positive_share", invalid),
            ("invalid_positive_share_in_success", invalid),
        ];
        [
            ("singleton_step_share", steps),
            ("singleton_cluster_share", steps),
            ("graph_progress_share_in_failures", graphs),
            ("graph_non_progress_share_in_successes", graphs),
        ]
        .into_iter()
        .chain(
            validity
                .into_iter()
                .filter(|_| !summary.invalid_actions.logged),
        )
        .map(|(key, why)| (format!("headline.{key}"), why.to_string()))
        .collect()
    }

    /// Why `key` (`headline.invalid_positive_share.mgr`) does not apply, when it or a key above it
    /// is listed in `not_applicable`, a map as `summary.json`'s.
    pub fn why_not_applicable<'a>(
        not_applicable: &'a serde_json::Value,
        key: &str,
    ) -> Option<&'a str> {
        let mut prefix = key;
        loop {
            if let Some(why) = not_applicable.get(prefix).and_then(|w| w.as_str()) {
                return Some(why);
            }
            prefix = &prefix[..prefix.rfind('.')?];
        }
    }

    /// `summary.json`'s `headline`: the figures these logs have, and `not_applicable` naming the
    /// others (left out, so that no made-up 1.0 or 0 sits beside the reason it means nothing).
    pub fn json(&self) -> serde_json::Value {
        let mut json = serde_json::to_value(self).unwrap_or_default();
        if let Some(figures) = json.as_object_mut() {
            for key in self.not_applicable.keys() {
                figures.remove(key.trim_start_matches("headline."));
            }
        }
        json
    }

    /// The shares both reports tabulate, as (label, `headline` key, value): those the logs have.
    pub fn shares(&self) -> Vec<(&'static str, &'static str, f64)> {
        let zero_std = self.zero_std_group_share.map(|share| {
            (
                "groups whose rewards all equal (single-turn)",
                "zero_std_group_share",
                share,
            )
        });
        [
            ("success rate", "success_rate", self.success_rate),
            (
                "invalid-action rate",
                "invalid_action_rate",
                self.invalid_action_rate,
            ),
            (
                "steps in singleton step groups",
                "singleton_step_share",
                self.singleton_step_share,
            ),
            (
                "singleton step groups (of clusters)",
                "singleton_cluster_share",
                self.singleton_cluster_share,
            ),
            (
                "degenerate groups (all-success or all-fail)",
                "degenerate_group_share",
                self.degenerate_group_share,
            ),
            (
                "steps in degenerate groups",
                "degenerate_step_share",
                self.degenerate_step_share,
            ),
            (
                "progress steps in failed trajectories (graph)",
                "graph_progress_share_in_failures",
                self.graph_progress_share_in_failures,
            ),
            (
                "non-progress steps in successful trajectories (graph)",
                "graph_non_progress_share_in_successes",
                self.graph_non_progress_share_in_successes,
            ),
        ]
        .into_iter()
        .chain(zero_std)
        .filter(|(_, key, _)| !self.not_applicable.contains_key(&format!("headline.{key}")))
        .collect()
    }
}

/// The "Progress and segments" section's key numbers as (label, value), when the logs carry
/// SPA's progress or HISR's segments.
pub fn progress_numbers(summary: &Summary) -> Vec<(String, String)> {
    let pct = |x: f64| format!("{:.1}%", 100.0 * x);
    let mut rows = Vec::new();
    if let Some(p) = &summary.progress {
        rows.push((
            "trajectories with ĉ_t on every step".into(),
            format!(
                "{} ({} left out)",
                p.trajectories, p.incomplete_trajectories
            ),
        ));
        rows.push((
            "negative-progress steps in successful trajectories".into(),
            format!(
                "{} ({} of {})",
                pct(p.share_negative_in_success),
                p.negative_steps_in_success,
                p.success_steps
            ),
        ));
        let c = &p.calibration;
        rows.push((
            "calibration of Σ ĉ_t against R: MSE".into(),
            format!("{:.4}", c.mse),
        ));
        rows.push((
            "calibration: Pearson r".into(),
            c.pearson
                .map_or("undefined (constant)".into(), |r| format!("{r:.3}")),
        ));
        rows.push((
            "mean Σ ĉ_t, mean R".into(),
            format!("{:.3}, {:.3}", c.mean_predicted, c.mean_return),
        ));
    }
    if let Some(s) = &summary.segments {
        let l = &s.segments_per_trajectory;
        rows.push((
            "segments per trajectory".into(),
            format!("mean {:.2}, median {}, max {}", l.mean, l.median, l.max),
        ));
        let multi = |d: &SizeDistribution| format!("{:.1}%", 100.0 - d.pct_clusters[0]);
        rows.push((
            "segments of 2 or more turns: successful, failed".into(),
            format!(
                "{}, {}",
                multi(&s.turns_per_segment_success),
                multi(&s.turns_per_segment_failure)
            ),
        ));
        if let Some(r) = &s.reward_share {
            for (i, label) in [(0, "first"), (2, "last")] {
                rows.push((
                    format!("reward share of the {label} segment, logged → modulated"),
                    format!("{} → {}", pct(r.raw[i]), pct(r.modulated[i])),
                ));
            }
        }
    }
    rows
}

/// `summary.json`: every number in the report, the preset and parameters, the figures, checks.
pub fn summary_json(
    inputs: &Inputs,
    figures: &[Figure],
    checks: Option<&check::Outcome>,
) -> serde_json::Value {
    let mut json = serde_json::json!({
        "schema": "credit-report/1",
        "metadata": inputs.run,
        "headline": Headline::of(inputs.summary, inputs.comparison).json(),
        "analyze": inputs.summary,
        "compare": inputs.comparison,
        "figures": figures,
        "checks": checks,
    });
    // Only with `--against`: a run without it writes the same summary.json as before.
    if let Some(against) = inputs.against {
        json["against"] = serde_json::to_value(against).unwrap_or_default();
    }
    json
}
