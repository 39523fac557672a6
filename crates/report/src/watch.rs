//! `credit watch`: a report that follows a run as its trainer writes the logs.
//!
//! Each poll lists the logs and reads what became complete since the last one ([`tail::ready`]):
//! new whole lines of plain JSONL (from the byte where the last read ended), a compressed or
//! Parquet file once it is whole. A file is read once its size holds still across two polls, so
//! that a trainer's burst of writes (one iteration, in both verl dumps) lands as one read. What
//! was read is added to the report's accumulators ([`Read::add`]) and never read again; the
//! report is then written whole, as `credit report` writes it.
//!
//! A unit (a group, or an iteration when a method takes statistics over the training batch) must
//! be read whole: when rows of a unit already read come in a later read (a group split across
//! files that land at different times, or across two bursts of one file), or a file shrinks, is
//! replaced or removed, everything is read again in one run, with a note. (verl-agent's
//! `dump_advantages` replaces the iteration's file once more: when the first version was read,
//! that iteration costs a read of the whole run.)

use crate::check::RuleResult;
use crate::run::{write, Options, Read, Split, Written};
use crate::Error;
use credit_core::ingest::tail::{self, Ready};
use credit_core::ingest::Span;
use credit_core::run::{Fill, RunPlan};
use credit_output::Inputs;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A run followed: its logs, what of each was read, and the report's accumulators.
pub struct Watch<'a> {
    run: RunPlan,
    fill: &'a dyn Fill,
    options: &'a Options,
    /// The logs to follow: folders (walked) and files.
    logs: Vec<PathBuf>,
    files: BTreeMap<PathBuf, Tracked>,
    read: Read,
    /// The rules failing in the last report written.
    failing: BTreeSet<String>,
    /// The last report written lacks the explorer's drawings ([`Watch::finish`] adds them).
    explorer_owed: bool,
}

/// What was read of one log file.
#[derive(Clone, Copy, Debug)]
struct Tracked {
    id: (u64, u64),
    /// The size at the last poll.
    size: u64,
    /// Bytes read: up to the last complete line of plain JSONL, else the whole file (or 0).
    read_to: u64,
    /// 1-based number of the line at `read_to` (plain JSONL).
    next_line: u64,
}

/// What one poll that read something gives: a line per iteration that landed, notes, the
/// rules that started failing, and the report written.
pub struct Landed {
    pub iterations: Vec<IterationLine>,
    pub notes: Vec<String>,
    pub newly_failing: Vec<RuleResult>,
    pub written: Written,
}

/// One iteration's figures as the report has them after it landed.
#[derive(Clone, Debug, serde::Serialize)]
pub struct IterationLine {
    /// `None`: logs without an iteration column (the figures are the whole run's).
    pub iteration: Option<i64>,
    pub rows: usize,
    pub success_rate: Option<f64>,
    pub singleton_step_share: Option<f64>,
    pub degenerate_group_share: Option<f64>,
    /// Spearman's ρ of each pair of methods (`"grpo~gigpo"`, in the methods' order) on the rows
    /// read with this iteration: the iteration's own when it landed alone (a file per
    /// iteration), else `None`.
    #[serde(serialize_with = "crate::explorer::ordered")]
    pub spearman: Agreement,
}

impl<'a> Watch<'a> {
    /// Follows `run.paths` (nothing read yet).
    pub fn new(run: RunPlan, fill: &'a dyn Fill, options: &'a Options) -> Result<Self, Error> {
        let read = Read::new(&run, options).map_err(|e| Error::Check(e.to_string()))?;
        Ok(Watch {
            logs: run.paths.clone(),
            run,
            fill,
            options,
            files: BTreeMap::new(),
            read,
            failing: BTreeSet::new(),
            explorer_owed: false,
        })
    }

    /// One poll: reads what is complete, and when anything landed writes the report into `out`
    /// (`inputs`: what the run reads, for the output rule). `now`: read what is there without
    /// waiting for sizes to hold still, and draw the explorer (`--once`). Other polls draw it
    /// only for groups named with `--explore`; [`Watch::finish`] draws it at the end.
    pub fn poll<E: From<credit_core::Error> + From<Error> + Send>(
        &mut self,
        out: &Path,
        inputs: &Inputs,
        now: bool,
    ) -> Result<Option<Landed>, E> {
        let mut notes = Vec::new();
        let listed = list(&self.logs)?;
        // A file read before and gone now: the report holds what the logs hold.
        let gone: Vec<PathBuf> = self
            .files
            .keys()
            .filter(|p| !listed.iter().any(|(l, _)| l == *p))
            .cloned()
            .collect();
        let mut again = false;
        for path in gone {
            if self.files.remove(&path).is_some_and(|t| t.read_to > 0) {
                notes.push(format!(
                    "{}: removed after it was read: reading the run again",
                    path.display()
                ));
                again = true;
            }
        }
        let mut pieces: Vec<(PathBuf, Option<Span>, Tracked)> = Vec::new();
        for (path, meta) in listed {
            let id = file_id(&meta);
            let size = meta.len();
            let earlier = self.files.get(&path).copied();
            let mut tracked = earlier.unwrap_or(Tracked {
                id,
                size,
                read_to: 0,
                next_line: 1,
            });
            if tracked.id != id || size < tracked.read_to {
                notes.push(format!(
                    "{}: {} after it was read: reading the run again",
                    path.display(),
                    if tracked.id != id {
                        "replaced"
                    } else {
                        "shrank"
                    }
                ));
                again = true;
                tracked = Tracked {
                    id,
                    size,
                    read_to: 0,
                    next_line: 1,
                };
            }
            let settled = now || earlier.is_some_and(|e| e.size == size);
            tracked.size = size;
            self.files.insert(path.clone(), tracked);
            if !settled || size == tracked.read_to {
                continue;
            }
            match tail::ready(&path, size, tracked.read_to)? {
                Ready::Wait => {}
                Ready::Lines { end, lines } => {
                    if now && end < size {
                        notes.push(format!(
                            "{}: its last line is not complete (no line break yet): left out",
                            path.display()
                        ));
                    }
                    let span = Span {
                        start: tracked.read_to,
                        end,
                        first_line: tracked.next_line,
                    };
                    let next = Tracked {
                        read_to: end,
                        next_line: tracked.next_line + lines,
                        ..tracked
                    };
                    pieces.push((path, Some(span), next));
                }
                Ready::Whole => {
                    if tracked.read_to > 0 {
                        notes.push(format!(
                            "{}: grew after it was read: reading the run again",
                            path.display()
                        ));
                        again = true;
                    }
                    let next = Tracked {
                        read_to: size,
                        ..tracked
                    };
                    pieces.push((path, None, next));
                }
            }
        }
        if pieces.is_empty() && !again {
            return Ok(None);
        }
        for (path, _, next) in &pieces {
            self.files.insert(path.clone(), *next);
        }
        // File by file, so that each iteration of a file per iteration (both verl dumps) gets
        // its own agreement line; the report is written once.
        let before: BTreeSet<i64> = self.read.trends().iterations().collect();
        let mut landed: Vec<(Vec<i64>, Agreement)> = Vec::new();
        for piece in &pieces {
            if again {
                break;
            }
            // New lines of a file read before may continue a trajectory read then: alone they
            // look like a trajectory with missing steps (an error, or rows `--lenient` skips)
            // before they look like a group read twice. Such a read is not added; the run is read
            // again, where a real problem is found where it is.
            let continues = piece.1.is_some_and(|span| span.start > 0);
            match self.read_more::<E>(piece, continues) {
                Ok(Ok(read)) => landed.extend(read),
                Ok(Err(Split(what))) => {
                    notes.push(format!(
                        "{what} came in two reads (its rows split across files, or across writes of one file): reading the run again"
                    ));
                    again = true;
                }
                Err(_) if continues => {
                    notes.push(format!(
                        "{}: its new lines do not stand alone (they continue rows read before): reading the run again",
                        piece.0.display()
                    ));
                    again = true;
                }
                Err(e) => return Err(e),
            }
        }
        if again {
            if !self.read_again::<E>()? {
                return Ok(None);
            }
            // The iterations the run read again holds beyond those already said.
            let said: BTreeSet<i64> = before
                .into_iter()
                .chain(landed.iter().flat_map(|(its, _)| its.iter().copied()))
                .collect();
            let new: Vec<i64> = self
                .read
                .trends()
                .iterations()
                .filter(|it| !said.contains(it))
                .collect();
            landed.push((new, Vec::new()));
        }
        if landed.is_empty() {
            return Ok(None);
        }
        let with_explorer = now || !self.options.explore.is_empty();
        let written = write(
            out,
            inputs,
            &self.run,
            &self.read,
            &self.read.notes(),
            self.options,
            with_explorer,
        )?;
        self.explorer_owed = !with_explorer && self.options.explore_max > 0;
        let failing: BTreeSet<String> = written
            .outcome
            .iter()
            .flat_map(|o| &o.rules)
            .filter(|r| r.passed == Some(false))
            .map(|r| r.name.clone())
            .collect();
        let newly_failing = written
            .outcome
            .iter()
            .flat_map(|o| &o.rules)
            .filter(|r| failing.contains(&r.name) && !self.failing.contains(&r.name))
            .cloned()
            .collect();
        self.failing = failing;
        Ok(Some(Landed {
            iterations: self.lines(&landed),
            notes,
            newly_failing,
            written,
        }))
    }

    /// When the last report was written without the explorer's drawings, writes it again with
    /// them (the same figures otherwise): the report a stopped watch leaves is `credit report`'s.
    pub fn finish(&mut self, out: &Path, inputs: &Inputs) -> Result<Option<Written>, Error> {
        if !self.explorer_owed {
            return Ok(None);
        }
        let written = write(
            out,
            inputs,
            &self.run,
            &self.read,
            &self.read.notes(),
            self.options,
            true,
        )?;
        self.explorer_owed = false;
        Ok(Some(written))
    }

    /// Reads `piece` and adds it; `Ok(Err(Split))` when it holds a unit read before (nothing
    /// added). Gives the iterations read (`None`: no rows) and the agreement on their rows.
    /// `continues`: the piece is new lines of a file read before, whose rows `--lenient` skips
    /// are a sign that they continue earlier ones (an error, to the caller).
    #[allow(clippy::type_complexity)]
    fn read_more<E: From<credit_core::Error> + Send>(
        &mut self,
        (path, span, _): &(PathBuf, Option<Span>, Tracked),
        continues: bool,
    ) -> Result<Result<Option<(Vec<i64>, Agreement)>, Split>, E> {
        self.run.paths = vec![path.clone()];
        self.run.ingest.spans = span.iter().map(|s| (path.clone(), *s)).collect();
        let Some(more) = nothing_is_none(self.read.more(&self.run, self.fill, &|_| {}))? else {
            return Ok(Ok(None));
        };
        if continues && !more.report.skipped.is_empty() {
            return Err(credit_core::Error::Config(format!(
                "{}: rows of its new lines skipped",
                path.display()
            ))
            .into());
        }
        let iterations = more.value.iterations();
        let agreement = agreement(&more.value);
        Ok(self.read.add(more).map(|()| Some((iterations, agreement))))
    }

    /// Reads every log again from the start in one run, up to where each was read; false when
    /// there is nothing to read.
    fn read_again<E: From<credit_core::Error> + Send>(&mut self) -> Result<bool, E> {
        self.read = Read::new(&self.run, self.options)?;
        self.run.paths = self
            .files
            .iter()
            .filter(|(_, t)| t.read_to > 0)
            .map(|(p, _)| p.clone())
            .collect();
        // Plain JSONL is read up to its last line read (those alone count lines).
        self.run.ingest.spans = self
            .files
            .iter()
            .filter(|(_, t)| t.read_to > 0 && t.next_line > 1)
            .map(|(p, t)| {
                let span = Span {
                    start: 0,
                    end: t.read_to,
                    first_line: 1,
                };
                (p.clone(), span)
            })
            .collect();
        if self.run.paths.is_empty() {
            return Ok(false);
        }
        let Some(more) = nothing_is_none(self.read.more(&self.run, self.fill, &|_| {}))? else {
            return Ok(false);
        };
        self.read.add(more).map_err(|Split(what)| {
            credit_core::Error::Config(format!("internal: {what} read twice in one run"))
        })?;
        Ok(true)
    }

    /// A line for each iteration of each read that `landed` (its iterations, and the agreement
    /// on its rows, shown when it held one iteration), with the report's figures now.
    fn lines(&self, landed: &[(Vec<i64>, Agreement)]) -> Vec<IterationLine> {
        let summary = self.read.summary();
        let mut lines = Vec::new();
        for (iterations, agreement) in landed {
            let spearman: Agreement = agreement
                .iter()
                .map(|(pair, rho)| (pair.clone(), rho.filter(|_| iterations.len() <= 1)))
                .collect();
            for &it in iterations {
                let trend = self.read.trends().of_iteration(it);
                lines.push(IterationLine {
                    iteration: Some(it),
                    rows: trend.map_or(0, |(steps, _)| steps),
                    success_rate: summary
                        .success
                        .per_iteration
                        .iter()
                        .find(|r| r.key == it.to_string())
                        .map(|r| r.rate),
                    singleton_step_share: summary
                        .step_groups
                        .per_iteration
                        .iter()
                        .find(|(i, _)| *i == it)
                        .map(|(_, d)| d.pct_steps[0] / 100.0),
                    degenerate_group_share: trend.map(|(_, share)| share),
                    spearman: spearman.clone(),
                });
            }
        }
        // Logs without an iteration: one line of the whole run's figures.
        if lines.is_empty() && self.read.trends().iterations().next().is_none() {
            let headline = crate::Headline::of(&summary, None);
            let spearman = landed.last().map(|(_, a)| a.clone()).unwrap_or_default();
            lines.push(IterationLine {
                iteration: None,
                rows: summary.rows,
                success_rate: Some(headline.success_rate),
                singleton_step_share: Some(headline.singleton_step_share),
                degenerate_group_share: Some(headline.degenerate_group_share),
                spearman,
            });
        }
        lines
    }
}

/// Spearman's ρ per pair of methods, as (`"a~b"`, ρ).
pub type Agreement = Vec<(String, Option<f64>)>;

fn agreement(more: &crate::run::More) -> Agreement {
    more.agreement()
        .into_iter()
        .map(|(a, b, rho)| (format!("{a}~{b}"), rho))
        .collect()
}

/// A read that found no rows (whole lines that hold none, or only rows `--lenient` skipped) is
/// nothing to add, not an error: the run goes on.
fn nothing_is_none<T>(
    result: Result<T, credit_core::Error>,
) -> Result<Option<T>, credit_core::Error> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(credit_core::Error::Input {
            reason: credit_core::error::Reason::EmptyInput,
            ..
        }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The log files under `logs` now, with their metadata; none yet is not an error.
fn list(logs: &[PathBuf]) -> Result<Vec<(PathBuf, std::fs::Metadata)>, credit_core::Error> {
    let files = match credit_core::ingest::input_files(logs) {
        Ok(files) => files,
        Err(credit_core::Error::Input {
            reason: credit_core::error::Reason::EmptyInput,
            ..
        }) => Vec::new(),
        Err(e) => return Err(e),
    };
    files
        .into_iter()
        .filter_map(|path| {
            // A file gone between the listing and now is as if not listed.
            std::fs::metadata(&path).ok().map(|meta| Ok((path, meta)))
        })
        .collect()
}

#[cfg(unix)]
fn file_id(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

#[cfg(not(unix))]
fn file_id(_meta: &std::fs::Metadata) -> (u64, u64) {
    // No inode outside unix: a replaced file is seen when it shrinks.
    (0, 0)
}
