//! `credit report [PATHS] --methods … --out DIR [--check thresholds.toml] [--baseline OLD/summary.json]
//! [--explore GROUP] [--explore-max N]`: `report.html` (self-contained, with the explorer of chosen
//! groups), `report.md` (PNGs in `figures/`), `summary.json`; exit 1 when a threshold rule fails.

use super::{say_methods, Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::{Context, Result};
use credit_core::request::Request;
use credit_output::OutputDir;
use credit_report::run::{gather, read_rules, write, Options};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(mut_arg("methods", |a| super::methods_help(a, credit_core::plan::REPORT)))]
pub struct Args {
    #[command(flatten)]
    pub globals: Globals,
    #[command(flatten)]
    pub methods: MethodArgs,
    #[command(flatten)]
    pub report: ReportFlags,
    /// An earlier run's summary.json: adds a before/after column.
    #[arg(long, value_name = "OLD/summary.json")]
    pub baseline: Option<PathBuf>,
}

/// The flags of a report, which `credit report` writes once and `credit watch` after each
/// iteration.
#[derive(Debug, clap::Args)]
pub struct ReportFlags {
    /// Output folder: report.html, report.md, summary.json, figures/. New, empty, or one credit
    /// report wrote before (never a folder of other files, nor one holding or inside the logs).
    #[arg(short = 'o', long, value_name = "DIR")]
    pub out: PathBuf,
    /// Threshold rules over summary.json keys; the exit code is 1 when any fails (in the last
    /// report of a watch, where a rule that starts failing prints a line).
    #[arg(long, value_name = "thresholds.toml")]
    pub check: Option<PathBuf>,
    /// A group for the explorer, by its `group_id` (repeatable); in logs with iterations, every
    /// iteration's group of that id, earliest first.
    #[arg(long = "explore", value_name = "GROUP")]
    pub explore: Vec<String>,
    /// The most groups the explorer embeds (each adds its steps and state graph, about 0.2–0.7 MB);
    /// 0 leaves it out. Drawing their state graphs (Graphviz) takes about 0.1 s a group, so the
    /// reports a watch writes while the run goes on leave them out (unless groups are named with
    /// `--explore`); its last report has them.
    #[arg(long, value_name = "N", default_value_t = 12)]
    pub explore_max: usize,
    /// Score every method against this one (`oracle`, `logged`): a section "Scores against
    /// METHOD" and `against` in summary.json (and a watch's iteration lines); added to the run
    /// when not among `--methods`.
    #[arg(long, value_name = "METHOD")]
    pub against: Option<String>,
    #[command(flatten)]
    pub models: super::signals::SignalModels,
}

impl ReportFlags {
    /// The run layer's request of a report: the methods' flags, `--against`, and the rules file
    /// and models among what the run reads.
    pub fn request(&self, globals: &Globals, methods: &MethodArgs) -> Request {
        let mut reads = self.models.paths();
        reads.extend(self.check.as_deref());
        let mut request = methods.request(globals, &reads);
        request.against = self.against.clone();
        request
    }

    /// The report's options: the rules (read before any work, so a typo fails fast) and the
    /// explorer's groups.
    pub fn options(&self, baseline: Option<serde_json::Value>) -> Result<Options> {
        Ok(Options {
            rules: self.check.as_deref().map(read_rules).transpose()?,
            baseline,
            explore: self.explore.clone(),
            explore_max: self.explore_max,
        })
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    let flags = &args.report;
    let request = flags.request(&args.globals, &args.methods);
    let resolved = request.resolve(Some(credit_core::plan::REPORT))?;
    let baseline = args.baseline.as_deref().map(read_baseline).transpose()?;
    let options = flags.options(baseline)?;
    let json = args.globals.format == Format::Json;
    let read = resolved.inputs(&request)?;
    OutputDir::check(&flags.out, "report", &read)?;
    let run = &resolved.run;
    let fillers = flags.models.load(&run.hisr)?;
    let finished = super::reading(&args.globals, |progress| {
        gather(run, &fillers, &options, progress)
    })?;
    let bar = crate::bars::spinner("drawing figures", json);
    let written = write(
        &flags.out,
        &read,
        run,
        &finished.value,
        &finished.notes,
        &options,
        true,
    )?;
    bar.finish_and_clear();
    let passed = written.outcome.as_ref().is_none_or(|o| o.passed);
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&written.json(&flags.out))?
        );
    } else {
        say_methods(&resolved, &finished.report)?;
        out!("{}", written.text(&flags.out, options.baseline.is_some()));
        if let Some(note) = written.note() {
            eprintln!("note: {note}");
        }
    }
    Ok(if passed {
        ExitCode::Ok
    } else {
        ExitCode::GateFailed
    })
}

/// `--baseline`: an earlier run's summary.json.
fn read_baseline(path: &std::path::Path) -> Result<serde_json::Value> {
    let text = credit_core::ingest::read_settings(path).context("reading the baseline")?;
    serde_json::from_str(&text).with_context(|| format!("{}: not a summary.json", path.display()))
}
