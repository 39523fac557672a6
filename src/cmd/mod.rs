//! The command line: one file per subcommand, each with its `Args` and `run`. Flags shared by
//! every subcommand live in [`Globals`]; flags shared by the method commands in [`MethodArgs`].

mod advantages;
mod analyze;
mod compare;
mod graph;
mod methods;
mod report;
mod signals;
mod train;
mod watch;

use crate::exit::ExitCode;
use anyhow::{Context, Result};
use clap::{Args, Parser, Subcommand, ValueEnum};
use credit_core::ingest::{read_paths, IngestReport, Ingested};
use credit_core::profile::Profile;
use credit_core::request::{Request, Resolved};
use credit_core::run::{Finished, OnProgress, RunPlan};
use credit_output::Inputs;
use std::path::{Path, PathBuf};

/// Credit assignment diagnostics for multi-turn LLM-agent RL: recompute, compare and report
/// the per-step advantages of every published group-based estimator from your rollout logs.
#[derive(Debug, Parser)]
#[command(name = "credit", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// What is in the logs: groups, success, lengths, invalid actions, degenerate groups, step groups.
    Analyze(analyze::Args),
    /// Per-step advantages of any methods, written to .parquet, .jsonl or .csv.
    Advantages(advantages::Args),
    /// The methods side by side: distributions, rank agreement, credit on invalid actions.
    Compare(compare::Args),
    /// GraphGPO state graphs as Graphviz DOT (and SVG/PNG), edges coloured by a method's advantage.
    Graph(graph::Args),
    /// A self-contained HTML/Markdown/JSON report with plots, and threshold checks for CI.
    Report(report::Args),
    /// Follow a run as it trains: the report rewritten and a line printed after each iteration.
    Watch(watch::Args),
    /// Fine-tune a causal LM on the logged steps with a method's advantages (`credit train policy`).
    Train(train::Args),
    /// Every method and its settings: `--set` names, defaults under each preset, types, meanings.
    Methods(methods::Args),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Text,
    Json,
}

/// Flags every subcommand takes.
#[derive(Debug, Args)]
pub struct Globals {
    /// Input files or directories (JSONL, .jsonl.gz, .jsonl.zst, Parquet; directories recursively).
    ///
    /// Default: the `inputs` of `credit.toml`, else `./logs`.
    pub paths: Vec<PathBuf>,
    /// Output format of what is printed.
    #[arg(long, value_enum, default_value = "text", global = true)]
    pub format: Format,
    /// Skip bad rows and report counts per reason instead of stopping at the first one.
    #[arg(long, global = true)]
    pub lenient: bool,
    /// A column-mapping file: `source_name = "canonical_name"` pairs (or a `[columns]` table).
    #[arg(long, value_name = "MAP.toml", global = true)]
    pub schema: Option<PathBuf>,
    /// The project file (default: ./credit.toml when present).
    #[arg(long, value_name = "credit.toml", global = true)]
    pub config: Option<PathBuf>,
    /// A trajectory succeeds when R(τ) exceeds this and no `success` column is logged [default: 0.5].
    #[arg(long, value_name = "X", global = true)]
    pub success_threshold: Option<f64>,
}

/// Flags of the commands that run methods.
#[derive(Clone, Debug, Default, Args)]
pub struct MethodArgs {
    /// Methods (each command words the help with its default list: [`methods_help`]).
    #[arg(long, value_name = "LIST")]
    pub methods: Option<String>,
    /// The profile every method follows: the papers' equations, or what the reference training
    /// code computes [default: credit.toml's `preset`, else paper; the run says when logs with
    /// verl-agent's columns are read under `paper`].
    #[arg(long, value_enum, value_name = "PRESET")]
    pub preset: Option<Profile>,
    /// Invalid-action penalty c for every method that has one [paper: 0, verl: 0.1].
    #[arg(long, value_name = "X")]
    pub invalid_penalty: Option<f64>,
    /// Discount γ of the step returns for every method that has one [default: 0.95; verl's
    /// reinforce_plus_plus and gae: 1].
    #[arg(long, value_name = "X")]
    pub gamma: Option<f64>,
    /// Seed of MGR's gate and SPA's `random` variant (`--set mgr.seed=…`, `--set spa.seed=…`)
    /// [default: 0].
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Any parameter: `--set gigpo.omega=0.5` (repeatable; see docs/methods.md).
    #[arg(long = "set", value_name = "METHOD.PARAM=VALUE")]
    pub set: Vec<String>,
}

impl Cli {
    /// Whether the command prints JSON (`--format json`), so that errors do too.
    pub fn json(&self) -> bool {
        let globals = match &self.command {
            Command::Analyze(a) => &a.globals,
            Command::Advantages(a) => &a.globals,
            Command::Compare(a) => &a.globals,
            Command::Graph(a) => &a.globals,
            Command::Report(a) => &a.globals,
            Command::Watch(a) => &a.globals,
            Command::Train(a) => return a.json(),
            Command::Methods(a) => return a.format == Format::Json,
        };
        globals.format == Format::Json
    }
}

pub fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Command::Analyze(args) => analyze::run(args),
        Command::Advantages(args) => advantages::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Graph(args) => graph::run(args),
        Command::Report(args) => report::run(args),
        Command::Watch(args) => watch::run(args),
        Command::Train(args) => train::run(args),
        Command::Methods(args) => methods::run(args),
    }
}

/// Prints `--lenient` skips as a warning.
fn warn_skips(report: &IngestReport) {
    report
        .skipped_warning()
        .iter()
        .for_each(|line| eprintln!("{line}"));
}

/// Reads the whole input of `run` into one batch, with a spinner (`credit train`).
pub fn load(run: &RunPlan, json: bool) -> Result<Ingested> {
    let bar = crate::bars::spinner("reading logs", json);
    let ingested = read_paths(&run.paths, &run.ingest).context("reading the logs")?;
    bar.finish_and_clear();
    warn_skips(&ingested.report);
    Ok(ingested)
}

/// Runs `run` (a [`RunPlan`] run) with a progress bar of bytes and rows; warns of `--lenient`
/// skips. An error is one of reading the logs unless it names its own stage.
pub fn reading<T>(
    globals: &Globals,
    run: impl FnOnce(OnProgress) -> Result<Finished<T>>,
) -> Result<Finished<T>> {
    let bar = crate::bars::reading(globals.format == Format::Json);
    let finished = run(&|p| crate::bars::update(&bar, p)).map_err(|error| {
        match error.chain().any(credit_report::names_its_stage) {
            true => error,
            false => error.context("reading the logs"),
        }
    })?;
    bar.finish_and_clear();
    warn_skips(&finished.report);
    Ok(finished)
}

/// `--methods`' help with the command's default list in it, for `#[command(mut_arg(…))]`.
pub fn methods_help(arg: clap::Arg, default: &'static str) -> clap::Arg {
    let (short, long) = credit_core::plan::methods_help(default);
    arg.help(short).long_help(long)
}

impl MethodArgs {
    /// The run layer's request: the logs and how to read them (`globals`), these methods and
    /// settings, and the other files the run reads (`reads`: models, rule files).
    pub fn request(&self, globals: &Globals, reads: &[&Path]) -> Request {
        Request {
            paths: globals.paths.clone(),
            config: globals.config.clone(),
            schema: globals.schema.clone(),
            lenient: globals.lenient,
            success_threshold: globals.success_threshold,
            methods: self.methods.clone(),
            preset: self.preset,
            invalid_penalty: self.invalid_penalty,
            gamma: self.gamma,
            seed: self.seed,
            set: self.set.clone(),
            reads: reads.iter().map(|p| p.to_path_buf()).collect(),
            ..Request::default()
        }
    }
}

/// Prints the methods' line, and the note on the preset when there is one.
pub fn say_methods(resolved: &Resolved, report: &IngestReport) -> Result<()> {
    outln!("{}", resolved.methods_line());
    if let Some(note) = resolved.preset_note(report) {
        eprintln!("note: {note}");
    }
    Ok(())
}

/// The figures of `scope` as PNG and SVG files in the folder output `dir` (`--plots DIR`).
pub fn write_plots(
    dir: &Path,
    command: &str,
    read: &Inputs,
    inputs: &credit_report::Inputs,
    scope: credit_report::Scope,
    json: bool,
) -> Result<()> {
    let bar = crate::bars::spinner("drawing figures", json);
    let figures = credit_report::folder::write_figures(dir, command, read, inputs, scope)?;
    bar.finish_and_clear();
    if !json {
        let n = figures.len();
        eprintln!("wrote {n} figures (PNG and SVG) to {}", dir.display());
    }
    Ok(())
}
