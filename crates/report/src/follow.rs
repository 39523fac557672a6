//! `credit watch`'s loop over a [`Watch`]: wait for the trainer's first log file, poll at an
//! interval until stopped (or once), hold the output folder's lock from the first report on, and
//! tally what was seen for the closing line. The binary prints what each poll landed
//! ([`Landed::lines`]) and the closing line ([`Seen::text`]).

use crate::check::{Outcome, Verdict};
use crate::watch::{Landed, Pace, Watch};
use crate::Error;
use credit_core::error::Reason;
use credit_output::Inputs;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How a watch polls: once (`--once`), or every `interval` until stopped; `fail_fast` ends it at
/// the first rule that starts failing.
pub struct Pacing {
    pub once: bool,
    pub fail_fast: bool,
    pub interval: Duration,
}

/// How a watch's polls ended.
pub struct Followed {
    /// A report was written.
    pub written: bool,
    /// Every rule passed in the last report written (or there are none).
    pub passed: bool,
    /// `fail_fast` ended the watch at a rule that started failing.
    pub failed_fast: bool,
    pub seen: Seen,
}

/// Polls `watch` into `out` as `pacing` says until `stop` (a stop reads what is complete once
/// more and names what is still being written); `landed` sees every poll's result, and is told
/// whether it wrote the watch's first report.
pub fn follow<E>(
    watch: &mut Watch,
    out: &Path,
    read: &Inputs,
    pacing: &Pacing,
    stop: &dyn Fn() -> bool,
    landed: &mut dyn FnMut(&Landed, bool) -> Result<(), E>,
) -> Result<Followed, E>
where
    E: From<credit_core::Error> + From<Error> + From<credit_output::Error> + Send,
{
    let mut followed = Followed {
        written: false,
        passed: true,
        failed_fast: false,
        seen: Seen::default(),
    };
    // The folder's lock, held from the watch's first report to its end (between reports too): a
    // second watch or report on the same `--out` is refused, naming this one.
    let mut held = None;
    loop {
        let stopping = stop();
        let pace = match (pacing.once, stopping) {
            (true, _) => Pace::Once,
            (false, true) => Pace::Stop,
            (false, false) => Pace::Live,
        };
        let poll = watch.poll::<E>(out, read, pace)?;
        let first = poll.written.is_some() && !followed.written;
        if let Some(report) = &poll.written {
            followed.written = true;
            if held.is_none() {
                held = Some(credit_output::hold(out)?);
            }
            followed.passed = report.outcome.as_ref().is_none_or(|o| o.passed);
        }
        landed(&poll, first)?;
        followed.seen.add(&poll);
        if pacing.fail_fast && !poll.newly_failing.is_empty() {
            followed.failed_fast = true;
            return Ok(followed);
        }
        if pacing.once || stopping {
            return Ok(followed);
        }
        sleep(pacing.interval, stop);
    }
}

/// Sleeps `interval` in short naps; false when `stop` asked first.
fn sleep(interval: Duration, stop: &dyn Fn() -> bool) -> bool {
    let until = Instant::now() + interval;
    while Instant::now() < until {
        if stop() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20).min(interval));
    }
    true
}

/// Waits, saying so through `say`, until every path of the logs exists and they hold a log file:
/// a watch may start before the trainer makes its folder or finishes its first file (a folder of
/// hidden temporary files, as a dump writes before it renames them, holds none). False when
/// `stop`ped first. An error other than "none yet" is left to the run, which says it where it
/// reads the logs.
pub fn wait_for_logs(
    logs: &[PathBuf],
    interval: Duration,
    stop: &dyn Fn() -> bool,
    say: &mut dyn FnMut(&str),
) -> bool {
    let mut said = BTreeSet::new();
    // No logs named: nothing to wait for, and the run says so.
    while !logs.is_empty() {
        let waiting = match logs.iter().find(|p| !p.exists()) {
            Some(missing) => format!("waiting for {} to appear", missing.display()),
            None => match credit_core::ingest::input_files(logs) {
                Ok(files) if files.is_empty() => no_log_file_yet(logs),
                Err(credit_core::Error::Input {
                    reason: Reason::EmptyInput,
                    ..
                }) => no_log_file_yet(logs),
                _ => return true,
            },
        };
        if said.insert(waiting.clone()) {
            say(&waiting);
        }
        if !sleep(interval, stop) {
            return false;
        }
    }
    true
}

/// What a watch waiting for the first log file in `logs` says.
fn no_log_file_yet(logs: &[PathBuf]) -> String {
    format!("waiting for a log file in {}", named(logs))
}

/// The paths, comma-separated, as a watch names its logs.
pub fn named(paths: &[PathBuf]) -> String {
    let named: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
    named.join(", ")
}

/// The error (exit 2) naming the log files that could not be read, if any: their notes were
/// printed and, when a report was `written`, are in its `summary.json`.
pub fn unread(watch: &Watch, written: bool) -> Option<String> {
    let unreadable: Vec<PathBuf> = watch.unreadable().into_iter().map(|(p, _)| p).collect();
    if unreadable.is_empty() {
        return None;
    }
    Some(format!(
        "{} could not be read (see the notes above{}): {}",
        credit_core::wording::plural(unreadable.len(), "log file"),
        if written {
            " and in summary.json"
        } else {
            "; no rows read"
        },
        named(&unreadable)
    ))
}

impl Landed {
    /// What a poll prints: notes on stderr (also as `{"note": …}` objects on stdout with
    /// `json`), a line per iteration (a JSON object each with `json`), a line per rule that
    /// started failing. (stderr lines, stdout lines.)
    pub fn lines(&self, json: bool) -> (Vec<String>, Vec<String>) {
        let notes = self.notes.iter().map(|n| format!("note: {n}")).collect();
        let mut out: Vec<String> = Vec::new();
        if json {
            out.extend(
                self.notes
                    .iter()
                    .map(|note| serde_json::json!({ "note": note }).to_string()),
            );
        }
        let at = self.iterations.last().and_then(|l| l.iteration);
        let failing_at = at.map_or(String::new(), |it| format!(" at iteration {it}"));
        out.extend(self.iterations.iter().map(|line| match json {
            true => serde_json::json!({ "iteration": line }).to_string(),
            false => line.text(),
        }));
        out.extend(self.newly_failing.iter().map(|rule| match json {
            true => serde_json::json!({ "check_failed": rule, "iteration": at }).to_string(),
            false => format!(
                "  {} {}{failing_at}: {:.4}",
                Verdict::Fail.word(),
                rule.name,
                rule.value
            ),
        }));
        (notes, out)
    }
}

/// What a watch saw, for the line it ends with: the rows of each iteration (`None`: logs without
/// one, the whole run's), when each rule began failing, and the rules failing in the last report.
#[derive(Default)]
pub struct Seen {
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

    /// The rules failing in the last report, `outcome`.
    pub fn last_report(&mut self, outcome: &Outcome) {
        self.failing = outcome
            .rules
            .iter()
            .filter(|r| r.passed == Some(false))
            .map(|r| r.name.clone())
            .collect();
    }

    fn since(&self, rule: &str) -> Option<i64> {
        self.failing_since.get(rule).copied().flatten()
    }

    fn iterations(&self) -> Vec<i64> {
        self.rows.keys().flatten().copied().collect()
    }

    /// `{"watched": {"iterations": […], "rows": N, "failing": [{rule, since_iteration}]}}`.
    pub fn json(&self) -> serde_json::Value {
        let failing: Vec<_> = self
            .failing
            .iter()
            .map(|r| serde_json::json!({ "rule": r, "since_iteration": self.since(r) }))
            .collect();
        let rows: usize = self.rows.values().sum();
        serde_json::json!({ "watched": { "iterations": self.iterations(), "rows": rows, "failing": failing } })
    }

    /// `watched 12 iterations (1–12), 6144 rows; failing: grpo_spearman since iteration 9`.
    pub fn text(&self) -> String {
        let iterations = self.iterations();
        let rows: usize = self.rows.values().sum();
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
            .map(|r| match self.since(r) {
                Some(it) => format!("{r} since iteration {it}"),
                None => r.clone(),
            })
            .collect();
        let rules = if failing.is_empty() {
            String::new()
        } else {
            format!("; failing: {}", failing.join(", "))
        };
        format!("watched {counted}{rows} rows{rules}")
    }
}
