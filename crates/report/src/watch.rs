//! `credit watch`: a report that follows a run as its trainer writes the logs.
//!
//! Each poll lists the logs and reads what became complete since the last one ([`tail::ready`]):
//! new whole lines of plain JSONL (from the byte where the last read ended), a compressed or
//! Parquet file once it is whole. A file is read once its size holds still across two polls, so
//! that a trainer's burst of writes (one iteration, in both verl dumps) lands as one read; one
//! that grows at every poll is read all the same after [`MOST_DEFERRED`] polls, with a note. What
//! stays incomplete for [`STALE_POLLS`] polls (a last line without its line break, a compressed
//! stream or Parquet file cut short), and everything with `--once`, is read as it is, as `credit
//! report` reads it. A file that does not read is named in a note, printed and in `summary.json`'s
//! notes, and is not tried again until it changes; the watch goes on with the others. What was
//! read is added to the report's accumulators ([`Read::add`]) and never read again; the report is
//! then written whole, as `credit report` writes it.
//!
//! A unit (a group, or an iteration when a method takes statistics over the training batch) must
//! be read whole: when rows of a unit already read come in a later read (a group split across
//! files that land at different times, or across two bursts of one file), or a file shrinks, is
//! replaced, rewritten in place (the first or last bytes read differ: [`fingerprint`]) or
//! removed, everything is read again in one run, with a note. (The verl-agent patch writes each
//! iteration's file once, with the trainer's advantages: `dump_steps(advantages_follow=True)`.)

use crate::check::RuleResult;
use crate::run::{write, Options, Read, Split, Written};
use crate::Error;
use credit_core::analyses::against::Against;
use credit_core::ingest::tail::{self, Ready};
use credit_core::ingest::Span;
use credit_core::run::{Fill, RunPlan};
use credit_output::Inputs;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash, Hasher};
use std::io::{Read as _, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Polls a file may change at, its new bytes waiting for it to hold still, before they are read
/// all the same: a trainer that appends faster than `--interval` is followed too.
const MOST_DEFERRED: u32 = 4;

/// Polls an incomplete file (a last line without its line break, a compressed stream or Parquet
/// file cut short) stays unchanged before it is read as it is: a trainer finishes what it writes
/// well within that, so such a file is truncated or corrupt, and `credit report` would say so.
const STALE_POLLS: u32 = 5;

/// Bytes at each end of what was read of a file that its [`fingerprint`] covers.
const CHECKED_BYTES: u64 = 4096;

/// What a poll does with what is not complete yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// While the run goes on: a file changed since the last poll waits (up to [`MOST_DEFERRED`]
    /// polls), what is incomplete until it is stale ([`STALE_POLLS`]).
    Live,
    /// The watch stops: what is complete is read, what is still being written is named in a note.
    Stop,
    /// `--once`: everything is read as it is, as `credit report` reads it.
    Once,
}

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
    /// The notes of the last report written (`None`: none written yet).
    written_notes: Option<Vec<String>>,
    /// The notes on the report's state printed by the last poll: each is printed when it appears.
    said: BTreeSet<String>,
    /// What the last poll with [`Pace::Stop`] left out, still being written.
    left_out: Vec<String>,
    /// Polls that read rows: the number of the line of logs without an iteration.
    reads: u64,
}

/// What was read of one log file.
#[derive(Clone, Debug)]
struct Tracked {
    id: (u64, u64),
    /// The size and modification time at the last poll.
    size: u64,
    modified: Option<SystemTime>,
    /// Bytes read: up to the last complete line of plain JSONL, else the whole file (or 0).
    read_to: u64,
    /// 1-based number of the line at `read_to` (plain JSONL).
    next_line: u64,
    /// The [`fingerprint`] of the bytes read, that tells a rewrite from an append.
    fingerprint: u64,
    /// The bytes read end in a line without its line break (read as it was, see [`Pace`]).
    open_line: bool,
    /// Polls in a row that found it changed, with bytes not read.
    deferred: u32,
    /// Polls in a row that found it unchanged, with bytes not read.
    unchanged: u32,
    /// A note said that it grows at every poll (said once).
    growth_said: bool,
    /// The note saying why it could not be read, kept until it changes.
    unreadable: Option<String>,
}

impl Tracked {
    fn new(id: (u64, u64)) -> Tracked {
        Tracked {
            id,
            size: 0,
            modified: None,
            read_to: 0,
            next_line: 1,
            fingerprint: 0,
            open_line: false,
            deferred: 0,
            unchanged: 0,
            growth_said: false,
            unreadable: None,
        }
    }
}

/// A part of a file to read: its span (plain JSONL), or the whole file; the file's record once
/// it is read, and as it was before.
struct Piece {
    path: PathBuf,
    span: Option<Span>,
    next: Tracked,
    before: Tracked,
}

/// What to do with a file that has bytes not read.
enum Next {
    Read(Box<Piece>),
    /// Nothing complete yet.
    Wait,
    /// It could not be looked at (recorded as not read).
    NotRead,
}

/// What one poll gives: a line per iteration that landed, the notes to print, the rules that
/// started failing, and the report, when one was written (rows landed, or its notes changed).
pub struct Landed {
    pub iterations: Vec<IterationLine>,
    pub notes: Vec<String>,
    pub newly_failing: Vec<RuleResult>,
    pub written: Option<Written>,
}

/// One iteration's figures as the report has them after it landed.
#[derive(Clone, Debug, serde::Serialize)]
pub struct IterationLine {
    /// `None`: logs without an iteration column (the figures are the whole run's, one line per
    /// poll that read rows, numbered by `read`).
    pub iteration: Option<i64>,
    /// 1-based number of the poll that read rows.
    pub read: u64,
    pub rows: usize,
    pub success_rate: Option<f64>,
    pub singleton_step_share: Option<f64>,
    pub degenerate_group_share: Option<f64>,
    /// Spearman's ρ of each pair of methods (`"grpo~gigpo"`, in the methods' order) on the rows
    /// read with this iteration: the iteration's own when it landed alone (a file per
    /// iteration), else `None`.
    #[serde(serialize_with = "crate::explorer::ordered")]
    pub spearman: Agreement,
    /// Every method scored against `--against`'s on the rows read with this iteration (as
    /// `spearman`: `None` when they came with other iterations' rows), absent without the flag.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub against: Option<Against>,
    /// Every method held to the trainer's logged advantages on the rows read with this iteration
    /// (as `spearman`: empty when they came with other iterations' rows, or without `logged`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub logged: Vec<LoggedDelta>,
}

/// A method against the logged advantages on an iteration's rows: whether the trainer computed
/// what the method does.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LoggedDelta {
    pub method: String,
    /// max |logged − method| over the rows.
    pub max_abs_diff: f64,
    /// Rows where they differ by more than `credit_core::analyses::logged::TOLERANCE`.
    pub rows_differing: usize,
    pub rows: usize,
}

impl IterationLine {
    /// `iteration 12: 512 rows, success 0.410, singleton 0.330, degenerate 0.250, spearman
    /// grpo~gigpo 0.870; logged vs grpo: max |Δ| 3.0e-8, 0 of 512 rows differ`. Pairs with
    /// `logged` show its check, not a rank agreement: a trainer is right when the values match.
    pub fn text(&self) -> String {
        let share = |x: Option<f64>| x.map_or("—".to_string(), |x| format!("{x:.3}"));
        let mut out = match self.iteration {
            Some(it) => format!("iteration {it}: "),
            None => format!("read {}: ", self.read),
        };
        out.push_str(&format!(
            "{} rows, success {}, singleton {}, degenerate {}",
            self.rows,
            share(self.success_rate),
            share(self.singleton_step_share),
            share(self.degenerate_group_share)
        ));
        // Several iterations read together have no agreement of their own: nothing to print.
        for (pair, rho) in &self.spearman {
            let with_logged = pair.split('~').any(|m| m == "logged");
            if let (Some(rho), false) = (rho, with_logged) {
                out.push_str(&format!(", spearman {pair} {rho:.3}"));
            }
        }
        for d in &self.logged {
            out.push_str(&format!(
                "; logged vs {}: max |Δ| {:.1e}, {} of {} rows differ",
                d.method, d.max_abs_diff, d.rows_differing, d.rows
            ));
        }
        if let Some(against) = &self.against {
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
            written_notes: None,
            said: BTreeSet::new(),
            left_out: Vec::new(),
            reads: 0,
        })
    }

    /// The notes naming the files that could not be read (each names its file and why).
    pub fn unreadable(&self) -> Vec<(PathBuf, String)> {
        self.files
            .iter()
            .filter_map(|(p, t)| t.unreadable.clone().map(|note| (p.clone(), note)))
            .collect()
    }

    /// One poll: reads what is complete (what is not as `pace` says), and when rows landed or
    /// the report's notes changed writes the report into `out` (`inputs`: what the run reads,
    /// for the output rule). The explorer is drawn with [`Pace::Once`] and for groups named with
    /// `--explore`; [`Watch::finish`] draws it at the end.
    pub fn poll<E: From<credit_core::Error> + From<Error> + Send>(
        &mut self,
        out: &Path,
        inputs: &Inputs,
        pace: Pace,
    ) -> Result<Landed, E> {
        let mut notes = Vec::new();
        let listed = list(&self.logs)?;
        let mut again = self.forget_gone(&listed, &mut notes);
        self.left_out.clear();
        let mut pieces = Vec::new();
        for (path, meta) in listed {
            pieces.extend(self.look(&path, &meta, pace, &mut notes, &mut again));
        }
        for piece in &pieces {
            self.files.insert(piece.path.clone(), piece.next.clone());
        }
        // File by file, so that each iteration of a file per iteration (both verl dumps) gets
        // its own agreement line; the report is written once.
        let before: BTreeSet<i64> = self.read.trends().iterations().collect();
        let mut landed: Vec<(Vec<i64>, ReadFigures)> = Vec::new();
        for piece in &pieces {
            if again {
                break;
            }
            // New lines of a file read before may continue a trajectory read then: alone they
            // look like a trajectory with missing steps (an error, or rows `--lenient` skips)
            // before they look like a group read twice. Such a read is not added; the run is read
            // again, where a real problem is found where it is.
            let continues = piece.span.is_some_and(|span| span.start > 0);
            match self.read_more(piece, continues) {
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
                        piece.path.display()
                    ));
                    again = true;
                }
                Err(e) if of_the_logs(&e) => self.not_read(&piece.path, piece.before.clone(), &e),
                Err(e) => return Err(e.into()),
            }
        }
        if again {
            self.read_again_without_failing::<E>(&pieces, before, &mut landed)?;
        }
        let report_notes = self.report_notes();
        let state: BTreeSet<String> = report_notes.iter().cloned().collect();
        notes.extend(
            report_notes
                .iter()
                .filter(|n| !self.said.contains(*n))
                .cloned(),
        );
        self.said = state;
        let notes_changed = self.written_notes.as_ref() != Some(&report_notes);
        if landed.is_empty() && !(notes_changed && self.read.report().rows > 0) {
            return Ok(Landed {
                iterations: Vec::new(),
                notes,
                newly_failing: Vec::new(),
                written: None,
            });
        }
        let with_explorer = pace == Pace::Once || !self.options.explore.is_empty();
        let written = write(
            out,
            inputs,
            &self.run,
            &self.read,
            &report_notes,
            self.options,
            with_explorer,
        )?;
        self.written_notes = Some(report_notes);
        self.explorer_owed = !with_explorer && self.options.explore_max > 0;
        let newly_failing = self.newly_failing(&written);
        if !landed.is_empty() {
            self.reads += 1;
        }
        Ok(Landed {
            iterations: self.lines(&landed),
            notes,
            newly_failing,
            written: Some(written),
        })
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
            &self.report_notes(),
            self.options,
            true,
        )?;
        self.explorer_owed = false;
        Ok(Some(written))
    }
    /// Forgets the files read before and gone now (the report holds what the logs hold): whether
    /// the run must be read again.
    fn forget_gone<M>(&mut self, listed: &[(PathBuf, M)], notes: &mut Vec<String>) -> bool {
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
        again
    }

    /// Reads the run again; a file of this poll's `pieces` that fails it is left out (named), and
    /// the rest read again without it. `landed` then says the iterations not said before.
    fn read_again_without_failing<E: From<credit_core::Error>>(
        &mut self,
        pieces: &[Piece],
        before: BTreeSet<i64>,
        landed: &mut Vec<(Vec<i64>, ReadFigures)>,
    ) -> Result<(), E> {
        // A file read in this poll that fails the run read again is left out of it (named),
        // and the rest read again without it.
        let mut left: BTreeSet<PathBuf> = BTreeSet::new();
        let any = loop {
            match self.read_again() {
                Ok(any) => break any,
                Err(e) => {
                    let piece = file_of(&e)
                        .and_then(|p| pieces.iter().find(|piece| piece.path == p))
                        .filter(|piece| left.insert(piece.path.clone()));
                    let Some(piece) = piece else {
                        return Err(e.into());
                    };
                    self.not_read(&piece.path, piece.before.clone(), &e);
                }
            }
        };
        if !any {
            landed.clear();
        } else {
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
            landed.push((new, ReadFigures::default()));
        }
        Ok(())
    }

    /// The rules failing in `written` that were not failing before.
    fn newly_failing(&mut self, written: &Written) -> Vec<RuleResult> {
        let failing: BTreeSet<String> = written
            .outcome
            .iter()
            .flat_map(|o| &o.rules)
            .filter(|r| r.passed == Some(false))
            .map(|r| r.name.clone())
            .collect();
        let newly = written
            .outcome
            .iter()
            .flat_map(|o| &o.rules)
            .filter(|r| failing.contains(&r.name) && !self.failing.contains(&r.name))
            .cloned()
            .collect();
        self.failing = failing;
        newly
    }

    /// Looks at one listed file: what of it to read now, if anything (`notes`: what it says;
    /// `again`: it was rewritten, replaced or shrank, and the run is read again).
    fn look(
        &mut self,
        path: &Path,
        meta: &std::fs::Metadata,
        pace: Pace,
        notes: &mut Vec<String>,
        again: &mut bool,
    ) -> Option<Piece> {
        let (id, size, modified) = (file_id(meta), meta.len(), meta.modified().ok());
        let earlier = self.files.get(path).cloned();
        let changed = earlier
            .as_ref()
            .is_none_or(|e| (e.id, e.size, e.modified) != (id, size, modified));
        let mut tracked = earlier.unwrap_or_else(|| Tracked::new(id));
        if changed && tracked.read_to > 0 {
            if let Some(note) = read_again_because(path, &tracked, id, size) {
                notes.push(note);
                *again = true;
                tracked = Tracked::new(id);
            }
        }
        (tracked.id, tracked.size, tracked.modified) = (id, size, modified);
        if changed {
            tracked.unreadable = None;
            tracked.deferred += 1;
            tracked.unchanged = 0;
        } else {
            tracked.unchanged += 1;
            tracked.deferred = 0;
        }
        if size == tracked.read_to {
            tracked.deferred = 0;
            tracked.unchanged = 0;
        }
        let growing = changed && pace == Pace::Live;
        if tracked.unreadable.is_some()
            || size == tracked.read_to
            || (growing && tracked.deferred <= MOST_DEFERRED)
        {
            self.files.insert(path.to_path_buf(), tracked);
            return None;
        }
        if growing && !tracked.growth_said {
            notes.push(format!(
                "{}: still growing after {MOST_DEFERRED} polls: what of it is complete is read without waiting for it to hold still",
                path.display()
            ));
            tracked.growth_said = true;
        }
        let next = self.next(path, tracked.clone(), pace, notes, again);
        match &next {
            Next::Read(piece) if piece.next.read_to == size => {}
            // Left for a later poll: said when the watch stops.
            Next::Read(_) | Next::Wait if pace == Pace::Stop => self.left_out.push(format!(
                "{}: {} when the watch stopped: left out",
                path.display(),
                if is_plain_jsonl(path) {
                    "its last line had no line break yet"
                } else {
                    "not complete yet (a compressed stream or Parquet file cut short)"
                }
            )),
            _ => {}
        }
        match next {
            Next::Read(piece) => Some(*piece),
            Next::NotRead => None,
            Next::Wait => {
                self.files.insert(path.to_path_buf(), tracked);
                None
            }
        }
    }

    /// What of `path` to read now (`tracked`: its record, its size now).
    fn next(
        &mut self,
        path: &Path,
        tracked: Tracked,
        pace: Pace,
        notes: &mut Vec<String>,
        again: &mut bool,
    ) -> Next {
        let size = tracked.size;
        let io = |cause| credit_core::Error::Io {
            path: path.to_path_buf(),
            cause,
        };
        let ready = match tail::ready(path, size, tracked.read_to) {
            Ok(ready) => ready,
            Err(e) => {
                self.not_read(path, tracked, &e);
                return Next::NotRead;
            }
        };
        // Read as it is (`credit report` reads a last line without a line break, and says what
        // does not read): with `--once`, or once it stayed so for `STALE_POLLS` polls.
        let as_it_is = pace == Pace::Once || tracked.unchanged >= STALE_POLLS;
        let lines = |end: u64, lines: u64, open_line: bool| {
            (
                Some(Span {
                    start: tracked.read_to,
                    end,
                    first_line: tracked.next_line,
                }),
                Tracked {
                    read_to: end,
                    next_line: tracked.next_line + lines,
                    open_line,
                    ..tracked.clone()
                },
            )
        };
        let whole = || {
            (
                None,
                Tracked {
                    read_to: size,
                    ..tracked.clone()
                },
            )
        };
        let (span, mut next) = match ready {
            Ready::Lines { end, lines: n } if end == size || !as_it_is => lines(end, n, false),
            Ready::Lines { lines: n, .. } => lines(size, n + 1, true),
            Ready::Wait if !as_it_is => return Next::Wait,
            Ready::Wait if is_plain_jsonl(path) => lines(size, 1, true),
            Ready::Wait => whole(),
            Ready::Whole => {
                if tracked.read_to > 0 {
                    notes.push(format!(
                        "{}: grew after it was read: reading the run again",
                        path.display()
                    ));
                    *again = true;
                }
                whole()
            }
        };
        next.fingerprint = match fingerprint(path, next.read_to) {
            Ok(f) => f,
            Err(e) => {
                self.not_read(path, tracked, &io(e));
                return Next::NotRead;
            }
        };
        next.deferred = 0;
        next.unchanged = 0;
        Next::Read(Box::new(Piece {
            path: path.to_path_buf(),
            span,
            next,
            before: tracked,
        }))
    }

    /// Records that `path` (`tracked`: its record as before the read) could not be read, until
    /// it changes: a note of the report's ([`Watch::report_notes`]).
    fn not_read(&mut self, path: &Path, mut tracked: Tracked, e: &credit_core::Error) {
        let why = e.to_string();
        // The error names the file (and line and column) when it is about its content.
        let note = if why.starts_with(&path.display().to_string()) {
            format!("not read: {why}")
        } else {
            format!("{}: not read: {why}", path.display())
        };
        tracked.unreadable = Some(note);
        self.files.insert(path.to_path_buf(), tracked);
    }

    /// The notes of the report: its reads' (windows' and ingest's), `--lenient`'s skips, the
    /// files that could not be read and what a stop left out.
    fn report_notes(&self) -> Vec<String> {
        let mut notes = self.read.notes();
        let report = self.read.report();
        let skipped = report.skipped_total();
        if skipped > 0 {
            let reasons: Vec<String> = report
                .skipped
                .iter()
                .map(|(r, n)| format!("{n} {}", r.as_str()))
                .collect();
            let first = report
                .skipped_examples
                .first()
                .map_or(String::new(), |e| format!(" (the first: {e})"));
            notes.push(format!(
                "--lenient skipped {}: {}{first}",
                credit_core::wording::plural(skipped as usize, "row"),
                reasons.join(", ")
            ));
        }
        notes.extend(self.unreadable().into_iter().map(|(_, note)| note));
        notes.extend(self.left_out.iter().cloned());
        notes
    }

    /// Reads `piece` and adds it; `Ok(Err(Split))` when it holds a unit read before (nothing
    /// added). Gives the iterations read (`None`: no rows) and the agreement on their rows.
    /// `continues`: the piece is new lines of a file read before, whose rows `--lenient` skips
    /// are a sign that they continue earlier ones (an error, to the caller).
    #[allow(clippy::type_complexity)]
    fn read_more(
        &mut self,
        piece: &Piece,
        continues: bool,
    ) -> Result<Result<Option<(Vec<i64>, ReadFigures)>, Split>, credit_core::Error> {
        let path = &piece.path;
        self.run.paths = vec![path.clone()];
        self.run.ingest.spans = piece.span.iter().map(|s| (path.clone(), *s)).collect();
        let Some(more) = nothing_is_none(self.read.more(&self.run, self.fill, &|_| {}))? else {
            return Ok(Ok(None));
        };
        if continues && !more.report.skipped.is_empty() {
            return Err(credit_core::Error::Config(format!(
                "{}: rows of its new lines skipped",
                path.display()
            )));
        }
        let iterations = more.value.iterations();
        let figures = ReadFigures::of(&more.value, &self.run)?;
        Ok(self.read.add(more).map(|()| Some((iterations, figures))))
    }

    /// Reads every log again from the start in one run, up to where each was read; false when
    /// there is nothing to read.
    fn read_again(&mut self) -> Result<bool, credit_core::Error> {
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

    /// One line per iteration that `landed` (each read's iterations, and the agreement on its
    /// rows), in the order they landed, with the report's figures now; an iteration read alone
    /// in one read shows that read's agreement. Logs without an iteration: one line of the whole
    /// run's figures.
    fn lines(&self, landed: &[(Vec<i64>, ReadFigures)]) -> Vec<IterationLine> {
        let summary = self.read.summary();
        let mut own: Vec<(i64, ReadFigures)> = Vec::new();
        for (iterations, figures) in landed {
            for &it in iterations {
                match own.iter_mut().find(|(i, _)| *i == it) {
                    // Read in parts: no figures of its own.
                    Some((_, seen)) => *seen = seen.none_of_its_own(),
                    None if iterations.len() == 1 => own.push((it, figures.clone())),
                    None => own.push((it, figures.none_of_its_own())),
                }
            }
        }
        let mut lines = Vec::new();
        for (
            it,
            ReadFigures {
                spearman,
                against,
                logged,
            },
        ) in own
        {
            let trend = self.read.trends().of_iteration(it);
            lines.push(IterationLine {
                iteration: Some(it),
                read: self.reads,
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
                spearman,
                against,
                logged,
            });
        }
        if lines.is_empty()
            && !landed.is_empty()
            && self.read.trends().iterations().next().is_none()
        {
            let headline = crate::Headline::of(&summary, None);
            // The agreement of the one read that landed; several have none of their own.
            let ReadFigures {
                spearman,
                against,
                logged,
            } = match landed {
                [(_, figures)] => figures.clone(),
                _ => ReadFigures::default(),
            };
            lines.push(IterationLine {
                iteration: None,
                read: self.reads,
                rows: summary.rows,
                success_rate: Some(headline.success_rate),
                singleton_step_share: Some(headline.singleton_step_share),
                degenerate_group_share: Some(headline.degenerate_group_share),
                spearman,
                against,
                logged,
            });
        }
        lines
    }
}

/// Why a file read before must be read again from its start, as a note, if it must: it was
/// replaced by another file, shrank, was rewritten in place (the [`fingerprint`] of the bytes
/// read changed: an append leaves them as they were), or its last line, read without a line
/// break, went on.
fn read_again_because(path: &Path, tracked: &Tracked, id: (u64, u64), size: u64) -> Option<String> {
    let how = if tracked.id != id {
        "replaced after it was read"
    } else if size < tracked.read_to {
        "shrank after it was read"
    } else if tracked.open_line && size > tracked.read_to {
        "its last line, read without a line break, went on"
    } else if fingerprint(path, tracked.read_to).ok() != Some(tracked.fingerprint) {
        "rewritten in place after it was read (the bytes read changed)"
    } else {
        return None;
    };
    Some(format!(
        "{}: {how}: reading the run again, this file from its start",
        path.display()
    ))
}

/// A hash of the first and the last [`CHECKED_BYTES`] of a file's first `read_to` bytes: what a
/// trainer rewriting the file in place changes, and appending leaves as it was.
fn fingerprint(path: &Path, read_to: u64) -> std::io::Result<u64> {
    let mut file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    (&mut file)
        .take(read_to.min(CHECKED_BYTES))
        .read_to_end(&mut bytes)?;
    let last = read_to.saturating_sub(CHECKED_BYTES);
    file.seek(SeekFrom::Start(last))?;
    file.take(read_to - last).read_to_end(&mut bytes)?;
    let mut hasher = std::hash::DefaultHasher::new();
    bytes.hash(&mut hasher);
    Ok(hasher.finish())
}

/// Plain JSONL, read line by line as it grows (not compressed, not Parquet).
fn is_plain_jsonl(path: &Path) -> bool {
    let name = path.to_string_lossy().to_ascii_lowercase();
    ![".gz", ".zst", ".parquet"]
        .iter()
        .any(|ext| name.ends_with(ext))
}

/// An error of reading a log (its bytes or its content): the file is named as not read and the
/// watch goes on. Others (a signal model's, writing the report) stop it.
fn of_the_logs(e: &credit_core::Error) -> bool {
    matches!(
        e,
        credit_core::Error::Input { .. }
            | credit_core::Error::Io { .. }
            | credit_core::Error::Polars(_)
            | credit_core::Error::Numbers(_)
    )
}

/// The file an error of reading the logs names.
fn file_of(e: &credit_core::Error) -> Option<&Path> {
    match e {
        credit_core::Error::Input { location, .. } => Some(&location.path),
        credit_core::Error::Io { path, .. } => Some(path),
        _ => None,
    }
}

/// Spearman's ρ per pair of methods, as (`"a~b"`, ρ).
pub type Agreement = Vec<(String, Option<f64>)>;

/// What a read's own rows say: the methods' agreement, and their scores against `--against`'s.
#[derive(Clone, Default)]
pub struct ReadFigures {
    spearman: Agreement,
    against: Option<Against>,
    logged: Vec<LoggedDelta>,
}

impl ReadFigures {
    fn of(more: &crate::run::More, run: &RunPlan) -> Result<Self, credit_core::Error> {
        let spearman = more
            .agreement()
            .into_iter()
            .map(|(a, b, rho)| (format!("{a}~{b}"), rho))
            .collect();
        let against = more.against(run)?;
        let logged = more
            .logged()
            .into_iter()
            .map(|c| LoggedDelta {
                method: c.method,
                max_abs_diff: c.max_abs_diff,
                rows_differing: c.rows_beyond,
                rows: c.rows,
            })
            .collect();
        Ok(ReadFigures {
            spearman,
            against,
            logged,
        })
    }

    /// The figures of an iteration whose rows came with other iterations': none of its own.
    fn none_of_its_own(&self) -> Self {
        ReadFigures {
            spearman: self
                .spearman
                .iter()
                .map(|(p, _)| (p.clone(), None))
                .collect(),
            against: None,
            logged: Vec::new(),
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// An append leaves a file's fingerprint as it was; a rewrite of its first bytes, a
    /// replacement, a shrink or a last line read without its line break going on do not.
    #[test]
    fn a_file_is_read_again_when_what_was_read_changed() {
        let dir = std::env::temp_dir().join(format!("credit-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("1.jsonl");
        // Longer than twice the bytes checked: the middle is not looked at.
        let text = "{\"a\": 1}\n".repeat(1000);
        std::fs::write(&path, &text).unwrap();
        let read_to = text.len() as u64;
        let tracked = Tracked {
            read_to,
            fingerprint: fingerprint(&path, read_to).unwrap(),
            ..Tracked::new((1, 2))
        };
        let again = |id, size| read_again_because(&path, &tracked, id, size);
        std::fs::write(&path, text.clone() + "{\"a\": 2}\n").unwrap();
        assert_eq!(again((1, 2), read_to + 9), None);
        let said = |how: &str| {
            Some(format!(
                "{}: {how}: reading the run again, this file from its start",
                path.display()
            ))
        };
        assert_eq!(
            again((1, 3), read_to + 9),
            said("replaced after it was read")
        );
        assert_eq!(again((1, 2), read_to - 1), said("shrank after it was read"));
        std::fs::write(&path, text.replacen('1', "3", 1) + "{\"a\": 2}\n").unwrap();
        assert_eq!(
            again((1, 2), read_to + 9),
            said("rewritten in place after it was read (the bytes read changed)")
        );
        let open = Tracked {
            open_line: true,
            ..tracked.clone()
        };
        assert_eq!(
            read_again_because(&path, &open, (1, 2), read_to + 9),
            said("its last line, read without a line break, went on")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
