//! `credit analyze [PATHS]`: what is in the logs, in one screen (or `--format json`).

use super::{read_windows, write_plots, Format, Globals, MethodArgs, Notes};
use crate::config::ProjectFile;
use crate::exit::ExitCode;
use anyhow::Result;
use credit_core::analyses::progress::Curve;
use credit_core::analyses::summary::{summary_part, SizeDistribution, Summary, SummaryBuilder};
use credit_core::ingest::{Event, UnitKind};
use credit_core::methods::hisr::Segments;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub globals: Globals,
    /// Also draw the analysis' figures (PNG and SVG) into this folder.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<std::path::PathBuf>,
    /// Also group steps as verl-agent's GiGPO similarity groups do (`--set gigpo.similarity`) at
    /// these thresholds, and show how the singleton share falls as the threshold drops. Costs a
    /// string-similarity ratio per pair of distinct states in a group (minutes per million rows).
    #[arg(
        long,
        value_name = "THRESHOLDS",
        value_delimiter = ',',
        num_args = 0..,
        require_equals = true,
        default_missing_value = "0.95,0.9,0.8",
        value_parser = similarity_threshold
    )]
    pub similarity: Option<Vec<f64>>,
    #[command(flatten)]
    pub models: super::progress::SignalModels,
}

fn similarity_threshold(text: &str) -> std::result::Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(t) if t > 0.0 && t < 1.0 => Ok(t),
        _ => Err(format!("{text:?} is not a threshold in (0, 1)")),
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    let project = ProjectFile::load(args.globals.config.as_deref())?;
    // No method flags here: HISR's segmenter comes from the preset and credit.toml.
    let hisr = MethodArgs::default().hisr_params(&project)?;
    let fillers = args.models.load(&hisr)?;
    let mut builder = SummaryBuilder::default();
    let mut notes = Notes::default();
    let thresholds = args.similarity.as_deref().unwrap_or_default();
    let report = read_windows(
        &args.globals,
        &project,
        UnitKind::Group,
        |window| {
            let (batch, notes) = fillers.fill(&window.batch)?;
            let part = summary_part(&batch, &hisr);
            Ok((part.with_similarity(&batch, thresholds), notes))
        },
        |event| {
            match event {
                Event::Window(_, (part, window_notes)) => {
                    builder.add(part);
                    notes.extend(window_notes);
                }
                Event::Restart => {
                    builder = SummaryBuilder::default();
                    notes.clear();
                }
            }
            Ok(())
        },
    )?;
    for note in notes.into_vec().iter().chain(&report.notes) {
        eprintln!("note: {note}");
    }
    let summary = builder.finish(&report);
    if let Some(dir) = &args.plots {
        let inputs = credit_report::Inputs {
            summary: &summary,
            comparison: None,
            advantages: &[],
            proxmo: None,
            metadata: serde_json::json!({}),
        };
        write_plots(
            dir,
            &inputs,
            credit_report::Scope::Analyze,
            args.globals.format == Format::Json,
        )?;
    }
    match args.globals.format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&summary)?),
        Format::Text => out!("{}", render(&summary)),
    }
    Ok(ExitCode::Ok)
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn buckets(d: &SizeDistribution, of_steps: bool) -> String {
    let v = if of_steps {
        d.pct_steps
    } else {
        d.pct_clusters
    };
    format!(
        "{:>6.1}% {:>6.1}% {:>6.1}% {:>6.1}%",
        v[0], v[1], v[2], v[3]
    )
}

/// Single-turn logs: which groups teach anything, and the rewards by group size; the multi-turn
/// sections are left out with one line saying why.
fn render_single_turn(o: &mut String, t: &credit_core::analyses::summary::SingleTurn) {
    use std::fmt::Write;
    let _ = writeln!(
        o,
        "\nsingle-turn logs (one step per rollout): trajectory lengths, step groups and state graphs do not apply"
    );
    let _ = writeln!(
        o,
        "zero-std groups (all rewards equal, GRPO advantage 0): {} of {}; effective groups {}",
        t.zero_std_groups,
        t.groups,
        pct(t.effective_group_fraction)
    );
    for rate in &t.zero_std_per_iteration {
        let _ = writeln!(
            o,
            "    iteration {:<22} {:>7} zero-std  ({} groups)",
            rate.key,
            pct(rate.rate),
            rate.n
        );
    }
    let _ = writeln!(
        o,
        "rewards by group size   groups  rollouts    mean     min     max  values"
    );
    for g in &t.reward_by_group_size {
        let values: Vec<String> = g.values.iter().map(|(v, n)| format!("{v}×{n}")).collect();
        let _ = writeln!(
            o,
            "  {:<21} {:>6} {:>9} {:>7.3} {:>7.3} {:>7.3}  {}",
            g.group_size,
            g.groups,
            g.rollouts,
            g.mean,
            g.min,
            g.max,
            values.join(" ")
        );
    }
}

/// `columns: group_id ← uid, …` (the renamed ones), then one line per field whose log carries
/// several names for it.
fn render_columns(uses: &[credit_core::schema::ColumnUse]) -> String {
    let renamed: Vec<String> = uses
        .iter()
        .filter(|u| u.column != u.field || u.field == credit_core::schema::columns::OBS)
        .map(|u| u.short())
        .collect();
    let mut out = format!("columns: {}", renamed.join(", "));
    for u in uses.iter().filter(|u| !u.also.is_empty()) {
        out.push_str(&format!("\n  {}", u.describe()));
    }
    out
}

pub fn render(s: &Summary) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let iterations = s
        .iterations
        .map_or(String::new(), |i| format!(", {i} iterations"));
    let _ = writeln!(
        o,
        "{} {}, {} rows{iterations}, {} groups, {} trajectories",
        s.files,
        if s.files == 1 { "file" } else { "files" },
        s.rows,
        s.groups,
        s.trajectories
    );
    let _ = writeln!(o, "{}", render_columns(&s.columns));
    let r = &s.rollouts_per_group;
    let _ = writeln!(
        o,
        "rollouts per group: min {} / mean {:.1} / max {}; {} group(s) with a single rollout",
        r.min, r.mean, r.max, r.single_rollout_groups
    );
    let _ = writeln!(o, "\nsuccess: {} of trajectories", pct(s.success.overall));
    for (title, rates) in [
        ("per task", &s.success.per_task),
        ("per iteration", &s.success.per_iteration),
    ] {
        if !rates.is_empty() {
            let _ = writeln!(o, "  {title}:");
            for rate in rates {
                let _ = writeln!(
                    o,
                    "    {:<32} {:>7}  ({} trajectories)",
                    rate.key,
                    pct(rate.rate),
                    rate.n
                );
            }
        }
    }
    if s.single_turn.is_none() {
        let _ = writeln!(o, "\ntrajectory length      n   mean  median  max");
        for (name, l) in [
            ("success", &s.length.success),
            ("failure", &s.length.failure),
        ] {
            let _ = writeln!(
                o,
                "  {name:<16} {:>5} {:>6.1} {:>7.1} {:>4}",
                l.trajectories, l.mean, l.median, l.max
            );
        }
    }
    let inv = &s.invalid_actions;
    let logged = if inv.logged {
        ""
    } else {
        " (no `valid` column)"
    };
    let _ = writeln!(
        o,
        "\ninvalid actions: {} of steps ({} steps){logged}",
        pct(inv.rate),
        inv.steps
    );
    for rate in &inv.per_task {
        let _ = writeln!(
            o,
            "    {:<32} {:>7}  ({} steps)",
            rate.key,
            pct(rate.rate),
            rate.n
        );
    }
    let d = &s.degenerate;
    let _ = writeln!(
        o,
        "\ndegenerate groups (GRPO signal 0): {} all-success + {} all-fail = {} of groups, {} of steps",
        d.all_success_groups,
        d.all_fail_groups,
        pct(d.share_of_groups),
        pct(d.share_of_steps)
    );
    if let Some(t) = &s.single_turn {
        render_single_turn(&mut o, t);
    } else {
        let g = &s.step_groups;
        let _ = writeln!(
            o,
            "\nexact-anchor step groups: {} clusters over {} steps, mean size {:.2}",
            g.overall.clusters, g.overall.steps, g.overall.mean_size
        );
        let _ = writeln!(o, "                       size 1  size 2  size 3   >3");
        let _ = writeln!(o, "  % of steps          {}", buckets(&g.overall, true));
        let _ = writeln!(o, "  % of clusters       {}", buckets(&g.overall, false));
        for (it, dist) in &g.per_iteration {
            let _ = writeln!(o, "  iteration {it:<6} steps {}", buckets(dist, true));
        }
        if !g.similarity.is_empty() {
            let _ = writeln!(
                o,
                "  similarity groups (gigpo.similarity; % of steps by size, clusters):"
            );
            for t in &g.similarity {
                let _ = writeln!(
                    o,
                    "  θ = {:<16} {}  {}",
                    t.threshold,
                    buckets(&t.overall, true),
                    t.overall.clusters
                );
            }
        }
        let gr = &s.graph;
        let _ = writeln!(
            o,
            "\nstate graphs (GraphGPO): {} state nodes, {} edges, {:.2} steps per node; {} of nodes reach success ({} of {} groups have one)",
            gr.nodes,
            gr.edges,
            gr.steps_per_node,
            pct(gr.share_nodes_reaching_success),
            gr.groups_with_success,
            gr.groups
        );
        let hist: Vec<String> = gr
            .distance_histogram
            .iter()
            .map(|(d, n)| format!("{d}:{n}"))
            .collect();
        let _ = writeln!(o, "  distance to goal (d:nodes): {}", hist.join(" "));
        let _ = writeln!(
            o,
            "  progress steps in failed trajectories: {} ({} of {}); non-progress steps in successful ones: {} ({} of {})",
            pct(gr.share_progress_in_failures),
            gr.progress_steps_in_failures,
            gr.failed_steps,
            pct(gr.share_non_progress_in_successes),
            gr.non_progress_steps_in_successes,
            gr.success_steps
        );
        let _ = writeln!(
            o,
            "  revisits: {} steps, {} trajectories with cycles; dead-end steps: {}",
            gr.revisit_steps, gr.trajectories_with_cycles, gr.dead_end_steps
        );
    }
    if let Some(p) = &s.progress {
        let c = &p.calibration;
        let r = c.pearson.map_or("n/a".into(), |r| format!("{r:.3}"));
        let _ = writeln!(
            o,
            "\nprogress (SPA ĉ_t): {} trajectories, {} steps; Σĉ vs R: MSE {:.4}, Pearson r {r} (mean Σĉ {:.3}, mean R {:.3})",
            p.trajectories, p.steps, c.mse, c.mean_predicted, c.mean_return
        );
        if p.incomplete_trajectories > 0 {
            let _ = writeln!(
                o,
                "  {} trajectories left out (a step without `progress`)",
                p.incomplete_trajectories
            );
        }
        let _ = writeln!(
            o,
            "  negative-progress steps in successful trajectories: {} ({} of {})",
            pct(p.share_negative_in_success),
            p.negative_steps_in_success,
            p.success_steps
        );
        let _ = writeln!(o, "  step   ĉ success  Φ success   ĉ failure  Φ failure");
        let cell = |c: &Option<Curve>| {
            c.as_ref().map_or(format!("{:>10} {:>10}", "-", "-"), |c| {
                format!("{:>10.3} {:>10.3}", c.mean_progress, c.mean_cumulative)
            })
        };
        for row in p.by_position.iter().take(10) {
            let _ = writeln!(
                o,
                "  {:<4} {}  {}",
                row.position,
                cell(&row.success),
                cell(&row.failure)
            );
        }
        if p.by_position.len() > 10 {
            let _ = writeln!(
                o,
                "  … {} more positions (--format json)",
                p.by_position.len() - 10
            );
        }
    }
    if let Some(g) = &s.segments {
        let l = &g.segments_per_trajectory;
        let logged = match g.segmenter {
            Segments::Logged => "",
            Segments::PerTurn => {
                " (one per turn: no `segment` column, or `hisr.segments = per_turn`)"
            }
            Segments::Rule => " (`hisr.segments = rule`: a heuristic, not the logged segmentation)",
        };
        let _ = writeln!(
            o,
            "\nsegments (HISR){logged}: {:.2} per trajectory (median {:.1}, max {})",
            l.mean, l.median, l.max
        );
        let _ = writeln!(o, "  turns per segment      size 1  size 2  size 3   >3");
        for (name, d) in [
            ("success", &g.turns_per_segment_success),
            ("failure", &g.turns_per_segment_failure),
        ] {
            if d.clusters > 0 {
                let _ = writeln!(o, "  {name}, % of segs  {}", buckets(d, false));
            }
        }
        if g.fallback_trajectories > 0 {
            let _ = writeln!(
                o,
                "  {} trajectories with non-contiguous `segment` ids counted one segment per turn",
                g.fallback_trajectories
            );
        }
        if let Some(r) = &g.reward_share {
            let three = |v: [f64; 3]| format!("{} / {} / {}", pct(v[0]), pct(v[1]), pct(v[2]));
            let _ = writeln!(
                o,
                "  reward share first / middle / last segment ({} trajectories): SPRM {}, after HISR modulation {}",
                r.trajectories,
                three(r.raw),
                three(r.modulated)
            );
        }
    }
    if s.padding_duplicates > 0 {
        let _ = writeln!(o, "\npadding duplicates dropped: {} rows (exact copies of earlier rows, as verl-agent's adjust_batch makes)", s.padding_duplicates);
    }
    if !s.skipped.is_empty() {
        let list: Vec<String> = s.skipped.iter().map(|(k, v)| format!("{v} {k}")).collect();
        let _ = writeln!(o, "\nskipped rows (--lenient): {}", list.join(", "));
    }
    if !s.diagnostics.is_empty() {
        let _ = writeln!(o, "\nworth a look:");
        for d in &s.diagnostics {
            let _ = writeln!(o, "  - {d}");
        }
    }
    o
}
