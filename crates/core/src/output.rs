//! Writing results: tables to .parquet/.jsonl/.csv by extension, atomically (a temporary file in
//! the same folder, renamed into place, so nothing is left on error), with the run's metadata
//! (Parquet key-value metadata `credit`, or a `<file>.meta.json` beside JSONL and CSV).

use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::methods::{Advantages, Values};
use crate::schema::columns::{GROUP_ID, ITERATION, STEP, TRAJ_ID};
use polars::prelude::*;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableFormat {
    Parquet,
    Jsonl,
    Csv,
}

pub fn table_format(path: &Path) -> Result<TableFormat> {
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    Ok(match ext.as_str() {
        "parquet" => TableFormat::Parquet,
        "jsonl" | "ndjson" => TableFormat::Jsonl,
        "csv" => TableFormat::Csv,
        _ => {
            return Err(Error::Config(format!(
                "{}: unknown output type; use .parquet, .jsonl or .csv",
                path.display()
            )))
        }
    })
}

/// Writes to `path` through a temporary file in the same folder.
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> Result<()>,
) -> Result<()> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("out");
    let tmp: PathBuf = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| Error::Io { path: p, source }
    };
    let result = (|| {
        let mut file = std::fs::File::create(&tmp).map_err(io(&tmp))?;
        write(&mut file)?;
        file.flush().map_err(io(&tmp))?;
        file.sync_all().map_err(io(&tmp))?;
        std::fs::rename(&tmp, path).map_err(io(path))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The output of `credit advantages`: keys (`group_id`, `traj_id`, `step`, and `iteration` when
/// present) then every method's columns, one row per batch row in input order.
pub fn advantages_frame(batch: &StepBatch, results: &[Advantages]) -> Result<DataFrame> {
    let mut columns = Vec::new();
    for key in [GROUP_ID, TRAJ_ID, STEP, ITERATION] {
        if let Ok(c) = batch.frame().column(key) {
            columns.push(c.clone());
        }
    }
    for result in results {
        for output in &result.columns {
            let name: PlSmallStr = output.name.as_str().into();
            columns.push(match &output.values {
                Values::F64(v) => Column::new(name, v),
                Values::I64(v) => Column::new(name, v),
            });
        }
    }
    Ok(DataFrame::new(batch.len(), columns)?)
}

/// Writes a table with its metadata.
pub fn write_table(path: &Path, frame: &mut DataFrame, metadata: &serde_json::Value) -> Result<()> {
    let format = table_format(path)?;
    let meta_text =
        serde_json::to_string_pretty(metadata).map_err(|e| Error::Config(e.to_string()))?;
    match format {
        TableFormat::Parquet => write_atomic(path, |file| {
            let kv = KeyValueMetadata::from_static(vec![("credit".to_string(), meta_text.clone())]);
            ParquetWriter::new(file)
                .with_key_value_metadata(Some(kv))
                .finish(frame)?;
            Ok(())
        })?,
        TableFormat::Jsonl => write_atomic(path, |file| {
            JsonWriter::new(file)
                .with_json_format(JsonFormat::JsonLines)
                .finish(frame)?;
            Ok(())
        })?,
        TableFormat::Csv => write_atomic(path, |file| {
            CsvWriter::new(file).finish(frame)?;
            Ok(())
        })?,
    }
    if format != TableFormat::Parquet {
        let mut sidecar = path.as_os_str().to_owned();
        sidecar.push(".meta.json");
        let sidecar = PathBuf::from(sidecar);
        write_atomic(&sidecar, |file| {
            file.write_all(meta_text.as_bytes())
                .map_err(|source| Error::Io {
                    path: sidecar.clone(),
                    source,
                })
        })?;
    }
    Ok(())
}
