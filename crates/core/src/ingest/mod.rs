//! Ingest: rollout logs (JSONL plain/.gz/.zst, episode-per-line JSONL, Parquet, directories) into a
//! validated [`StepBatch`].
//!
//! Every file is read into typed column builders (one per canonical field, `crate::schema::FIELDS`),
//! remembering each row's origin so that any later check can still name file, line or row, and
//! column. Then batch-wide checks run (duplicate (traj_id, step), step gaps, a trajectory in two
//! groups), and the surviving rows become a polars `DataFrame`. By default the first problem is an
//! error; with `lenient` bad rows are skipped and counted per [`Reason`].
//!
//! verl-agent pads batches by copying whole rows (`adjust_batch`): a row identical to an earlier
//! row with the same (traj_id, step) is dropped and counted as a padding duplicate, not an error.

mod jsonl;
mod parquet;

use crate::batch::StepBatch;
use crate::error::{Error, Location, Reason, Result, Unit};
use crate::schema::{columns::*, ColumnMap, ColumnUse, Field, Kind, FIELDS};
use polars::prelude::*;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How to read the logs.
#[derive(Clone, Debug)]
pub struct IngestOptions {
    pub columns: ColumnMap,
    pub lenient: bool,
    /// A trajectory succeeds when R(τ) exceeds this and no `success` column is logged.
    pub success_threshold: f64,
    /// γ of the derived `return_to_go` column.
    pub gamma: f64,
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            columns: ColumnMap::default(),
            lenient: false,
            success_threshold: 0.5,
            gamma: 0.95,
        }
    }
}

/// One input file and what was read from it.
#[derive(Clone, Debug, Serialize)]
pub struct FileSummary {
    pub path: PathBuf,
    pub format: &'static str,
    pub rows: u64,
}

/// What ingest saw besides the rows it kept.
#[derive(Clone, Debug, Default, Serialize)]
pub struct IngestReport {
    pub files: Vec<FileSummary>,
    /// Rows skipped under `--lenient`, per reason.
    pub skipped: BTreeMap<Reason, u64>,
    /// The first few skipped rows' messages.
    pub skipped_examples: Vec<String>,
    /// Rows dropped as exact copies of an earlier row (verl-agent batch padding).
    pub padding_duplicates: u64,
    /// Files skipped for their extension, and similar notes.
    pub notes: Vec<String>,
    /// Which log column fed each field, and what became of the other columns named for it.
    pub columns: Vec<ColumnUse>,
}

impl IngestReport {
    pub fn skipped_total(&self) -> u64 {
        self.skipped.values().sum()
    }
}

pub struct Ingested {
    pub batch: StepBatch,
    pub report: IngestReport,
}

/// Reads every path (files, or directories walked recursively in sorted order) into one batch.
pub fn read_paths(paths: &[PathBuf], options: &IngestOptions) -> Result<Ingested> {
    options.columns.check().map_err(Error::Config)?;
    let mut report = IngestReport::default();
    let mut files = Vec::new();
    for path in paths {
        collect_files(path, &mut files, &mut report)?;
    }
    let mut rows = RowBuilder::new(options.lenient);
    for path in &files {
        let before = rows.len();
        let format = read_file(path, &options.columns, &mut rows)?;
        report.files.push(FileSummary {
            path: path.clone(),
            format,
            rows: (rows.len() - before) as u64,
        });
    }
    rows.paths = files;
    report.columns = std::mem::take(&mut rows.column_uses).into_iter().collect();
    report
        .columns
        .sort_by_key(|u| (crate::schema::field_index(u.field), u.column.clone()));
    let batch = rows.finish(options, &mut report, paths)?;
    Ok(Ingested { batch, report })
}

fn collect_files(path: &Path, out: &mut Vec<PathBuf>, report: &mut IngestReport) -> Result<()> {
    let meta = std::fs::metadata(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if meta.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(|source| Error::Io {
                path: path.to_path_buf(),
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for entry in entries {
            if entry.is_dir() {
                collect_files(&entry, out, report)?;
            } else if format_of(&entry).is_some() {
                out.push(entry);
            } else {
                report.notes.push(format!(
                    "{}: skipped (not .jsonl, .ndjson, .json, .parquet, optionally .gz/.zst)",
                    entry.display()
                ));
            }
        }
    } else {
        if format_of(path).is_none() {
            return Err(Error::input(
                Location { path: path.to_path_buf(), line: None, unit: Unit::Line, column: None },
                Reason::UnreadableFile,
                "unknown file type: expected .jsonl, .ndjson, .json or .parquet (JSONL optionally .gz or .zst)",
            ));
        }
        out.push(path.to_path_buf());
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Jsonl(Compression),
    Parquet,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Compression {
    None,
    Gzip,
    Zstd,
}

fn format_of(path: &Path) -> Option<Format> {
    let name = path.file_name()?.to_str()?.to_ascii_lowercase();
    let (stem, compression) = if let Some(s) = name.strip_suffix(".gz") {
        (s, Compression::Gzip)
    } else if let Some(s) = name.strip_suffix(".zst") {
        (s, Compression::Zstd)
    } else {
        (name.as_str(), Compression::None)
    };
    if [".jsonl", ".ndjson", ".json"]
        .iter()
        .any(|e| stem.ends_with(e))
    {
        Some(Format::Jsonl(compression))
    } else if stem.ends_with(".parquet") && compression == Compression::None {
        Some(Format::Parquet)
    } else {
        None
    }
}

fn read_file(path: &Path, columns: &ColumnMap, rows: &mut RowBuilder) -> Result<&'static str> {
    let file_index = rows.paths.len() as u32;
    rows.paths.push(path.to_path_buf());
    match format_of(path) {
        Some(Format::Jsonl(c)) => {
            jsonl::read(path, c, columns, file_index, rows)?;
            Ok(match c {
                Compression::None => "jsonl",
                Compression::Gzip => "jsonl.gz",
                Compression::Zstd => "jsonl.zst",
            })
        }
        Some(Format::Parquet) => {
            parquet::read(path, columns, file_index, rows)?;
            Ok("parquet")
        }
        None => unreachable!("collect_files keeps only known formats"),
    }
}

/// One typed value of a canonical field.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Cell {
    Str(String),
    Int(i64),
    Float(f64),
    Bool(bool),
}

impl Cell {
    /// The value as a message shows it.
    fn show(&self) -> String {
        match self {
            Cell::Str(s) if s.chars().count() > 40 => {
                format!("{:?}…", s.chars().take(40).collect::<String>())
            }
            Cell::Str(s) => format!("{s:?}"),
            Cell::Int(v) => v.to_string(),
            Cell::Float(v) => v.to_string(),
            Cell::Bool(v) => v.to_string(),
        }
    }
}

/// Typed column builders for every canonical field, plus each row's origin.
pub(crate) struct RowBuilder {
    lenient: bool,
    cells: Vec<Vec<Option<Cell>>>,
    present: Vec<bool>,
    /// (file index, line or row) of each kept row.
    origin: Vec<(u32, u64)>,
    units: Vec<Unit>,
    paths: Vec<PathBuf>,
    skipped: BTreeMap<Reason, u64>,
    skipped_examples: Vec<String>,
    pub(crate) column_uses: std::collections::BTreeSet<ColumnUse>,
}

impl RowBuilder {
    fn new(lenient: bool) -> Self {
        RowBuilder {
            lenient,
            cells: vec![Vec::new(); FIELDS.len()],
            present: vec![false; FIELDS.len()],
            origin: Vec::new(),
            units: Vec::new(),
            paths: Vec::new(),
            skipped: BTreeMap::new(),
            skipped_examples: Vec::new(),
            column_uses: Default::default(),
        }
    }

    fn len(&self) -> usize {
        self.origin.len()
    }

    pub(crate) fn location(&self, file: u32, line: u64, column: Option<&str>) -> Location {
        Location {
            path: self.paths[file as usize].clone(),
            line: Some(line),
            unit: self.units.get(file as usize).copied().unwrap_or(Unit::Line),
            column: column.map(str::to_string),
        }
    }

    pub(crate) fn set_unit(&mut self, unit: Unit) {
        self.units.resize(self.paths.len(), Unit::Line);
        if let Some(u) = self.units.last_mut() {
            *u = unit;
        }
    }

    /// Reports a bad row: an error in strict mode, a counted skip under `--lenient`.
    pub(crate) fn reject(&mut self, error: Error) -> Result<()> {
        match (&error, self.lenient) {
            (Error::Input { reason, .. }, true) => {
                *self.skipped.entry(*reason).or_default() += 1;
                if self.skipped_examples.len() < 5 {
                    self.skipped_examples.push(error.to_string());
                }
                Ok(())
            }
            _ => Err(error),
        }
    }

    /// Adds one row whose cells are already typed; `cells[i]` belongs to `FIELDS[i]`.
    pub(crate) fn push(&mut self, file: u32, line: u64, cells: Vec<Option<Cell>>) {
        for (i, cell) in cells.into_iter().enumerate() {
            if cell.is_some() {
                self.present[i] = true;
            }
            self.cells[i].push(cell);
        }
        self.origin.push((file, line));
    }

    fn cell(&self, field: usize, row: usize) -> Option<&Cell> {
        self.cells[field][row].as_ref()
    }

    fn key(&self, field: usize, row: usize) -> &str {
        match self.cell(field, row) {
            Some(Cell::Str(s)) => s,
            _ => "",
        }
    }

    fn int(&self, field: usize, row: usize) -> Option<i64> {
        match self.cell(field, row) {
            Some(Cell::Int(v)) => Some(*v),
            _ => None,
        }
    }

    fn rows_equal(&self, a: usize, b: usize) -> bool {
        self.cells.iter().all(|col| col[a] == col[b])
    }

    /// Batch-wide checks, then the frame.
    fn finish(
        mut self,
        options: &IngestOptions,
        report: &mut IngestReport,
        inputs: &[PathBuf],
    ) -> Result<StepBatch> {
        let n = self.len();
        let fi = |name: &str| {
            FIELDS
                .iter()
                .position(|f| f.name == name)
                .expect("canonical field")
        };
        let (g_f, t_f, s_f, it_f) = (fi(GROUP_ID), fi(TRAJ_ID), fi(STEP), fi(ITERATION));
        let mut keep = vec![true; n];

        // Padding duplicates, real duplicates, and a trajectory in two groups.
        let mut first_of_step: PlHashMap<(Option<i64>, &str, i64), usize> = PlHashMap::default();
        let mut group_of_traj: PlHashMap<(Option<i64>, &str), (usize, &str)> = PlHashMap::default();
        let mut rejects: Vec<Error> = Vec::new();
        for row in 0..n {
            let it = self.int(it_f, row);
            let (gid, tid) = (self.key(g_f, row), self.key(t_f, row));
            let step = self.int(s_f, row).unwrap_or_default();
            let (file, line) = self.origin[row];
            let &mut (first_row, first_gid) = group_of_traj.entry((it, tid)).or_insert((row, gid));
            if first_gid != gid {
                let (ff, fl) = self.origin[first_row];
                rejects.push(Error::input(
                    self.location(file, line, Some(GROUP_ID)),
                    Reason::TrajectoryInTwoGroups,
                    format!(
                        "trajectory `{tid}` is in group `{gid}` here but in group `{first_gid}` at {}; a trajectory belongs to one group",
                        self.location(ff, fl, None)
                    ),
                ));
                keep[row] = false;
                continue;
            }
            match first_of_step.get(&(it, tid, step)) {
                None => {
                    first_of_step.insert((it, tid, step), row);
                }
                Some(&first) if self.rows_equal(first, row) => {
                    report.padding_duplicates += 1;
                    keep[row] = false;
                }
                Some(&first) => {
                    let (ff, fl) = self.origin[first];
                    rejects.push(Error::input(
                        self.location(file, line, Some(STEP)),
                        Reason::DuplicateStep,
                        format!(
                            "duplicate step {step} of trajectory `{tid}` (first at {}), with different content; each (traj_id, step) must appear once",
                            self.location(ff, fl, None)
                        ),
                    ));
                    keep[row] = false;
                }
            }
        }
        drop(first_of_step);
        drop(group_of_traj);
        for e in rejects {
            self.reject(e)?;
        }

        // Steps must be contiguous from 0 or 1 within each trajectory.
        let mut steps_of: PlHashMap<(Option<i64>, &str), Vec<(i64, usize)>> = PlHashMap::default();
        for row in (0..n).filter(|&r| keep[r]) {
            steps_of
                .entry((self.int(it_f, row), self.key(t_f, row)))
                .or_default()
                .push((self.int(s_f, row).unwrap_or_default(), row));
        }
        let mut gaps: Vec<(Error, Vec<usize>)> = Vec::new();
        for ((_, tid), mut steps) in steps_of {
            steps.sort_unstable();
            let start = steps[0].0;
            let bad = if start > 1 {
                Some((0, format!("trajectory `{tid}` starts at step {start}; steps must start at 0 or 1 and be contiguous")))
            } else {
                steps.windows(2).position(|w| w[1].0 != w[0].0 + 1).map(|k| {
                    let (prev, found) = (steps[k].0, steps[k + 1].0);
                    (k + 1, format!("trajectory `{tid}` jumps from step {prev} to step {found}: step {} is missing", prev + 1))
                })
            };
            if let Some((k, message)) = bad {
                let (file, line) = self.origin[steps[k].1];
                gaps.push((
                    Error::input(
                        self.location(file, line, Some(STEP)),
                        Reason::StepGap,
                        message,
                    ),
                    steps.iter().map(|&(_, r)| r).collect(),
                ));
            }
        }
        gaps.sort_by_key(|(_, rows)| rows.iter().min().copied());
        for (e, rows) in gaps {
            if !self.lenient {
                return Err(e);
            }
            *self.skipped.entry(Reason::StepGap).or_default() += rows.len() as u64;
            if self.skipped_examples.len() < 5 {
                self.skipped_examples.push(e.to_string());
            }
            for r in rows {
                keep[r] = false;
            }
        }

        report.skipped = std::mem::take(&mut self.skipped);
        report.skipped_examples = std::mem::take(&mut self.skipped_examples);
        let kept = keep.iter().filter(|&&k| k).count();
        if kept == 0 {
            let what: Vec<String> = inputs.iter().map(|p| p.display().to_string()).collect();
            let detail = if report.skipped_total() > 0 {
                format!("; all {} rows were skipped as bad", report.skipped_total())
            } else {
                String::new()
            };
            return Err(Error::input(
                Location {
                    path: PathBuf::from(what.join(", ")),
                    line: None,
                    unit: Unit::Line,
                    column: None,
                },
                Reason::EmptyInput,
                format!("no step rows found{detail}"),
            ));
        }

        let mut columns = Vec::new();
        for (i, field) in FIELDS.iter().enumerate() {
            if !self.present[i] {
                continue;
            }
            let values = self.cells[i]
                .iter()
                .zip(&keep)
                .filter(|(_, k)| **k)
                .map(|(c, _)| c.as_ref());
            let name: PlSmallStr = field.name.into();
            let column = match field.kind {
                Kind::Key | Kind::Text => Column::new(
                    name,
                    values
                        .map(|c| match c {
                            Some(Cell::Str(s)) => Some(s.as_str()),
                            _ => None,
                        })
                        .collect::<Vec<_>>(),
                ),
                Kind::Int => Column::new(
                    name,
                    values
                        .map(|c| match c {
                            Some(Cell::Int(v)) => Some(*v),
                            _ => None,
                        })
                        .collect::<Vec<_>>(),
                ),
                Kind::Float if field.required => Column::new(
                    name,
                    values
                        .map(|c| match c {
                            Some(Cell::Float(v)) => *v,
                            _ => 0.0,
                        })
                        .collect::<Vec<_>>(),
                ),
                Kind::Float => Column::new(
                    name,
                    values
                        .map(|c| match c {
                            Some(Cell::Float(v)) => Some(*v),
                            _ => None,
                        })
                        .collect::<Vec<_>>(),
                ),
                Kind::Bool => Column::new(
                    name,
                    values
                        .map(|c| match c {
                            Some(Cell::Bool(v)) => Some(*v),
                            _ => None,
                        })
                        .collect::<Vec<_>>(),
                ),
            };
            columns.push(column);
        }
        let frame = DataFrame::new(kept, columns)?;
        StepBatch::new(frame, options.success_threshold, options.gamma)
    }
}

/// Converts a JSON-like scalar into a field's kind; `Err` holds what was found instead.
pub(crate) fn convert(
    kind: Kind,
    value: &serde_json::Value,
) -> std::result::Result<Cell, (Reason, String)> {
    use serde_json::Value;
    let got = || format!("expected {}, got {}", kind.expected(), describe(value));
    match (kind, value) {
        (Kind::Key, Value::String(s)) => Ok(Cell::Str(s.clone())),
        (Kind::Key, Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(Cell::Str(n.to_string())),
        (Kind::Int, Value::Number(n)) => match n.as_i64() {
            Some(v) => Ok(Cell::Int(v)),
            None => match n.as_f64() {
                Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(Cell::Int(f as i64)),
                _ => Err((Reason::WrongType, got())),
            },
        },
        (Kind::Float, Value::Number(n)) => match n.as_f64() {
            Some(f) if f.is_finite() => Ok(Cell::Float(f)),
            _ => Err((
                Reason::NonFinite,
                format!("expected a finite number, got {n}"),
            )),
        },
        (Kind::Float, Value::String(s)) if is_non_finite_word(s) => Err((
            Reason::NonFinite,
            format!(
                "expected a finite number, got {:?} (NaN and infinities are not rewards)",
                s
            ),
        )),
        (Kind::Bool, Value::Bool(b)) => Ok(Cell::Bool(*b)),
        (Kind::Bool, Value::Number(n)) if n.as_f64() == Some(0.0) || n.as_f64() == Some(1.0) => {
            Ok(Cell::Bool(n.as_f64() == Some(1.0)))
        }
        (Kind::Bool, Value::String(s))
            if matches!(s.as_str(), "true" | "True" | "false" | "False") =>
        {
            Ok(Cell::Bool(s.eq_ignore_ascii_case("true")))
        }
        (Kind::Text, Value::String(s)) => Ok(Cell::Str(s.clone())),
        // Structured observations (dicts, lists) are compared as their JSON text, as `to_hashable` does.
        (Kind::Text, Value::Number(_) | Value::Bool(_) | Value::Array(_) | Value::Object(_)) => {
            Ok(Cell::Str(value.to_string()))
        }
        _ => Err((Reason::WrongType, got())),
    }
}

/// Two columns that must agree ([`crate::schema::Collision::Agree`]) hold different values.
pub(crate) fn conflict_message(
    field: &Field,
    first: &str,
    a: &Cell,
    second: &str,
    b: &Cell,
) -> String {
    format!(
        "`{second}` = {} but `{first}` = {} on this row; both give `{}`, and which one credit reads changes the results: choose one with `--schema map.toml` (e.g. `{second} = \"{}\"`)",
        b.show(),
        a.show(),
        field.name,
        field.name
    )
}

/// Checks beyond the kind: a value the field cannot take.
pub(crate) fn domain_error(field: &crate::schema::Field, cell: &Cell) -> Option<String> {
    match (field.name, cell) {
        (COST, Cell::Float(c)) if *c <= 0.0 => Some(format!("expected a cost > 0, got {c}")),
        (N_TOKENS, Cell::Int(n)) if *n <= 0 => Some(format!("expected a token count > 0, got {n}")),
        _ => None,
    }
}

pub(crate) fn is_non_finite_word(s: &str) -> bool {
    matches!(
        s.trim().to_ascii_lowercase().as_str(),
        "nan" | "inf" | "-inf" | "+inf" | "infinity" | "-infinity" | "+infinity"
    )
}

fn describe(value: &serde_json::Value) -> String {
    use serde_json::Value;
    match value {
        Value::Null => "null".into(),
        Value::String(s) if s.chars().count() > 40 => {
            format!("a string {:?}…", s.chars().take(40).collect::<String>())
        }
        Value::String(s) => format!("{s:?}"),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
        other => other.to_string(),
    }
}
