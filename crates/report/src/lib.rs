//! credit-report: every analysis as a picture, and one report for people (HTML, Markdown) and for
//! machines and CI gates (`summary.json`, threshold checks).
//!
//! Data flows one way: credit-core computes, this crate draws and writes. [`figures`] renders the
//! plots (SVG strings, and PNG files when a folder is given), [`summary_json`] gathers every number,
//! [`check::evaluate`] applies `thresholds.toml`, and [`html`] / [`markdown`] write the documents.

pub mod check;
pub mod html;
pub mod markdown;
pub mod plots;

use credit_core::analyses::compare::Comparison;
use credit_core::analyses::summary::Summary;
use credit_core::methods::proxmo;
use credit_core::StepBatch;
use plots::{render, BarPanels, Figure, HeatTable, LinePanels, PairScatter, Plot, SmallHistograms};
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("drawing {figure}: {message}")]
    Plot { figure: String, message: String },
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("{0}")]
    Check(String),
}

/// Everything a report is made of.
pub struct Inputs<'a> {
    pub batch: &'a StepBatch,
    pub summary: &'a Summary,
    pub comparison: Option<&'a Comparison>,
    /// (method label, advantage per row)
    pub advantages: &'a [(String, Vec<f64>)],
    /// ProxMO's parameters in use (for the PSC curve), when ProxMO is among the methods.
    pub proxmo: Option<proxmo::Params>,
    /// Preset, parameters and notes, as written with `credit advantages`.
    pub metadata: serde_json::Value,
}

/// Which figures to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Analyze,
    Compare,
    All,
}

/// Renders the figures of `scope`; PNGs go to `png_dir/<id>.png` when given (written through a
/// temporary name, then renamed).
pub fn figures(
    inputs: &Inputs,
    scope: Scope,
    png_dir: Option<&Path>,
) -> Result<Vec<Figure>, Error> {
    let mut out = Vec::new();
    let mut add = |id: &str,
                   title: String,
                   caption: String,
                   plot: &dyn Fn(Option<&Path>) -> Result<String, String>|
     -> Result<(), Error> {
        let png = png_dir.map(|d| d.join(format!(".{id}.tmp.png")));
        let svg = plot(png.as_deref()).map_err(|message| Error::Plot {
            figure: id.to_string(),
            message,
        })?;
        if let (Some(tmp), Some(dir)) = (png, png_dir) {
            let target = dir.join(format!("{id}.png"));
            std::fs::rename(&tmp, &target).map_err(|e| Error::File {
                path: target,
                message: e.to_string(),
            })?;
        }
        out.push(Figure {
            id: id.to_string(),
            title,
            caption,
            svg,
        });
        Ok(())
    };
    fn draw<P: Plot>(p: P) -> impl Fn(Option<&Path>) -> Result<String, String> {
        move |png| render(&p, png)
    }
    let s = inputs.summary;
    let batch = inputs.batch;

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
            panels.push((
                "success rate per iteration".into(),
                "share of trajectories that succeeded".into(),
                rates(&s.success.per_iteration),
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
            "success",
            "Success rate per task and per iteration".into(),
            format!(
                "Share of trajectories that succeeded, overall ({:.1}%) and broken down by task and by training iteration where the logs say so.",
                100.0 * s.success.overall
            ),
            &draw(BarPanels { panels, x_max: Some(1.0) }),
        )?;

        let lengths = |want: bool| {
            batch
                .trajs
                .iter()
                .filter(|t| t.success == want)
                .map(|t| t.rows.len() as f64)
                .collect::<Vec<_>>()
        };
        add(
            "lengths",
            "Trajectory length by outcome".into(),
            format!(
                "How many steps successful and failed trajectories take (mean {:.1} vs {:.1}). Failures that run to the step limit pile up at the right.",
                s.length.success.mean, s.length.failure.mean
            ),
            &draw(SmallHistograms {
                series: vec![("successful trajectories".into(), lengths(true)), ("failed trajectories".into(), lengths(false))],
                x_desc: "steps per trajectory".into(),
                y_desc: "share of trajectories".into(),
                bins: 30,
            }),
        )?;

        let mut rows: Vec<(String, Vec<f64>)> = s
            .step_groups
            .per_iteration
            .iter()
            .map(|(it, d)| (format!("iteration {it}"), d.pct_steps.to_vec()))
            .collect();
        rows.push(("all steps".into(), s.step_groups.overall.pct_steps.to_vec()));
        add(
            "step_groups",
            "Exact-anchor step-group sizes (% of steps)".into(),
            format!(
                "GiGPO groups steps whose observation is identical within a group. Steps in groups of size 1 ({:.1}% here) get no step-level signal from GiGPO; ProxMO's soft grouping still gives them a baseline.",
                s.step_groups.overall.pct_steps[0]
            ),
            &draw(BarPanels {
                panels: vec![("share of steps by the size of their anchor-state group".into(), "% of steps".into(), rows, ["size 1", "size 2", "size 3", "size > 3"].map(String::from).to_vec())],
                x_max: Some(100.0),
            }),
        )?;

        let hist: Vec<(String, Vec<f64>)> = s
            .graph
            .distance_histogram
            .iter()
            .map(|(d, n)| (format!("d = {d}"), vec![*n as f64]))
            .collect();
        add(
            "graph_distance",
            "GraphGPO distance to goal".into(),
            format!(
                "How many states of the groups' state graphs lie at each distance from success ({} of {} states can reach it). Failed trajectories still made progress on {:.1}% of their steps.",
                s.graph.nodes_reaching_success,
                s.graph.nodes,
                100.0 * s.graph.share_progress_in_failures
            ),
            &draw(BarPanels { panels: vec![("states by distance to success".into(), "states".into(), hist, vec![])], x_max: None }),
        )?;
    }

    if scope != Scope::Analyze {
        if let Some(c) = inputs.comparison {
            add(
                "distributions",
                "Advantage distribution per method".into(),
                "The spread of per-step credit each method assigns, on one shared axis (1st–99th percentile). Tall bars at 0 mean many steps get no credit.".into(),
                &draw(SmallHistograms { series: inputs.advantages.to_vec(), x_desc: "advantage".into(), y_desc: "share of steps".into(), bins: 50 }),
            )?;
            let column = |m: &str| {
                inputs
                    .advantages
                    .iter()
                    .find(|(n, _)| n == m)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            let pairs: Vec<_> = c
                .pairwise
                .iter()
                .take(6)
                .map(|p| {
                    (
                        p.a.clone(),
                        p.b.clone(),
                        column(&p.a),
                        column(&p.b),
                        p.spearman,
                    )
                })
                .collect();
            if !pairs.is_empty() {
                add(
                    "scatter",
                    "Method against method".into(),
                    "Each point is a step; the title gives the rank correlation. Points off the diagonal trend are steps the two methods credit differently.".into(),
                    &draw(PairScatter { pairs }),
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
            add(
                "by_position",
                "Mean advantage by step position".into(),
                "Mean credit at each step index, for successful and failed trajectories separately. A flat line means the method credits every step of a trajectory alike (GRPO); slopes show step-level credit.".into(),
                &draw(LinePanels { panels, x_desc: "step position".into(), y_desc: "mean advantage".into(), columns: 2, y_range: None }),
            )?;
            let cells = [
                "success, valid",
                "success, invalid",
                "failure, valid",
                "failure, invalid",
            ]
            .map(String::from)
            .to_vec();
            add(
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

/// The headline numbers CI rules usually gate on, with short stable keys.
pub fn headline(summary: &Summary, comparison: Option<&Comparison>) -> serde_json::Value {
    let per_method =
        |f: &dyn Fn(&credit_core::analyses::compare::InvalidCredit) -> f64| -> serde_json::Value {
            comparison.map_or(serde_json::json!({}), |c| {
                c.invalid_credit
                    .iter()
                    .map(|(m, i)| (m.clone(), serde_json::json!(f(i))))
                    .collect()
            })
        };
    serde_json::json!({
        "rows": summary.rows,
        "groups": summary.groups,
        "trajectories": summary.trajectories,
        "success_rate": summary.success.overall,
        "invalid_action_rate": summary.invalid_actions.rate,
        "singleton_step_share": summary.step_groups.overall.pct_steps[0] / 100.0,
        "singleton_cluster_share": summary.step_groups.overall.pct_clusters[0] / 100.0,
        "degenerate_group_share": summary.degenerate.share_of_groups,
        "degenerate_step_share": summary.degenerate.share_of_steps,
        "graph_progress_share_in_failures": summary.graph.share_progress_in_failures,
        "graph_non_progress_share_in_successes": summary.graph.share_non_progress_in_successes,
        "invalid_positive_share": per_method(&|i| i.invalid_positive_share),
        "invalid_positive_share_in_success": per_method(&|i| i.invalid_positive_share_in_success),
    })
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
        "headline": headline(inputs.summary, inputs.comparison),
        "analyze": inputs.summary,
        "compare": inputs.comparison,
        "figures": figures,
        "checks": checks,
    })
}
