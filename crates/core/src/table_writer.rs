//! The table writer: results as .parquet/.jsonl/.csv by extension, with the run's metadata (Parquet
//! key-value metadata `credit`, or a `<file>.meta.json` beside JSONL and CSV), through the one
//! output layer (`credit_output`: written whole or not at all, never over an input).

use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::methods::{Advantages, Values};
use crate::schema::columns::{GROUP_ID, ITERATION, STEP, TRAJ_ID};
use credit_output::AtomicFile;
pub use credit_output::Inputs;
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

/// The output of `credit advantages`: keys (`group_id`, `traj_id`, `step`, and `iteration` when
/// present) then every method's columns, one row per batch row in input order.
pub fn advantages_frame(batch: &StepBatch, results: Vec<Advantages>) -> Result<DataFrame> {
    let mut columns = Vec::new();
    for key in [GROUP_ID, TRAJ_ID, STEP, ITERATION] {
        if let Ok(c) = batch.frame().column(key) {
            columns.push(c.clone());
        }
    }
    // The values move into the frame's arrays (a copy of each was ~1% of a five-method run).
    for result in results {
        for output in result.columns {
            let name: PlSmallStr = output.name.as_str().into();
            columns.push(match output.values {
                Values::F64(v) => Column::new(name, v),
                Values::I64(v) => Column::new(name, v),
            });
        }
    }
    Ok(DataFrame::new(batch.len(), columns)?)
}

/// `<file>.meta.json`, beside JSONL and CSV outputs.
pub fn sidecar(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".meta.json");
    PathBuf::from(name)
}

/// The file behind the table, shared by [`TableWriter`] and the Parquet writer it hands a handle
/// to.
#[derive(Clone)]
struct Shared(std::sync::Arc<std::sync::Mutex<AtomicFile>>);

impl Shared {
    fn lock(&self) -> std::io::Result<std::sync::MutexGuard<'_, AtomicFile>> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("the output writer was poisoned by a panic"))
    }

    /// The error to report for a failed write: the disk's own (`no space left on device`) where
    /// the file met one, else what the writer said; naming the output.
    fn failed(&self, cause: impl std::fmt::Display) -> Error {
        match self.lock() {
            Ok(mut file) => file.failed(std::io::Error::other(cause.to_string())).into(),
            Err(e) => Error::Config(e.to_string()),
        }
    }

    /// The file, once every other handle is gone.
    fn into_file(self) -> Result<AtomicFile> {
        std::sync::Arc::try_unwrap(self.0)
            .ok()
            .and_then(|m| m.into_inner().ok())
            .ok_or_else(|| Error::Config("the output writer is still in use".into()))
    }
}

impl Write for Shared {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.lock()?.write(bytes)
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.lock()?.write_all(bytes)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.lock()?.flush()
    }
}

enum Sink {
    Parquet(Option<Box<polars::io::parquet::write::BatchedWriter<Shared>>>),
    Jsonl,
    Csv { header: bool },
}

/// A table written frame by frame to a temporary file beside `path`, renamed into place (with its
/// metadata) by [`TableWriter::finish`]; dropped unfinished, it leaves nothing behind.
pub struct TableWriter {
    path: PathBuf,
    file: Shared,
    sink: Sink,
    rows: u64,
}

impl TableWriter {
    /// A table at `path`, refused when `path` (or its `.meta.json`) is, contains or lies inside
    /// one of `inputs`.
    pub fn create(path: &Path, inputs: &Inputs) -> Result<Self> {
        let format = table_format(path)?;
        inputs.check(path)?;
        if format != TableFormat::Parquet {
            let meta = sidecar(path);
            inputs.check(&meta)?;
            // NAME_MAX on Linux and macOS: found only at the end, after all the work, otherwise.
            if meta.file_name().is_some_and(|n| n.len() > 255) {
                return Err(Error::Config(format!(
                    "{}: the name of its metadata file (`.meta.json` added) is longer than 255 bytes: choose a shorter name, or .parquet (metadata inside)",
                    path.display()
                )));
            }
        }
        ours(path, format)?;
        Ok(TableWriter {
            path: path.to_path_buf(),
            file: Shared(std::sync::Arc::new(std::sync::Mutex::new(
                AtomicFile::create(path)?,
            ))),
            sink: match format {
                TableFormat::Parquet => Sink::Parquet(None),
                TableFormat::Jsonl => Sink::Jsonl,
                TableFormat::Csv => Sink::Csv { header: true },
            },
            rows: 0,
        })
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Appends the rows of `frame` (every frame has the same columns).
    pub fn write(&mut self, frame: &mut DataFrame) -> Result<()> {
        self.rows += frame.height() as u64;
        let mut file = self.file.clone();
        let written = match &mut self.sink {
            Sink::Parquet(writer) => (|| {
                if writer.is_none() {
                    *writer = Some(Box::new(
                        ParquetWriter::new(file.clone()).batched(frame.schema())?,
                    ));
                }
                frame.rechunk_mut();
                writer.as_mut().expect("created above").write_batch(frame)
            })(),
            Sink::Jsonl => JsonWriter::new(&mut file)
                .with_json_format(JsonFormat::JsonLines)
                .finish(frame),
            Sink::Csv { header } => {
                let written = CsvWriter::new(&mut file)
                    .include_header(*header)
                    .finish(frame);
                *header = false;
                written
            }
        };
        written.map_err(|e| self.file.failed(e))
    }

    /// Ends the file with its metadata (Parquet key-value metadata `credit`, or `<file>.meta.json`
    /// for JSONL and CSV); both are written and synced before either is renamed into place.
    pub fn finish(mut self, metadata: &serde_json::Value) -> Result<()> {
        let text =
            serde_json::to_string_pretty(metadata).map_err(|e| Error::Config(e.to_string()))?;
        let mut sidecar_file = None;
        match &mut self.sink {
            Sink::Parquet(writer) => {
                let writer = match writer.take() {
                    Some(w) => *w,
                    None => ParquetWriter::new(self.file.clone())
                        .batched(&Schema::default())
                        .map_err(|e| self.file.failed(e))?,
                };
                let ended = (|| {
                    let mut inner = writer.get_writer().lock().map_err(|_| {
                        PolarsError::ComputeError(
                            "the Parquet writer was poisoned by a panic".into(),
                        )
                    })?;
                    let schema_key = polars_parquet::write::schema_to_metadata_key(inner.schema());
                    let key_values = vec![
                        schema_key,
                        polars_parquet::write::KeyValue {
                            key: "credit".into(),
                            value: Some(text.clone()),
                        },
                    ];
                    inner.end(Some(key_values)).map(drop)
                })();
                drop(writer);
                ended.map_err(|e| self.file.failed(e))?;
            }
            Sink::Jsonl | Sink::Csv { .. } => {
                let meta = sidecar(&self.path);
                let mut file = AtomicFile::create(&meta)?;
                if let Err(cause) = file.write_all(text.as_bytes()) {
                    return Err(file.failed(cause).into());
                }
                sidecar_file = Some(file);
            }
        }
        // The metadata is renamed first: a table in place always has its own.
        let table = self.file.into_file()?;
        Ok(credit_output::commit_together(
            sidecar_file.into_iter().chain([table]).collect(),
        )?)
    }
}

/// Refuses a table output that would replace a file credit did not write: an existing `path` must
/// carry credit's metadata (Parquet key-value `credit`; a `.meta.json` beside JSONL and CSV), and a
/// `.meta.json` already beside it must be credit's.
fn ours(path: &Path, format: TableFormat) -> Result<()> {
    let refuse = |what: String| {
        Error::Output(credit_output::Error::Refused {
            path: path.to_path_buf(),
            reason: format!(
                "{what}: credit replaces only its own earlier output; choose another name, or remove it yourself (nothing was written)"
            ),
        })
    };
    let meta = sidecar(path);
    let meta_is_ours = || {
        std::fs::read(&meta).ok().is_some_and(|bytes| {
            serde_json::from_slice::<serde_json::Value>(&bytes)
                .is_ok_and(|v| v.get("credit_version").is_some())
        })
    };
    if format != TableFormat::Parquet && meta.symlink_metadata().is_ok() && !meta_is_ours() {
        return Err(refuse(format!(
            "{} exists and is not credit's metadata",
            meta.display()
        )));
    }
    let Ok(kind) = path.symlink_metadata() else {
        return Ok(());
    };
    if kind.file_type().is_symlink() {
        return Err(refuse("exists as a symbolic link".into()));
    }
    if !kind.is_file() {
        return Err(refuse("exists and is not a file".into()));
    }
    let written_by_credit = match format {
        TableFormat::Parquet => std::fs::File::open(path)
            .ok()
            .and_then(|mut f| polars_parquet::read::read_metadata(&mut f).ok())
            .is_some_and(|m| {
                m.key_value_metadata()
                    .iter()
                    .flatten()
                    .any(|kv| kv.key == "credit")
            }),
        TableFormat::Jsonl | TableFormat::Csv => meta_is_ours(),
    };
    if written_by_credit {
        Ok(())
    } else {
        Err(refuse(match format {
            TableFormat::Parquet => {
                "exists and was not written by credit (no `credit` metadata)".into()
            }
            _ => format!(
                "exists and was not written by credit (no credit {} beside it)",
                meta.file_name()
                    .map_or(String::new(), |n| n.to_string_lossy().into_owned())
            ),
        }))
    }
}

/// A window's output rows: keys and every method's columns ([`advantages_rows`]).
pub struct OutputRows(DataFrame);

impl OutputRows {
    pub fn frame(&self) -> &DataFrame {
        &self.0
    }

    pub fn columns(&self) -> Vec<String> {
        self.0
            .get_column_names()
            .iter()
            .map(|c| c.to_string())
            .collect()
    }

    pub fn len(&self) -> usize {
        self.0.height()
    }

    pub fn is_empty(&self) -> bool {
        self.0.height() == 0
    }
}

/// The output rows of `credit advantages` for one batch (see [`advantages_frame`]).
pub fn advantages_rows(batch: &StepBatch, results: Vec<Advantages>) -> Result<OutputRows> {
    Ok(OutputRows(advantages_frame(batch, results)?))
}

impl TableWriter {
    /// Appends rows `selection` of `rows`, in that order.
    pub fn write_rows(&mut self, rows: &OutputRows, selection: &[usize]) -> Result<()> {
        self.write(&mut take_rows(&rows.0, selection)?)
    }
}

/// Rows `selection` of `frame`, in that order (the frame itself when that is all of it).
pub fn take_rows(frame: &DataFrame, selection: &[usize]) -> Result<DataFrame, Error> {
    use polars::prelude::{IdxCa, IdxSize};
    let whole =
        selection.len() == frame.height() && selection.iter().enumerate().all(|(i, &r)| i == r);
    if whole {
        return Ok(frame.clone());
    }
    let idx: Vec<IdxSize> = selection.iter().map(|&r| r as IdxSize).collect();
    Ok(frame.take(&IdxCa::from_vec("".into(), idx))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names in `dir`, sorted.
    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn table_writer_finishes_or_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let inputs = Inputs::default();
        let mut frame = df!("a" => [1i64, 2]).unwrap();
        // Dropped unfinished: nothing left.
        let mut w = TableWriter::create(&path, &inputs).unwrap();
        w.write(&mut frame).unwrap();
        drop(w);
        assert!(names(dir.path()).is_empty());
        // Finished: the table and its sidecar, no temporary.
        let mut w = TableWriter::create(&path, &inputs).unwrap();
        w.write(&mut frame).unwrap();
        w.write(&mut frame).unwrap();
        assert_eq!(w.rows(), 4);
        w.finish(&serde_json::json!({"k": 1})).unwrap();
        assert_eq!(names(dir.path()), ["t.jsonl", "t.jsonl.meta.json"]);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text.lines().collect::<Vec<_>>(),
            [r#"{"a":1}"#, r#"{"a":2}"#, r#"{"a":1}"#, r#"{"a":2}"#]
        );
        let meta: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(sidecar(&path)).unwrap()).unwrap();
        assert_eq!(meta["k"], 1);
    }

    #[test]
    fn two_writers_of_one_output_do_not_share_a_temporary() {
        // A second pass over the logs starts a new writer while the first is still alive: dropping
        // the first must not take the second's file with it.
        let dir = tempfile::tempdir().unwrap();
        let inputs = Inputs::default();
        for name in ["t.jsonl", "t.parquet", "t.csv"] {
            let path = dir.path().join(name);
            let mut frame = df!("a" => [1i64, 2]).unwrap();
            let mut first = TableWriter::create(&path, &inputs).unwrap();
            first.write(&mut frame).unwrap();
            let mut second = TableWriter::create(&path, &inputs).unwrap();
            drop(first);
            second.write(&mut frame).unwrap();
            second.finish(&serde_json::json!({})).unwrap();
            assert!(path.is_file(), "{name}");
        }
    }

    #[test]
    fn formats_and_inputs() {
        assert_eq!(
            table_format(Path::new("a.PARQUET")).unwrap(),
            TableFormat::Parquet
        );
        assert_eq!(
            table_format(Path::new("a.ndjson")).unwrap(),
            TableFormat::Jsonl
        );
        assert_eq!(table_format(Path::new("a.csv")).unwrap(), TableFormat::Csv);
        assert!(table_format(Path::new("a.txt")).is_err());
        assert_eq!(
            sidecar(Path::new("d/a.csv")),
            Path::new("d/a.csv.meta.json")
        );
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log.jsonl");
        std::fs::write(&log, "{}").unwrap();
        let inputs = Inputs::new([&log]);
        // The same file by another spelling is still the input.
        let other_spelling = dir.path().join(".").join("log.jsonl");
        let e = TableWriter::create(&other_spelling, &inputs).err().unwrap();
        assert!(e.to_string().contains("is the input"), "{e}");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "{}");
        // A new file beside it is fine.
        assert!(TableWriter::create(&dir.path().join("out.jsonl"), &inputs).is_ok());
    }

    #[test]
    fn only_credits_own_tables_are_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let inputs = Inputs::default();
        let metadata = serde_json::json!({"credit_version": "0"});
        for name in ["t.jsonl", "t.parquet", "t.csv"] {
            let path = dir.path().join(name);
            std::fs::write(&path, "user data").unwrap();
            let e = TableWriter::create(&path, &inputs).err().unwrap();
            assert!(e.to_string().contains("was not written by credit"), "{e}");
            std::fs::remove_file(&path).unwrap();
            let mut frame = df!("a" => [1i64]).unwrap();
            let mut w = TableWriter::create(&path, &inputs).unwrap();
            w.write(&mut frame).unwrap();
            w.finish(&metadata).unwrap();
            assert!(TableWriter::create(&path, &inputs).is_ok(), "{name}");
        }
        // A user's `.meta.json` where the sidecar would go is not replaced either.
        let path = dir.path().join("u.csv");
        std::fs::write(sidecar(&path), "{}").unwrap();
        let e = TableWriter::create(&path, &inputs).err().unwrap();
        assert!(e.to_string().contains("is not credit's metadata"), "{e}");
        #[cfg(unix)]
        {
            let link = dir.path().join("link.jsonl");
            std::os::unix::fs::symlink(dir.path().join("t.jsonl"), &link).unwrap();
            let e = TableWriter::create(&link, &inputs).err().unwrap();
            assert!(e.to_string().contains("symbolic link"), "{e}");
        }
    }
}
