//! From rows to complete units: every row joins its unit (a group, an iteration's groups, or the
//! whole input), a unit is checked when it closes (duplicate and padding rows, step gaps), and
//! closed units leave as windows: a [`StepBatch`] of whole units that any method can run on.
//!
//! When a unit closes is the question. Logs are written batch by batch, so a group's rows sit
//! close together: in a single pass ([`Closing::Optimistic`]) a unit closes once a set amount of
//! other rows has gone by since its last row, or when too much is held. If a row of a closed unit
//! turns up later (or a field first appears after windows went out without it), the pass reports
//! [`Flow::Restart`]; the driver then indexes the input and reads it again with
//! [`Closing::Exact`], where each unit closes right after its last row. Either way every window
//! holds exactly the rows the whole-input batch would give that unit.

use super::ids::{id, Id, IdTable, Probe};
use super::rows::{Origin, Rows, Runs, UnitRows};
use super::IngestReport;
use crate::batch::StepBatch;
use crate::error::{Error, Location, Reason, Result, Unit as LineUnit};
use crate::schema::{columns::*, field_index, FIELDS};
use polars::prelude::PlHashMap as HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// What a window holds whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitKind {
    /// Each group: for group-local methods and analyses.
    Group,
    /// Each iteration's groups (the training batch): for methods with per-batch statistics
    /// (ProxMO's TF-IDF fit, MGR's batch rates, SPA/HISR whitening). Without an `iteration`
    /// column, the whole input is one batch.
    Iteration,
    /// The whole input as one window.
    All,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum UnitKey {
    Group(Option<i64>, String),
    Iteration(Option<i64>),
    All,
}

impl UnitKey {
    fn describe(&self) -> String {
        match self {
            UnitKey::Group(Some(it), g) => format!("group `{g}` of iteration {it}"),
            UnitKey::Group(None, g) => format!("group `{g}`"),
            UnitKey::Iteration(Some(it)) => format!("iteration {it}"),
            UnitKey::Iteration(None) => "the rows without an iteration".into(),
            UnitKey::All => "the input".into(),
        }
    }
}

/// When units close.
pub(crate) enum Closing {
    /// After `quiet` bytes of other rows since a unit's last row, or oldest first while more than
    /// `budget` bytes are held.
    Optimistic { quiet: u64, budget: u64 },
    /// Right after each unit's last row, as an index pass found it; `present` are the fields that
    /// the whole input has.
    Exact {
        last_seq: HashMap<UnitKey, u64>,
        present: Vec<bool>,
    },
}

/// Whether the pass can go on.
#[derive(Debug)]
pub(crate) enum Flow {
    Continue,
    /// The single pass cannot stay exact: the reason, for the note.
    Restart(String),
}

/// An open unit; its rows are in `Assembler::rows_of` at its slot, so that the units moved
/// about in `open` stay small.
struct OpenUnit {
    id: Id,
    /// Its entry in `Assembler::slot_place` and `Assembler::rows_of`.
    slot: u32,
    first_seq: u64,
    /// `position` when its last row arrived.
    last_position: u64,
    /// Whether a row arrived in the block being assembled.
    touched: bool,
    /// Under [`Closing::Exact`]: the seq of its last row.
    last_seq: Option<u64>,
}

/// A closed, checked unit: its rows and which of them are kept.
#[derive(Default)]
struct Closed {
    rows: UnitRows,
    keep: Kept,
    trajs: KeptTrajs,
    first_seq: u64,
}

/// Complete units as one batch.
pub struct Window {
    pub batch: StepBatch,
    /// Each batch row's place in the input (increasing within a unit, not across units).
    pub seq: Vec<u64>,
    /// Every input row before this place has been in this or an earlier window, or was dropped.
    pub watermark: u64,
    /// Each batch row's file and line (or Parquet row).
    origin: Vec<Origin>,
    paths: Arc<[PathBuf]>,
}

impl Window {
    /// Where batch row `row` was read: `logs/a.jsonl:17`, `logs/a.parquet:row 16`.
    pub fn location(&self, row: usize) -> Location {
        location(&self.paths, self.origin[row], None)
    }
}

/// `origin` as a location in `paths`: a line of JSONL, a row of Parquet.
fn location(paths: &[PathBuf], origin: Origin, column: Option<&str>) -> Location {
    let path = &paths[origin.file as usize];
    let unit = match super::files::format_of(path) {
        Some(super::files::Format::Parquet) => LineUnit::Row,
        _ => LineUnit::Line,
    };
    Location {
        path: path.clone(),
        line: Some(origin.line),
        unit,
        char_column: None,
        column: column.map(str::to_string),
    }
}

/// The place of a free slot.
const FREE: u32 = u32::MAX;

/// Where a unit stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    New,
    /// Open, at this place in `open`.
    Open(usize),
    Closed,
}

/// What is kept of every trajectory seen, to catch one in two groups.
#[derive(Clone, Copy, Default)]
struct TrajSeen {
    group: Id,
    first: Origin,
}

/// The first piece of a trajectory id to close, whatever its iteration: a later iteration may
/// reuse the id (its steps start again), but a piece that goes on where another stopped is one
/// trajectory whose rows carry two iterations.
#[derive(Clone, Copy)]
struct FirstPiece {
    iteration: Option<i64>,
    /// The group id's identity, without the iteration.
    group: Id,
    first_step: i64,
    at: Origin,
}

/// The previous row's keys and unit: consecutive rows of one trajectory skip the look-ups. The
/// id buffers are reused from row to row.
#[derive(Default)]
struct LastRow {
    it: Option<i64>,
    gid: String,
    tid: String,
    /// Its trajectory's number (see [`UnitRows::traj`]).
    traj: u64,
    /// Its unit's place in `open`; `None` once a unit closed (places move).
    unit: Option<usize>,
}

pub(crate) struct Assembler {
    kind: UnitKind,
    closing: Closing,
    lenient: bool,
    success_threshold: f64,
    gamma: f64,
    /// The input files, shared with every window (its rows name them: [`Window::location`]).
    paths: Arc<[PathBuf]>,
    open: Vec<OpenUnit>,
    /// Every unit seen, with its slot: a unit is open while its slot holds it. One look-up per
    /// unit and one per trajectory, whatever the number of units, and none when a unit closes.
    units: IdTable<u32>,
    /// Each slot's place in `open` (closing a unit moves the last open one into its place), or
    /// [`FREE`]; slots of closed units are reused.
    slot_place: Vec<u32>,
    /// Each slot's unit's rows.
    rows_of: Vec<UnitRows>,
    free_slots: Vec<u32>,
    /// Bytes of the rows of open units.
    held: u64,
    /// Every trajectory seen, by the identity of (iteration, traj_id). Whether it is open is
    /// its unit's state.
    trajs: IdTable<TrajSeen>,
    /// Every trajectory id's first piece to close, by the identity of the id alone (kept only
    /// when the logs have iterations).
    pieces: IdTable<FirstPiece>,
    /// Bytes of input in all (on disk; 0 when unknown) and read so far: `units` and `trajs` are
    /// sized for the whole input at the rate seen so far, not doubled their way there (each
    /// doubling moves every entry, a million for a log of single-row groups).
    input_bytes: u64,
    read_bytes: u64,
    next_seq: u64,
    position: u64,
    present: Vec<bool>,
    /// Per key field: whether an id was given as a number, and as a string.
    numbered: Vec<bool>,
    named: Vec<bool>,
    /// The fields of the windows that went out, once one has.
    emitted_present: Option<Vec<bool>>,
    ready: Vec<Closed>,
    ready_bytes: usize,
    last_row: LastRow,
    pub report: IngestReport,
    field: Fields,
}

/// Field indices of the keys.
struct Fields {
    group: usize,
    traj: usize,
    step: usize,
    iteration: usize,
    episode_reward: usize,
}

/// (iteration, group_id, traj_id) of a row.
type RowKey<'a> = (Option<i64>, &'a str, &'a str);

/// The rows of a unit that are kept, inline for the common one-row unit.
type Kept = smallvec::SmallVec<[usize; 2]>;

/// The trajectory of each kept row of a unit, numbered in order of first appearance.
type KeptTrajs = smallvec::SmallVec<[u32; 2]>;

/// The identities of a row's group, unit and trajectory.
#[derive(Clone, Copy)]
struct RowIds {
    group: Id,
    unit: Id,
    traj: Id,
}

/// Rows whose identities are worked out, and their slots fetched, ahead of placing them: enough
/// for the fetches to overlap, few enough that their slots stay in the first-level cache.
const AHEAD: usize = 64;

/// A window goes out once this many bytes of closed units are ready.
const WINDOW_BYTES: usize = 8 << 20;

impl Assembler {
    pub fn new(
        kind: UnitKind,
        closing: Closing,
        lenient: bool,
        success_threshold: f64,
        gamma: f64,
        paths: Vec<PathBuf>,
    ) -> Self {
        let fi = |name| field_index(name).expect("canonical field");
        let present = match &closing {
            Closing::Exact { present, .. } => present.clone(),
            Closing::Optimistic { .. } => vec![false; FIELDS.len()],
        };
        let emitted_present = match &closing {
            Closing::Exact { present, .. } => Some(present.clone()),
            Closing::Optimistic { .. } => None,
        };
        Assembler {
            kind,
            closing,
            lenient,
            success_threshold,
            gamma,
            report: IngestReport {
                files: Vec::new(),
                ..Default::default()
            },
            paths: paths.into(),
            open: Vec::new(),
            units: IdTable::new(),
            slot_place: Vec::new(),
            rows_of: Vec::new(),
            free_slots: Vec::new(),
            held: 0,
            trajs: IdTable::new(),
            pieces: IdTable::new(),
            input_bytes: 0,
            read_bytes: 0,
            last_row: LastRow::default(),
            next_seq: 0,
            position: 0,
            present,
            numbered: vec![false; FIELDS.len()],
            named: vec![false; FIELDS.len()],
            emitted_present,
            ready: Vec::new(),
            ready_bytes: 0,
            field: Fields {
                group: fi(GROUP_ID),
                traj: fi(TRAJ_ID),
                step: fi(STEP),
                iteration: fi(ITERATION),
                episode_reward: fi(EPISODE_REWARD),
            },
        }
    }

    /// The input's size on disk, to size the tables of units and trajectories seen.
    pub fn expect_bytes(&mut self, bytes: u64) {
        self.input_bytes = bytes;
    }

    /// Room in `units` and `trajs` for as many entries as the whole input will give at the
    /// rate seen so far.
    fn reserve_for_input(&mut self) {
        if self.read_bytes == 0 || self.input_bytes <= self.read_bytes {
            return;
        }
        let scale = self.input_bytes as f64 / self.read_bytes as f64;
        let expected = |seen: usize| (seen as f64 * scale) as usize;
        let (units, trajs) = (expected(self.units.len()), expected(self.trajs.len()));
        self.units.reserve(units.saturating_sub(self.units.len()));
        self.trajs.reserve(trajs.saturating_sub(self.trajs.len()));
    }

    fn location(&self, origin: Origin, column: Option<&str>) -> Location {
        location(&self.paths, origin, column)
    }

    /// Reports a bad row: an error in strict mode, a counted skip under `--lenient`.
    fn reject(&mut self, error: Error, rows: u64) -> Result<()> {
        match (&error, self.lenient) {
            (Error::Input { reason, .. }, true) => {
                *self.report.skipped.entry(*reason).or_default() += rows;
                if self.report.skipped_examples.len() < super::SKIPPED_EXAMPLES {
                    self.report.skipped_examples.push(error.to_string());
                }
                Ok(())
            }
            _ => Err(error),
        }
    }

    /// Takes one parsed block, in input order.
    pub fn push(&mut self, block: super::jsonl::Block) -> Result<Flow> {
        for problem in block.problems {
            self.reject(problem, 1)?;
        }
        self.read_bytes += block.disk_bytes;
        self.report.columns_seen.extend(block.uses);
        self.report.column_names.merge(block.columns);
        for i in 0..FIELDS.len() {
            self.numbered[i] |= block.rows.numbered[i];
            self.named[i] |= block.rows.named[i];
        }
        let mut rows = block.rows;
        rows.freeze();
        let rows = Arc::new(rows);
        if let Some(summary) = self.report.files.get_mut(block.file as usize) {
            summary.rows += rows.len() as u64;
        }
        if rows.is_empty() {
            return Ok(Flow::Continue);
        }
        for (i, &p) in rows.present.iter().enumerate() {
            if p && !self.present[i] {
                if self.emitted_present.is_some() {
                    return Ok(Flow::Restart(format!(
                        "the column feeding `{}` first appears at {}, after windows without it went out",
                        FIELDS[i].name,
                        self.location(rows.origin[0], None)
                    )));
                }
                self.present[i] = true;
            }
        }
        let per_row = (rows.bytes() / rows.len()).max(1) as u64;
        for unit in &mut self.open {
            unit.touched = false;
        }
        let mut ids = Vec::with_capacity(AHEAD);
        for start in (0..rows.len()).step_by(AHEAD) {
            let batch = start..rows.len().min(start + AHEAD);
            self.row_ids(&rows, batch.clone(), &mut ids);
            for (r, &((it, gid, tid), row_ids)) in batch.zip(&ids) {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.position += per_row;
                let origin = rows.origin[r];

                let last = &self.last_row;
                let same = last
                    .unit
                    .filter(|_| last.it == it && last.gid == gid && last.tid == tid);
                let (u, traj) = match same {
                    Some(u) => (u, last.traj),
                    None => match self.place(it, gid, tid, row_ids, seq, origin)? {
                        Ok(placed) => placed,
                        Err(Some(flow)) => return Ok(flow),
                        Err(None) => continue,
                    },
                };
                let unit = &mut self.open[u];
                self.rows_of[unit.slot as usize].push(&rows, r, seq, traj, per_row as usize);
                self.held += per_row;
                unit.last_position = self.position;
                unit.touched = true;
                if unit.last_seq == Some(seq) {
                    self.close(u)?;
                }
            }
        }
        self.reserve_for_input();
        if let Closing::Optimistic { quiet, budget } = self.closing {
            // Quiet units first, then the oldest untouched ones while over budget. One sweep each:
            // closing swaps the last open unit into the closed one's place, which is looked at
            // again, so units close in the order a search from the start for each would find.
            let position = self.position;
            let mut u = 0;
            while u < self.open.len() {
                if self.open[u].last_position + quiet < position {
                    self.close(u)?;
                } else {
                    u += 1;
                }
            }
            if self.held > budget {
                // Positions are unique (one per row), so this is the order of oldest first.
                let mut oldest: Vec<(u64, u32)> = self
                    .open
                    .iter()
                    .filter(|u| !u.touched)
                    .map(|u| (u.last_position, u.slot))
                    .collect();
                oldest.sort_unstable_by_key(|&(last_position, _)| last_position);
                for (_, slot) in oldest {
                    if self.held <= budget {
                        break;
                    }
                    self.close(self.slot_place[slot as usize] as usize)?;
                }
            }
        }
        Ok(Flow::Continue)
    }

    /// The keys and identities of rows `batch`, into `ids`, with their slots in `units` and
    /// `trajs` asked for: by the time [`Assembler::place`] looks them up they are in cache. A row
    /// of the trajectory of the row before repeats its identities without hashing.
    fn row_ids<'r>(
        &self,
        rows: &'r Rows,
        batch: std::ops::Range<usize>,
        ids: &mut Vec<(RowKey<'r>, RowIds)>,
    ) {
        let (gf, tf, itf) = (self.field.group, self.field.traj, self.field.iteration);
        ids.clear();
        let mut previous: Option<(RowKey, RowIds)> = None;
        for r in batch {
            let key = (rows.int(itf, r), rows.text(gf, r), rows.text(tf, r));
            let (it, gid, tid) = key;
            let row_ids = match previous {
                Some((before, row_ids)) if before == key => row_ids,
                _ => {
                    let group = id(it, gid);
                    RowIds {
                        group,
                        unit: self.unit_id(it, group),
                        traj: id(it, tid),
                    }
                }
            };
            ids.push((key, row_ids));
            previous = Some((key, row_ids));
        }
        // Asked for together, after the hashing: each request that misses the TLB holds back
        // the instructions after it until its page walk ends, so walks asked for one row at a
        // time, between hashes, overlap little; asked for back to back they overlap.
        let mut previous = None;
        for &(_, row_ids) in ids.iter() {
            if previous != Some(row_ids.traj) {
                self.units.prefetch(row_ids.unit);
                self.trajs.prefetch(row_ids.traj);
                previous = Some(row_ids.traj);
            }
        }
    }

    /// The open unit of a row that does not continue the previous row's trajectory, and the
    /// number of its trajectory: `Err(None)` when the row was rejected, `Err(Some(restart))` when
    /// a closed unit reappears.
    fn place(
        &mut self,
        it: Option<i64>,
        gid: &str,
        tid: &str,
        ids: RowIds,
        seq: u64,
        origin: Origin,
    ) -> Result<std::result::Result<(usize, u64), Option<Flow>>> {
        let RowIds { group, unit, traj } = ids;
        // A trajectory belongs to one group.
        let state = self.state(unit);
        let (seen, number) = match self.trajs.find(traj) {
            Probe::Found(at) => (Some(*self.trajs.value(at)), self.trajs.number(at)),
            Probe::Vacant(_) if state == State::Closed => {
                return Ok(Err(Some(self.reappears(self.key(it, gid), origin))));
            }
            Probe::Vacant(at) => {
                let first = origin;
                (
                    None,
                    self.trajs.insert_at(at, traj, TrajSeen { group, first }),
                )
            }
        };
        match seen {
            Some(seen) if seen.group != group => {
                let first_gid = self.open_group_of(self.unit_id(it, seen.group), it, tid);
                let e = self.two_groups(origin, tid, gid, first_gid.as_deref(), seen.first);
                self.reject(e, 1)?;
                return Ok(Err(None));
            }
            // Its rows again after its group closed.
            Some(_) if state == State::Closed => {
                return Ok(Err(Some(
                    self.reappears(UnitKey::Group(it, gid.to_string()), origin),
                )));
            }
            Some(_) | None => {}
        }
        let u = match state {
            State::Open(u) => u,
            _ => self.open_unit(unit, it, gid, seq),
        };
        self.last_row.it = it;
        self.last_row.gid.clear();
        self.last_row.gid.push_str(gid);
        self.last_row.tid.clear();
        self.last_row.tid.push_str(tid);
        self.last_row.traj = number as u64;
        self.last_row.unit = Some(u);
        Ok(Ok((u, number as u64)))
    }

    fn state(&self, unit: Id) -> State {
        let Some(&slot) = self.units.get(unit) else {
            return State::New;
        };
        match self.slot_place[slot as usize] {
            FREE => State::Closed,
            place if self.open[place as usize].id == unit => State::Open(place as usize),
            // The slot went to a unit opened later.
            _ => State::Closed,
        }
    }

    /// The identity of the unit of a row of group `group` (an [`id`] of (iteration, group_id)).
    fn unit_id(&self, it: Option<i64>, group: Id) -> Id {
        match self.kind {
            UnitKind::Group => group,
            UnitKind::Iteration => id(it, ""),
            UnitKind::All => id(None, ""),
        }
    }

    /// The unit of a row, for messages and the index pass.
    fn key(&self, it: Option<i64>, gid: &str) -> UnitKey {
        match self.kind {
            UnitKind::Group => UnitKey::Group(it, gid.to_string()),
            UnitKind::Iteration => UnitKey::Iteration(it),
            UnitKind::All => UnitKey::All,
        }
    }

    /// Opens a unit at a row; returns its place in `open`.
    fn open_unit(&mut self, unit_id: Id, it: Option<i64>, gid: &str, seq: u64) -> usize {
        let last_seq = match &self.closing {
            Closing::Exact { last_seq, .. } => last_seq.get(&self.key(it, gid)).copied(),
            Closing::Optimistic { .. } => None,
        };
        let place = self.open.len();
        let slot = match self.free_slots.pop() {
            Some(slot) => {
                self.slot_place[slot as usize] = place as u32;
                slot
            }
            None => {
                self.slot_place.push(place as u32);
                self.rows_of.push(UnitRows::default());
                (self.slot_place.len() - 1) as u32
            }
        };
        self.open.push(OpenUnit {
            id: unit_id,
            slot,
            first_seq: seq,
            last_position: 0,
            touched: false,
            last_seq,
        });
        self.units.insert(unit_id, slot);
        place
    }

    /// The group_id of open trajectory (it, tid) of unit `unit` (from its first row); `None`
    /// when that unit has closed.
    fn open_group_of(&self, unit: Id, it: Option<i64>, tid: &str) -> Option<String> {
        let State::Open(u) = self.state(unit) else {
            return None;
        };
        let rows = &self.rows_of[self.open[u].slot as usize];
        let (gf, tf, itf) = (self.field.group, self.field.traj, self.field.iteration);
        (0..rows.len())
            .find(|&r| rows.int(itf, r) == it && rows.text(tf, r) == tid)
            .map(|r| rows.text(gf, r).to_string())
    }

    fn two_groups(
        &self,
        at: Origin,
        tid: &str,
        gid: &str,
        first_gid: Option<&str>,
        first: Origin,
    ) -> Error {
        let before = match first_gid {
            Some(g) => format!("in group `{g}`"),
            None => "in another group".to_string(),
        };
        Error::input(
            self.location(at, Some(GROUP_ID)),
            Reason::TrajectoryInTwoGroups,
            format!(
                "trajectory `{tid}` is in group `{gid}` here but {before} at {}; a trajectory belongs to one group",
                self.location(first, None)
            ),
        )
    }

    fn reappears(&self, key: UnitKey, at: Origin) -> Flow {
        Flow::Restart(format!(
            "{} has rows again at {} after it was complete in one pass",
            key.describe(),
            self.location(at, None)
        ))
    }

    /// Closes open unit `u`: its checks, then it waits in `ready`.
    fn close(&mut self, u: usize) -> Result<()> {
        self.last_row.unit = None;
        let unit = self.open.swap_remove(u);
        if let Some(moved) = self.open.get(u) {
            self.slot_place[moved.slot as usize] = u as u32;
        }
        self.slot_place[unit.slot as usize] = FREE;
        self.free_slots.push(unit.slot);
        let rows = std::mem::take(&mut self.rows_of[unit.slot as usize]);
        self.held -= rows.bytes as u64;
        let (keep, trajs) = self.check(&rows)?;
        self.ready_bytes += rows.bytes;
        self.ready.push(Closed {
            rows,
            keep,
            trajs,
            first_seq: unit.first_seq,
        });
        Ok(())
    }

    /// The checks of a closed unit, as the whole-input batch would make them: padding duplicates
    /// dropped, duplicate steps and step gaps rejected. Returns the rows kept, and the trajectory
    /// of each, numbered in order of first appearance among them.
    fn check(&mut self, rows: &UnitRows) -> Result<(Kept, KeptTrajs)> {
        let n = rows.len();
        let (tf, sf) = (self.field.traj, self.field.step);
        if n == 1 {
            // No duplicate, one step: the check without its tables (logs of single-row groups
            // close a unit per row).
            let steps = [(rows.int(sf, 0).unwrap_or_default(), 0)];
            let problem = self
                .step_gap(rows, rows.text(tf, 0), &steps)
                .or_else(|| self.in_two_iterations(rows, 0, steps[0].0));
            if let Some(e) = problem {
                self.reject(e, 1)?;
                return Ok((Kept::new(), KeptTrajs::new()));
            }
            return Ok((Kept::from_slice(&[0]), KeptTrajs::from_slice(&[0])));
        }
        // Every row as (trajectory, step, row), sorted: the rows of one (trajectory, step) come
        // together, the first in the input first, and each trajectory's steps in order (no table
        // of a key per row, no vector per trajectory). A trajectory is the number the assembler
        // gave it when the input first showed it: no key is compared or looked up.
        let mut entries: Vec<(u64, i64, usize)> = (0..n)
            .map(|row| (rows.traj(row), rows.int(sf, row).unwrap_or_default(), row))
            .collect();
        entries.sort_unstable();
        let mut keep = vec![true; n];
        let mut rejects = Vec::new();
        for same_step in entries.chunk_by(|a, b| (a.0, a.1) == (b.0, b.1)) {
            let (_, step, first) = same_step[0];
            for &(_, _, row) in &same_step[1..] {
                keep[row] = false;
                if rows.rows_equal(first, row) {
                    self.report.padding_duplicates += 1;
                    continue;
                }
                rejects.push((
                    row,
                    Error::input(
                        self.location(rows.origin(row), Some(STEP)),
                        Reason::DuplicateStep,
                        format!(
                            "duplicate step {} of trajectory `{}` (first at {}), with different content; each (traj_id, step) must appear once",
                            step,
                            rows.text(tf, row),
                            self.location(rows.origin(first), None)
                        ),
                    ),
                ));
            }
        }
        // In input order, as the rows came.
        rejects.sort_unstable_by_key(|&(row, _)| row);
        for (_, e) in rejects {
            self.reject(e, 1)?;
        }

        // Steps must be contiguous from 0 or 1 within each trajectory: the kept rows' entries.
        entries.retain(|&(_, _, row)| keep[row]);
        let steps: Vec<(i64, usize)> = entries.iter().map(|&(_, step, row)| (step, row)).collect();
        let mut gaps: Vec<(Error, Vec<usize>)> = Vec::new();
        let mut start = 0;
        for traj in entries.chunk_by(|a, b| a.0 == b.0) {
            let steps = &steps[start..start + traj.len()];
            start += traj.len();
            if let Some(e) = self.step_gap(rows, rows.text(tf, steps[0].1), steps) {
                gaps.push((e, steps.iter().map(|&(_, r)| r).collect()));
            }
        }
        gaps.sort_by_key(|(_, rows)| rows.iter().min().copied());
        for (e, gap_rows) in gaps {
            self.reject(e, gap_rows.len() as u64)?;
            for r in gap_rows {
                keep[r] = false;
            }
        }
        // What is decided per trajectory of whole rows: rows that carry two iterations, and an
        // episode reward that changes (the batch takes one row's). Skipped whole.
        let mut dropped: Vec<(Error, Vec<usize>)> = Vec::new();
        for traj in entries.chunk_by(|a, b| a.0 == b.0) {
            let kept_rows = || traj.iter().map(|&(_, _, row)| row).filter(|&row| keep[row]);
            let Some(&(_, first_step, first_row)) = traj.iter().find(|e| keep[e.2]) else {
                continue;
            };
            let problem = self
                .in_two_iterations(rows, first_row, first_step)
                .or_else(|| self.episode_reward_changes(rows, kept_rows()));
            if let Some(e) = problem {
                dropped.push((e, kept_rows().collect()));
            }
        }
        dropped.sort_by_key(|(_, rows)| rows.iter().min().copied());
        for (e, traj_rows) in dropped {
            self.reject(e, traj_rows.len() as u64)?;
            for r in traj_rows {
                keep[r] = false;
            }
        }
        // The kept rows' trajectories, numbered in order of first appearance among them, which
        // the batch index takes as they are. A trajectory's first row is in its unit, and is kept
        // unless the trajectory is dropped whole (a gap; of duplicates the first is kept), so the
        // kept trajectories first appear in the order of the assembler's numbers: a row whose
        // number is above all before it starts a trajectory, and one of a trajectory before
        // finds it among their numbers (sorted, as they came).
        let mut firsts: Vec<u64> = Vec::new();
        let mut previous: Option<(u64, u32)> = None;
        let (mut kept, mut trajs) = (Kept::new(), KeptTrajs::new());
        for row in (0..n).filter(|&r| keep[r]) {
            let number = rows.traj(row);
            let traj = match previous {
                Some((before, traj)) if before == number => traj,
                _ if firsts.last().is_none_or(|&last| number > last) => {
                    firsts.push(number);
                    (firsts.len() - 1) as u32
                }
                _ => match firsts.binary_search(&number) {
                    Ok(traj) => traj as u32,
                    Err(_) => {
                        return Err(Error::Config(format!(
                            "{}: a trajectory's rows are numbered out of the order they came",
                            self.location(rows.origin(row), None)
                        )))
                    }
                },
            };
            previous = Some((number, traj));
            kept.push(row);
            trajs.push(traj);
        }
        Ok((kept, trajs))
    }

    /// The step gap of trajectory `tid` whose (step, row) are `steps`, sorted: steps must be
    /// contiguous from 0 or 1.
    fn step_gap(&self, rows: &UnitRows, tid: &str, steps: &[(i64, usize)]) -> Option<Error> {
        let start = steps[0].0;
        let (k, message) = if start > 1 {
            (0, format!("trajectory `{tid}` starts at step {start}; steps must start at 0 or 1 and be contiguous"))
        } else {
            steps.windows(2).position(|w| w[1].0 != w[0].0 + 1).map(|k| {
                let (prev, found) = (steps[k].0, steps[k + 1].0);
                (k + 1, format!("trajectory `{tid}` jumps from step {prev} to step {found}: step {} is missing", prev + 1))
            })?
        };
        Some(Error::input(
            self.location(rows.origin(steps[k].1), Some(STEP)),
            Reason::StepGap,
            message,
        ))
    }

    /// The error of a trajectory whose first row (by step) is `row`, at `step`, when its id's
    /// first piece is in another iteration of the same group and this piece goes on from it
    /// instead of starting its steps again. Notes the first piece of each id.
    fn in_two_iterations(&mut self, rows: &UnitRows, row: usize, step: i64) -> Option<Error> {
        let (gf, tf, itf) = (self.field.group, self.field.traj, self.field.iteration);
        if !self.present[itf] {
            return None;
        }
        let (tid, gid) = (rows.text(tf, row), rows.text(gf, row));
        let piece = FirstPiece {
            iteration: rows.int(itf, row),
            group: id(None, gid),
            first_step: step,
            at: rows.origin(row),
        };
        let key = id(None, tid);
        let Some(first) = self.pieces.get(key).copied() else {
            self.pieces.insert(key, piece);
            return None;
        };
        if first.iteration == piece.iteration
            || first.group != piece.group
            || first.first_step == piece.first_step
        {
            return None;
        }
        let iteration =
            |it: Option<i64>| it.map_or("no iteration".into(), |it| format!("iteration {it}"));
        Some(Error::input(
            self.location(piece.at, Some(ITERATION)),
            Reason::TrajectoryInTwoIterations,
            format!(
                "trajectory `{tid}` of group `{gid}` has {} here (from step {step}) but {} at {} (from step {}): a trajectory's rows belong to one iteration, and ids a later iteration reuses start their steps again",
                iteration(piece.iteration),
                iteration(first.iteration),
                self.location(first.at, None),
                first.first_step,
            ),
        ))
    }

    /// The error of a trajectory whose rows (in step order) log two different episode rewards.
    fn episode_reward_changes(
        &self,
        rows: &UnitRows,
        traj_rows: impl Iterator<Item = usize>,
    ) -> Option<Error> {
        let ef = self.field.episode_reward;
        if !self.present[ef] {
            return None;
        }
        let mut first: Option<(f64, usize)> = None;
        for row in traj_rows {
            let Some(value) = rows.float(ef, row) else {
                continue;
            };
            let Some((before, at)) = first else {
                first = Some((value, row));
                continue;
            };
            if value != before {
                // The log's own column, where one column fed the field.
                let mut feeding = self
                    .report
                    .columns_seen
                    .iter()
                    .filter(|u| u.field == EPISODE_REWARD);
                let column = match (feeding.next(), feeding.next()) {
                    (Some(only), None) => only.column.as_str(),
                    _ => EPISODE_REWARD,
                };
                return Some(Error::input(
                    self.location(rows.origin(row), Some(column)),
                    Reason::EpisodeRewardChanges,
                    format!(
                        "trajectory `{}` has episode reward {value} here but {before} at {}: a trajectory has one episode reward; log the same value on each of its rows (or on one)",
                        rows.text(self.field.traj, row),
                        self.location(rows.origin(at), None),
                    ),
                ));
            }
        }
        None
    }

    /// Closes every open unit (the input has ended), oldest first, and notes ids given both as
    /// numbers and as strings (`1` and `"1"` name the same group).
    pub fn finish(&mut self) -> Result<()> {
        for (i, field) in FIELDS.iter().enumerate() {
            if self.numbered[i] && self.named[i] {
                self.report.notes.push(format!(
                    "`{}` is a number on some rows and a string on others: `1` and `\"1\"` count as the same id; log one kind if they are different {}",
                    field.name,
                    if field.name == GROUP_ID { "groups" } else { "trajectories" }
                ));
            }
        }
        let mut order: Vec<(u64, u32)> = self.open.iter().map(|u| (u.first_seq, u.slot)).collect();
        order.sort_unstable_by_key(|&(first_seq, _)| first_seq);
        for (_, slot) in order {
            self.close(self.slot_place[slot as usize] as usize)?;
        }
        Ok(())
    }

    /// The ready units as a window, when enough are ready (or `all`, at the end); its batch is
    /// built by [`Pending::build`], in parallel with other work.
    pub fn window(&mut self, all: bool) -> Option<Pending> {
        if self.ready.is_empty() || (!all && self.ready_bytes < WINDOW_BYTES) {
            return None;
        }
        let mut units = std::mem::take(&mut self.ready);
        // The next window will likely hold as many units: room for them now, not by doubling.
        self.ready = Vec::with_capacity(units.len());
        self.ready_bytes = 0;
        units.retain(|u| !u.keep.is_empty());
        if units.is_empty() {
            return None;
        }
        let present = self
            .emitted_present
            .get_or_insert_with(|| self.present.clone())
            .clone();
        self.report.rows += units.iter().map(|u| u.keep.len() as u64).sum::<u64>();
        let watermark = self
            .open
            .iter()
            .map(|u| u.first_seq)
            .min()
            .unwrap_or(self.next_seq);
        Some(Pending {
            units,
            present,
            watermark,
            paths: self.paths.clone(),
            units_are_groups: self.kind == UnitKind::Group,
            success_threshold: self.success_threshold,
            gamma: self.gamma,
        })
    }
}

/// Closed units waiting to become a [`Window`].
pub(crate) struct Pending {
    /// In the order they closed ([`Pending::build`] puts them in input order).
    units: Vec<Closed>,
    present: Vec<bool>,
    watermark: u64,
    paths: Arc<[PathBuf]>,
    /// Whether each unit is one group (so each group is one run of the window's rows).
    units_are_groups: bool,
    success_threshold: f64,
    gamma: f64,
}

impl Pending {
    /// The window of these units, in the order of their first rows. Built on a worker, not on
    /// the reading thread: the units are put in order here.
    pub fn build(mut self) -> Result<Window> {
        if !self.units.is_sorted_by_key(|u| u.first_seq) {
            // Each unit has its own first row: an unstable sort gives the same order. The keys
            // are sorted, then the units moved once (a window can hold 50k units of one row).
            let mut order: Vec<(u64, usize)> = self
                .units
                .iter()
                .enumerate()
                .map(|(i, u)| (u.first_seq, i))
                .collect();
            order.sort_unstable();
            self.units = order
                .into_iter()
                .map(|(_, i)| std::mem::take(&mut self.units[i]))
                .collect();
        }
        let mut runs = Runs::default();
        for u in &self.units {
            runs.push(&u.rows, &u.keep);
        }
        // The rows' places in the input are gathered beside the frame and its index: a window
        // of one large group is otherwise built on one core.
        let (batch, (seq, origin)) = rayon::join(
            || -> Result<StepBatch> {
                let frame = Rows::frame(&runs.parts(), &self.present)?;
                if self.units_are_groups {
                    let group_rows: Vec<usize> = self.units.iter().map(|u| u.keep.len()).collect();
                    let traj_in_group: Vec<u32> = self
                        .units
                        .iter()
                        .flat_map(|u| u.trajs.iter().copied())
                        .collect();
                    StepBatch::of_group_runs(
                        frame,
                        self.success_threshold,
                        self.gamma,
                        &group_rows,
                        &traj_in_group,
                    )
                } else {
                    StepBatch::new(frame, self.success_threshold, self.gamma)
                }
            },
            || {
                let kept = || {
                    self.units
                        .iter()
                        .flat_map(|u| u.keep.iter().map(move |&r| (u, r)))
                };
                let seq: Vec<u64> = kept().map(|(u, r)| u.rows.seq(r)).collect();
                let origin: Vec<Origin> = kept().map(|(u, r)| u.rows.origin(r)).collect();
                (seq, origin)
            },
        );
        let batch = batch?;
        Ok(Window {
            batch,
            seq,
            watermark: self.watermark,
            origin,
            paths: self.paths,
        })
    }
}

/// What the index pass records: each unit's last row, and the fields the input has.
#[derive(Default)]
pub(crate) struct Indexer {
    pub last_seq: HashMap<UnitKey, u64>,
    pub present: Vec<bool>,
    next_seq: u64,
}

impl Indexer {
    pub fn new() -> Self {
        Indexer {
            present: vec![false; FIELDS.len()],
            ..Default::default()
        }
    }

    pub fn push(&mut self, kind: UnitKind, rows: &Rows) {
        let gf = field_index(GROUP_ID).expect("field");
        let itf = field_index(ITERATION).expect("field");
        for (p, &q) in self.present.iter_mut().zip(&rows.present) {
            *p |= q;
        }
        for r in 0..rows.len() {
            let it = rows.int(itf, r);
            let key = match kind {
                UnitKind::Group => UnitKey::Group(it, rows.text(gf, r).to_string()),
                UnitKind::Iteration => UnitKey::Iteration(it),
                UnitKind::All => UnitKey::All,
            };
            self.last_seq.insert(key, self.next_seq);
            self.next_seq += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::jsonl::{parse_text, Block};

    /// A step line: (group, traj, step, reward).
    fn line(g: &str, t: &str, step: i64, reward: f64) -> String {
        format!(r#"{{"uid": "{g}", "traj_uid": "{t}", "step": {step}, "reward": {reward}}}"#)
    }

    /// `lines` as one parsed block of `mem.jsonl` whose first line is `first_line`.
    fn block(lines: &[String], first_line: u64) -> Block {
        parse_text(&lines.join("\n"), first_line)
    }

    /// An assembler that never closes a unit before the input ends.
    fn assembler(kind: UnitKind, lenient: bool) -> Assembler {
        let closing = Closing::Optimistic {
            quiet: u64::MAX / 2,
            budget: u64::MAX,
        };
        Assembler::new(kind, closing, lenient, 0.5, 0.95, vec!["mem.jsonl".into()])
    }

    /// A group assembler that closes each group as soon as another group's row comes.
    fn eager_assembler() -> Assembler {
        let closing = Closing::Optimistic {
            quiet: 0,
            budget: u64::MAX,
        };
        Assembler::new(
            UnitKind::Group,
            closing,
            false,
            0.5,
            0.95,
            vec!["mem.jsonl".into()],
        )
    }

    /// Assembles `lines` as one block: the single window at the end, with the report.
    fn assemble(lines: &[String], kind: UnitKind, lenient: bool) -> Result<(Window, IngestReport)> {
        let mut a = assembler(kind, lenient);
        assert!(matches!(a.push(block(lines, 1))?, Flow::Continue));
        a.finish()?;
        let window = a.window(true).expect("rows were kept").build()?;
        Ok((window, a.report))
    }

    /// (reason, line, field, message) of an input error.
    fn input_error(e: Error) -> (Reason, Option<u64>, Option<String>, String) {
        let text = e.to_string();
        match e {
            Error::Input {
                location, reason, ..
            } => (reason, location.line, location.column, text),
            other => panic!("not an input error: {other}"),
        }
    }

    #[test]
    fn groups_come_in_input_order_and_padding_is_dropped() {
        let lines = [
            line("g2", "b", 0, 0.0), // line 1, seq 0
            line("g1", "a", 0, 0.0), // line 2, seq 1
            line("g2", "b", 1, 1.0), // line 3, seq 2
            line("g2", "b", 1, 1.0), // line 4, seq 3: a copy of line 3 (padding)
            line("g1", "a", 1, 0.0), // line 5, seq 4
        ];
        let (window, report) = assemble(&lines, UnitKind::Group, false).unwrap();
        assert_eq!(report.padding_duplicates, 1);
        assert_eq!(report.rows, 4);
        assert!(report.skipped.is_empty());
        let b = &window.batch;
        // g2 starts first (seq 0), so it comes first; each group's rows in input order.
        let ids: Vec<&str> = b.groups.iter().map(|g| g.id.as_str()).collect();
        assert_eq!(ids, ["g2", "g1"]);
        assert_eq!(window.seq, vec![0, 2, 1, 4]);
        assert_eq!(b.group_of_row, vec![0, 0, 1, 1]);
        // b: R = 0 + 1 = 1 (the padding copy not counted twice); a: R = 0.
        assert_eq!(b.trajs[0].episode_return, 1.0);
        assert_eq!(b.trajs[1].episode_return, 0.0);
        assert_eq!(window.watermark, 5);
    }

    #[test]
    fn duplicate_step_with_other_content_is_an_error() {
        let lines = [
            line("g1", "a", 0, 0.0),
            line("g1", "a", 1, 0.0),
            line("g1", "a", 1, 0.5), // line 3: step 1 again, another reward
            line("g1", "a", 2, 1.0),
        ];
        let e = assemble(&lines, UnitKind::Group, false).err().unwrap();
        let (reason, at, field, text) = input_error(e);
        assert_eq!(reason, Reason::DuplicateStep);
        assert_eq!((at, field.as_deref()), (Some(3), Some(STEP)));
        assert!(
            text.starts_with(
                "mem.jsonl:3 (step): duplicate step 1 of trajectory `a` (first at mem.jsonl:2)"
            ),
            "{text}"
        );
    }

    #[test]
    fn step_gaps_are_errors_at_the_step_after_the_gap() {
        // Steps 0, 1, 3 (written out of order): step 3 on line 2 follows step 1.
        let lines = [
            line("g1", "a", 0, 0.0),
            line("g1", "a", 3, 1.0),
            line("g1", "a", 1, 0.0),
        ];
        let (reason, at, field, text) =
            input_error(assemble(&lines, UnitKind::Group, false).err().unwrap());
        assert_eq!(reason, Reason::StepGap);
        assert_eq!((at, field.as_deref()), (Some(2), Some(STEP)));
        assert!(
            text.contains("trajectory `a` jumps from step 1 to step 3: step 2 is missing"),
            "{text}"
        );

        // Starting at 2 is a gap too, reported on the first step's line (line 1).
        let lines = [line("g1", "a", 2, 0.0), line("g1", "a", 3, 1.0)];
        let (reason, at, _, text) =
            input_error(assemble(&lines, UnitKind::Group, false).err().unwrap());
        assert_eq!((reason, at), (Reason::StepGap, Some(1)));
        assert!(text.contains("starts at step 2"), "{text}");

        // Starting at 1 is fine.
        let lines = [line("g1", "a", 1, 0.0), line("g1", "a", 2, 1.0)];
        let (window, _) = assemble(&lines, UnitKind::Group, false).unwrap();
        assert_eq!(window.batch.len(), 2);
    }

    #[test]
    fn a_trajectory_in_two_groups_is_an_error() {
        let lines = [
            line("g1", "a", 0, 0.0),
            line("g1", "b", 0, 0.0),
            line("g2", "a", 1, 1.0), // line 3: a again, in g2
        ];
        let (reason, at, field, text) =
            input_error(assemble(&lines, UnitKind::Group, false).err().unwrap());
        assert_eq!(reason, Reason::TrajectoryInTwoGroups);
        assert_eq!((at, field.as_deref()), (Some(3), Some(GROUP_ID)));
        assert!(
            text.contains("trajectory `a` is in group `g2` here but in group `g1` at mem.jsonl:1"),
            "{text}"
        );
        // The same ids in two iterations are two trajectories, not an error.
        let lines = [
            r#"{"uid": "g1", "traj_uid": "a", "step": 0, "reward": 0, "iteration": 0}"#.to_string(),
            r#"{"uid": "g2", "traj_uid": "a", "step": 0, "reward": 0, "iteration": 1}"#.to_string(),
        ];
        let (window, _) = assemble(&lines, UnitKind::Iteration, false).unwrap();
        assert_eq!(window.batch.trajs.len(), 2);
        assert_eq!(window.batch.groups.len(), 2);
    }

    #[test]
    fn lenient_skips_and_counts_bad_rows() {
        let lines = [
            line("g1", "a", 0, 0.0), // a: steps 0, 2 → a gap; both rows skipped
            line("g1", "a", 2, 1.0),
            line("g1", "b", 0, 0.0), // b: fine
            line("g1", "b", 1, 1.0),
            line("g1", "b", 1, 0.5), // line 5: duplicate step, skipped
            r#"{"uid": "g1", "traj_uid": "c", "step": 0, "reward": "x"}"#.to_string(), // wrong type
            line("g2", "b", 2, 0.0), // line 7: b in another group, skipped
        ];
        let (window, report) = assemble(&lines, UnitKind::Group, true).unwrap();
        let b = &window.batch;
        // Kept: b's steps 0 and 1 (lines 3 and 4).
        assert_eq!(b.len(), 2);
        assert_eq!(window.seq, vec![2, 3]);
        assert_eq!(b.trajs.len(), 1);
        assert_eq!(b.trajs[0].id, "b");
        assert_eq!(report.rows, 2);
        let skipped = |r| report.skipped.get(&r).copied().unwrap_or(0);
        assert_eq!(skipped(Reason::StepGap), 2);
        assert_eq!(skipped(Reason::DuplicateStep), 1);
        assert_eq!(skipped(Reason::WrongType), 1);
        assert_eq!(skipped(Reason::TrajectoryInTwoGroups), 1);
        assert_eq!(report.skipped_total(), 5);
        assert_eq!(report.skipped_examples.len(), 4);
    }

    #[test]
    fn a_window_is_indexed_as_a_batch_of_its_frame_would_be() {
        // Trajectories interleaved in their groups; the first to appear has a gap and is
        // skipped whole, a duplicate step is skipped, and a row of `x` in another group is
        // rejected: the checks' trajectory numbers, which the window's index takes instead of
        // looking trajectories up, leave them out, in units of a group and of all groups.
        let lines = [
            line("g1", "gap", 0, 0.0),
            line("g1", "x", 0, 0.0),
            line("g2", "w", 0, 0.0),
            line("g1", "y", 0, 0.0),
            line("g1", "gap", 2, 1.0),
            line("g1", "x", 1, 1.0),
            line("g2", "x", 2, 1.0),
            line("g1", "x", 1, 0.5),
            line("g2", "v", 0, 1.0),
            line("g1", "y", 1, 0.0),
            line("g2", "w", 1, 0.0),
        ];
        // A window of groups holds g1's rows, then g2's; one of the whole input, the rows as
        // they came.
        window_indexed_as_its_frame(&lines, UnitKind::Group, ["x", "y", "w", "v"]);
        window_indexed_as_its_frame(&lines, UnitKind::Iteration, ["x", "w", "y", "v"]);
    }

    fn window_indexed_as_its_frame(lines: &[String], kind: UnitKind, trajectories: [&str; 4]) {
        let (window, _) = assemble(lines, kind, true).unwrap();
        let indexed = &window.batch;
        let looked_up = StepBatch::new(indexed.frame().clone(), 0.5, 0.95).unwrap();
        let groups = |b: &StepBatch| -> Vec<(String, Vec<u32>, usize)> {
            b.groups
                .iter()
                .map(|g| (g.id.to_string(), g.trajs.to_vec(), g.n_rows))
                .collect()
        };
        let trajs = |b: &StepBatch| -> Vec<(String, u32, Vec<u32>)> {
            b.trajs
                .iter()
                .map(|t| (t.id.to_string(), t.group, t.rows.to_vec()))
                .collect()
        };
        assert_eq!(groups(indexed), groups(&looked_up));
        assert_eq!(trajs(indexed), trajs(&looked_up));
        assert_eq!(indexed.traj_of_row, looked_up.traj_of_row);
        assert_eq!(indexed.group_of_row, looked_up.group_of_row);
        assert_eq!(indexed.position, looked_up.position);
        let ids: Vec<String> = indexed.trajs.iter().map(|t| t.id.to_string()).collect();
        assert_eq!(ids, trajectories);
    }

    #[test]
    fn a_group_seen_again_after_it_closed_restarts_the_pass() {
        // quiet 0: a unit closes as soon as a later block's rows have gone by.
        let mut a = eager_assembler();
        let push = |a: &mut Assembler, l: String, n: u64| a.push(block(&[l], n)).unwrap();
        assert!(matches!(
            push(&mut a, line("g1", "a", 0, 0.0), 1),
            Flow::Continue
        ));
        // g2's row closes g1.
        assert!(matches!(
            push(&mut a, line("g2", "b", 0, 0.0), 2),
            Flow::Continue
        ));
        match push(&mut a, line("g1", "c", 0, 0.0), 3) {
            Flow::Restart(why) => assert_eq!(
                why,
                "group `g1` has rows again at mem.jsonl:3 after it was complete in one pass"
            ),
            Flow::Continue => panic!("g1 was closed"),
        }
    }

    #[test]
    fn a_closed_trajectory_in_another_group_is_an_error_at_its_first_row() {
        let mut a = eager_assembler();
        a.push(block(&[line("g1", "a", 0, 0.0)], 1)).unwrap();
        // g2's row closes g1; then trajectory `a` comes back in g2.
        a.push(block(&[line("g2", "b", 0, 0.0)], 2)).unwrap();
        let e = a.push(block(&[line("g2", "a", 1, 1.0)], 3)).err().unwrap();
        let (reason, at, field, text) = input_error(e);
        assert_eq!(reason, Reason::TrajectoryInTwoGroups);
        assert_eq!((at, field.as_deref()), (Some(3), Some(GROUP_ID)));
        assert!(
            text.contains(
                "trajectory `a` is in group `g2` here but in another group at mem.jsonl:1;"
            ),
            "{text}"
        );
    }

    #[test]
    fn exact_closing_keeps_interleaved_groups_whole() {
        // The index pass records each group's last row (seq 3 for g1, seq 2 for g2), so the
        // pass closes each right there and g1's late row is no restart.
        let lines = [
            line("g1", "a", 0, 0.0),
            line("g2", "b", 0, 0.0),
            line("g2", "b", 1, 1.0),
            line("g1", "a", 1, 1.0),
        ];
        let first = block(&lines, 1);
        let mut indexer = Indexer::new();
        indexer.push(UnitKind::Group, &first.rows);
        assert_eq!(indexer.last_seq[&UnitKey::Group(None, "g1".into())], 3);
        let closing = Closing::Exact {
            last_seq: indexer.last_seq,
            present: indexer.present,
        };
        let mut a = Assembler::new(
            UnitKind::Group,
            closing,
            false,
            0.5,
            0.95,
            vec!["mem.jsonl".into()],
        );
        assert!(matches!(a.push(first).unwrap(), Flow::Continue));
        // Both closed already: nothing left open.
        assert!(a.open.is_empty());
        let window = a.window(true).unwrap().build().unwrap();
        let ids: Vec<&str> = window.batch.groups.iter().map(|g| g.id.as_str()).collect();
        assert_eq!(ids, ["g1", "g2"]);
        assert_eq!(window.seq, vec![0, 3, 1, 2]);
    }

    #[test]
    fn ids_as_numbers_and_strings_are_one_id_with_a_note() {
        // `1` and `"1"` name the same group, and the report says so.
        let lines = [
            r#"{"uid": 1, "traj_uid": "a", "step": 0, "reward": 0}"#.to_string(),
            r#"{"uid": "1", "traj_uid": "a", "step": 1, "reward": 1}"#.to_string(),
        ];
        let (window, report) = assemble(&lines, UnitKind::Group, false).unwrap();
        assert_eq!(window.batch.groups.len(), 1);
        assert_eq!(window.batch.groups[0].id, "1");
        assert_eq!(window.batch.trajs[0].rows[..], [0, 1]);
        assert_eq!(report.notes.len(), 1);
        assert!(
            report.notes[0].starts_with("`group_id` is a number on some rows and a string"),
            "{:?}",
            report.notes
        );
    }

    /// A step line with an iteration: (iteration, group, traj, step).
    fn iteration_line(it: i64, g: &str, t: &str, step: i64) -> String {
        format!(
            r#"{{"uid": "{g}", "traj_uid": "{t}", "step": {step}, "reward": 0, "iteration": {it}}}"#
        )
    }

    #[test]
    fn a_trajectory_that_goes_on_into_another_iteration_is_an_error() {
        // Ids a later iteration reuses start their steps again: two trajectories.
        let reused = [
            iteration_line(0, "g", "a", 0),
            iteration_line(0, "g", "a", 1),
            iteration_line(1, "g", "a", 0),
        ];
        for kind in [UnitKind::Group, UnitKind::Iteration, UnitKind::All] {
            let (window, _) = assemble(&reused, kind, false).unwrap();
            assert_eq!(window.batch.trajs.len(), 2);
        }
        // `a` goes on into iteration 1 at its step 1 (line 2): one trajectory split in two.
        let split = [
            iteration_line(0, "g", "a", 0),
            iteration_line(1, "g", "a", 1),
            iteration_line(1, "g", "a", 2),
            iteration_line(0, "g", "b", 0),
        ];
        for kind in [UnitKind::Group, UnitKind::Iteration, UnitKind::All] {
            let (reason, at, field, text) =
                input_error(assemble(&split, kind, false).err().unwrap());
            assert_eq!(reason, Reason::TrajectoryInTwoIterations);
            assert_eq!((at, field.as_deref()), (Some(2), Some(ITERATION)));
            assert_eq!(
                text,
                "mem.jsonl:2 (iteration): trajectory `a` of group `g` has iteration 1 here (from step 1) but iteration 0 at mem.jsonl:1 (from step 0): a trajectory's rows belong to one iteration, and ids a later iteration reuses start their steps again"
            );
        }
        // Skipped under `--lenient`: the later piece's rows, counted.
        let (window, report) = assemble(&split, UnitKind::Group, true).unwrap();
        assert_eq!(window.batch.len(), 2);
        assert_eq!(report.skipped[&Reason::TrajectoryInTwoIterations], 2);
        // A one-row piece (a unit of one row) is checked too.
        let one_row = [
            iteration_line(0, "g", "a", 0),
            iteration_line(1, "g", "a", 1),
        ];
        let e = assemble(&one_row, UnitKind::Group, false).err().unwrap();
        assert_eq!(input_error(e).0, Reason::TrajectoryInTwoIterations);
    }

    #[test]
    fn an_episode_reward_that_changes_within_a_trajectory_is_an_error() {
        let with_episode = |t: &str, step: i64, episode: &str| {
            format!(
                r#"{{"uid": "g", "traj_uid": "{t}", "step": {step}, "reward": 0, "episode_rewards": {episode}}}"#
            )
        };
        // Logged on one row only, or the same on every row: one episode reward.
        let fine = [
            with_episode("a", 0, "null"),
            with_episode("a", 1, "2.5"),
            with_episode("b", 0, "1"),
            with_episode("b", 1, "1.0"),
        ];
        let (window, _) = assemble(&fine, UnitKind::Group, false).unwrap();
        let returns: Vec<f64> = window
            .batch
            .trajs
            .iter()
            .map(|t| t.episode_return)
            .collect();
        assert_eq!(returns, vec![2.5, 1.0]);
        let changes = [
            with_episode("a", 0, "1"),
            with_episode("b", 0, "0"),
            with_episode("a", 1, "1"),
            with_episode("a", 2, "0"),
            with_episode("b", 1, "0"),
        ];
        let (reason, at, field, text) =
            input_error(assemble(&changes, UnitKind::Group, false).err().unwrap());
        assert_eq!(reason, Reason::EpisodeRewardChanges);
        assert_eq!((at, field.as_deref()), (Some(4), Some("episode_rewards")));
        assert_eq!(
            text,
            "mem.jsonl:4 (episode_rewards): trajectory `a` has episode reward 0 here but 1 at mem.jsonl:1: a trajectory has one episode reward; log the same value on each of its rows (or on one)"
        );
        let (window, report) = assemble(&changes, UnitKind::Group, true).unwrap();
        assert_eq!(window.batch.trajs.len(), 1);
        assert_eq!(report.skipped[&Reason::EpisodeRewardChanges], 3);
    }
}
