//! Parquet reading, slice by slice, reading only the columns that feed a field: one step row per
//! row. Text columns are read from their pages as views into them where they decode ([`pages`]),
//! the others through polars' own reader. Columns are resolved through the same schema table as JSONL and
//! cast to each field's kind, a column at a time; a value that does not cast is reported with its
//! row (0-based) and column.
//!
//! Slices follow the row groups (see [`slices`]): small groups are read together, a large one in
//! parts. polars decompresses only the data pages a slice overlaps, so a group read in parts is
//! decompressed about once, and memory holds a few slices whatever the writer's group size. Its
//! dictionary pages are the exception: each read decodes every dictionary page of the columns
//! (pyarrow's are up to 1 MB per column, even where the column fell back to plain pages), so a
//! group read in N parts decodes them N times: a third of the decompression of 100k-row groups
//! of ~900-byte observations when read in 16 MB parts. What grows with a group is its
//! dictionary-encoded columns' dictionaries, decoded (and held by the rows that point into them)
//! once per slice: a 1M-row group of ids takes ~1.5x the memory of 82k-row groups.

use super::jsonl::Block;
use super::pages::{self, Slice};
use super::rows::{Buffer, Origin, Rows, Value as Typed};
use super::{conflict_message, domain_error, Cell, SeenColumns};
use crate::error::{Error, Location, Reason, Result, Unit};
use crate::schema::{missing_message, ColumnMap, Derive, Field, Kind, Resolution, FIELDS};
use polars::io::parquet::read::ParallelStrategy;
use polars::prelude::*;
use polars_arrow::array::MutableBinaryViewArray;
use std::path::Path;

/// A slice holds about this many decoded bytes (of the columns read). A round of reading holds a
/// slice per thread (`stream::is_round`), as much as it held in two slices of 16 MB, with a
/// large group cut into half as many parts, each decoding the group's dictionary pages again
/// (see the module's documentation): 1M rows in 100k-row groups read 12 % faster.
const SLICE_BYTES: usize = 32 << 20;

/// One Parquet file, planned: what to read and in which slices.
pub(crate) struct Plan {
    pub file: u32,
    pub resolution: Resolution,
    /// The file's column names.
    pub columns: SeenColumns,
    /// The columns that feed a field (feeding and agreeing ones).
    projection: Vec<String>,
    /// Those of them read from their pages as string views ([`pages`]), where they decode.
    text_columns: Vec<String>,
    /// Those of them of 8- or 16-bit integers, with their type: read from their pages and widened
    /// ([`pages::narrow_ints`]), as polars is built without those types.
    narrow_columns: Vec<(String, ArrowDataType)>,
    metadata: Arc<polars_parquet_metadata::FileMetadata>,
    pub slices: Vec<Slice>,
    /// Bytes of the file per row, for progress.
    pub disk_bytes_per_row: f64,
}

mod polars_parquet_metadata {
    pub use polars::io::parquet::read::FileMetadata;
}

fn at(path: &Path, row: Option<u64>, column: Option<&str>) -> Location {
    Location {
        path: path.to_path_buf(),
        line: row,
        unit: Unit::Row,
        char_column: None,
        column: column.map(str::to_string),
    }
}

thread_local! {
    /// Set while [`guard`] runs polars' reader: its panics are caught and reported as errors, so
    /// the panic hook stays quiet for them.
    static GUARDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// How many [`guard`]s run now: polars decodes on its own pool threads (named `polars-…`), whose
/// panics reach the guard through the pool, so those are quiet too while one runs.
static GUARDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Runs polars' reader; its errors and its panics (on damaged files) are an unreadable file.
fn guard<T>(path: &Path, read: impl FnOnce() -> PolarsResult<T>) -> Result<T> {
    static QUIET_HOOK: std::sync::Once = std::sync::Once::new();
    QUIET_HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let pool = std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("polars-"));
            let quiet = GUARDED.with(|g| g.get())
                || (pool && GUARDS.load(std::sync::atomic::Ordering::SeqCst) > 0);
            if !quiet {
                previous(info);
            }
        }));
    });
    GUARDED.with(|g| g.set(true));
    GUARDS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(read));
    GUARDS.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    GUARDED.with(|g| g.set(false));
    match outcome {
        Ok(result) => result.map_err(|e| unreadable(path, e)),
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("the Parquet reader failed");
            Err(unreadable(path, format!("damaged ({what})")))
        }
    }
}

fn unreadable(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::input(
        at(path, None, None),
        Reason::UnreadableFile,
        format!("not a readable Parquet file: {e}"),
    )
}

/// Reads the file's footer and resolves its columns. `Err` is a whole-file problem: unreadable, or
/// a required field missing (a located input error either way).
pub(crate) fn plan(path: &Path, file: u32, size: u64, columns: &ColumnMap) -> Result<Plan> {
    let handle = std::fs::File::open(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        cause: source,
    })?;
    let mut reader = ParquetReader::new(handle);
    // polars' footer parser can panic on a damaged file: that is an unreadable file too.
    let (mut metadata, mut schema) = guard(path, || {
        let metadata = reader.get_metadata()?.clone();
        Ok((metadata, reader.schema()?))
    })?;
    if schema.iter_values().any(|f| string_dictionary(&f.dtype)) {
        // A dictionary (pandas' categorical, Arrow's dictionary type) of strings is text. Its
        // type comes from the Arrow schema the writer stored, which polars reads as a categorical
        // (a feature credit does not build); without that schema the same pages are read as the
        // strings they hold.
        let mut plain = (*metadata).clone();
        if let Some(pairs) = &mut plain.key_value_metadata {
            pairs.retain(|kv| kv.key != "ARROW:schema");
        }
        metadata = Arc::new(plain);
        schema = Arc::new(
            polars::io::parquet::read::infer_schema(&metadata).map_err(|e| unreadable(path, e))?,
        );
    }
    let resolution = columns
        .resolve(schema.iter_names().map(|n| n.as_str()))
        .map_err(Error::Config)?;
    let mut noted = SeenColumns::default();
    for name in schema.iter_names() {
        noted.note(columns, name);
    }
    let missing: Vec<&Field> = resolution.missing_required();
    if let Some(first) = missing.first() {
        let names: Vec<&str> = schema.iter_names().map(|n| n.as_str()).collect();
        return Err(Error::input(
            at(path, None, Some(first.name)),
            Reason::MissingColumn,
            missing_message(&missing, &names),
        ));
    }
    let projection: Vec<String> = resolution
        .feeds
        .iter()
        .flatten()
        .flat_map(|f| std::iter::once(f.column.clone()).chain(f.agree.iter().cloned()))
        .collect();
    // Only the projected columns are decoded; each must be of a type credit converts (polars
    // panics on decimals, structs, dictionaries and a few more without their features).
    for name in &projection {
        if let Some(field) = schema.get(name.as_str()) {
            if !readable(&field.dtype) {
                return Err(Error::input(
                    at(path, None, Some(name)),
                    Reason::WrongType,
                    format!(
                        "a Parquet column of type {:?}, which credit does not read; store it as a number, boolean or string",
                        field.dtype
                    ),
                ));
            }
        }
    }
    let text_columns = projection
        .iter()
        .filter(|name| {
            schema.get(name.as_str()).is_some_and(|field| {
                matches!(
                    field.dtype,
                    ArrowDataType::Utf8 | ArrowDataType::LargeUtf8 | ArrowDataType::Utf8View
                )
            }) && pages::readable(&metadata, name)
        })
        .cloned()
        .collect();
    let narrow_columns = projection
        .iter()
        .filter_map(|name| {
            let field = schema.get(name.as_str())?;
            pages::narrow_int(&field.dtype).then(|| (name.clone(), field.dtype.clone()))
        })
        .collect();
    let rows = metadata.num_rows;
    let slices = slices(&metadata, &projection, SLICE_BYTES);
    Ok(Plan {
        file,
        resolution,
        columns: noted,
        projection,
        text_columns,
        narrow_columns,
        metadata,
        slices,
        disk_bytes_per_row: size as f64 / rows.max(1) as f64,
    })
}

/// The slices of a file, each of whole row groups or of a part of one, about `budget` bytes when
/// decoded: consecutive groups are merged while they fit, and a larger group is cut into equal
/// parts that do. A slice never spans a group boundary it could avoid, so no group is read twice
/// for the sake of a neighbour.
fn slices(
    metadata: &polars_parquet_metadata::FileMetadata,
    projection: &[String],
    budget: usize,
) -> Vec<Slice> {
    let mut slices = Vec::new();
    let mut open = Slice {
        start: 0,
        rows: 0,
        bytes: 0,
    };
    for group in &metadata.row_groups {
        let rows = group.num_rows();
        // What the projected columns take decoded: their pages' uncompressed bytes, and each
        // row's fixed-size values.
        let bytes = projection
            .iter()
            .filter_map(|name| group.columns_under_root_iter(name))
            .flatten()
            .map(|c| c.uncompressed_size().max(0) as usize)
            .sum::<usize>()
            + rows * Rows::FIXED_BYTES_PER_ROW;
        if open.rows > 0 && open.bytes + bytes > budget {
            slices.push(open);
            open.start += open.rows;
            (open.rows, open.bytes) = (0, 0);
        }
        if bytes <= budget {
            open.rows += rows;
            open.bytes += bytes;
            continue;
        }
        let parts = bytes.div_ceil(budget).min(rows.max(1));
        for part in 0..parts {
            let (from, to) = (rows * part / parts, rows * (part + 1) / parts);
            slices.push(Slice {
                start: open.start + from,
                rows: to - from,
                bytes: bytes / parts,
            });
        }
        open.start += rows;
    }
    if open.rows > 0 {
        slices.push(open);
    }
    slices
}

/// Whether an Arrow type is a dictionary of strings.
fn string_dictionary(dtype: &ArrowDataType) -> bool {
    use ArrowDataType as A;
    matches!(dtype, A::Dictionary(_, values, _)
        if matches!(**values, A::Utf8 | A::LargeUtf8 | A::Utf8View))
}

/// Whether credit reads a Parquet column of this Arrow type.
fn readable(dtype: &ArrowDataType) -> bool {
    use ArrowDataType as A;
    match dtype {
        A::Null
        | A::Boolean
        | A::Int8
        | A::Int16
        | A::Int32
        | A::Int64
        | A::UInt8
        | A::UInt16
        | A::UInt32
        | A::UInt64
        | A::Float32
        | A::Float64
        | A::Utf8
        | A::LargeUtf8
        | A::Utf8View
        | A::Binary
        | A::LargeBinary
        | A::BinaryView => true,
        A::List(inner) | A::LargeList(inner) => readable(&inner.dtype),
        _ => false,
    }
}

/// A value that does not cast: (row, reason, message).
type RowProblem = (usize, Reason, String);

/// (row, field, column, reason, message): sorted by row, then field, each row's first is kept.
type Problems = Vec<(usize, usize, String, Reason, String)>;

/// Reads a slice of a planned file into a block.
pub(crate) fn read_slice(path: &Path, plan: &Plan, slice: Slice) -> Result<Block> {
    let open = || {
        std::fs::File::open(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            cause: source,
        })
    };
    // Text columns from their pages where they decode (polars reads the others, and these where
    // they do not), and narrow integers.
    let mut text: Vec<(&str, Column)> = Vec::new();
    if !plan.narrow_columns.is_empty() {
        let mut file = open()?;
        for (name, dtype) in &plan.narrow_columns {
            let values = guard(path, || {
                Ok(pages::narrow_ints(&mut file, &plan.metadata, name, dtype, slice))
            })?
            .map_err(|e| {
                Error::input(
                    at(path, None, Some(name)),
                    Reason::UnreadableFile,
                    format!("not a readable Parquet file: a column of {dtype:?} whose pages do not decode ({e})"),
                )
            })?;
            let column = Int64Chunked::from_iter_options(name.as_str().into(), values.into_iter());
            text.push((name, column.into_column()));
        }
    }
    if !plan.text_columns.is_empty() {
        let mut file = open()?;
        for name in &plan.text_columns {
            let array = guard(path, || {
                Ok(pages::text(&mut file, &plan.metadata, name, slice))
            });
            if let Ok(Some(array)) = array {
                let series = Series::from_arrow(name.as_str().into(), Box::new(array))?;
                text.push((name, series.into_column()));
            }
        }
    }
    let rest: Vec<String> = plan
        .projection
        .iter()
        .filter(|name| !text.iter().any(|(t, _)| t == name))
        .cloned()
        .collect();
    let (frame, n) = if rest.is_empty() {
        (DataFrame::empty(), slice.rows)
    } else {
        let mut reader = ParquetReader::new(open()?)
            .with_columns(Some(rest))
            .with_slice(Some((slice.start, slice.rows)))
            // Only this way does polars skip the row groups before the slice: the others set up
            // every earlier group's columns (decompressing their dictionaries) for none of its rows.
            .read_parallel(ParallelStrategy::RowGroups);
        reader.set_metadata(plan.metadata.clone());
        let frame = guard(path, || reader.finish())?;
        let n = frame.height();
        if n != slice.rows && !text.is_empty() {
            return Err(unreadable(
                path,
                "its row groups hold other rows than its footer says",
            ));
        }
        (frame, n)
    };
    let column = |name: &str| -> Result<&Column> {
        match text.iter().find(|(t, _)| *t == name) {
            Some((_, column)) => Ok(column),
            None => Ok(frame.column(name)?),
        }
    };

    let mut problems: Problems = Vec::new();
    // Per field: its values, a column at a time (nulls where no column feeds it).
    let mut columns: Vec<Buffer> = Vec::with_capacity(FIELDS.len());
    for (i, field) in FIELDS.iter().enumerate() {
        let Some(feed) = &plan.resolution.feeds[i] else {
            columns.push(Buffer::Nulls(field.kind, n));
            continue;
        };
        let mut cast = |name: &str| -> Result<Buffer> {
            let (values, bad) = cast_column(field.kind, column(name)?)?;
            for (row, reason, message) in bad {
                problems.push((row, i, name.to_string(), reason, message));
            }
            let mut out_of_domain = |row: usize, cell: Cell| {
                if let Some(message) = domain_error(field, &cell) {
                    problems.push((row, i, name.to_string(), Reason::WrongType, message));
                }
            };
            match &values {
                Buffer::Int(v) => v.iter().enumerate().for_each(|(row, c)| {
                    c.map(|c| out_of_domain(row, Cell::Int(c)));
                }),
                Buffer::Float(v) => v.iter().enumerate().for_each(|(row, c)| {
                    c.map(|c| out_of_domain(row, Cell::Float(c)));
                }),
                _ => {}
            }
            Ok(values)
        };
        let mut values = cast(&feed.column)?;
        if !feed.agree.is_empty() {
            let mut agree = Vec::new();
            for other in &feed.agree {
                agree.push((other.as_str(), cast(other)?));
            }
            values = agreed(i, &feed.column, &values, &agree, n, &mut problems);
        }
        if field.required {
            for row in (0..n).filter(|&row| values.get(row).is_none()) {
                problems.push((
                    row,
                    i,
                    feed.column.clone(),
                    Reason::MissingValue,
                    format!("`{}` is null; a value is required", field.name),
                ));
            }
        }
        columns.push(derived(feed.derive, values));
    }

    // A row with a problem is left out.
    let mut bad = vec![false; n];
    for p in &problems {
        bad[p.0] = true;
    }
    let kept: Vec<usize> = (0..n).filter(|&row| !bad[row]).collect();
    if kept.len() < n {
        columns = columns.into_iter().map(|c| c.keep(&kept)).collect();
    }
    let origin = kept
        .iter()
        .map(|&row| Origin {
            file: plan.file,
            line: (slice.start + row) as u64,
        })
        .collect();
    let mut rows = Rows::from_columns(columns, origin);

    // Ids stored as integers are numbers, as in JSONL (`1` vs `"1"`, see the assembler).
    for (i, field) in FIELDS.iter().enumerate() {
        if let (Kind::Key, Some(feed)) = (field.kind, &plan.resolution.feeds[i]) {
            if column(&feed.column)?.dtype().is_integer() {
                rows.numbered[i] = true;
                rows.named[i] = false;
            }
        }
    }

    // The first problem of each row, in row order (a value that does not cast before a null).
    problems.sort_by_key(|p| (p.0, p.1));
    problems.dedup_by_key(|p| p.0);
    let problems = problems
        .into_iter()
        .map(|(row, _, column, reason, message)| {
            Error::input(
                at(path, Some((slice.start + row) as u64), Some(&column)),
                reason,
                message,
            )
        })
        .collect();
    Ok(Block {
        file: plan.file,
        rows,
        problems,
        uses: plan.resolution.uses.iter().cloned().collect(),
        columns: plan.columns.clone(),
        disk_bytes: (plan.disk_bytes_per_row * slice.rows as f64) as u64,
        lines: 0,
    })
}

/// A field's values where agreeing columns back the feeding one: each row's first value (feeding
/// column first), a value that differs from it a conflict (the row's problem).
fn agreed(
    field: usize,
    feed: &str,
    first: &Buffer,
    agree: &[(&str, Buffer)],
    n: usize,
    problems: &mut Problems,
) -> Buffer {
    let values = (0..n).map(|row| {
        let (mut chosen, mut from) = (first.get(row), feed);
        for &(name, ref other) in agree {
            let Some(value) = other.get(row) else {
                continue;
            };
            match chosen {
                None => (chosen, from) = (Some(value), name),
                Some(c) if c == value => {}
                Some(c) => problems.push((
                    row,
                    field,
                    name.to_string(),
                    Reason::ConflictingColumns,
                    conflict_message(&FIELDS[field], from, &owned(c), name, &owned(value)),
                )),
            }
        }
        chosen
    });
    column_of(FIELDS[field].kind, values)
}

/// A column of `kind` holding `values` (of that kind).
fn column_of<'a>(kind: Kind, values: impl Iterator<Item = Option<Typed<'a>>>) -> Buffer {
    match kind {
        Kind::Key | Kind::Text => Buffer::Views(
            values
                .map(|v| match v {
                    Some(Typed::Str(s)) => Some(s),
                    _ => None,
                })
                .collect::<MutableBinaryViewArray<str>>()
                .into(),
        ),
        Kind::Int => Buffer::Int(
            values
                .map(|v| match v {
                    Some(Typed::Int(x)) => Some(x),
                    _ => None,
                })
                .collect(),
        ),
        Kind::Float => Buffer::Float(
            values
                .map(|v| match v {
                    Some(Typed::Float(x)) => Some(x),
                    _ => None,
                })
                .collect(),
        ),
        Kind::Bool => Buffer::Bool(
            values
                .map(|v| match v {
                    Some(Typed::Bool(x)) => Some(x),
                    _ => None,
                })
                .collect(),
        ),
    }
}

/// A field's values derived from its column's (see [`Derive`]).
fn derived(derive: Derive, values: Buffer) -> Buffer {
    match (derive, values) {
        (Derive::SamplePart, Buffer::Views(ids)) => Buffer::Views(
            ids.iter()
                .map(|id| id.map(|id| Derive::SamplePart.key(id)))
                .collect::<MutableBinaryViewArray<str>>()
                .into(),
        ),
        (Derive::Zero, Buffer::Int(v)) => Buffer::Int(v.iter().map(|v| v.map(|_| 0)).collect()),
        (_, values) => values,
    }
}

fn owned(value: Typed) -> Cell {
    match value {
        Typed::Str(s) => Cell::Str(s.to_string()),
        Typed::Int(v) => Cell::Int(v),
        Typed::Float(v) => Cell::Float(v),
        Typed::Bool(v) => Cell::Bool(v),
    }
}

/// A text column's string views as one array (polars' own: the text is not copied).
fn views(column: &Column) -> Result<Buffer> {
    let text = column.cast(&DataType::String)?;
    let text = text.str()?.rechunk();
    Ok(Buffer::Views(text.downcast_as_array().clone()))
}

/// Casts a column to a field's kind. Values that fail to cast are problems; nulls stay `None`.
fn cast_column(kind: Kind, column: &Column) -> Result<(Buffer, Vec<RowProblem>)> {
    let dtype = column.dtype();
    let mut problems = Vec::new();
    let wrong = |problems: &mut Vec<RowProblem>, row: usize, got: String| {
        problems.push((
            row,
            Reason::WrongType,
            format!("expected {}, got {got}", kind.expected()),
        ));
    };
    let values = match kind {
        Kind::Key if dtype.is_integer() || dtype == &DataType::String => views(column)?,
        // Text is read from text, numbers and booleans; a list or a struct has no one text.
        Kind::Text
            if dtype == &DataType::String
                || dtype.is_primitive_numeric()
                || dtype == &DataType::Boolean =>
        {
            views(column)?
        }
        // Above 2^63 − 1 a cast to i64 would give null, reported as a missing value.
        Kind::Int if dtype == &DataType::UInt64 => Buffer::Int(
            column
                .u64()?
                .iter()
                .enumerate()
                .map(|(row, v)| match v.map(i64::try_from) {
                    Some(Ok(v)) => Some(v),
                    Some(Err(_)) => {
                        wrong(
                            &mut problems,
                            row,
                            format!(
                                "{}, above the largest integer credit holds (2^63 − 1)",
                                v.unwrap_or_default()
                            ),
                        );
                        None
                    }
                    None => None,
                })
                .collect(),
        ),
        Kind::Int if dtype.is_integer() => {
            Buffer::Int(column.cast(&DataType::Int64)?.i64()?.iter().collect())
        }
        Kind::Int if dtype.is_float() => {
            let c = column.cast(&DataType::Float64)?;
            Buffer::Int(
                c.f64()?
                    .iter()
                    .enumerate()
                    .map(|(row, v)| match v {
                        // As JSONL: whole numbers only, and below 2^53 where f64 is exact.
                        Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(f as i64),
                        Some(f) => {
                            wrong(&mut problems, row, f.to_string());
                            None
                        }
                        None => None,
                    })
                    .collect(),
            )
        }
        Kind::Float if dtype.is_primitive_numeric() => {
            let c = column.cast(&DataType::Float64)?;
            Buffer::Float(
                c.f64()?
                    .iter()
                    .enumerate()
                    .map(|(row, v)| match v {
                        Some(f) if !f.is_finite() => {
                            problems.push((
                                row,
                                Reason::NonFinite,
                                format!("expected a finite number, got {f}"),
                            ));
                            None
                        }
                        other => other,
                    })
                    .collect(),
            )
        }
        Kind::Bool if dtype == &DataType::Boolean => Buffer::Bool(column.bool()?.iter().collect()),
        Kind::Bool if dtype.is_primitive_numeric() => {
            // As JSONL: 0 and 1, given as integers or floats, are booleans.
            let c = column.cast(&DataType::Float64)?;
            Buffer::Bool(
                c.f64()?
                    .iter()
                    .enumerate()
                    .map(|(row, v)| match v {
                        Some(0.0) => Some(false),
                        Some(1.0) => Some(true),
                        Some(f) => {
                            wrong(&mut problems, row, f.to_string());
                            None
                        }
                        None => None,
                    })
                    .collect(),
            )
        }
        _ => {
            let first = (0..column.len())
                .find(|&r| !matches!(column.get(r), Ok(AnyValue::Null)))
                .unwrap_or(0);
            wrong(&mut problems, first, format!("a column of type {dtype}"));
            Buffer::Nulls(kind, column.len())
        }
    };
    Ok((values, problems))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::columns::*;
    use crate::schema::field_index;

    /// Writes `frame` as a Parquet file in a fresh temporary folder, then plans and reads it whole.
    fn read(mut frame: DataFrame) -> (tempfile::TempDir, Result<Block>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.parquet");
        let file = std::fs::File::create(&path).unwrap();
        ParquetWriter::new(file).finish(&mut frame).unwrap();
        let size = std::fs::metadata(&path).unwrap().len();
        let whole = Slice {
            start: 0,
            rows: frame.height(),
            bytes: 0,
        };
        let block =
            plan(&path, 0, size, &ColumnMap::default()).and_then(|p| read_slice(&path, &p, whole));
        (dir, block)
    }

    fn fi(name: &str) -> usize {
        field_index(name).unwrap()
    }

    #[test]
    fn columns_are_cast_to_their_fields() {
        let frame = df!(
            // Integer ids are ids (as their digits), and remembered as numbers.
            "uid" => [7i64, 7],
            "traj_uid" => ["t", "t"],
            // Integral floats are steps; integer rewards are floats.
            "step" => [0.0f64, 1.0],
            "reward" => [0i32, 2],
            // 0/1 integers are booleans.
            "is_action_valid" => [1i64, 0],
            "won" => [Some(false), None],
            "anchor_obs" => ["A", "B"]
        )
        .unwrap();
        let (_dir, block) = read(frame);
        let block = block.unwrap();
        assert!(block.problems.is_empty(), "{:?}", block.problems);
        let rows = &block.rows;
        assert_eq!(rows.len(), 2);
        // Origins are 0-based rows.
        assert_eq!((rows.origin[0].line, rows.origin[1].line), (0, 1));
        assert_eq!(rows.text(fi(GROUP_ID), 1), "7");
        assert!(rows.numbered[fi(GROUP_ID)] && !rows.named[fi(GROUP_ID)]);
        assert_eq!(rows.int(fi(STEP), 1), Some(1));
        assert_eq!(rows.get(fi(REWARD), 1), Some(Typed::Float(2.0)));
        assert_eq!(rows.get(fi(VALID), 0), Some(Typed::Bool(true)));
        assert_eq!(rows.get(fi(VALID), 1), Some(Typed::Bool(false)));
        assert_eq!(rows.get(fi(SUCCESS), 0), Some(Typed::Bool(false)));
        assert_eq!(rows.get(fi(SUCCESS), 1), None);
        assert_eq!(rows.text(fi(OBS), 1), "B");
    }

    /// The same values mean the same in Parquet as in JSONL: 0.0/1.0 floats are booleans (2.5 is
    /// not), and a float step is an integer only below 2^53, where f64 holds it exactly.
    #[test]
    fn float_booleans_and_huge_steps_as_jsonl_reads_them() {
        let frame = df!(
            "uid" => ["g", "g", "g"],
            "traj_uid" => ["t", "t", "t"],
            "step" => [0.0f64, 1.0, 1e20],
            "reward" => [0.0f64, 1.0, 0.0],
            "is_action_valid" => [1.0f64, 0.0, 2.5]
        )
        .unwrap();
        let (_dir, block) = read(frame);
        let block = block.unwrap();
        assert_eq!(block.rows.len(), 2);
        assert_eq!(block.rows.get(fi(VALID), 0), Some(Typed::Bool(true)));
        assert_eq!(block.rows.get(fi(VALID), 1), Some(Typed::Bool(false)));
        // Row 2: the step comes first (field order), and is the one reported.
        let messages: Vec<String> = block.problems.iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(
            messages[0].ends_with(
                "log.parquet:row 2 (step): expected an integer, got 100000000000000000000"
            ),
            "{messages:?}"
        );
    }

    #[test]
    fn bad_values_name_row_and_column() {
        let frame = df!(
            "uid" => ["g", "g", "g", "g", "g"],
            "traj_uid" => ["t", "t", "t", "t", "t"],
            // Row 1: a fractional step.
            "step" => [0.0f64, 1.5, 2.0, 3.0, 4.0],
            // Row 2: NaN; row 3: null (required).
            "reward" => [Some(0.0f64), Some(0.0), Some(f64::NAN), None, Some(1.0)],
            // Row 4: 2 is not a boolean.
            "is_action_valid" => [1i64, 1, 1, 1, 2]
        )
        .unwrap();
        let (_dir, block) = read(frame);
        let block = block.unwrap();
        // Only row 0 is kept; one problem per bad row, in row order.
        assert_eq!(block.rows.len(), 1);
        let got: Vec<(Reason, Option<u64>, Option<String>)> = block
            .problems
            .iter()
            .map(|e| match e {
                Error::Input {
                    location, reason, ..
                } => (*reason, location.line, location.column.clone()),
                other => panic!("{other}"),
            })
            .collect();
        let want = vec![
            (Reason::WrongType, Some(1), Some("step".to_string())),
            (Reason::NonFinite, Some(2), Some("reward".to_string())),
            (Reason::MissingValue, Some(3), Some("reward".to_string())),
            (
                Reason::WrongType,
                Some(4),
                Some("is_action_valid".to_string()),
            ),
        ];
        assert_eq!(got, want);
        let first = block.problems[0].to_string();
        assert!(
            first.ends_with("log.parquet:row 1 (step): expected an integer, got 1.5"),
            "{first}"
        );
    }

    /// Row groups of 3, 1, 2, 30 and 14 rows, read with a budget of about 8 rows a slice: the
    /// small groups share a slice, the large ones are cut, and the rows and their problems come
    /// out as one slice of the whole file gives them.
    #[test]
    fn slices_follow_row_groups_and_read_as_the_whole_file() {
        let n = 50;
        // Row 12: a fractional step (in the 30-row group); row 44: a null reward (in the last).
        let mut step: Vec<f64> = (0..n).map(|r| (r % 4) as f64).collect();
        step[12] = 0.5;
        let frame = df!(
            "uid" => (0..n).map(|r| format!("g{}", r / 8)).collect::<Vec<_>>(),
            "traj_uid" => (0..n).map(|r| format!("t{}", r / 4)).collect::<Vec<_>>(),
            "step" => step,
            "reward" => (0..n).map(|r| Some(r as f64).filter(|_| r != 44)).collect::<Vec<_>>(),
            "anchor_obs" => (0..n)
                .map(|r| format!("observation {r:02} {}", "x".repeat(200)))
                .collect::<Vec<_>>()
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.parquet");
        let file = std::fs::File::create(&path).unwrap();
        let mut writer = ParquetWriter::new(file).batched(frame.schema()).unwrap();
        let groups = [3, 1, 2, 30, 14];
        let mut start = 0;
        for rows in groups {
            let mut group = frame.slice(start as i64, rows);
            writer.write_batch(group.rechunk_mut()).unwrap();
            start += rows;
        }
        writer.finish().unwrap();
        let size = std::fs::metadata(&path).unwrap().len();
        let mut plan = plan(&path, 0, size, &ColumnMap::default()).unwrap();
        let written: Vec<usize> = plan
            .metadata
            .row_groups
            .iter()
            .map(|g| g.num_rows())
            .collect();
        assert_eq!(written, groups);

        let whole = slices(&plan.metadata, &plan.projection, usize::MAX);
        assert_eq!((whole.len(), whole[0].rows), (1, n));
        plan.slices = slices(&plan.metadata, &plan.projection, whole[0].bytes * 8 / n);
        let cuts: Vec<(usize, usize)> = plan.slices.iter().map(|s| (s.start, s.rows)).collect();
        assert_eq!(
            cuts,
            [(0, 6), (6, 7), (13, 8), (21, 7), (28, 8), (36, 7), (43, 7)]
        );

        let read = |slices: &[Slice]| {
            let blocks: Vec<Block> = slices
                .iter()
                .map(|&s| read_slice(&path, &plan, s).unwrap())
                .collect();
            let mut values = Vec::new();
            for rows in blocks.iter().map(|b| &b.rows) {
                for r in 0..rows.len() {
                    let row: Vec<Option<Cell>> = (0..FIELDS.len())
                        .map(|f| rows.get(f, r).map(owned))
                        .collect();
                    values.push((rows.origin[r].line, row));
                }
            }
            let problems: Vec<String> = blocks
                .iter()
                .flat_map(|b| b.problems.iter().map(|e| e.to_string()))
                .collect();
            (values, problems)
        };
        let (values, problems) = read(&plan.slices);
        assert_eq!((values, problems.clone()), read(&whole));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].ends_with("log.parquet:row 12 (step): expected an integer, got 0.5"));
        assert!(problems[1]
            .ends_with("log.parquet:row 44 (reward): `reward` is null; a value is required"));
    }

    /// A log whose text comes in every page layout (`scripts/fixture-pages.py`), read in slices
    /// that cut pages and row groups: each row's text is what polars reads, whether it came from
    /// the pages or, for a column in an encoding read by polars alone, from polars.
    #[test]
    fn text_read_from_pages_is_what_polars_reads() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for version in [1, 2] {
            let path = root.join(format!("fixtures/formats/pages-v{version}.parquet"));
            let size = std::fs::metadata(&path).unwrap().len();
            let mut plan = plan(&path, 0, size, &ColumnMap::default()).unwrap();
            let text_fields = [GROUP_ID, TRAJ_ID, OBS, ACTION, TASK, FEEDBACK];
            let mut read_by_pages = plan.text_columns.clone();
            read_by_pages.sort();
            let mut expected = [
                "action",
                "anchor_obs",
                "env_feedback",
                "task",
                "traj_uid",
                "uid",
            ];
            expected.sort();
            assert_eq!(read_by_pages, expected);
            plan.slices = slices(&plan.metadata, &plan.projection, 16 << 10);
            assert!(plan.slices.len() > 10, "{} slices", plan.slices.len());
            let whole = ParquetReader::new(std::fs::File::open(&path).unwrap())
                .finish()
                .unwrap();
            let columns = [
                "uid",
                "traj_uid",
                "anchor_obs",
                "action",
                "task",
                "env_feedback",
            ];
            let polars: Vec<Vec<Option<String>>> = columns
                .iter()
                .map(|c| {
                    let column = whole.column(c).unwrap().str().unwrap().clone();
                    column.iter().map(|v| v.map(str::to_string)).collect()
                })
                .collect();
            let mut row = 0;
            for &slice in &plan.slices {
                let block = read_slice(&path, &plan, slice).unwrap();
                assert!(block.problems.is_empty());
                for r in 0..block.rows.len() {
                    for (field, want) in text_fields.iter().zip(&polars) {
                        let got = block.rows.get(fi(field), r).map(|v| match v {
                            Typed::Str(s) => s.to_string(),
                            other => panic!("{field}: {other:?}"),
                        });
                        assert_eq!(got, want[row], "v{version} row {row} {field}");
                    }
                    row += 1;
                }
            }
            assert_eq!(row, whole.height());
        }
    }

    #[test]
    fn missing_required_column_is_a_file_error() {
        let frame = df!(
            "uid" => ["g"],
            "traj_uid" => ["t"],
            "step" => [0i64]
        )
        .unwrap();
        let (_dir, block) = read(frame);
        match block.err().unwrap() {
            Error::Input {
                location, reason, ..
            } => {
                assert_eq!(reason, Reason::MissingColumn);
                assert_eq!(location.line, None);
                assert_eq!(location.column.as_deref(), Some(REWARD));
            }
            other => panic!("{other}"),
        }
    }

    #[test]
    fn a_column_of_the_wrong_type_is_reported_at_its_first_value() {
        // A text reward column: reported once, at the first non-null value (row 1).
        let frame = df!(
            "uid" => ["g", "g"],
            "traj_uid" => ["t", "t"],
            "step" => [0i64, 1],
            "reward" => [None, Some("1.0")]
        )
        .unwrap();
        let (_dir, block) = read(frame);
        let block = block.unwrap();
        assert_eq!(block.rows.len(), 0);
        let messages: Vec<String> = block.problems.iter().map(|e| e.to_string()).collect();
        // Row 0's reward is null (missing); row 1's does not cast.
        assert_eq!(messages.len(), 2, "{messages:?}");
        assert!(
            messages[1]
                .contains(":row 1 (reward): expected a finite number, got a column of type str"),
            "{messages:?}"
        );
    }

    #[test]
    fn a_list_of_strings_is_not_text() {
        let obs = Series::new(
            "anchor_obs".into(),
            [
                Series::new("".into(), ["a", "b"]),
                Series::new("".into(), ["c"]),
            ],
        );
        let mut frame = df!(
            "uid" => ["g", "g"],
            "traj_uid" => ["t", "t"],
            "step" => [0i64, 1],
            "reward" => [0.0f64, 1.0]
        )
        .unwrap();
        frame.with_column(obs.into_column()).unwrap();
        let (_dir, block) = read(frame);
        let block = block.unwrap();
        assert_eq!(block.rows.len(), 1);
        let messages: Vec<String> = block.problems.iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(
            messages[0].ends_with(
                "log.parquet:row 0 (anchor_obs): expected a string, got a column of type list[str]"
            ),
            "{messages:?}"
        );
    }

    #[test]
    fn an_unsigned_step_above_the_largest_integer_is_named() {
        let frame = df!(
            "uid" => ["g", "g"],
            "traj_uid" => ["t", "t"],
            "step" => [0u64, u64::MAX],
            "reward" => [0.0f64, 1.0]
        )
        .unwrap();
        let (_dir, block) = read(frame);
        let block = block.unwrap();
        assert_eq!(block.rows.len(), 1);
        let messages: Vec<String> = block.problems.iter().map(|e| e.to_string()).collect();
        assert_eq!(messages.len(), 1, "{messages:?}");
        assert!(
            messages[0].ends_with(
                "log.parquet:row 1 (step): expected an integer, got 18446744073709551615, above the largest integer credit holds (2^63 − 1)"
            ),
            "{messages:?}"
        );
    }
}
