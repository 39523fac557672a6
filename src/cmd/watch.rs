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
use credit_report::follow::{self, Pacing};
use credit_report::watch::Watch;
use std::time::Duration;

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
    let pacing = Pacing {
        once: args.once,
        fail_fast: args.fail_fast,
        interval: Duration::from_secs_f64(args.interval),
    };
    // SIGINT/SIGTERM ask the loop to stop after the report it is writing (see `main`).
    let stop = credit_output::interrupt::stop_gracefully();
    let stopped = |logs: &[std::path::PathBuf]| {
        eprintln!(
            "stopped: no step rows were read from {}; nothing written",
            follow::named(logs)
        )
    };
    if !args.once {
        // Said whether or not a terminal reads it: a job's log shows the watch began.
        let logs = request.logs()?;
        eprintln!(
            "watching {} every {} s (Ctrl-C stops after the report being written)",
            follow::named(&logs),
            args.interval
        );
        if !follow::wait_for_logs(&logs, pacing.interval, &stop, &mut |w| eprintln!("{w}")) {
            stopped(&logs);
            return Ok(ExitCode::Ok);
        }
    }
    let resolved = request.resolve(Some(credit_core::plan::REPORT))?;
    let options = flags.options(None)?;
    let json = args.globals.format == Format::Json;
    let read = resolved.inputs(&request)?;
    OutputDir::check(&flags.out, "report", &read)?;
    let fillers = flags.models.load(&resolved.run.hisr)?;
    let methods = resolved.methods_line();
    let run_paths = resolved.run.paths.clone();
    let mut watch = Watch::new(resolved.run, &fillers, &options)?;
    let mut followed = follow::follow(
        &mut watch,
        &flags.out,
        &read,
        &pacing,
        &stop,
        &mut |landed, first| -> Result<()> {
            if first && !json {
                outln!("{methods} → {}", flags.out.display());
            }
            let (notes, lines) = landed.lines(json);
            notes.iter().for_each(|n| eprintln!("{n}"));
            for line in lines {
                outln!("{line}");
            }
            Ok(())
        },
    )
    .context("watching the logs")?;
    let unread = follow::unread(&watch, followed.written);
    if followed.failed_fast {
        return match unread {
            Some(unread) => Err(anyhow::anyhow!(unread)),
            None => Ok(ExitCode::GateFailed),
        };
    }
    if !followed.written && unread.is_none() {
        if args.once {
            anyhow::bail!(
                "no step rows found in {}: nothing to report",
                follow::named(&run_paths)
            );
        }
        stopped(&run_paths);
    }
    if followed.written {
        let bar = crate::bars::spinner("drawing the explorer", json);
        let last = watch
            .finish(&flags.out, &read)
            .context("writing the last report")?;
        bar.finish_and_clear();
        if let Some(outcome) = last.as_ref().and_then(|l| l.outcome.as_ref()) {
            followed.passed = outcome.passed;
            followed.seen.last_report(outcome);
        }
        match json {
            true => outln!("{}", followed.seen.json()),
            false => outln!(
                "{}\nreport: {}",
                followed.seen.text(),
                flags.out.join("report.html").display()
            ),
        }
    }
    if let Some(unread) = unread {
        anyhow::bail!(unread);
    }
    Ok(if followed.passed {
        ExitCode::Ok
    } else {
        ExitCode::GateFailed
    })
}
