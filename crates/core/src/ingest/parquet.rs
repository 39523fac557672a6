//! Parquet reading through polars: one step row per row. Columns are resolved through the same
//! alias table as JSONL and cast to each field's kind; a value that does not cast is reported with
//! its row (0-based) and column.

use super::{conflict_message, domain_error, Cell, RowBuilder};
use crate::error::{Error, Location, Reason, Result, Unit};
use crate::schema::{describe_accepted, ColumnMap, Kind, FIELDS};
use polars::prelude::*;
use std::path::Path;

pub(super) fn read(
    path: &Path,
    columns: &ColumnMap,
    file: u32,
    rows: &mut RowBuilder,
) -> Result<()> {
    rows.set_unit(Unit::Row);
    let at = |line: Option<u64>, column: Option<&str>| Location {
        path: path.to_path_buf(),
        line,
        unit: Unit::Row,
        column: column.map(str::to_string),
    };
    let handle = std::fs::File::open(path).map_err(|source| Error::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let frame = ParquetReader::new(handle).finish().map_err(|e| {
        Error::input(
            at(None, None),
            Reason::UnreadableFile,
            format!("not a readable Parquet file: {e}"),
        )
    })?;
    let n = frame.height();

    let resolution = columns
        .resolve(frame.get_column_names().iter().map(|c| c.as_str()))
        .map_err(Error::Config)?;
    rows.column_uses.extend(resolution.uses.iter().cloned());
    for (i, field) in FIELDS.iter().enumerate() {
        if field.required && resolution.feeds[i].is_none() {
            let message = format!(
                "missing required column {}; map another name onto it with `--schema map.toml`",
                describe_accepted(field)
            );
            rows.reject(Error::input(
                at(None, Some(field.name)),
                Reason::MissingColumn,
                message,
            ))?;
            return Ok(());
        }
    }

    // Typed values per field, with per-row problems collected as (row, column, reason, message).
    let mut typed: Vec<Option<Vec<Option<Cell>>>> = Vec::with_capacity(FIELDS.len());
    let mut problems: Vec<(usize, String, Reason, String)> = Vec::new();
    for (i, field) in FIELDS.iter().enumerate() {
        let Some(feed) = &resolution.feeds[i] else {
            typed.push(None);
            continue;
        };
        let cast = |name: &str,
                    problems: &mut Vec<(usize, String, Reason, String)>|
         -> Result<Vec<Option<Cell>>> {
            let column = frame.column(name)?;
            let (values, bad) = cast_column(field.kind, column)?;
            for (row, reason, message) in bad {
                problems.push((row, name.to_string(), reason, message));
            }
            for (row, v) in values.iter().enumerate() {
                if let Some(message) = v.as_ref().and_then(|c| domain_error(field, c)) {
                    problems.push((row, name.to_string(), Reason::WrongType, message));
                }
            }
            Ok(values)
        };
        let mut values = cast(&feed.column, &mut problems)?;
        let mut from: Vec<&str> = vec![feed.column.as_str(); n];
        for other in &feed.agree {
            let others = cast(other, &mut problems)?;
            for (row, value) in others.into_iter().enumerate() {
                let Some(value) = value else { continue };
                match &values[row] {
                    None => {
                        values[row] = Some(value);
                        from[row] = other;
                    }
                    Some(first) if *first == value => {}
                    Some(first) => problems.push((
                        row,
                        other.clone(),
                        Reason::ConflictingColumns,
                        conflict_message(field, from[row], first, other, &value),
                    )),
                }
            }
        }
        if field.required {
            for (row, v) in values.iter().enumerate() {
                if v.is_none() {
                    problems.push((
                        row,
                        feed.column.clone(),
                        Reason::MissingValue,
                        format!("`{}` is null; a value is required", field.name),
                    ));
                }
            }
        }
        typed.push(Some(values));
    }
    // The first problem of each row, in row order (a value that does not cast before a null).
    problems.sort_by_key(|p| p.0);
    problems.dedup_by_key(|p| p.0);
    let mut bad_rows = vec![false; n];
    for (row, column, reason, message) in problems {
        rows.reject(Error::input(
            at(Some(row as u64), Some(&column)),
            reason,
            message,
        ))?;
        bad_rows[row] = true;
    }
    for row in (0..n).filter(|&r| !bad_rows[r]) {
        let cells = typed
            .iter_mut()
            .map(|t| t.as_mut().and_then(|v| v[row].take()))
            .collect();
        rows.push(file, row as u64, cells);
    }
    Ok(())
}

type Problems = Vec<(usize, Reason, String)>;

/// Casts a column to a field's kind. Values that fail to cast are problems; nulls stay `None`.
fn cast_column(kind: Kind, column: &Column) -> Result<(Vec<Option<Cell>>, Problems)> {
    let dtype = column.dtype();
    let mut problems = Problems::new();
    let wrong = |problems: &mut Problems, row: usize, got: String| {
        problems.push((
            row,
            Reason::WrongType,
            format!("expected {}, got {got}", kind.expected()),
        ));
    };
    let values: Vec<Option<Cell>> = match kind {
        Kind::Key if dtype.is_integer() || dtype == &DataType::String => {
            let c = column.cast(&DataType::String)?;
            c.str()?
                .iter()
                .map(|v| v.map(|s| Cell::Str(s.to_string())))
                .collect()
        }
        Kind::Text => {
            let c = column.cast(&DataType::String)?;
            c.str()?
                .iter()
                .map(|v| v.map(|s| Cell::Str(s.to_string())))
                .collect()
        }
        Kind::Int if dtype.is_integer() => {
            let c = column.cast(&DataType::Int64)?;
            c.i64()?.iter().map(|v| v.map(Cell::Int)).collect()
        }
        Kind::Int if dtype.is_float() => {
            let c = column.cast(&DataType::Float64)?;
            c.f64()?
                .iter()
                .enumerate()
                .map(|(row, v)| match v {
                    Some(f) if f.fract() == 0.0 => Some(Cell::Int(f as i64)),
                    Some(f) => {
                        wrong(&mut problems, row, f.to_string());
                        None
                    }
                    None => None,
                })
                .collect()
        }
        Kind::Float if dtype.is_primitive_numeric() => {
            let c = column.cast(&DataType::Float64)?;
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
                    other => other.map(Cell::Float),
                })
                .collect()
        }
        Kind::Bool if dtype == &DataType::Boolean => {
            column.bool()?.iter().map(|v| v.map(Cell::Bool)).collect()
        }
        Kind::Bool if dtype.is_integer() => {
            let c = column.cast(&DataType::Int64)?;
            c.i64()?
                .iter()
                .enumerate()
                .map(|(row, v)| match v {
                    Some(0) => Some(Cell::Bool(false)),
                    Some(1) => Some(Cell::Bool(true)),
                    Some(x) => {
                        wrong(&mut problems, row, x.to_string());
                        None
                    }
                    None => None,
                })
                .collect()
        }
        _ => {
            let first = (0..column.len())
                .find(|&r| !matches!(column.get(r), Ok(AnyValue::Null)))
                .unwrap_or(0);
            wrong(&mut problems, first, format!("a column of type {dtype}"));
            vec![None; column.len()]
        }
    };
    Ok((values, problems))
}
