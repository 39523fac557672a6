//! credit-report: every analysis as a picture, and one report for people (HTML, Markdown) and for
//! machines and CI gates (`summary.json`, threshold checks).
//!
//! Data flows one way: credit-core computes, this crate draws and writes. [`figures`] renders the
//! plots (SVG strings, and PNG files when a folder is given), [`summary_json`] gathers every number,
//! [`check::evaluate`] applies `thresholds.toml`, and [`html`] / [`markdown`] write the documents.

pub mod check;
pub mod dot;
pub mod explorer;
pub mod folder;
pub mod graphs;
pub mod html;
pub mod markdown;
pub mod palette;
pub mod plots;
pub mod run;
pub mod text;
pub mod trends;
pub mod watch;

use credit_core::analyses::compare::{Comparison, InvalidCredit, POSITION_CAP};
use credit_core::analyses::progress::{Curve, ProgressPosition};
use credit_core::analyses::summary::{SingleTurn, SizeDistribution, Summary};
use credit_core::methods::hisr::Segments;
use credit_core::methods::proxmo;
use plots::{
    render, BarPanels, Figure, HeatTable, LinePanels, Plot, Rendered, Scatter, ScatterPanel,
    Section, SmallHistograms,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

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

/// Everything a report is made of.
pub struct Inputs<'a> {
    pub summary: &'a Summary,
    pub comparison: Option<&'a Comparison>,
    /// (method label, advantage per row)
    pub advantages: &'a [(String, Vec<f64>)],
    /// ProxMO's parameters in use (for the PSC curve), when ProxMO is among the methods.
    pub proxmo: Option<proxmo::Params>,
    /// Preset, parameters and notes, as written with `credit advantages`.
    pub metadata: serde_json::Value,
}

/// Per-iteration bars: a longer run is drawn as this many ranges of consecutive iterations.
const MAX_ITERATION_BARS: usize = 40;

/// Steps drawn in a method-against-method scatter.
const SCATTER_POINTS: usize = 4000;

/// (iteration, weight, values) in equal ranges of consecutive iterations, each the weighted mean
/// of its iterations' values (weights: trajectories or steps); `None` when few enough to draw
/// one bar each.
fn by_iteration(
    items: impl Iterator<Item = (i64, f64, Vec<f64>)>,
) -> Option<Vec<(String, Vec<f64>)>> {
    let mut items: Vec<(i64, f64, Vec<f64>)> = items.collect();
    if items.len() <= MAX_ITERATION_BARS {
        return None;
    }
    items.sort_by_key(|i| i.0);
    let per_bar = items.len().div_ceil(MAX_ITERATION_BARS);
    Some(
        items
            .chunks(per_bar)
            .map(|chunk| {
                let weight: f64 = chunk.iter().map(|c| c.1).sum();
                let width = chunk[0].2.len();
                let values = (0..width)
                    .map(|k| chunk.iter().map(|c| c.1 * c.2[k]).sum::<f64>() / weight.max(1e-300))
                    .collect();
                let (first, last) = (chunk[0].0, chunk[chunk.len() - 1].0);
                (format!("iterations {first}–{last}"), values)
            })
            .collect(),
    )
}

/// Draws one figure: `plot` returns the SVG, and the PNG's bytes when asked; PNGs go to
/// `png_dir/<id>.png` when given (written whole or not at all).
fn figure(
    png_dir: Option<&Path>,
    section: Section,
    id: &str,
    title: String,
    caption: String,
    plot: &dyn Fn(bool) -> Result<Rendered, String>,
) -> Result<Figure, Error> {
    let Rendered { svg, png } = plot(png_dir.is_some()).map_err(|message| Error::Plot {
        figure: id.to_string(),
        message,
    })?;
    if let (Some(bytes), Some(dir)) = (png, png_dir) {
        credit_output::write_file(&dir.join(format!("{id}.png")), |f| {
            std::io::Write::write_all(f, &bytes)
        })?;
    }
    Ok(Figure {
        id: id.to_string(),
        title,
        caption,
        svg,
        section,
    })
}

/// How `figures` hands a figure on: (section, id, title, caption, plot).
type AddFigure<'a> = dyn FnMut(
        Section,
        &str,
        String,
        String,
        &dyn Fn(bool) -> Result<Rendered, String>,
    ) -> Result<(), Error>
    + 'a;

fn draw<P: Plot>(p: P) -> impl Fn(bool) -> Result<Rendered, String> {
    move |png| render(&p, png)
}

/// Multi-turn logs: trajectory lengths, exact-anchor step groups, state-graph distances.
fn multi_turn_figures(s: &Summary, add: &mut AddFigure) -> Result<(), Error> {
    let lengths = |want: bool| {
        s.length.histograms[if want { 0 } else { 1 }]
            .0
            .iter()
            .flat_map(|(&len, &n)| std::iter::repeat_n(len as f64, n))
            .collect::<Vec<_>>()
    };
    add(
        Section::Figures,
        "lengths",
        "Trajectory length by outcome".into(),
        format!(
            "How many steps successful and failed trajectories take (mean {:.1} vs {:.1}). Failures that run to the step limit pile up at the right.",
            s.length.success.mean, s.length.failure.mean
        ),
        &draw(SmallHistograms {
            series: vec![("successful trajectories".into(), lengths(true).into()), ("failed trajectories".into(), lengths(false).into())],
            x_desc: "steps per trajectory".into(),
            y_desc: "share of trajectories".into(),
            bins: 30,
        }),
    )?;

    let iterations = s
        .step_groups
        .per_iteration
        .iter()
        .map(|(it, d)| (*it, d.steps as f64, d.pct_steps.to_vec()));
    let mut rows: Vec<(String, Vec<f64>)> = by_iteration(iterations.clone()).unwrap_or_else(|| {
        iterations
            .map(|(it, _, pct)| (format!("iteration {it}"), pct))
            .collect()
    });
    rows.push(("all steps".into(), s.step_groups.overall.pct_steps.to_vec()));
    add(
        Section::Figures,
        "step_groups",
        "Exact-anchor step-group sizes (% of steps)".into(),
        format!(
            "GiGPO groups steps whose observation is identical within a group. Steps in groups of size 1 ({:.1}% here) get no step-level signal from GiGPO; ProxMO's soft grouping still gives them a baseline.",
            s.step_groups.overall.pct_steps[0]
        ),
        &draw(BarPanels {
            panels: vec![("share of steps by the size of their anchor-state group".into(), "% of steps".into(), rows, ["size 1", "size 2", "size 3", "size > 3"].map(String::from).to_vec())],
            x_max: Some(100.0),
            grouped: false,
        }),
    )?;

    let hist: Vec<(String, Vec<f64>)> = s
        .graph
        .distance_histogram
        .iter()
        .map(|(d, n)| (format!("d = {d}"), vec![*n as f64]))
        .collect();
    add(
        Section::Figures,
        "graph_distance",
        "GraphGPO distance to goal".into(),
        format!(
            "How many states of the groups' state graphs lie at each distance from success ({} of {} states can reach it). Failed trajectories still made progress on {:.1}% of their steps.",
            s.graph.nodes_reaching_success,
            s.graph.nodes,
            100.0 * s.graph.share_progress_in_failures
        ),
        &draw(BarPanels { panels: vec![("states by distance to success".into(), "states".into(), hist, vec![])], x_max: None, grouped: false }),
    )?;

    Ok(())
}

/// Single-turn logs (one step per rollout): lengths, step groups and state graphs do not apply;
/// what does is which groups teach anything (a group whose rewards all equal gives GRPO nothing)
/// and the rewards by group size.
fn single_turn_figures(t: &SingleTurn, add: &mut AddFigure) -> Result<(), Error> {
    let iterations = t
        .zero_std_per_iteration
        .iter()
        .map(|r| (r.key.parse().unwrap_or(i64::MAX), r.n as f64, vec![r.rate]));
    let mut rows = by_iteration(iterations).unwrap_or_else(|| {
        t.zero_std_per_iteration
            .iter()
            .map(|r| (format!("iteration {} (n={})", r.key, r.n), vec![r.rate]))
            .collect()
    });
    rows.push((
        format!("all groups (n={})", t.groups),
        vec![1.0 - t.effective_group_fraction],
    ));
    add(
        Section::Figures,
        "zero_std_groups",
        "Groups whose rewards all equal, per iteration".into(),
        format!(
            "Share of groups whose rollouts all got the same reward: GRPO's advantage is 0 for every rollout there, so they teach nothing ({} of {} groups; {:.1}% of groups are effective).",
            t.zero_std_groups,
            t.groups,
            100.0 * t.effective_group_fraction
        ),
        &draw(BarPanels {
            panels: vec![("share of groups with zero reward spread".into(), "share of groups".into(), rows, vec![])],
            x_max: Some(1.0),
            grouped: false,
        }),
    )?;
    let rows: Vec<(String, Vec<f64>)> = t
        .reward_by_group_size
        .iter()
        .map(|g| {
            (
                format!("{} rollouts ({} groups)", g.group_size, g.groups),
                vec![g.mean],
            )
        })
        .collect();
    add(
        Section::Figures,
        "reward_by_group_size",
        "Mean reward by group size".into(),
        "Mean reward of the rollouts of groups of each size (rollouts per prompt). Groups of one rollout have no spread at all: group-based methods give them advantage 0.".into(),
        &draw(BarPanels {
            panels: vec![("mean reward by rollouts per group".into(), "mean reward".into(), rows, vec![])],
            x_max: None,
            grouped: false,
        }),
    )?;
    Ok(())
}

/// Which figures to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Analyze,
    Compare,
    All,
}

/// Renders the figures of `scope`; PNGs go to `png_dir/<id>.png` when given (written whole or
/// not at all).
pub fn figures(
    inputs: &Inputs,
    scope: Scope,
    png_dir: Option<&Path>,
) -> Result<Vec<Figure>, Error> {
    let mut out = Vec::new();
    let mut add = |section: Section,
                   id: &str,
                   title: String,
                   caption: String,
                   plot: &dyn Fn(bool) -> Result<Rendered, String>|
     -> Result<(), Error> {
        out.push(figure(png_dir, section, id, title, caption, plot)?);
        Ok(())
    };
    let s = inputs.summary;

    if scope != Scope::Compare {
        let mut panels = Vec::new();
        let rates = |v: &[credit_core::analyses::summary::Rate]| {
            v.iter()
                .map(|r| (format!("{} (n={})", r.key, r.n), vec![r.rate]))
                .collect::<Vec<_>>()
        };
        if !s.success.per_task.is_empty() {
            panels.push((
                "success rate per task".to_string(),
                "share of trajectories that succeeded".to_string(),
                rates(&s.success.per_task),
                vec![],
            ));
        }
        if !s.success.per_iteration.is_empty() {
            let rows = match by_iteration(
                s.success
                    .per_iteration
                    .iter()
                    .map(|r| (r.key.parse().unwrap_or(i64::MAX), r.n as f64, vec![r.rate])),
            ) {
                Some(bins) => bins,
                None => rates(&s.success.per_iteration),
            };
            panels.push((
                "success rate per iteration".into(),
                "share of trajectories that succeeded".into(),
                rows,
                vec![],
            ));
        }
        panels.push((
            "success rate overall".into(),
            "share of trajectories that succeeded".into(),
            vec![(
                format!("all (n={})", s.trajectories),
                vec![s.success.overall],
            )],
            vec![],
        ));
        add(
            Section::Figures,
            "success",
            "Success rate per task and per iteration".into(),
            format!(
                "Share of trajectories that succeeded, overall ({:.1}%) and broken down by task and by training iteration where the logs say so.",
                100.0 * s.success.overall
            ),
            &draw(BarPanels { panels, x_max: Some(1.0), grouped: false }),
        )?;

        match &s.single_turn {
            None => multi_turn_figures(s, &mut add)?,
            Some(t) => single_turn_figures(t, &mut add)?,
        }

        if let Some(p) = &s.progress {
            let by_outcome = |value: fn(&Curve) -> f64| {
                let line = |side: fn(&ProgressPosition) -> &Option<Curve>| {
                    p.by_position
                        .iter()
                        .filter_map(|pos| {
                            side(pos).as_ref().map(|c| (pos.position as f64, value(c)))
                        })
                        .collect::<Vec<_>>()
                };
                vec![
                    ("successful".to_string(), 2, line(|pos| &pos.success)),
                    ("failed".to_string(), 3, line(|pos| &pos.failure)),
                ]
            };
            let last_bucket = format!("positions ≥ {POSITION_CAP} share the last point");
            add(
                Section::ProgressSegments,
                "progress_by_position",
                "SPA progress ĉ_t by step position".into(),
                format!(
                    "Mean logged progress ĉ_t at each step index, for successful and failed trajectories ({} trajectories; {last_bucket}). ĉ_t can be negative: {:.1}% of the steps of successful trajectories are.",
                    p.trajectories,
                    100.0 * p.share_negative_in_success
                ),
                &draw(LinePanels {
                    panels: vec![("mean ĉ_t by outcome".into(), by_outcome(|c| c.mean_progress))],
                    x_desc: "step position".into(),
                    y_desc: "mean progress ĉ_t".into(),
                    columns: 1,
                    y_range: None,
                }),
            )?;
            add(
                Section::ProgressSegments,
                "progress_cumulative",
                "Cumulative progress Φ_t by step position".into(),
                format!(
                    "Mean cumulative progress Φ_t, the sum of ĉ up to and including step t, at each step index ({last_bucket}). Successful trajectories should climb towards R = 1 and failed ones stay near 0; a curve that does not separate them means the estimator has not learnt what progress is."
                ),
                &draw(LinePanels {
                    panels: vec![("mean Φ_t by outcome".into(), by_outcome(|c| c.mean_cumulative))],
                    x_desc: "step position".into(),
                    y_desc: "mean cumulative progress Φ_t".into(),
                    columns: 1,
                    y_range: None,
                }),
            )?;
            let c = &p.calibration;
            add(
                Section::ProgressSegments,
                "progress_calibration",
                "Calibration: Σ ĉ_t against the return R".into(),
                format!(
                    "Each point is a trajectory: the estimator's prediction R̂ = Σ_t ĉ_t against the logged return R. On the line y = x the prediction is exact; the MSE is the estimator's training loss (SPA Eq. 7). Mean R̂ {:.3}, mean R {:.3}.",
                    c.mean_predicted, c.mean_return
                ),
                &draw(Scatter {
                    panels: vec![ScatterPanel {
                        title: format!("MSE = {:.4}, Pearson r = {}", c.mse, c.pearson.map_or("undefined".into(), |r| format!("{r:.3}"))),
                        x_desc: "predicted return Σ ĉ_t".into(),
                        y_desc: "return R".into(),
                        points: c.points.clone(),
                        diagonal: true,
                    }],
                }),
            )?;
        }

        if let Some(seg) = &s.segments {
            let turns = |outcome: &str, d: &SizeDistribution| {
                (
                    format!("{outcome} ({} segments)", d.clusters),
                    d.pct_clusters.to_vec(),
                )
            };
            add(
                Section::ProgressSegments,
                "segment_turns",
                "HISR segments: turns per segment by outcome".into(),
                format!(
                    "Share of segments made of 1, 2, 3 or more turns, in successful and failed trajectories ({:.1} segments per trajectory on average).{}",
                    seg.segments_per_trajectory.mean,
                    match seg.segmenter {
                        Segments::Logged => "",
                        Segments::PerTurn => " Every turn is its own segment (no `segment` column, or `hisr.segments = per_turn`).",
                        Segments::Rule => " Segments from `hisr.segments = rule`, a heuristic, not the logged segmentation.",
                    }
                ),
                &draw(BarPanels {
                    panels: vec![(
                        "segments by their number of turns".into(),
                        "% of segments".into(),
                        vec![turns("successful", &seg.turns_per_segment_success), turns("failed", &seg.turns_per_segment_failure)],
                        ["1 turn", "2 turns", "3 turns", "> 3 turns"].map(String::from).to_vec(),
                    )],
                    x_max: Some(100.0),
                    grouped: false,
                }),
            )?;
            if let Some(share) = &seg.reward_share {
                let positions = ["first segment", "middle segments", "last segment"];
                add(
                    Section::ProgressSegments,
                    "segment_reward_share",
                    "HISR reward share by segment position, before and after modulation".into(),
                    format!(
                        "Mean share of a trajectory's segment reward on its first, middle and last segments, as logged (the SPRM's r̂) and after HISR's hindsight modulation (paper preset: β = 0.3, L1), over {} trajectories with two or more segments. The HISR paper reports modulation raising the early segments' share from 14.8% to 21.7%.",
                        share.trajectories
                    ),
                    &draw(BarPanels {
                        panels: vec![(
                            "share of reward by segment position".into(),
                            "% of the trajectory's reward".into(),
                            positions.iter().enumerate().map(|(i, k)| (k.to_string(), vec![100.0 * share.raw[i], 100.0 * share.modulated[i]])).collect(),
                            ["logged", "modulated"].map(String::from).to_vec(),
                        )],
                        x_max: None,
                        grouped: true,
                    }),
                )?;
            }
        }
    }

    if scope != Scope::Analyze {
        if let Some(c) = inputs.comparison {
            add(
                Section::Figures,
                "distributions",
                "Advantage distribution per method".into(),
                "The spread of per-step credit each method assigns, on one shared axis (1st–99th percentile). Tall bars at 0 mean many steps get no credit.".into(),
                &draw(SmallHistograms { series: inputs.advantages.iter().map(|(m, v)| (m.clone(), v.as_slice().into())).collect(), x_desc: "advantage".into(), y_desc: "share of steps".into(), bins: 50 }),
            )?;
            let column = |m: &str| {
                inputs
                    .advantages
                    .iter()
                    .find(|(n, _)| n == m)
                    .map_or(&[][..], |(_, v)| v.as_slice())
            };
            let panels: Vec<_> = c
                .pairwise
                .iter()
                .take(6)
                .map(|p| ScatterPanel {
                    title: match p.spearman {
                        Some(r) => format!("{} vs {}: Spearman ρ = {r:.3}", p.a, p.b),
                        None => format!("{} vs {}: ρ undefined (constant)", p.a, p.b),
                    },
                    x_desc: format!("adv_{}", p.a),
                    y_desc: format!("adv_{}", p.b),
                    // An even stride of at most SCATTER_POINTS steps: all a picture can show.
                    points: column(&p.a)
                        .iter()
                        .copied()
                        .zip(column(&p.b).iter().copied())
                        .step_by(column(&p.a).len().div_ceil(SCATTER_POINTS).max(1))
                        .collect(),
                    diagonal: false,
                })
                .collect();
            if !panels.is_empty() {
                add(
                    Section::Figures,
                    "scatter",
                    "Method against method".into(),
                    "Each point is a step; the title gives the rank correlation. Points off the diagonal trend are steps the two methods credit differently.".into(),
                    &draw(Scatter { panels }),
                )?;
            }
            let panels: Vec<_> = c
                .methods
                .iter()
                .map(|m| {
                    let pos = &c.by_position[m];
                    let line =
                        |f: &dyn Fn(&credit_core::analyses::compare::Position) -> Option<f64>| {
                            pos.iter()
                                .filter_map(|p| f(p).map(|v| (p.position as f64, v)))
                                .collect::<Vec<_>>()
                        };
                    (
                        m.clone(),
                        vec![
                            ("successful".to_string(), 2, line(&|p| p.mean_success)),
                            ("failed".to_string(), 3, line(&|p| p.mean_failure)),
                        ],
                    )
                })
                .collect();
            if s.single_turn.is_none() {
                add(
                Section::Figures,
                "by_position",
                "Mean advantage by step position".into(),
                "Mean credit at each step index, for successful and failed trajectories separately. A flat line means the method credits every step of a trajectory alike (GRPO); slopes show step-level credit.".into(),
                &draw(LinePanels { panels, x_desc: "step position".into(), y_desc: "mean advantage".into(), columns: 2, y_range: None }),
            )?;
            }
            let cells = [
                "success, valid",
                "success, invalid",
                "failure, valid",
                "failure, invalid",
            ]
            .map(String::from)
            .to_vec();
            add(
                Section::Figures,
                "credit_table",
                "Credit by trajectory outcome × action validity".into(),
                "Mean advantage in each cell (colour scaled per method). A positive value under 'success, invalid' means invalid actions are rewarded because their trajectory succeeded — the additive methods' blind spot that MGR closes.".into(),
                &draw(HeatTable {
                    title: "mean advantage by (trajectory outcome, action validity)".into(),
                    rows: c.methods.clone(),
                    columns: cells,
                    values: c.methods.iter().map(|m| c.cells[m].iter().map(|x| (x.steps > 0).then_some(x.mean)).collect()).collect(),
                    notes: c
                        .methods
                        .iter()
                        .map(|m| c.cells[m].iter().map(|x| format!("n={}, {:.0}% positive", x.steps, 100.0 * x.share_positive)).collect())
                        .collect(),
                }),
            )?;
            if let Some(p) = &inputs.proxmo {
                let curve = |success: bool| {
                    (0..=100)
                        .map(|i| i as f64 / 100.0)
                        .map(|q| (q, p.weight(success, q)))
                        .collect::<Vec<_>>()
                };
                add(
                    Section::Figures,
                    "psc_weight",
                    "ProxMO PSC weight w(p)".into(),
                    format!(
                        "The factor ProxMO's Polarized Signal Controller puts on the episode advantage, against the group's success rate p (α = {}, β = {:.4}, {:?} form): rare successes are amplified, failures in easy groups damped.",
                        p.psc_alpha,
                        p.beta(),
                        p.psc_form
                    ),
                    &draw(LinePanels {
                        panels: vec![("w(p) for the parameters in use".into(), vec![("successful trajectory".into(), 2, curve(true)), ("failed trajectory".into(), 3, curve(false))])],
                        x_desc: "group success rate p".into(),
                        y_desc: "weight w".into(),
                        columns: 1,
                        y_range: None,
                    }),
                )?;
            }
        }
    }
    Ok(out)
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
    /// own) and no state graphs: the figures built on them do not apply.
    fn not_applicable(summary: &Summary) -> BTreeMap<String, String> {
        if summary.single_turn.is_none() {
            return BTreeMap::new();
        }
        let steps = "single-turn logs: every rollout is one step, so there are no step groups";
        let graphs = "single-turn logs: one step per rollout, so no state graphs";
        [
            ("singleton_step_share", steps),
            ("singleton_cluster_share", steps),
            ("graph_progress_share_in_failures", graphs),
            ("graph_non_progress_share_in_successes", graphs),
        ]
        .into_iter()
        .map(|(key, why)| (format!("headline.{key}"), why.to_string()))
        .collect()
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
    serde_json::json!({
        "schema": "credit-report/1",
        "metadata": inputs.metadata,
        "headline": Headline::of(inputs.summary, inputs.comparison),
        "analyze": inputs.summary,
        "compare": inputs.comparison,
        "figures": figures,
        "checks": checks,
    })
}

#[cfg(test)]
mod by_iteration_tests {
    use super::*;

    #[test]
    fn long_runs_are_drawn_in_ranges_weighted_by_count() {
        // 80 iterations, the k-th with weight k and value k: 40 bars of two iterations each; the
        // first bar (iterations 1–2) is (1·1 + 2·2)/3.
        let items = (1..=80).map(|k| (k as i64, k as f64, vec![k as f64]));
        let bins = by_iteration(items).unwrap();
        assert_eq!(bins.len(), 40);
        assert_eq!(bins[0].0, "iterations 1–2");
        assert!((bins[0].1[0] - 5.0 / 3.0).abs() < 1e-12);
        assert_eq!(bins[39].0, "iterations 79–80");
        assert!(by_iteration((1..=40).map(|k| (k, 1.0, vec![0.0]))).is_none());
    }
}

#[cfg(test)]
mod figure_tests {
    use super::*;

    /// A blank figure; `fails` makes its drawing fail as a plot's can.
    struct Blank {
        fails: bool,
    }

    impl Plot for Blank {
        fn size(&self) -> (u32, u32) {
            (40, 20)
        }
        fn draw<DB: plotters::prelude::DrawingBackend>(
            &self,
            _: &plotters::prelude::DrawingArea<DB, plotters::coord::Shift>,
        ) -> plots::PlotResult {
            if self.fails {
                Err("no data to draw".into())
            } else {
                Ok(())
            }
        }
    }

    /// A fresh folder of this test's own under the system's temporary folder.
    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("credit-report-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn blank(dir: Option<&Path>, fails: bool) -> Result<Figure, Error> {
        figure(
            dir,
            Section::Figures,
            "blank",
            String::new(),
            String::new(),
            &|png| render(&Blank { fails }, png),
        )
    }

    #[test]
    fn a_figure_renders_its_png_in_memory_and_writes_it() {
        let dir = scratch("png");
        let figure = blank(Some(&dir), false).unwrap();
        assert!(figure.svg.contains("<svg"));
        let png = std::fs::read(dir.join("blank.png")).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        let names: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(names.len(), 1, "a temporary file was left");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn drawing_and_writing_errors_are_sentences_naming_the_figure_or_file() {
        let e = blank(None, true).unwrap_err().to_string();
        assert_eq!(e, "drawing figure `blank`: no data to draw");
        let missing =
            std::env::temp_dir().join(format!("credit-report-{}-gone", std::process::id()));
        let e = blank(Some(&missing), false).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "writing {}: no such file or directory",
                missing.join("blank.png").display()
            )
        );
    }
}
