//! The terminal views of `credit analyze` and `credit compare` (their `--format text`): fixed-width
//! tables sized for one screen. The JSON views are the serialised `Summary` and `Comparison`.

use credit_core::analyses::compare::Comparison;
use credit_core::analyses::logged::LoggedCheck;
use credit_core::analyses::progress::Curve;
use credit_core::analyses::summary::{Rate, SizeDistribution, Summary};
use credit_core::methods::hisr::Segments;

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
/// Per-iteration lines beyond this many show the first and last few: a long run stays readable,
/// and `--format json` has every iteration.
const ITERATION_LINES: usize = 12;

/// Writes a per-iteration list, one `line` per item; beyond [`ITERATION_LINES`] the first and
/// last few, with one line saying how many were left out in the middle.
fn write_iterations<T>(o: &mut String, items: &[T], mut line: impl FnMut(&mut String, &T)) {
    use std::fmt::Write;
    if items.len() <= ITERATION_LINES {
        items.iter().for_each(|item| line(o, item));
        return;
    }
    let half = ITERATION_LINES / 2 - 1;
    items[..half].iter().for_each(|item| line(o, item));
    let _ = writeln!(
        o,
        "    … {} more iterations (all of them: --format json)",
        items.len() - 2 * half
    );
    items[items.len() - half..]
        .iter()
        .for_each(|item| line(o, item));
}

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
    write_iterations(o, &t.zero_std_per_iteration, |o, rate| {
        let _ = writeln!(
            o,
            "    iteration {:<22} {:>7} zero-std  ({} groups)",
            rate.key,
            pct(rate.rate),
            rate.n
        );
    });
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

/// `credit analyze`'s terminal view of the summary.
pub fn analyze(s: &Summary) -> String {
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
            let line = |o: &mut String, rate: &Rate| {
                let _ = writeln!(
                    o,
                    "    {:<32} {:>7}  ({} trajectories)",
                    rate.key,
                    pct(rate.rate),
                    rate.n
                );
            };
            if title == "per iteration" {
                write_iterations(&mut o, rates, line);
            } else {
                rates.iter().for_each(|rate| line(&mut o, rate));
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
        write_iterations(&mut o, &g.per_iteration, |o, (it, dist)| {
            let _ = writeln!(o, "  iteration {it:<6} steps {}", buckets(dist, true));
        });
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

fn opt(x: Option<f64>) -> String {
    x.map_or("  n/a".into(), |v| format!("{v:>6.3}"))
}

/// Each method against the logged advantages: max |Δ|, the rows beyond the tolerance, and the
/// first of them by file and line.
fn logged(checks: &[LoggedCheck], w: usize) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "against the logged advantages (a row differs where |logged − method| > {:e})",
        credit_core::analyses::logged::TOLERANCE
    );
    let _ = writeln!(o, "  {:<w$}  {:>10}  rows differing", "method", "max |Δ|");
    for check in checks {
        let _ = writeln!(
            o,
            "  {:<w$}  {:>10.2e}  {} of {}",
            check.method, check.max_abs_diff, check.rows_beyond, check.rows
        );
        for d in &check.first {
            let step = d.step.map_or_else(String::new, |s| format!(" step {s}"));
            let _ = writeln!(
                o,
                "    {}  trajectory `{}`{step}: logged {:.6}, {} {:.6}",
                d.location, d.traj_id, d.logged, check.method, d.value
            );
        }
    }
    o
}

/// `credit compare`'s terminal view of the comparison.
pub fn compare(c: &Comparison) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let w = c.methods.iter().map(|m| m.len()).max().unwrap_or(6).max(6);
    if !c.logged.is_empty() {
        o.push_str(&logged(&c.logged, w));
        o.push('\n');
    }
    let _ = writeln!(o, "distribution of per-step credit");
    let _ = writeln!(
        o,
        "  {:<w$}  {:>8} {:>8} {:>8} {:>8} {:>8}  {:>6} {:>6}",
        "method", "mean", "std", "q05", "median", "q95", "zero", "pos"
    );
    for m in &c.methods {
        let d = &c.distributions[m];
        let _ = writeln!(
            o,
            "  {m:<w$}  {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3}  {:>5.1}% {:>5.1}%",
            d.mean,
            d.std,
            d.q05,
            d.median,
            d.q95,
            100.0 * d.share_zero,
            100.0 * d.share_positive
        );
    }
    if !c.pairwise.is_empty() {
        let _ = writeln!(o, "\nagreement over steps");
        let _ = writeln!(
            o,
            "  {:<w2$}  spearman  kendall  same sign",
            "pair",
            w2 = 2 * w + 4
        );
        for p in &c.pairwise {
            let pair = format!("{} vs {}", p.a, p.b);
            let _ = writeln!(
                o,
                "  {pair:<w2$}  {}   {}   {:>6.1}%",
                opt(p.spearman),
                opt(p.kendall_tau_b),
                100.0 * p.sign_agreement,
                w2 = 2 * w + 4
            );
        }
    }
    let _ = writeln!(o, "\nmean credit by (trajectory outcome × action validity)");
    let _ = writeln!(
        o,
        "  {:<w$}  {:>14} {:>14} {:>14} {:>14}",
        "method", "success/valid", "success/inval", "fail/valid", "fail/invalid"
    );
    for m in &c.methods {
        let cells: Vec<String> = c.cells[m]
            .iter()
            .map(|x| {
                if x.steps == 0 {
                    "-".into()
                } else {
                    format!("{:.3} (n={})", x.mean, x.steps)
                }
            })
            .collect();
        let _ = writeln!(
            o,
            "  {m:<w$}  {:>14} {:>14} {:>14} {:>14}",
            cells[0], cells[1], cells[2], cells[3]
        );
    }
    let _ = writeln!(o, "\ninvalid actions that receive positive credit");
    let _ = writeln!(
        o,
        "  {:<w$}  {:>10} {:>18} {:>16}",
        "method", "overall", "in successful traj", "sign = validity"
    );
    for m in &c.methods {
        let i = &c.invalid_credit[m];
        let _ = writeln!(
            o,
            "  {m:<w$}  {:>9.1}% {:>17.1}% {:>15.1}%   ({} invalid steps, {} in successes)",
            100.0 * i.invalid_positive_share,
            100.0 * i.invalid_positive_share_in_success,
            100.0 * i.sign_agreement_with_validity,
            i.invalid_steps,
            i.invalid_steps_in_success
        );
    }
    let _ = writeln!(o, "\nmean credit by step position (success / failure)");
    let positions: Vec<u32> = c
        .by_position
        .values()
        .next()
        .map(|v| v.iter().map(|p| p.position).collect())
        .unwrap_or_default();
    let shown: Vec<u32> = positions
        .iter()
        .copied()
        .filter(|&p| p < 5 || p % 5 == 0)
        .collect();
    let _ = write!(o, "  {:<w$}", "t");
    for p in &shown {
        let _ = write!(o, " {:>13}", p);
    }
    let _ = writeln!(o);
    for m in &c.methods {
        let _ = write!(o, "  {m:<w$}");
        for p in &shown {
            let pos = c.by_position[m].iter().find(|x| x.position == *p);
            let cell = pos.map_or("-".into(), |x| {
                let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
                format!("{}/{}", f(x.mean_success), f(x.mean_failure))
            });
            let _ = write!(o, " {cell:>13}");
        }
        let _ = writeln!(o);
    }
    if !c.per_task.is_empty() {
        let _ = writeln!(
            o,
            "\nper task: mean credit (share of invalid actions credited positively)"
        );
        for t in &c.per_task {
            let cells: Vec<String> = c
                .methods
                .iter()
                .map(|m| {
                    format!(
                        "{m} {:.3} ({:.0}%)",
                        t.mean[m],
                        100.0 * t.invalid_positive_share[m]
                    )
                })
                .collect();
            let _ = writeln!(
                o,
                "  {:<28} {:>6} steps  {}",
                t.task,
                t.steps,
                cells.join("  ")
            );
        }
    }
    o
}
