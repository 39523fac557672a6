//! JSONL reading: one step row per line, or one episode per line with a `steps` array.
//!
//! Lines are parsed one by one with serde_json rather than polars' NDJSON reader, because every
//! problem must name its line and column (polars reports neither) and `--lenient` must skip single
//! lines. The typed columns then go into polars like every other input.

use super::{
    conflict_message, convert, domain_error, is_non_finite_word, Cell, Compression, RowBuilder,
};
use crate::error::{Error, Location, Reason, Result, Unit};
use crate::schema::{
    columns::*, describe_accepted, ColumnMap, ColumnUse, Field, Resolution, FIELDS,
};
use serde_json::{Map, Value};
use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::path::Path;

pub(super) fn read(
    path: &Path,
    compression: Compression,
    columns: &ColumnMap,
    file: u32,
    rows: &mut RowBuilder,
) -> Result<()> {
    rows.set_unit(Unit::Line);
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let file_handle = std::fs::File::open(path).map_err(io)?;
    // Streamed line by line: logs run to gigabytes, and only the typed columns are kept.
    let mut reader: Box<dyn BufRead> = match compression {
        Compression::None => Box::new(BufReader::with_capacity(1 << 20, file_handle)),
        Compression::Gzip => Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(
            BufReader::new(file_handle),
        ))),
        Compression::Zstd => Box::new(BufReader::new(
            zstd::stream::read::Decoder::new(file_handle).map_err(io)?,
        )),
    };
    let mut uses = BTreeSet::new();
    let mut resolver = Resolver {
        columns,
        cache: HashMap::new(),
        uses: &mut uses,
    };
    let mut buffer = Vec::new();
    let mut index = 0usize;
    loop {
        buffer.clear();
        if reader.read_until(b'\n', &mut buffer).map_err(io)? == 0 {
            break;
        }
        index += 1;
        let line = buffer.strip_suffix(b"\n").unwrap_or(&buffer);
        let line_no = index as u64;
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let at = |column: Option<String>| Location {
            path: path.to_path_buf(),
            line: Some(line_no),
            unit: Unit::Line,
            column,
        };
        let text = match std::str::from_utf8(line) {
            Ok(t) => t,
            Err(e) => {
                let col = e.valid_up_to() + 1;
                rows.reject(Error::input(
                    at(Some(format!("byte {col}"))),
                    Reason::InvalidUtf8,
                    "invalid UTF-8; logs must be UTF-8 text",
                ))?;
                continue;
            }
        };
        let value: Value = match serde_json::from_str(text) {
            Ok(v) => v,
            Err(e) => {
                rows.reject(malformed(text, &e, at))?;
                continue;
            }
        };
        let Value::Object(object) = value else {
            rows.reject(Error::input(
                at(None),
                Reason::WrongType,
                "expected a JSON object (one step or one episode per line)",
            ))?;
            continue;
        };
        match object.get("steps") {
            Some(Value::Array(steps)) => {
                for (k, step) in steps.iter().enumerate() {
                    let Value::Object(step) = step else {
                        rows.reject(Error::input(
                            at(Some(format!("steps[{k}]"))),
                            Reason::WrongType,
                            "expected each element of `steps` to be an object",
                        ))?;
                        continue;
                    };
                    let prefix = format!("steps[{k}].");
                    match resolver.cells(&[(step, prefix.as_str()), (&object, "")]) {
                        Ok(cells) => rows.push(file, line_no, cells),
                        Err((column, reason, message)) => {
                            rows.reject(Error::input(at(Some(column)), reason, message))?
                        }
                    }
                }
            }
            _ => match resolver.cells(&[(&object, "")]) {
                Ok(cells) => rows.push(file, line_no, cells),
                Err((column, reason, message)) => {
                    rows.reject(Error::input(at(Some(column)), reason, message))?
                }
            },
        }
    }
    drop(resolver);
    rows.column_uses.extend(uses);
    Ok(())
}

/// Malformed JSON: name the column (character position), and the field when a Python-style
/// `NaN`/`Infinity` literal is what broke the parse.
fn malformed(text: &str, e: &serde_json::Error, at: impl Fn(Option<String>) -> Location) -> Error {
    let col = e.column();
    let byte = text
        .char_indices()
        .nth(col.saturating_sub(1))
        .map(|(b, _)| b)
        .unwrap_or(text.len());
    let rest = &text[byte.min(text.len())..];
    let word: String = rest
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '+')
        .collect();
    if is_non_finite_word(&word) {
        let key = text[..byte]
            .rsplit_once('"')
            .and_then(|(head, _)| head.rsplit_once('"'))
            .map(|(_, k)| k.to_string());
        if let Some(key) = key {
            return Error::input(
                at(Some(key)),
                Reason::NonFinite,
                format!(
                    "expected a finite number, got {word} (NaN and infinities are not rewards)"
                ),
            );
        }
    }
    Error::input(
        at(Some(format!("{col}"))),
        Reason::MalformedJson,
        format!("malformed JSON: {e}"),
    )
}

struct Resolver<'a> {
    columns: &'a ColumnMap,
    /// Resolutions by row shape (the sorted key list): logs repeat a handful of shapes.
    cache: HashMap<Vec<String>, Resolution>,
    /// Every column use seen, for the report.
    uses: &'a mut BTreeSet<ColumnUse>,
}

impl Resolver<'_> {
    /// Typed cells of one row from one or more objects (a step, then its episode), the first
    /// object's keys taking precedence. `Err` is (column, reason, message).
    fn cells(
        &mut self,
        sources: &[(&Map<String, Value>, &str)],
    ) -> std::result::Result<Vec<Option<Cell>>, (String, Reason, String)> {
        let episode_level = sources.len() > 1;
        let mut shape: Vec<String> = Vec::new();
        for (level, (object, _)) in sources.iter().enumerate() {
            for key in object.keys() {
                if !(episode_level && level == sources.len() - 1 && key == "steps") {
                    shape.push(key.clone());
                }
            }
        }
        shape.sort_unstable();
        shape.dedup();
        if !self.cache.contains_key(&shape) {
            let resolution = self
                .columns
                .resolve(shape.iter().map(String::as_str))
                .map_err(|message| ("".to_string(), Reason::MissingColumn, message))?;
            self.uses.extend(resolution.uses.iter().cloned());
            self.cache.insert(shape.clone(), resolution);
        }
        let resolution = &self.cache[&shape];
        // A column's value and the prefix that locates it (`steps[3].`), the step's own keys first.
        let lookup = |key: &str| -> Option<(&Value, &str)> {
            sources
                .iter()
                .find_map(|(object, prefix)| object.get(key).map(|v| (v, *prefix)))
        };
        let typed = |field: &Field,
                     key: &str|
         -> std::result::Result<Option<Cell>, (String, Reason, String)> {
            let Some((value, prefix)) = lookup(key) else {
                return Ok(None);
            };
            if value.is_null() {
                return Ok(None);
            }
            let located = |reason, message| (format!("{prefix}{key}"), reason, message);
            let cell = convert(field.kind, value).map_err(|(r, m)| located(r, m))?;
            if let Some(message) = domain_error(field, &cell) {
                return Err(located(Reason::WrongType, message));
            }
            Ok(Some(cell))
        };
        let mut cells = Vec::with_capacity(FIELDS.len());
        for (i, field) in FIELDS.iter().enumerate() {
            let Some(feed) = &resolution.feeds[i] else {
                if field.required {
                    return Err((
                        field.name.to_string(),
                        Reason::MissingColumn,
                        missing_message(field, sources[sources.len() - 1].0),
                    ));
                }
                cells.push(None);
                continue;
            };
            let mut cell = typed(field, &feed.column)?;
            let mut from = feed.column.as_str();
            for other in &feed.agree {
                let Some(value) = typed(field, other)? else {
                    continue;
                };
                match &cell {
                    None => {
                        cell = Some(value);
                        from = other;
                    }
                    Some(first) if *first == value => {}
                    Some(first) => {
                        let prefix = lookup(other).map_or("", |(_, p)| p);
                        return Err((
                            format!("{prefix}{other}"),
                            Reason::ConflictingColumns,
                            conflict_message(field, from, first, other, &value),
                        ));
                    }
                }
            }
            if cell.is_none() && field.required {
                let prefix = lookup(&feed.column).map_or("", |(_, p)| p);
                return Err((
                    format!("{prefix}{}", feed.column),
                    Reason::MissingValue,
                    format!("`{}` is null; a value is required", field.name),
                ));
            }
            cells.push(cell);
        }
        Ok(cells)
    }
}

fn missing_message(field: &crate::schema::Field, object: &Map<String, Value>) -> String {
    let has = |k: &str| object.contains_key(k);
    if (field.name == GROUP_ID || field.name == TRAJ_ID)
        && has("input")
        && has("output")
        && has("score")
    {
        return "this looks like verl-agent's rollout dump (`input, output, score, step`), which has no group or \
                trajectory ids: columns `group_id` (or uid, index, group, task_uid) and `traj_id` (or traj_uid, \
                traj_index, episode_id, trajectory_id) are missing. Log `uid` and `traj_uid` from the batch's \
                non_tensor_batch with each row, or map your own id columns with `--schema map.toml`"
            .to_string();
    }
    format!(
        "missing required column {}; map another name onto it with `--schema map.toml`",
        describe_accepted(field)
    )
}
