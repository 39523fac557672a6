//! `credit report [PATHS] --methods … --out DIR [--check thresholds.toml] [--baseline OLD/summary.json]
//! [--explore GROUP] [--explore-max N]`: `report.html` (self-contained, with the explorer of chosen
//! groups), `report.md` (PNGs in `figures/`), `summary.json`; exit 1 when a threshold rule fails.

use super::{proxmo_params, Format, Globals, MethodArgs};
use credit_core::project::ProjectFile;
use crate::exit::ExitCode;
use anyhow::{bail, Context, Result};
use credit_output::{OutputDir, Stale};
use credit_report::explorer::{DrawSvg, Selection, Selector};
use credit_report::folder::{write_report, Report};
use credit_report::trends::Trends;
use credit_report::{check, dot, summary_json, Inputs};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub globals: Globals,
    #[command(flatten)]
    pub methods: MethodArgs,
    /// Output folder: report.html, report.md, summary.json, figures/. New, empty, or one credit
    /// report wrote before (never a folder of other files, nor one holding or inside the logs).
    #[arg(short = 'o', long, value_name = "DIR")]
    pub out: PathBuf,
    /// Threshold rules over summary.json keys; the exit code is 1 when any fails.
    #[arg(long, value_name = "thresholds.toml")]
    pub check: Option<PathBuf>,
    /// An earlier run's summary.json: adds a before/after column.
    #[arg(long, value_name = "OLD/summary.json")]
    pub baseline: Option<PathBuf>,
    /// A group for the explorer, by its `group_id` (repeatable); in logs with iterations, every
    /// iteration's group of that id, earliest first.
    #[arg(long = "explore", value_name = "GROUP")]
    pub explore: Vec<String>,
    /// The most groups the explorer embeds (each adds its steps and state graph, about 0.2–0.7 MB);
    /// 0 leaves it out.
    #[arg(long, value_name = "N", default_value_t = 12)]
    pub explore_max: usize,
    #[command(flatten)]
    pub models: super::signals::SignalModels,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let project = ProjectFile::load(args.globals.config.as_deref())?;
    let plan = args
        .methods
        .plan(&args.globals, &project, credit_core::plan::REPORT)?;
    // Rules and baseline are read before any work, so a typo fails fast.
    let rules = match &args.check {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Some(check::parse(&text, &path.display().to_string())?)
        }
        None => None,
    };
    let baseline: Option<serde_json::Value> = match &args.baseline {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Some(
                serde_json::from_str(&text)
                    .with_context(|| format!("{}: not a summary.json", path.display()))?,
            )
        }
        None => None,
    };
    if args.explore_max == 0 && !args.explore.is_empty() {
        bail!("--explore needs room: --explore-max is 0");
    }
    let json = args.globals.format == Format::Json;
    let read = super::inputs(&args.globals, &project, &args.models.paths())?;
    OutputDir::check(&args.out, "report", &read)?;
    let hisr = args.methods.hisr_params(&project)?;
    let fillers = args.models.load(&hisr)?;
    let labels: Vec<String> = plan.methods.iter().map(|m| m.label().to_string()).collect();
    let selector = (args.explore_max > 0)
        .then(|| Selector::new(&args.explore, args.explore_max, labels.clone()));
    let mut selection = Selection::default();
    let mut trends = Trends::default();
    let run = super::run_plan(&args.globals, &project, plan, hisr)?;
    let plan = &run.methods;
    let finished = super::reading(&args.globals, |progress| {
        run.gather(
            &fillers,
            true,
            progress,
        |window, batch, results| {
            let candidates = selector
                .as_ref()
                .map(|s| s.look(batch, &window.seq, results));
            let columns: Vec<&[f64]> = results.iter().map(|r| r.advantage()).collect();
            Ok((candidates, Trends::of(batch, &columns)))
        },
        |kept| {
            match kept {
                Some((candidates, part)) => {
                    if let (Some(s), Some(c)) = (&selector, candidates) {
                        selection.add(s, c);
                    }
                    trends.add(part);
                }
                None => {
                    if let Some(s) = &selector {
                        selection.restart(s);
                    }
                    trends = Trends::default();
                }
            }
            Ok(())
        },
        )
    })?;
    let gathered = &finished.value;
    if let Some(s) = &selector {
        let unmatched = selection.unmatched(s);
        if !unmatched.is_empty() {
            bail!(
                "--explore: no group `{}` in the logs",
                unmatched.join("`, `")
            );
        }
    }
    let summary = gathered.summary.as_ref().expect("asked for the summary");
    let comparison = gathered.compare();
    let inputs = Inputs {
        summary,
        comparison: Some(&comparison),
        advantages: &gathered.advantages,
        proxmo: proxmo_params(plan),
        metadata: plan.metadata(&finished.notes),
    };

    // The checks first (a bad key fails before anything is written); then the report's files,
    // each written whole, into a folder that holds nothing but credit's report.
    let outcome = rules
        .as_ref()
        .map(|r| check::evaluate(r, &summary_json(&inputs, &[], None), baseline.as_ref()))
        .transpose()?;
    let dot_available = selector.is_some() && dot::available();
    let bar = crate::bars::spinner("drawing figures", json);
    let explorer = match &selector {
        Some(s) => {
            let draw: &DrawSvg = &dot::svg;
            Some(selection.finish(s, &comparison, dot_available.then_some(draw))?)
        }
        None => None,
    };
    let out = OutputDir::open(&args.out, "report", &read)?;
    let figures = write_report(
        out.path(),
        &Report {
            inputs: &inputs,
            trends: &trends,
            labels: &labels,
            outcome: outcome.as_ref(),
            baseline: baseline.as_ref(),
            explorer: explorer.as_ref(),
        },
    )?;
    bar.finish_and_clear();
    out.finish(Stale::Remove)?;

    let passed = outcome.as_ref().is_none_or(|o| o.passed);
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "out": args.out,
                "files": ["report.html", "report.md", "summary.json", "figures/"],
                "figures": figures.len(),
                "checks": outcome,
            }))?
        );
    } else {
        outln!(
            "wrote {}, {}, {} and {} figures",
            args.out.join("report.html").display(),
            args.out.join("report.md").display(),
            args.out.join("summary.json").display(),
            figures.len()
        );
        if selector.is_some() && !dot_available {
            eprintln!("note: Graphviz `dot` is not installed: the explorer shows no state graphs (install graphviz)");
        }
        if let Some(o) = &outcome {
            for r in &o.rules {
                outln!(
                    "  {} {}: {:.4}",
                    if r.passed { "pass" } else { "FAIL" },
                    r.name,
                    r.value
                );
            }
        }
    }
    Ok(if passed {
        ExitCode::Ok
    } else {
        ExitCode::GateFailed
    })
}
