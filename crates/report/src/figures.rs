//! The figure catalogue: one function per figure, each `fn(&Inputs) -> Option<Sketch>` (`None`
//! where the logs or the methods do not allow it), grouped as the logs call for them: every log,
//! multi-turn or single-turn logs, SPA's progress and HISR's segments, the comparison of methods,
//! and the per-iteration trends. [`figures`] draws a scope's entries in catalogue order (the
//! order of `summary.json`'s `figures`); adding a figure is adding an entry to a group.

use crate::plots::{
    sketch, BarPanels, Figure, HeatTable, LinePanels, Rendered, Scatter, ScatterPanel, Section,
    Sketch, SmallHistograms,
};
use crate::{Error, Inputs};
use credit_core::analyses::compare::{Position, POSITION_CAP};
use credit_core::analyses::progress::{Curve, ProgressPosition};
use credit_core::analyses::summary::{Rate, SizeDistribution};
use credit_core::methods::hisr::Segments;
use std::path::Path;

/// Which figures to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// The logs' figures (`analyze --plots`).
    Analyze,
    /// The methods' figures (`compare --plots`).
    Compare,
    /// Both, and the per-iteration trends (the report).
    All,
}

/// A catalogue entry.
pub type Entry = for<'i> fn(&'i Inputs<'i>) -> Option<Sketch<'i>>;

/// Every log's figures.
const LOGS: &[Entry] = &[success];
/// Logs of several steps per trajectory.
const MULTI_TURN: &[Entry] = &[lengths, step_groups, graph_distance];
/// Logs of one step per rollout: which groups teach anything, rewards by group size.
const SINGLE_TURN: &[Entry] = &[zero_std_groups, reward_by_group_size];
/// SPA's progress and HISR's segments, when the logs carry them ("Progress and segments").
const PROGRESS: &[Entry] = &[
    progress_by_position,
    progress_cumulative,
    progress_calibration,
    segment_turns,
    segment_reward_share,
];
/// The methods against each other, with a comparison.
const COMPARISON: &[Entry] = &[
    distributions,
    scatter,
    by_position,
    credit_table,
    psc_weight,
    against,
];
/// The training curve, with the report's trends.
const TRENDS: &[Entry] = &[crate::trends::sketch];

/// The entries of `scope`, in order.
fn catalogue(scope: Scope, single_turn: bool) -> Vec<Entry> {
    let turns = if single_turn { SINGLE_TURN } else { MULTI_TURN };
    match scope {
        Scope::Analyze => [LOGS, turns, PROGRESS].concat(),
        Scope::Compare => COMPARISON.to_vec(),
        Scope::All => [LOGS, turns, PROGRESS, COMPARISON, TRENDS].concat(),
    }
}

/// Draws the figures of `scope`; PNGs go to `png_dir/<id>.png` when given (written whole or not
/// at all).
pub fn figures(
    inputs: &Inputs,
    scope: Scope,
    png_dir: Option<&Path>,
) -> Result<Vec<Figure>, Error> {
    catalogue(scope, inputs.summary.single_turn.is_some())
        .into_iter()
        .filter_map(|entry| entry(inputs))
        .map(|sketch| draw(png_dir, sketch))
        .collect()
}

/// Draws one figure; its PNG goes to `png_dir/<id>.png` when given (written whole or not at
/// all).
pub fn draw(png_dir: Option<&Path>, sketch: Sketch) -> Result<Figure, Error> {
    let Rendered { svg, png } =
        (sketch.plot)(png_dir.is_some()).map_err(|message| Error::Plot {
            figure: sketch.id.to_string(),
            message,
        })?;
    if let (Some(bytes), Some(dir)) = (png, png_dir) {
        credit_output::write_file(&dir.join(format!("{}.png", sketch.id)), |f| {
            std::io::Write::write_all(f, &bytes)
        })?;
    }
    Ok(Figure {
        id: sketch.id.to_string(),
        title: sketch.title,
        caption: sketch.caption,
        svg,
        section: sketch.section,
    })
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

/// Rates as bars, one per key with its count.
fn rate_bars(rates: &[Rate]) -> Vec<(String, Vec<f64>)> {
    rates
        .iter()
        .map(|r| (format!("{} (n={})", r.key, r.n), vec![r.rate]))
        .collect()
}

/// Per-iteration rates as bars: one per iteration, or ranges of them in a long run.
fn iteration_bars(rates: &[Rate], label: impl Fn(&Rate) -> String) -> Vec<(String, Vec<f64>)> {
    let items = rates
        .iter()
        .map(|r| (r.key.parse().unwrap_or(i64::MAX), r.n as f64, vec![r.rate]));
    by_iteration(items).unwrap_or_else(|| rates.iter().map(|r| (label(r), vec![r.rate])).collect())
}

const SUCCEEDED: &str = "share of trajectories that succeeded";

fn success<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let s = inputs.summary;
    let mut panels: Vec<crate::plots::BarPanel> = Vec::new();
    if !s.success.per_task.is_empty() {
        let rows = rate_bars(&s.success.per_task);
        panels.push((
            "success rate per task".into(),
            SUCCEEDED.into(),
            rows,
            vec![],
        ));
    }
    if !s.success.per_iteration.is_empty() {
        let rows = iteration_bars(&s.success.per_iteration, |r| {
            format!("{} (n={})", r.key, r.n)
        });
        panels.push((
            "success rate per iteration".into(),
            SUCCEEDED.into(),
            rows,
            vec![],
        ));
    }
    let overall = vec![(
        format!("all (n={})", s.trajectories),
        vec![s.success.overall],
    )];
    panels.push((
        "success rate overall".into(),
        SUCCEEDED.into(),
        overall,
        vec![],
    ));
    sketch(
        Section::Figures,
        "success",
        "Success rate per task and per iteration",
        format!(
            "Share of trajectories that succeeded, overall ({:.1}%) and broken down by task and by training iteration where the logs say so.",
            100.0 * s.success.overall
        ),
        BarPanels { panels, x_max: Some(1.0), grouped: false },
    )
}

fn lengths<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let s = inputs.summary;
    let lengths = |want: bool| {
        s.length.histograms[if want { 0 } else { 1 }]
            .0
            .iter()
            .flat_map(|(&len, &n)| std::iter::repeat_n(len as f64, n))
            .collect::<Vec<_>>()
    };
    sketch(
        Section::Figures,
        "lengths",
        "Trajectory length by outcome",
        format!(
            "How many steps successful and failed trajectories take (mean {:.1} vs {:.1}). Failures that run to the step limit pile up at the right.",
            s.length.success.mean, s.length.failure.mean
        ),
        SmallHistograms {
            series: vec![("successful trajectories".into(), lengths(true).into()), ("failed trajectories".into(), lengths(false).into())],
            x_desc: "steps per trajectory".into(),
            y_desc: "share of trajectories".into(),
            bins: 30,
        },
    )
}

fn step_groups<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let g = &inputs.summary.step_groups;
    let iterations = g
        .per_iteration
        .iter()
        .map(|(it, d)| (*it, d.steps as f64, d.pct_steps.to_vec()));
    let mut rows: Vec<(String, Vec<f64>)> = by_iteration(iterations.clone()).unwrap_or_else(|| {
        iterations
            .map(|(it, _, pct)| (format!("iteration {it}"), pct))
            .collect()
    });
    rows.push(("all steps".into(), g.overall.pct_steps.to_vec()));
    sketch(
        Section::Figures,
        "step_groups",
        "Exact-anchor step-group sizes (% of steps)",
        format!(
            "GiGPO groups steps whose observation is identical within a group. Steps in groups of size 1 ({:.1}% here) get no step-level signal from GiGPO; ProxMO's soft grouping still gives them a baseline.",
            g.overall.pct_steps[0]
        ),
        BarPanels {
            panels: vec![("share of steps by the size of their anchor-state group".into(), "% of steps".into(), rows, ["size 1", "size 2", "size 3", "size > 3"].map(String::from).to_vec())],
            x_max: Some(100.0),
            grouped: false,
        },
    )
}

fn graph_distance<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let graph = &inputs.summary.graph;
    let hist: Vec<(String, Vec<f64>)> = graph
        .distance_histogram
        .iter()
        .map(|(d, n)| (format!("d = {d}"), vec![*n as f64]))
        .collect();
    sketch(
        Section::Figures,
        "graph_distance",
        "GraphGPO distance to goal",
        format!(
            "How many states of the groups' state graphs lie at each distance from success ({} of {} states can reach it). Failed trajectories still made progress on {:.1}% of their steps.",
            graph.nodes_reaching_success,
            graph.nodes,
            100.0 * graph.share_progress_in_failures
        ),
        BarPanels { panels: vec![("states by distance to success".into(), "states".into(), hist, vec![])], x_max: None, grouped: false },
    )
}

fn zero_std_groups<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let t = inputs.summary.single_turn.as_ref()?;
    let mut rows = iteration_bars(&t.zero_std_per_iteration, |r| {
        format!("iteration {} (n={})", r.key, r.n)
    });
    rows.push((
        format!("all groups (n={})", t.groups),
        vec![1.0 - t.effective_group_fraction],
    ));
    sketch(
        Section::Figures,
        "zero_std_groups",
        "Groups whose rewards all equal, per iteration",
        format!(
            "Share of groups whose rollouts all got the same reward: GRPO's advantage is 0 for every rollout there, so they teach nothing ({} of {} groups; {:.1}% of groups are effective).",
            t.zero_std_groups,
            t.groups,
            100.0 * t.effective_group_fraction
        ),
        BarPanels {
            panels: vec![("share of groups with zero reward spread".into(), "share of groups".into(), rows, vec![])],
            x_max: Some(1.0),
            grouped: false,
        },
    )
}

fn reward_by_group_size<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let t = inputs.summary.single_turn.as_ref()?;
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
    sketch(
        Section::Figures,
        "reward_by_group_size",
        "Mean reward by group size",
        "Mean reward of the rollouts of groups of each size (rollouts per prompt). Groups of one rollout have no spread at all: group-based methods give them advantage 0.".into(),
        BarPanels {
            panels: vec![("mean reward by rollouts per group".into(), "mean reward".into(), rows, vec![])],
            x_max: None,
            grouped: false,
        },
    )
}

/// SPA's curves by step position, for successful and failed trajectories: `value` of each.
fn progress_lines(
    positions: &[ProgressPosition],
    value: fn(&Curve) -> f64,
) -> Vec<crate::plots::Line> {
    let line = |side: fn(&ProgressPosition) -> &Option<Curve>| {
        positions
            .iter()
            .filter_map(|pos| side(pos).as_ref().map(|c| (pos.position as f64, value(c))))
            .collect::<Vec<_>>()
    };
    vec![
        ("successful".to_string(), 2, line(|pos| &pos.success)),
        ("failed".to_string(), 3, line(|pos| &pos.failure)),
    ]
}

/// Said under every by-position progress figure.
fn last_bucket() -> String {
    format!("positions ≥ {POSITION_CAP} share the last point")
}

fn progress_by_position<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let p = inputs.summary.progress.as_ref()?;
    sketch(
        Section::ProgressSegments,
        "progress_by_position",
        "SPA progress ĉ_t by step position",
        format!(
            "Mean logged progress ĉ_t at each step index, for successful and failed trajectories ({} trajectories; {}). ĉ_t can be negative: {:.1}% of the steps of successful trajectories are.",
            p.trajectories,
            last_bucket(),
            100.0 * p.share_negative_in_success
        ),
        LinePanels {
            panels: vec![("mean ĉ_t by outcome".into(), progress_lines(&p.by_position, |c| c.mean_progress))],
            x_desc: "step position".into(),
            y_desc: "mean progress ĉ_t".into(),
            columns: 1,
            y_range: None,
            y_within: Vec::new(),
            x_integer: false,
        },
    )
}

fn progress_cumulative<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let p = inputs.summary.progress.as_ref()?;
    sketch(
        Section::ProgressSegments,
        "progress_cumulative",
        "Cumulative progress Φ_t by step position",
        format!(
            "Mean cumulative progress Φ_t, the sum of ĉ up to and including step t, at each step index ({}). Successful trajectories should climb towards R = 1 and failed ones stay near 0; a curve that does not separate them means the estimator has not learnt what progress is.",
            last_bucket()
        ),
        LinePanels {
            panels: vec![("mean Φ_t by outcome".into(), progress_lines(&p.by_position, |c| c.mean_cumulative))],
            x_desc: "step position".into(),
            y_desc: "mean cumulative progress Φ_t".into(),
            columns: 1,
            y_range: None,
            y_within: Vec::new(),
            x_integer: false,
        },
    )
}

fn progress_calibration<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let c = &inputs.summary.progress.as_ref()?.calibration;
    sketch(
        Section::ProgressSegments,
        "progress_calibration",
        "Calibration: Σ ĉ_t against the return R",
        format!(
            "Each point is a trajectory: the estimator's prediction R̂ = Σ_t ĉ_t against the logged return R. On the line y = x the prediction is exact; the MSE is the estimator's training loss (SPA Eq. 7). Mean R̂ {:.3}, mean R {:.3}.",
            c.mean_predicted, c.mean_return
        ),
        Scatter {
            panels: vec![ScatterPanel {
                title: format!("MSE = {:.4}, Pearson r = {}", c.mse, c.pearson.map_or("undefined".into(), |r| format!("{r:.3}"))),
                x_desc: "predicted return Σ ĉ_t".into(),
                y_desc: "return R".into(),
                points: c.points.clone(),
                diagonal: true,
            }],
        },
    )
}

fn segment_turns<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let seg = inputs.summary.segments.as_ref()?;
    let turns = |outcome: &str, d: &SizeDistribution| {
        (
            format!("{outcome} ({} segments)", d.clusters),
            d.pct_clusters.to_vec(),
        )
    };
    sketch(
        Section::ProgressSegments,
        "segment_turns",
        "HISR segments: turns per segment by outcome",
        format!(
            "Share of segments made of 1, 2, 3 or more turns, in successful and failed trajectories ({:.1} segments per trajectory on average).{}",
            seg.segments_per_trajectory.mean,
            match seg.segmenter {
                Segments::Logged => "",
                Segments::PerTurn => " Every turn is its own segment (no `segment` column, or `hisr.segments = per_turn`).",
                Segments::Rule => " Segments from `hisr.segments = rule`, a heuristic, not the logged segmentation.",
            }
        ),
        BarPanels {
            panels: vec![(
                "segments by their number of turns".into(),
                "% of segments".into(),
                vec![turns("successful", &seg.turns_per_segment_success), turns("failed", &seg.turns_per_segment_failure)],
                ["1 turn", "2 turns", "3 turns", "> 3 turns"].map(String::from).to_vec(),
            )],
            x_max: Some(100.0),
            grouped: false,
        },
    )
}

fn segment_reward_share<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let share = inputs.summary.segments.as_ref()?.reward_share.as_ref()?;
    let positions = ["first segment", "middle segments", "last segment"];
    sketch(
        Section::ProgressSegments,
        "segment_reward_share",
        "HISR reward share by segment position, before and after modulation",
        format!(
            "Mean share of a trajectory's segment reward on its first, middle and last segments, as logged (the SPRM's r̂) and after HISR's hindsight modulation (paper preset: β = 0.3, L1), over {} trajectories with two or more segments. The HISR paper reports modulation raising the early segments' share from 14.8% to 21.7%.",
            share.trajectories
        ),
        BarPanels {
            panels: vec![(
                "share of reward by segment position".into(),
                "% of the trajectory's reward".into(),
                positions.iter().enumerate().map(|(i, k)| (k.to_string(), vec![100.0 * share.raw[i], 100.0 * share.modulated[i]])).collect(),
                ["logged", "modulated"].map(String::from).to_vec(),
            )],
            x_max: None,
            grouped: true,
        },
    )
}

fn distributions<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    inputs.comparison?;
    sketch(
        Section::Figures,
        "distributions",
        "Advantage distribution per method",
        "The spread of per-step credit each method assigns, on one shared axis (1st–99th percentile). Tall bars at 0 mean many steps get no credit.".into(),
        SmallHistograms { series: inputs.advantages.iter().map(|(m, v)| (m.clone(), v.as_slice().into())).collect(), x_desc: "advantage".into(), y_desc: "share of steps".into(), bins: 50 },
    )
}

fn scatter<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let c = inputs.comparison?;
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
    if panels.is_empty() {
        return None;
    }
    sketch(
        Section::Figures,
        "scatter",
        "Method against method",
        "Each point is a step; the title gives the rank correlation. Points off the diagonal trend are steps the two methods credit differently.".into(),
        Scatter { panels },
    )
}

/// Step positions do not apply to single-turn logs.
fn by_position<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let c = inputs
        .comparison
        .filter(|_| inputs.summary.single_turn.is_none())?;
    let panels: Vec<_> = c
        .methods
        .iter()
        .map(|m| {
            let pos = &c.by_position[m];
            let line = |f: &dyn Fn(&Position) -> Option<f64>| {
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
    sketch(
        Section::Figures,
        "by_position",
        "Mean advantage by step position",
        "Mean credit at each step index, for successful and failed trajectories separately. A flat line means the method credits every step of a trajectory alike (GRPO); slopes show step-level credit.".into(),
        LinePanels { panels, x_desc: "step position".into(), y_desc: "mean advantage".into(), columns: 2, y_range: None, y_within: Vec::new(), x_integer: false },
    )
}

fn credit_table<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let c = inputs.comparison?;
    // Single-turn logs without invalid actions: half the table would be empty cells, and the
    // comparison's table already gives the mean credit by outcome.
    if inputs.summary.single_turn.is_some() && !crate::sections::compare::has_invalid(c) {
        return None;
    }
    let cells = [
        "success, valid",
        "success, invalid",
        "failure, valid",
        "failure, invalid",
    ]
    .map(String::from)
    .to_vec();
    sketch(
        Section::Figures,
        "credit_table",
        "Credit by trajectory outcome × action validity",
        "Mean advantage in each cell (colour scaled per method). A positive value under 'success, invalid' means invalid actions are rewarded because their trajectory succeeded — the additive methods' blind spot that MGR closes.".into(),
        HeatTable {
            title: "mean advantage by (trajectory outcome, action validity)".into(),
            rows: c.methods.clone(),
            columns: cells,
            values: c.methods.iter().map(|m| c.cells[m].iter().map(|x| (x.steps > 0).then_some(x.mean)).collect()).collect(),
            notes: c
                .methods
                .iter()
                .map(|m| c.cells[m].iter().map(|x| format!("n={}, {:.0}% positive", x.steps, 100.0 * x.share_positive)).collect())
                .collect(),
            scale: None,
        },
    )
}

/// Every method's four scores against `--against`'s reference, one colour scale for all (leakage
/// as 1 − leakage, so that a fuller colour is better in every column).
fn against<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    let a = inputs.against?;
    let rows: Vec<String> = a.scores.keys().cloned().collect();
    let columns = [
        "Spearman ρ",
        "sign accuracy",
        "1 − leakage",
        "gradient cosine",
    ];
    let values = a
        .scores
        .values()
        .map(|s| {
            vec![
                Some(s.spearman),
                s.sign_accuracy,
                Some(1.0 - s.leakage),
                s.gradient_cosine,
            ]
        })
        .collect();
    let notes = a
        .scores
        .values()
        .map(|s| {
            let share = |x: Option<f64>| {
                x.map_or("no signed rows".into(), |x| {
                    format!("{:.1}% right", 100.0 * x)
                })
            };
            vec![
                "rank agreement".into(),
                share(s.sign_accuracy),
                format!("{:.1}% leaked", 100.0 * s.leakage),
                "policy-gradient direction".into(),
            ]
        })
        .collect();
    sketch(
        Section::Against,
        "against",
        &format!("Scores against {}", a.method),
        format!(
            "Each method against `{}` (coverage {:.1}%), every cell on one colour scale from −1 to 1: the fuller the colour on the positive side, the closer the method is to the reference. Spearman ρ and the gradient cosine run from −1 (opposed) to 1; sign accuracy and 1 − leakage from 0 to 1 (a coin's sign accuracy is 0.5). A dash where a score is undefined (no row the reference signs, or no gradient).",
            a.method,
            100.0 * a.coverage
        ),
        HeatTable {
            title: format!("scores against {}", a.method),
            rows,
            columns: columns.map(String::from).to_vec(),
            values,
            notes,
            scale: Some(1.0),
        },
    )
}

fn psc_weight<'i>(inputs: &'i Inputs<'i>) -> Option<Sketch<'i>> {
    inputs.comparison?;
    let p = inputs.proxmo.as_ref()?;
    let curve = |success: bool| {
        (0..=100)
            .map(|i| i as f64 / 100.0)
            .map(|q| (q, p.weight(success, q)))
            .collect::<Vec<_>>()
    };
    sketch(
        Section::Figures,
        "psc_weight",
        "ProxMO PSC weight w(p)",
        format!(
            "The factor ProxMO's Polarized Signal Controller puts on the episode advantage, against the group's success rate p (α = {}, β = {:.4}, {:?} form): rare successes are amplified, failures in easy groups damped.",
            p.psc_alpha,
            p.beta(),
            p.psc_form
        ),
        LinePanels {
            panels: vec![("w(p) for the parameters in use".into(), vec![("successful trajectory".into(), 2, curve(true)), ("failed trajectory".into(), 3, curve(false))])],
            x_desc: "group success rate p".into(),
            y_desc: "weight w".into(),
            columns: 1,
            y_range: None,
            y_within: Vec::new(),
            x_integer: false,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plots::Plot;

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
        ) -> crate::plots::PlotResult {
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
        let sketch = sketch(
            Section::Figures,
            "blank",
            "",
            String::new(),
            Blank { fails },
        );
        draw(dir, sketch.unwrap())
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
