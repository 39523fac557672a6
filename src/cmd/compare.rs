//! `credit compare [PATHS] --methods grpo,gigpo,proxmo`: how differently estimators credit the
//! same steps.

use super::{gather, metadata, proxmo_params, write_plots, Format, Globals, MethodArgs};
use crate::config::ProjectFile;
use crate::exit::ExitCode;
use anyhow::Result;
use credit_core::analyses::compare::{compare, Comparison};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub globals: Globals,
    #[command(flatten)]
    pub methods: MethodArgs,
    /// Also draw the comparison's figures (PNG and SVG) into this folder.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub models: super::progress::SignalModels,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let project = ProjectFile::load(args.globals.config.as_deref())?;
    let plan = args.methods.plan(&project, "grpo,gigpo,proxmo")?;
    let hisr = args.methods.hisr_params(&project)?;
    let fillers = args.models.load(&hisr)?;
    let json = args.globals.format == Format::Json;
    let gathered = gather(
        &args.globals,
        &project,
        &plan,
        &fillers,
        &hisr,
        args.plots.is_some(),
    )?;
    let notes = &gathered.notes;
    let comparison = compare(&gathered.rows, &gathered.advantages);
    if let (Some(dir), Some(summary)) = (&args.plots, &gathered.summary) {
        let inputs = credit_report::Inputs {
            summary,
            comparison: Some(&comparison),
            advantages: &gathered.advantages,
            proxmo: proxmo_params(&plan),
            metadata: metadata(&plan, notes),
        };
        write_plots(dir, &inputs, credit_report::Scope::Compare, json)?;
    }
    if json {
        let mut value = serde_json::to_value(&comparison)?;
        value["metadata"] = metadata(&plan, notes);
        outln!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        for note in notes {
            eprintln!("note: {note}");
        }
        outln!(
            "methods: {} (preset {})",
            comparison.methods.join(", "),
            plan.profile
        );
        out!("{}", render(&comparison));
    }
    Ok(ExitCode::Ok)
}

fn opt(x: Option<f64>) -> String {
    x.map_or("  n/a".into(), |v| format!("{v:>6.3}"))
}

pub fn render(c: &Comparison) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let w = c.methods.iter().map(|m| m.len()).max().unwrap_or(6).max(6);
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
