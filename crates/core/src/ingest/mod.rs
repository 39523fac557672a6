//! Ingest: rollout logs (JSONL plain/.gz/.zst, episode-per-line JSONL, Parquet, directories) into
//! validated step batches, in bounded memory.
//!
//! [`stream`] reads the inputs once (twice when a log's groups are not where one pass expects
//! them), in parallel, and hands out windows of complete units (groups, or iterations when a
//! method needs the whole training batch): memory holds what is in flight, never the whole log.
//! [`read_paths`] is the same read with the whole input as one unit, for callers that want one
//! [`StepBatch`] (training; tests).
//!
//! Every row remembers its origin so that any check can name file, line or row, and column. Row
//! checks run as rows are read, unit checks (duplicate (traj_id, step), step gaps) when a unit
//! closes, and a trajectory in two groups is caught as soon as it is seen. By default the first
//! problem is an error; with `lenient` bad rows are skipped and counted per [`Reason`].
//!
//! verl-agent pads batches by copying whole rows (`adjust_batch`): a row identical to an earlier
//! row with the same (traj_id, step) is dropped and counted as a padding duplicate, not an error.

mod assemble;
mod files;
mod flat;
mod ids;
mod jsonl;
mod pages;
mod parquet;
mod rows;
mod stream;
pub mod tail;

pub use assemble::{UnitKind, Window};
pub use files::{read_column_map, read_settings};
pub use stream::{stream, Event, Limits, Progress};

use crate::batch::StepBatch;
use crate::error::{Reason, Result};
use crate::schema::{columns::*, ColumnMap, ColumnUse, Field, Kind};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// A trajectory succeeds when its return exceeds this and no `success` column is logged.
pub const DEFAULT_SUCCESS_THRESHOLD: f64 = 0.5;

/// How to read the logs.
#[derive(Clone, Debug)]
pub struct IngestOptions {
    pub columns: ColumnMap,
    pub lenient: bool,
    /// A trajectory succeeds when R(τ) exceeds this and no `success` column is logged.
    pub success_threshold: f64,
    /// γ of the derived `return_to_go` column.
    pub gamma: f64,
    pub limits: Limits,
    /// Plain JSONL files read only in part, by path as listed: a log still being written is read
    /// up to its last complete line, and on from there the next time (`credit watch`).
    pub spans: BTreeMap<PathBuf, Span>,
}

/// The part of a plain JSONL file a read takes: whole lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// Byte offset of the first line read.
    pub start: u64,
    /// Byte offset just past the last line read (its line break).
    pub end: u64,
    /// 1-based number of the line at `start`, for messages.
    pub first_line: u64,
}

impl IngestOptions {
    /// The options a user sets, checked (the other sizes at their defaults).
    pub fn new(columns: ColumnMap, lenient: bool, success_threshold: f64) -> Result<Self> {
        if !success_threshold.is_finite() {
            return Err(crate::error::Error::Config(format!(
                "--success-threshold {success_threshold}: expected a finite number (a trajectory succeeds when R(τ) exceeds it)"
            )));
        }
        Ok(IngestOptions {
            columns,
            lenient,
            success_threshold,
            ..IngestOptions::default()
        })
    }
}

impl Default for IngestOptions {
    fn default() -> Self {
        IngestOptions {
            columns: ColumnMap::default(),
            lenient: false,
            success_threshold: DEFAULT_SUCCESS_THRESHOLD,
            gamma: 0.95,
            limits: Limits::default(),
            spans: BTreeMap::new(),
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

/// Column names the logs have: every mapped one, to find mappings that feed nothing, and a
/// sample of the others for the message.
#[derive(Clone, Debug, Default)]
pub(crate) struct SeenColumns {
    pub mapped: BTreeSet<String>,
    pub others: BTreeSet<String>,
}

/// How many column names besides the mapped ones are kept: a log whose rows each carry a key of
/// their own must not grow the sample without bound.
const SAMPLED_COLUMNS: usize = 64;

impl SeenColumns {
    pub fn note(&mut self, columns: &ColumnMap, name: &str) {
        if columns.user.contains_key(name) {
            if !self.mapped.contains(name) {
                self.mapped.insert(name.to_string());
            }
        } else if self.others.len() < SAMPLED_COLUMNS && !self.others.contains(name) {
            self.others.insert(name.to_string());
        }
    }

    pub fn merge(&mut self, other: SeenColumns) {
        self.mapped.extend(other.mapped);
        for name in other.others {
            if self.others.len() >= SAMPLED_COLUMNS {
                break;
            }
            self.others.insert(name);
        }
    }
}

/// What ingest saw besides the rows it kept.
#[derive(Clone, Debug, Default, Serialize)]
pub struct IngestReport {
    pub files: Vec<FileSummary>,
    /// Rows kept.
    pub rows: u64,
    /// Rows skipped under `--lenient`, per reason.
    pub skipped: BTreeMap<Reason, u64>,
    /// The first few skipped rows' messages.
    pub skipped_examples: Vec<String>,
    /// Rows dropped as exact copies of an earlier row (verl-agent batch padding).
    pub padding_duplicates: u64,
    /// Files skipped for their extension, a re-read, and similar notes.
    pub notes: Vec<String>,
    /// Which log column fed each field, and what became of the other columns named for it.
    pub columns: Vec<ColumnUse>,
    #[serde(skip)]
    pub(crate) columns_seen: BTreeSet<ColumnUse>,
    #[serde(skip)]
    pub(crate) column_names: SeenColumns,
}

/// How many skipped rows' messages a report keeps.
const SKIPPED_EXAMPLES: usize = 5;

impl IngestReport {
    pub fn skipped_total(&self) -> u64 {
        self.skipped.values().sum()
    }

    /// What `--lenient` skipped, as the warning a command prints (its first line) and the first
    /// skipped rows' messages; empty when nothing was skipped.
    pub fn skipped_warning(&self) -> Vec<String> {
        let skipped = self.skipped_total();
        if skipped == 0 {
            return Vec::new();
        }
        let reasons: Vec<String> = self
            .skipped
            .iter()
            .map(|(r, n)| format!("{n} {}", r.as_str()))
            .collect();
        let mut lines = vec![format!(
            "warning: --lenient skipped {}: {}",
            crate::wording::plural(skipped as usize, "row"),
            reasons.join(", ")
        )];
        lines.extend(self.skipped_examples.iter().map(|e| format!("  {e}")));
        lines
    }

    /// Adds what a read of more logs saw (`credit watch` reads a run file by file).
    pub fn merge(&mut self, other: IngestReport) {
        self.files.extend(other.files);
        self.rows += other.rows;
        for (reason, n) in other.skipped {
            *self.skipped.entry(reason).or_default() += n;
        }
        let room = SKIPPED_EXAMPLES.saturating_sub(self.skipped_examples.len());
        self.skipped_examples
            .extend(other.skipped_examples.into_iter().take(room));
        self.padding_duplicates += other.padding_duplicates;
        for note in other.notes {
            if !self.notes.contains(&note) {
                self.notes.push(note);
            }
        }
        for column in other.columns {
            if !self.columns.contains(&column) {
                self.columns.push(column);
            }
        }
        self.columns
            .sort_by_key(|u| (crate::schema::field_index(u.field), u.column.clone()));
    }
}

/// The files `paths` name (directories walked as [`stream`] walks them).
pub fn input_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    Ok(files::collect(paths, &mut Vec::new())?
        .into_iter()
        .map(|i| i.path)
        .collect())
}

/// The file system identities (device, inode) of every file the inputs hold, from the walk that
/// finds them: the output rule refuses to write over any of them under another name. None outside
/// unix, where files have no such identity.
pub fn input_file_ids(paths: &[PathBuf]) -> Result<Vec<(u64, u64)>> {
    Ok(files::collect(paths, &mut Vec::new())?
        .into_iter()
        .filter_map(|i| i.id)
        .collect())
}

/// Bytes of JSONL that [`first_rows_carry`] reads: a few rows of any trainer's dump.
const PEEK_BYTES: usize = 64 << 10;

/// Whether the first rows of the first input file carry a value for `field` (a JSONL file's
/// first 64 KiB, a Parquet file's footer): a look at the logs before a run plans its methods,
/// for `--methods all` to take `logged` where the logs have an advantage column. Problems in
/// those rows are left to the run, which reports them where they are.
pub fn first_rows_carry(paths: &[PathBuf], options: &IngestOptions, field: &str) -> Result<bool> {
    let Some(index) = crate::schema::field_index(field) else {
        return Ok(false);
    };
    first_rows_of(
        paths,
        options,
        |block| block.rows.present[index],
        |resolution| resolution.feeds[index].is_some(),
    )
}

/// Whether the first input file is a verl dump of one row per rollout (single-turn: every
/// rollout's one step is step 0), as [`first_rows_carry`] looks: the commands' default methods
/// for such logs are the outcome estimators ([`crate::plan::SINGLE_TURN`]).
pub fn first_rows_single_turn(paths: &[PathBuf], options: &IngestOptions) -> Result<bool> {
    let one_step = |u: &crate::schema::ColumnUse| {
        u.field == crate::schema::columns::STEP && u.how == crate::schema::ONE_STEP_PER_ROLLOUT
    };
    first_rows_of(
        paths,
        options,
        |block| block.uses.iter().any(one_step),
        |resolution| resolution.uses.iter().any(one_step),
    )
}

/// `jsonl` on the first 64 KiB of the first input file parsed, or `parquet` on its columns'
/// resolution; false without inputs.
fn first_rows_of(
    paths: &[PathBuf],
    options: &IngestOptions,
    jsonl: impl Fn(&jsonl::Block) -> bool,
    parquet: impl Fn(&crate::schema::Resolution) -> bool,
) -> Result<bool> {
    if paths.is_empty() {
        return Ok(false);
    }
    let Some(input) = files::collect(paths, &mut Vec::new())?.into_iter().next() else {
        return Ok(false);
    };
    match input.format {
        files::Format::Jsonl(compression) => {
            let mut first = None;
            let buffers = jsonl::ChunkBuffers::new(PEEK_BYTES);
            jsonl::read_chunks(&input, compression, 0, PEEK_BYTES, &buffers, |chunk| {
                first = Some(chunk);
                false
            })?;
            Ok(first
                .is_some_and(|chunk| jsonl(&jsonl::parse(&chunk, &input.path, &options.columns))))
        }
        files::Format::Parquet => Ok(parquet::plan(&input.path, 0, input.size, &options.columns)
            .is_ok_and(|plan| parquet(&plan.resolution))),
    }
}

pub struct Ingested {
    pub batch: StepBatch,
    pub report: IngestReport,
}

/// Reads every path (files, or directories walked recursively in sorted order) into one batch,
/// rows in input order.
pub fn read_paths(paths: &[PathBuf], options: &IngestOptions) -> Result<Ingested> {
    let mut whole: Option<StepBatch> = None;
    let report = stream(
        paths,
        options,
        UnitKind::All,
        &|_| {},
        |_| Ok::<(), crate::Error>(()),
        |event| {
            if let Event::Window(window, ()) = event {
                whole = Some(window.batch);
            }
            Ok(())
        },
    )?;
    let batch = whole.expect("a non-empty input gives one window");
    Ok(Ingested { batch, report })
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

/// Converts a JSON-like scalar into a field's kind; `Err` holds what was found instead.
pub(crate) fn convert(
    kind: Kind,
    value: &serde_json::Value,
) -> std::result::Result<Cell, (Reason, String)> {
    use serde_json::Value;
    let got = || format!("expected {}, got {}", kind.expected(), describe(value));
    match (kind, value) {
        (Kind::Key, Value::String(s)) => Ok(Cell::Str(s.clone())),
        // An integer id stays a number (it is written the same way), so that ingest can tell when
        // a log names one id both as `1` and as `"1"`.
        (Kind::Key, Value::Number(n)) if n.is_i64() => {
            Ok(Cell::Int(n.as_i64().unwrap_or_default()))
        }
        (Kind::Key, Value::Number(n)) if n.is_u64() => Ok(Cell::Str(n.to_string())),
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
        (STEP | ITERATION | SEGMENT, Cell::Int(n)) if *n < 0 => {
            Some(format!("expected a {} ≥ 0, got {n}", field.name))
        }
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
