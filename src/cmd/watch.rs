//! `credit watch [PATHS] --out DIR [--check thresholds.toml] [--fail-fast] [--interval SECS]
//! [--once]`: follows a run's logs as the trainer writes them (waiting for its folder and first
//! log file), rewrites the report (as `credit report` writes it) after each iteration lands and
//! prints a line per iteration; exit 1 when a threshold rule fails in the last report (at once
//! with `--fail-fast`), 2 when a log file could not be read (named in a note and in
//! `summary.json`'s notes).

use super::{Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::{Context, Result};
use credit_output::OutputDir;
use credit_report::watch::{Landed, Pace, Watch};
use std::collections::{BTreeMap, BTreeSet};
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
    /// The report rewritten whole after each iteration (the rule of `credit report --out`).
    #[command(flatten)]
    pub report: super::report::ReportFlags,
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
}

pub fn run(args: Args) -> Result<ExitCode> {
    if !(args.interval.is_finite() && args.interval > 0.0) {
        anyhow::bail!(
            "--interval {}: expected a number of seconds > 0",
            args.interval
        );
    }
    let flags = &args.report;
    let request = flags.request(&args.globals, &args.methods);
    let interval = Duration::from_secs_f64(args.interval);
    // SIGINT/SIGTERM ask the loop to stop after the report it is writing (see `main`).
    crate::STOP_GRACEFULLY.store(true, Ordering::SeqCst);
    let stop = || crate::STOP.load(Ordering::SeqCst);
    if !args.once {
        // Said whether or not a terminal reads it: a job's log shows the watch began.
        let logs = request.logs()?;
        let named: Vec<String> = logs.iter().map(|p| p.display().to_string()).collect();
        eprintln!(
            "watching {} every {} s (Ctrl-C stops after the report being written)",
            named.join(", "),
            args.interval
        );
        if !wait_for_logs(&logs, interval, &stop) {
            eprintln!(
                "stopped: no step rows were read from {}; nothing written",
                named.join(", ")
            );
            return Ok(ExitCode::Ok);
        }
    }
    let resolved = request.resolve(Some(credit_core::plan::REPORT))?;
    let options = flags.options(None)?;
    let json = args.globals.format == Format::Json;
    let read = resolved.inputs(&request)?;
    OutputDir::check(&flags.out, "report", &read)?;
    let fillers = flags.models.load(&resolved.run.hisr)?;
    let methods = super::methods_line(&resolved);
    let run = resolved.run;
    let run_paths: Vec<String> = run.paths.iter().map(|p| p.display().to_string()).collect();
    let mut watch = Watch::new(run, &fillers, &options)?;
    let mut seen = Seen::default();
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
            .poll::<anyhow::Error>(&flags.out, &read, pace)
            .context("watching the logs")?;
        if let Some(report) = &landed.written {
            if !written && !json {
                outln!("{methods} → {}", flags.out.display());
            }
            written = true;
            if held.is_none() {
                held = Some(credit_output::hold(&flags.out)?);
            }
            passed = report.outcome.as_ref().is_none_or(|o| o.passed);
        }
        say(&landed, json)?;
        seen.add(&landed);
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
    if !written && watch.unreadable().is_empty() {
        eprintln!(
            "stopped: no step rows were read from {}; nothing written",
            run_paths.join(", ")
        );
    }
    if written {
        let bar = crate::bars::spinner("drawing the explorer", json);
        let last = watch
            .finish(&flags.out, &read)
            .context("writing the last report")?;
        bar.finish_and_clear();
        if let Some(outcome) = last.as_ref().and_then(|l| l.outcome.as_ref()) {
            passed = outcome.passed;
            seen.failing = outcome
                .rules
                .iter()
                .filter(|r| r.passed == Some(false))
                .map(|r| r.name.clone())
                .collect();
        }
        seen.say(json)?;
        if !json {
            outln!("report: {}", flags.out.join("report.html").display());
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
/// temporary files, as a dump writes before it renames them, holds none). False when `stop`ped
/// first. An error other than "none yet" is left to the run, which says it where it reads the
/// logs.
fn wait_for_logs(logs: &[PathBuf], interval: Duration, stop: &dyn Fn() -> bool) -> bool {
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
                _ => return true,
            },
        };
        if said.insert(waiting.clone()) {
            eprintln!("{waiting}");
        }
        let until = Instant::now() + interval;
        while Instant::now() < until {
            if stop() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20).min(interval));
        }
    }
    true
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
            outln!("{}", line.text());
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

/// What a watch saw, for the lines it ends with: the rows of each iteration (`None`: logs without
/// one, the whole run's), when each rule began failing, and the rules failing in the last report.
#[derive(Default)]
struct Seen {
    rows: BTreeMap<Option<i64>, usize>,
    failing_since: BTreeMap<String, Option<i64>>,
    failing: Vec<String>,
}

impl Seen {
    fn add(&mut self, landed: &Landed) {
        for line in &landed.iterations {
            self.rows.insert(line.iteration, line.rows);
        }
        let at = landed.iterations.last().and_then(|l| l.iteration);
        for rule in &landed.newly_failing {
            self.failing_since.insert(rule.name.clone(), at);
        }
    }

    /// `watched 12 iterations (1–12), 6144 rows; failing: grpo_spearman since iteration 9`.
    fn say(&self, json: bool) -> Result<()> {
        let iterations: Vec<i64> = self.rows.keys().flatten().copied().collect();
        let rows: usize = self.rows.values().sum();
        let since = |rule: &str| self.failing_since.get(rule).copied().flatten();
        if json {
            let failing: Vec<_> = self
                .failing
                .iter()
                .map(|r| serde_json::json!({ "rule": r, "since_iteration": since(r) }))
                .collect();
            outln!(
                "{}",
                serde_json::json!({ "watched": { "iterations": iterations, "rows": rows, "failing": failing } })
            );
            return Ok(());
        }
        let span = match (iterations.first(), iterations.last()) {
            (Some(a), Some(b)) if a != b => format!(" ({a}–{b})"),
            (Some(a), _) => format!(" ({a})"),
            _ => String::new(),
        };
        let counted = match iterations.len() {
            0 => String::new(),
            1 => format!("1 iteration{span}, "),
            n => format!("{n} iterations{span}, "),
        };
        let failing: Vec<String> = self
            .failing
            .iter()
            .map(|r| match since(r) {
                Some(it) => format!("{r} since iteration {it}"),
                None => r.clone(),
            })
            .collect();
        let rules = if failing.is_empty() {
            String::new()
        } else {
            format!("; failing: {}", failing.join(", "))
        };
        outln!("watched {counted}{rows} rows{rules}");
        Ok(())
    }
}
