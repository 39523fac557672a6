//! `credit watch [PATHS] --out DIR [--check thresholds.toml] [--fail-fast] [--interval SECS]
//! [--once]`: follows a run's logs as the trainer writes them (waiting for its folder and first
//! log file), rewrites the report (as `credit report` writes it) after each iteration lands and
//! prints a line per iteration; exit 1 when a threshold rule fails in the last report (at once
//! with `--fail-fast`), 2 when a log file could not be read (named in a note and in
//! `summary.json`'s notes).

use super::{Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::{Context, Result};
use credit_core::project::ProjectFile;
use credit_output::OutputDir;
use credit_report::run::{read_rules, Options};
use credit_report::watch::{IterationLine, Landed, Pace, Watch};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
#[command(mut_arg("methods", |a| super::methods_help(a, credit_core::plan::REPORT)))]
pub struct Args {
    #[command(flatten)]
    pub globals: Globals,
    #[command(flatten)]
    pub methods: MethodArgs,
    /// Output folder: report.html, report.md, summary.json, figures/, rewritten whole after each
    /// iteration (the rule of `credit report --out`).
    #[arg(short = 'o', long, value_name = "DIR")]
    pub out: PathBuf,
    /// Threshold rules over summary.json keys, evaluated after each iteration: a rule that starts
    /// failing prints a line; the exit code is 1 when any fails in the last report.
    #[arg(long, value_name = "thresholds.toml")]
    pub check: Option<PathBuf>,
    /// Exit 1 as soon as a rule fails (the report of that iteration written).
    #[arg(long, requires = "check")]
    pub fail_fast: bool,
    /// Seconds between two looks at the logs; a file is read once its size holds still across
    /// two looks (or after 5 looks that found it growing).
    #[arg(long, value_name = "SECS", default_value_t = 2.0)]
    pub interval: f64,
    /// Read what is there as `credit report` reads it, write the report and exit (for cron and
    /// CI); exit 2 when a log file could not be read.
    #[arg(long)]
    pub once: bool,
    /// A group for the explorer, by its `group_id` (repeatable).
    #[arg(long = "explore", value_name = "GROUP")]
    pub explore: Vec<String>,
    /// The most groups the explorer embeds; 0 leaves it out. Drawing their state graphs
    /// (Graphviz) takes about 0.1 s a group, so reports written while the run goes on leave the
    /// drawings out (unless groups are named with `--explore`); the last report, when the watch
    /// stops (a signal, or `--once`), has them.
    #[arg(long, value_name = "N", default_value_t = 12)]
    pub explore_max: usize,
    /// Score every method against this one (`oracle`, `logged`) on each iteration's rows (the
    /// iteration line) and on the whole run (the report); added to the run when not among
    /// `--methods`.
    #[arg(long, value_name = "METHOD")]
    pub against: Option<String>,
    #[command(flatten)]
    pub models: super::signals::SignalModels,
}

pub fn run(args: Args) -> Result<ExitCode> {
    if !(args.interval.is_finite() && args.interval > 0.0) {
        anyhow::bail!(
            "--interval {}: expected a number of seconds > 0",
            args.interval
        );
    }
    let project = ProjectFile::load(args.globals.config.as_deref())?;
    let interval = Duration::from_secs_f64(args.interval);
    if !args.once {
        wait_for_logs(&project.inputs(&args.globals.paths), interval);
    }
    let (plan, against) = args.methods.plan_against(
        &args.globals,
        &project,
        credit_core::plan::REPORT,
        args.against.as_deref(),
    )?;
    let options = Options {
        rules: args.check.as_deref().map(read_rules).transpose()?,
        baseline: None,
        explore: args.explore.clone(),
        explore_max: args.explore_max,
    };
    let json = args.globals.format == Format::Json;
    let mut extra = args.models.paths();
    extra.extend(args.check.as_deref());
    let read = super::inputs(&args.globals, &project, &extra)?;
    OutputDir::check(&args.out, "report", &read)?;
    let hisr = args.methods.hisr_params(&project)?;
    let fillers = args.models.load(&hisr)?;
    let mut run = super::run_plan(&args.globals, &project, plan, hisr)?;
    run.against = against;
    let labels = run.methods.labels();
    let run_paths: Vec<String> = run.paths.iter().map(|p| p.display().to_string()).collect();
    let mut watch = Watch::new(run, &fillers, &options)?;
    // SIGINT/SIGTERM ask the loop to stop after the report it is writing (see `main`).
    crate::STOP_GRACEFULLY.store(true, Ordering::SeqCst);
    let stop = || crate::STOP.load(Ordering::SeqCst);
    let mut passed = true;
    let mut written = false;
    // The folder's lock, held from the watch's first report to its end (between reports too): a
    // second watch or report on the same `--out` is refused, naming this one.
    let mut held = None;
    loop {
        // A stop reads what is complete once more, and names what is still being written.
        let stopping = stop();
        let pace = match (args.once, stopping) {
            (true, _) => Pace::Once,
            (false, true) => Pace::Stop,
            (false, false) => Pace::Live,
        };
        let landed = watch
            .poll::<anyhow::Error>(&args.out, &read, pace)
            .context("watching the logs")?;
        if let Some(report) = &landed.written {
            if !written && !json {
                outln!("methods: {} → {}", labels.join(", "), args.out.display());
            }
            written = true;
            if held.is_none() {
                held = Some(credit_output::hold(&args.out)?);
            }
            passed = report.outcome.as_ref().is_none_or(|o| o.passed);
        }
        say(&landed, json)?;
        if args.fail_fast && !landed.newly_failing.is_empty() {
            all_read(&watch, written)?;
            return Ok(ExitCode::GateFailed);
        }
        if args.once || stopping {
            break;
        }
        let until = Instant::now() + interval;
        while Instant::now() < until && !stop() {
            std::thread::sleep(Duration::from_millis(20).min(interval));
        }
    }
    if !written && watch.unreadable().is_empty() && args.once {
        anyhow::bail!(
            "no step rows found in {}: nothing to report",
            run_paths.join(", ")
        );
    }
    if written {
        let bar = crate::bars::spinner("drawing the explorer", json);
        let last = watch
            .finish(&args.out, &read)
            .context("writing the last report")?;
        bar.finish_and_clear();
        if let Some(last) = last {
            passed = last.outcome.as_ref().is_none_or(|o| o.passed);
        }
        if !json {
            outln!("report: {}", args.out.join("report.html").display());
        }
    }
    all_read(&watch, written)?;
    Ok(if passed {
        ExitCode::Ok
    } else {
        ExitCode::GateFailed
    })
}

/// An error (exit 2) naming the log files that could not be read, if any: their notes were
/// printed and, when a report was `written`, are in its `summary.json`.
fn all_read(watch: &Watch, written: bool) -> Result<()> {
    let unreadable: Vec<String> = watch
        .unreadable()
        .into_iter()
        .map(|(path, _)| path.display().to_string())
        .collect();
    if unreadable.is_empty() {
        return Ok(());
    }
    anyhow::bail!(
        "{} log file(s) could not be read (see the notes above{}): {}",
        unreadable.len(),
        if written {
            " and in summary.json"
        } else {
            "; no rows read"
        },
        unreadable.join(", ")
    )
}

/// Waits, saying so, until every path of the logs exists and they hold a log file: a watch may
/// start before the trainer makes its folder or finishes its first file (a folder of hidden
/// temporary files, as a dump writes before it renames them, holds none). An error other than
/// "none yet" is left to the run, which says it where it reads the logs.
fn wait_for_logs(logs: &[PathBuf], interval: Duration) {
    let mut said = BTreeSet::new();
    // No logs named: nothing to wait for, and the run says so.
    while !logs.is_empty() {
        let waiting = match logs.iter().find(|p| !p.exists()) {
            Some(missing) => format!("waiting for {} to appear", missing.display()),
            None => match credit_core::ingest::input_files(logs) {
                Ok(files) if files.is_empty() => no_log_file_yet(logs),
                Err(credit_core::Error::Input {
                    reason: credit_core::error::Reason::EmptyInput,
                    ..
                }) => no_log_file_yet(logs),
                _ => return,
            },
        };
        if said.insert(waiting.clone()) {
            eprintln!("{waiting}");
        }
        std::thread::sleep(interval);
    }
}

/// What a watch waiting for the first log file in `logs` says.
fn no_log_file_yet(logs: &[PathBuf]) -> String {
    let logs: Vec<String> = logs.iter().map(|p| p.display().to_string()).collect();
    format!("waiting for a log file in {}", logs.join(", "))
}

/// Prints what a poll says: notes on stderr (and as `{"note": …}` objects with `--format json`),
/// a line per iteration (a JSON object each with `--format json`), and a line per rule that
/// started failing.
fn say(landed: &Landed, json: bool) -> Result<()> {
    for note in &landed.notes {
        eprintln!("note: {note}");
        if json {
            outln!("{}", serde_json::json!({ "note": note }));
        }
    }
    let failing_at = landed
        .iterations
        .last()
        .and_then(|l| l.iteration)
        .map_or(String::new(), |it| format!(" at iteration {it}"));
    for line in &landed.iterations {
        if json {
            outln!("{}", serde_json::json!({ "iteration": line }));
        } else {
            outln!("{}", text(line));
        }
    }
    for rule in &landed.newly_failing {
        if json {
            outln!(
                "{}",
                serde_json::json!({ "check_failed": rule, "iteration": landed.iterations.last().and_then(|l| l.iteration) })
            );
        } else {
            outln!(
                "  {} {}{failing_at}: {:.4}",
                credit_report::check::Verdict::Fail.word(),
                rule.name,
                rule.value
            );
        }
    }
    Ok(())
}

/// `iteration 12: 512 rows, success 0.41, singleton 0.33, degenerate 0.25, spearman grpo~gigpo 0.87`
fn text(line: &IterationLine) -> String {
    let share = |x: Option<f64>| x.map_or("—".to_string(), |x| format!("{x:.3}"));
    let mut out = match line.iteration {
        Some(it) => format!("iteration {it}: "),
        None => format!("read {}: ", line.read),
    };
    out.push_str(&format!(
        "{} rows, success {}, singleton {}, degenerate {}",
        line.rows,
        share(line.success_rate),
        share(line.singleton_step_share),
        share(line.degenerate_group_share)
    ));
    // Several iterations read together have no agreement of their own: nothing to print.
    for (pair, rho) in &line.spearman {
        if let Some(rho) = rho {
            out.push_str(&format!(", spearman {pair} {rho:.3}"));
        }
    }
    if let Some(against) = &line.against {
        let cosine = |x: Option<f64>| x.map_or("—".to_string(), |x| format!("{x:.2}"));
        let scores: Vec<String> = against
            .scores
            .iter()
            .map(|(m, s)| format!("{m} {}", cosine(s.gradient_cosine)))
            .collect();
        out.push_str(&format!(
            "; against {} (coverage {:.0}%), gradient cosine: {}",
            against.method,
            100.0 * against.coverage,
            scores.join(", ")
        ));
    }
    out
}
