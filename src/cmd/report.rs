//! `credit report [PATHS] --methods … --out DIR [--check thresholds.toml] [--baseline OLD/summary.json]
//! [--explore GROUP] [--explore-max N]`: `report.html` (self-contained, with the explorer of chosen
//! groups), `report.md` (PNGs in `figures/`), `summary.json`; exit 1 when a threshold rule fails.

use super::{Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::{Context, Result};
use credit_core::project::ProjectFile;
use credit_output::OutputDir;
use credit_report::run::{gather, read_rules, write, Options, Written};
use credit_report::{render::text, sections};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(mut_arg("methods", |a| super::methods_help(a, credit_core::plan::REPORT)))]
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
    /// Score every method against this one (`oracle`, `logged`): a section "Scores against
    /// METHOD" and `against` in summary.json; added to the run when not among `--methods`.
    #[arg(long, value_name = "METHOD")]
    pub against: Option<String>,
    #[command(flatten)]
    pub models: super::signals::SignalModels,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let project = ProjectFile::load(args.globals.config.as_deref())?;
    let (plan, against) = args.methods.plan_against(
        &args.globals,
        &project,
        credit_core::plan::REPORT,
        args.against.as_deref(),
    )?;
    // Rules and baseline are read before any work, so a typo fails fast.
    let baseline: Option<serde_json::Value> = match &args.baseline {
        Some(path) => {
            let text = credit_core::ingest::read_settings(path).context("reading the baseline")?;
            Some(
                serde_json::from_str(&text)
                    .with_context(|| format!("{}: not a summary.json", path.display()))?,
            )
        }
        None => None,
    };
    let options = Options {
        rules: args.check.as_deref().map(read_rules).transpose()?,
        baseline,
        explore: args.explore.clone(),
        explore_max: args.explore_max,
    };
    let json = args.globals.format == Format::Json;
    let read = super::inputs(&args.globals, &project, &args.models.paths())?;
    OutputDir::check(&args.out, "report", &read)?;
    let hisr = args.methods.hisr_params(&project)?;
    let fillers = args.models.load(&hisr)?;
    let mut run = super::run_plan(&args.globals, &project, plan, hisr)?;
    run.against = against;
    let finished = super::reading(&args.globals, |progress| {
        gather(&run, &fillers, &options, progress)
    })?;
    let bar = crate::bars::spinner("drawing figures", json);
    let Written {
        figures,
        outcome,
        graphs,
    } = write(
        &args.out,
        &read,
        &run,
        &finished.value,
        &finished.notes,
        &options,
        true,
    )?;
    bar.finish_and_clear();
    let plan = &run.methods;
    let passed = outcome.as_ref().is_none_or(|o| o.passed);
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "out": args.out,
                "files": ["report.html", "report.md", "summary.json", "figures/"],
                "figures": figures,
                "checks": outcome,
            }))?
        );
    } else {
        outln!(
            "wrote {}, {}, {} and {} figures",
            args.out.join("report.html").display(),
            args.out.join("report.md").display(),
            args.out.join("summary.json").display(),
            figures
        );
        args.methods.say(&project, plan, &finished.report)?;
        if graphs == Some(false) {
            eprintln!("note: Graphviz `dot` is not installed: the explorer shows no state graphs (install graphviz)");
        }
        if let Some(o) = &outcome {
            let checks = sections::report::checks(o, options.baseline.is_some());
            out!("{}", text::section(&checks));
        }
    }
    Ok(if passed {
        ExitCode::Ok
    } else {
        ExitCode::GateFailed
    })
}
