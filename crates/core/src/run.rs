//! One run over the logs, the same for the `credit` binary and the Python package.
//!
//! Ingest reads the logs window by window (complete groups, or whole iterations when a planned
//! method takes statistics over the training batch), in parallel and in bounded memory. Each
//! window's signals are filled ([`Fill`]), the planned methods run, and what a command keeps is
//! handed on in input order ([`InOrder`]). When ingest must read the logs a second time (a group
//! came back after its window closed), everything kept is forgotten and the run starts again.
//!
//! A run is described by a [`RunPlan`]; [`RunPlan::advantages`], [`RunPlan::summary`] and
//! [`RunPlan::gather`] are the runs the commands make, [`RunPlan::frames`] the general one.

use crate::analyses::against::{against_columns, spa_weighting_note, Against};
use crate::analyses::compare::{compare, CompareChunk, CompareRows, Comparison};
use crate::analyses::logged::{self, Departures};
use crate::analyses::search::Search;
use crate::analyses::summary::{summary_part, Summary, SummaryBuilder};
use crate::error::Error;
use crate::ingest::{stream, Event, IngestOptions, IngestReport, Progress, UnitKind, Window};
use crate::methods::{hisr, oracle, Advantages};
use crate::plan::{Notes, Plan};
pub use crate::table_writer::take_rows;
use crate::table_writer::{advantages_rows, table_format, OutputRows, TableWriter};
use crate::StepBatch;
use credit_output::Inputs;
use polars::prelude::DataFrame;
use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What one run reads and computes: the logs and how to read them, the planned methods, and
/// HISR's segmentation (which the summary's segment statistics share with the method).
pub struct RunPlan {
    pub paths: Vec<PathBuf>,
    pub ingest: IngestOptions,
    pub methods: Plan,
    pub hisr: hisr::Params,
    /// The method every other one is scored against (`--against`), by its label; it is among
    /// `methods`. The run then keeps each row's key ([`CompareRows::keys`]).
    pub against: Option<String>,
}

/// Signals filled into each window's batch before the methods run: SPA's progress and HISR's
/// segment rewards predicted by trained models (`credit train progress`/`sprm`). The notes say
/// what was filled.
pub trait Fill: Sync {
    fn fill<'a>(&self, batch: &'a StepBatch) -> Result<(Cow<'a, StepBatch>, Vec<String>), Error>;
}

/// What the logs carry, nothing filled.
pub struct Logged;

impl Fill for Logged {
    fn fill<'a>(&self, batch: &'a StepBatch) -> Result<(Cow<'a, StepBatch>, Vec<String>), Error> {
        Ok((Cow::Borrowed(batch), Vec::new()))
    }
}

/// Called as ingest goes: bytes and rows read so far.
pub type OnProgress<'a> = &'a (dyn Fn(Progress) + Sync);

/// A run's result, the notes of its windows (each once, in the order first seen) then ingest's,
/// and what ingest saw (rows skipped under `--lenient`, files read).
pub struct Finished<T> {
    pub value: T,
    pub notes: Vec<String>,
    pub report: IngestReport,
}

/// A table of advantages written: its rows, columns and metadata (the `.meta.json` sidecar's).
pub struct WrittenTable {
    pub rows: u64,
    pub columns: Vec<String>,
    pub metadata: serde_json::Value,
}

/// Rows of `credit advantages` as they are handed on, in input order.
pub enum Rows<'a> {
    /// Rows `selection` of a window's output, in that order.
    Rows(&'a OutputRows, &'a [usize]),
    /// The logs are read again from the start: drop every row handed on so far.
    Restart,
}

/// Every planned method on every row, as `compare` and `report` keep it: a few bytes per row
/// plus 8 per method, in input order; the summary when asked for.
pub struct Gathered {
    pub rows: CompareRows,
    /// (method label, advantage per row), rows in input order.
    pub advantages: Vec<(String, Vec<f64>)>,
    pub summary: Option<Summary>,
    /// The first rows where each method departs from `logged` (when planned), with their origin.
    pub departures: Departures,
    /// Every trajectory's number of steps, when the run scores against a reference (SPA's
    /// weighting note); empty otherwise.
    pub traj_lengths: Vec<u32>,
}

impl Gathered {
    /// The comparison of every planned method, and each against `logged` when it is planned.
    pub fn compare(&self) -> Comparison {
        let mut comparison = compare(&self.rows, &self.advantages);
        comparison.logged = logged::check(&self.advantages, &self.departures);
        comparison
    }

    /// Adds what a run over logs read after these gathered (`credit watch` reads a run file by
    /// file): its rows follow these. Summaries do not add up once finished: `later`'s is left
    /// out (gather the summary's parts instead).
    pub fn extend(&mut self, later: Gathered) {
        self.rows.extend(later.rows);
        for ((_, mine), (_, theirs)) in self.advantages.iter_mut().zip(later.advantages) {
            mine.extend(theirs);
        }
        self.departures.follow(later.departures);
        self.traj_lengths.extend(later.traj_lengths);
    }

    /// Every other method scored against `reference` (one of the gathered columns) over the rows'
    /// keys, and SPA's weighting note when it fires ([`spa_weighting_note`]).
    pub fn against(
        &self,
        reference: &str,
        plan: &Plan,
    ) -> Result<(Against, Option<String>), Error> {
        let Some((_, values)) = self.advantages.iter().find(|(m, _)| m == reference) else {
            return Err(Error::Param(format!(
                "--against {reference}: `{reference}` is not among the methods run"
            )));
        };
        if self.rows.keys.len() != self.rows.len() {
            return Err(Error::Param(format!(
                "--against {reference}: {} keys for {} rows (the run kept no keys)",
                self.rows.keys.len(),
                self.rows.len()
            )));
        }
        let others = self
            .advantages
            .iter()
            .filter(|(m, _)| m != reference)
            .map(|(m, a)| (m.as_str(), a.as_slice()));
        let scored = against_columns(reference, values, others, &self.rows.keys)?;
        let lengths = || self.traj_lengths.iter().map(|&n| n as usize);
        let note = plan
            .methods
            .iter()
            .find_map(|m| spa_weighting_note(m.params()?, lengths()));
        Ok((scored, note))
    }
}

/// A window's batch with its signals filled, every planned method's result on it, and the notes
/// of both.
pub struct Computed<'a> {
    pub batch: Cow<'a, StepBatch>,
    pub results: Vec<Advantages>,
    pub notes: Vec<String>,
}

impl RunPlan {
    /// One window: its signals filled, then every planned method.
    pub fn compute<'a>(&self, fill: &dyn Fill, window: &'a Window) -> Result<Computed<'a>, Error> {
        let (batch, mut notes) = fill.fill(&window.batch)?;
        let results = self.methods.run(&batch)?;
        notes.extend(results.iter().flat_map(|r| r.notes.iter().cloned()));
        Ok(Computed {
            batch,
            results,
            notes,
        })
    }

    /// The scores against `--against`'s method (`None` without the flag) and SPA's weighting note.
    pub fn against(&self, gathered: &Gathered) -> Result<Option<(Against, Option<String>)>, Error> {
        self.against
            .as_deref()
            .map(|reference| gathered.against(reference, &self.methods))
            .transpose()
    }

    /// `credit advantages -o PATH`: keys and every method's columns written to the table `path`
    /// (`read`: what the run reads, for the output rule), with the run's metadata.
    pub fn write_advantages(
        &self,
        fill: &dyn Fill,
        path: &Path,
        read: &Inputs,
        progress: OnProgress,
    ) -> Result<Finished<WrittenTable>, Error> {
        table_format(path)?;
        let mut writer = TableWriter::create(path, read)?;
        let mut columns: Vec<String> = Vec::new();
        let finished = self.advantages(fill, progress, |rows| {
            match rows {
                Rows::Rows(rows, selection) => {
                    if columns.is_empty() {
                        columns = rows.columns();
                    }
                    writer.write_rows(rows, selection)?;
                }
                Rows::Restart => writer = TableWriter::create(path, read)?,
            }
            Ok::<_, Error>(())
        })?;
        let metadata = self.methods.metadata(&finished.notes);
        let rows = writer.rows();
        writer.finish(&metadata)?;
        Ok(Finished {
            value: WrittenTable {
                rows,
                columns,
                metadata,
            },
            notes: finished.notes,
            report: finished.report,
        })
    }

    /// `credit advantages`: keys and every method's columns, handed to `take` in input order.
    pub fn advantages<E: From<Error> + Send>(
        &self,
        fill: &dyn Fill,
        progress: OnProgress,
        mut take: impl FnMut(Rows<'_>) -> Result<(), E>,
    ) -> Result<Finished<()>, E> {
        let (notes, report) = self.in_input_order(
            self.methods.unit(),
            progress,
            |window| {
                let computed = self.compute(fill, window)?;
                Ok((
                    advantages_rows(&computed.batch, computed.results)?,
                    computed.notes,
                ))
            },
            |step| match step {
                Step::Arrived(_) => Ok(()),
                Step::Rows(rows, selection) => take(Rows::Rows(rows, selection)),
                Step::Restart => take(Rows::Restart),
            },
        )?;
        Ok(Finished {
            value: (),
            notes,
            report,
        })
    }

    /// `credit analyze`: the summary of the logs (no methods run), with verl-agent's similarity
    /// groups at each of `similarity` thresholds.
    pub fn summary<E: From<Error> + Send>(
        &self,
        fill: &dyn Fill,
        similarity: &[f64],
        progress: OnProgress,
    ) -> Result<Finished<Summary>, E> {
        let mut builder = SummaryBuilder::default();
        let mut notes = Notes::default();
        let report = stream(
            &self.paths,
            &self.ingest,
            UnitKind::Group,
            progress,
            |window| {
                let (batch, notes) = fill.fill(&window.batch)?;
                let part = summary_part(&batch, &self.hisr).with_similarity(&batch, similarity);
                Ok::<_, E>((part, notes))
            },
            |event| {
                match event {
                    Event::Window(_, (part, window_notes)) => {
                        builder.add(part);
                        notes.extend(window_notes);
                    }
                    Event::Restart => {
                        builder = SummaryBuilder::default();
                        notes.clear();
                    }
                }
                Ok(())
            },
        )?;
        let value = builder.finish(&report);
        Ok(Finished {
            value,
            notes: with_ingest_notes(notes, &report),
            report,
        })
    }

    /// Every planned method on every row ([`Gathered`]), and more of each window: `look` gets the
    /// window, its filled batch and every method's result, in parallel; `keep` gets what `look`
    /// made of it, window by window in input order, and `None` when the logs are read again
    /// (forget everything kept).
    pub fn gather<X: Send, E: From<Error> + Send>(
        &self,
        fill: &dyn Fill,
        with_summary: bool,
        progress: OnProgress,
        look: impl Fn(&Window, &StepBatch, &[Advantages]) -> Result<X, E> + Sync,
        mut keep: impl FnMut(Option<X>) -> Result<(), E>,
    ) -> Result<Finished<Gathered>, E> {
        let labels = self.methods.labels();
        let mut rows = CompareRows::default();
        let mut columns: Vec<Vec<f64>> = vec![Vec::new(); labels.len()];
        let mut builder = SummaryBuilder::default();
        let mut departures = Departures::default();
        let search = labels
            .iter()
            .any(|l| l == "logged")
            .then(|| Arc::new(Search::new(&self.methods.methods, self.methods.profile)));
        let mut traj_lengths: Vec<u32> = Vec::new();
        let (notes, report) = self.in_input_order(
            self.methods.unit(),
            progress,
            |window| {
                let computed = self.compute(fill, window)?;
                let looked = look(window, &computed.batch, &computed.results)?;
                let part = with_summary.then(|| summary_part(&computed.batch, &self.hisr));
                let departed =
                    Departures::of(window, &computed.batch, &labels, &computed.results, &search);
                let advantages = computed
                    .results
                    .iter()
                    .map(|r| r.advantage().to_vec())
                    .collect();
                let batch = &computed.batch;
                let (keys, lengths) = match self.against {
                    Some(_) => (
                        Some(oracle::row_keys(batch)?),
                        batch.trajs.iter().map(|t| t.rows.len() as u32).collect(),
                    ),
                    None => (None, Vec::new()),
                };
                let chunk = CompareChunk::of(batch, advantages).with_keys(keys);
                let arrived = (looked, part, departed, lengths);
                Ok(((chunk, Some(arrived)), computed.notes))
            },
            // `keep` and the summary are fed once per window, as it arrives; the rows as they
            // come into input order.
            |step| match step {
                Step::Arrived((_, arrived)) => {
                    let (looked, part, departed, lengths) =
                        arrived.take().expect("a window arrives once");
                    if let Some(part) = part {
                        builder.add(part);
                    }
                    traj_lengths.extend(lengths);
                    departures.merge(departed);
                    keep(Some(looked))
                }
                Step::Rows((chunk, _), selection) => {
                    rows.append(chunk, selection, &mut columns);
                    Ok(())
                }
                Step::Restart => {
                    rows = CompareRows::default();
                    columns.iter_mut().for_each(Vec::clear);
                    builder = SummaryBuilder::default();
                    departures = Departures::default();
                    traj_lengths.clear();
                    keep(None)
                }
            },
        )?;
        Ok(Finished {
            value: Gathered {
                rows,
                advantages: labels.into_iter().zip(columns).collect(),
                summary: with_summary.then(|| builder.finish(&report)),
                departures,
                traj_lengths,
            },
            notes,
            report,
        })
    }

    /// Every window, `process`ed in parallel, then `sink`, window by window in input order (and
    /// [`Event::Restart`] when the logs are read again): for a command that uses windows its own
    /// way (`credit graph`).
    pub fn windows<R: Send, E: From<Error> + Send>(
        &self,
        unit: UnitKind,
        progress: OnProgress,
        process: impl Fn(&Window) -> Result<R, E> + Sync,
        sink: impl FnMut(Event<R>) -> Result<(), E>,
    ) -> Result<Finished<()>, E> {
        let report = stream(&self.paths, &self.ingest, unit, progress, process, sink)?;
        Ok(Finished {
            value: (),
            notes: report.notes.clone(),
            report,
        })
    }

    /// Every window's table (`make`: the table and its notes), joined in input order: the
    /// general run, for callers that keep whole tables (the Python package).
    pub fn frames<E: From<Error> + Send>(
        &self,
        unit: UnitKind,
        progress: OnProgress,
        make: impl Fn(&Window) -> Result<(DataFrame, Vec<String>), E> + Sync,
    ) -> Result<Finished<Option<DataFrame>>, E> {
        let mut parts: Vec<DataFrame> = Vec::new();
        let (notes, report) = self.in_input_order(unit, progress, make, |step| {
            match step {
                Step::Arrived(_) => {}
                Step::Rows(frame, selection) => parts.push(take_rows(frame, selection)?),
                Step::Restart => parts.clear(),
            }
            Ok(())
        })?;
        let value = concat(parts)?;
        Ok(Finished {
            value,
            notes,
            report,
        })
    }

    /// The machinery every run shares: `process` makes each window's rows `C` (and notes), in
    /// parallel; `step` sees each window's rows once as they arrive, then runs of one window's
    /// rows in input order, and the restart when the logs are read again.
    fn in_input_order<C: Send, E: From<Error> + Send>(
        &self,
        unit: UnitKind,
        progress: OnProgress,
        process: impl Fn(&Window) -> Result<(C, Vec<String>), E> + Sync,
        mut step: impl FnMut(Step<'_, C>) -> Result<(), E>,
    ) -> Result<(Vec<String>, IngestReport), E> {
        let mut in_order: InOrder<C> = InOrder::default();
        let mut notes = Notes::default();
        let report = stream(
            &self.paths,
            &self.ingest,
            unit,
            progress,
            process,
            |event| {
                match event {
                    Event::Window(window, (mut rows, window_notes)) => {
                        notes.extend(window_notes);
                        step(Step::Arrived(&mut rows))?;
                        in_order.push(window.seq, rows);
                        in_order.flush(window.watermark, |c, rows| step(Step::Rows(c, rows)))?;
                    }
                    Event::Restart => {
                        in_order.clear();
                        notes.clear();
                        step(Step::Restart)?;
                    }
                }
                Ok(())
            },
        )?;
        in_order.flush(u64::MAX, |c, rows| step(Step::Rows(c, rows)))?;
        Ok((with_ingest_notes(notes, &report), report))
    }
}

/// What the run's machinery hands on ([`RunPlan::in_input_order`]).
enum Step<'a, C> {
    /// A window's rows, once, as the window arrives.
    Arrived(&'a mut C),
    /// Rows `selection` of a window, in input order.
    Rows(&'a C, &'a [usize]),
    /// The logs are read again from the start: forget everything.
    Restart,
}

/// The windows' notes, then ingest's.
fn with_ingest_notes(notes: Notes, report: &IngestReport) -> Vec<String> {
    let mut notes = notes.into_vec();
    notes.extend(report.notes.iter().cloned());
    notes
}

/// Tables with the same columns, one after the other (`None` for none).
pub fn concat(parts: Vec<DataFrame>) -> Result<Option<DataFrame>, Error> {
    let mut parts = parts.into_iter();
    let Some(mut whole) = parts.next() else {
        return Ok(None);
    };
    for part in parts {
        whole.vstack_mut_owned(part)?;
    }
    whole.rechunk_mut();
    Ok(Some(whole))
}

/// Rows that arrive in windows, out of input order when a log's groups interleave, handed on in
/// input order: each window's rows carry their place in the input (`seq`), and a window's
/// watermark says that no later window holds an earlier row.
pub(crate) struct InOrder<C> {
    pending: Vec<Waiting<C>>,
}

/// A window's rows not all handed on yet.
struct Waiting<C> {
    /// Each row's place in the input.
    seq: Vec<u64>,
    chunk: C,
    /// The rows in input order: the first `handed_on` of them have been handed on. Watermarks
    /// only grow, so each flush goes on from there instead of looking at every waiting row (a
    /// window held back by a group open since the start would be looked at once per window).
    by_seq: Vec<u32>,
    handed_on: usize,
}

impl<C> Default for InOrder<C> {
    fn default() -> Self {
        InOrder {
            pending: Vec::new(),
        }
    }
}

impl<C> InOrder<C> {
    pub fn push(&mut self, seq: Vec<u64>, chunk: C) {
        let mut by_seq: Vec<u32> = (0..seq.len() as u32).collect();
        by_seq.sort_unstable_by_key(|&r| seq[r as usize]);
        self.pending.push(Waiting {
            seq,
            chunk,
            by_seq,
            handed_on: 0,
        });
    }

    pub fn clear(&mut self) {
        self.pending.clear();
    }

    /// Hands on every pending row before `watermark` in input order, as runs of rows of one
    /// chunk: `take(chunk, rows)`.
    pub fn flush<E>(
        &mut self,
        watermark: u64,
        mut take: impl FnMut(&C, &[usize]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let mut ready: Vec<(u64, usize, usize)> = Vec::new();
        for (c, waiting) in self.pending.iter().enumerate() {
            for &r in &waiting.by_seq[waiting.handed_on..] {
                let s = waiting.seq[r as usize];
                if s >= watermark {
                    break;
                }
                ready.push((s, c, r as usize));
            }
        }
        if ready.windows(2).any(|w| w[1].0 < w[0].0) {
            ready.sort_unstable();
        }
        let mut rows = Vec::new();
        let mut i = 0;
        while i < ready.len() {
            let c = ready[i].1;
            rows.clear();
            while i < ready.len() && ready[i].1 == c {
                rows.push(ready[i].2);
                i += 1;
            }
            take(&self.pending[c].chunk, &rows)?;
            self.pending[c].handed_on += rows.len();
        }
        self.pending
            .retain(|waiting| waiting.handed_on < waiting.by_seq.len());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_come_out_in_input_order() {
        // Window A holds rows 0, 2, 5; window B rows 1, 3, 4. After A with watermark 1 only row 0
        // may go; after B with watermark 6 the rest, in order.
        let mut order: InOrder<&str> = InOrder::default();
        let mut out: Vec<(String, Vec<usize>)> = Vec::new();
        order.push(vec![0, 2, 5], "A");
        order
            .flush(1, |c, rows| {
                out.push((c.to_string(), rows.to_vec()));
                Ok::<(), ()>(())
            })
            .unwrap();
        order.push(vec![1, 3, 4], "B");
        order
            .flush(6, |c, rows| {
                out.push((c.to_string(), rows.to_vec()));
                Ok::<(), ()>(())
            })
            .unwrap();
        assert_eq!(
            out,
            vec![
                ("A".to_string(), vec![0]),
                ("B".to_string(), vec![0]),
                ("A".to_string(), vec![1]),
                ("B".to_string(), vec![1, 2]),
                ("A".to_string(), vec![2]),
            ]
        );
        assert!(order.pending.is_empty());
    }
}
