//! Writing results: tables to .parquet/.jsonl/.csv by extension, atomically (a temporary file in
//! the same folder, renamed into place, so nothing is left on error), with the run's metadata
//! (Parquet key-value metadata `credit`, or a `<file>.meta.json` beside JSONL and CSV).
//!
//! Every temporary path is registered while it exists ([`remove_temporaries`] deletes them when
//! the run is interrupted), and a temporary left by a run that was killed outright is removed the
//! next time the same output is written.

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
    let tmp = temporary(path);
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |source| Error::Io {
            path: p,
            cause: source,
        }
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
    forget_temporary(&tmp);
    result
}

/// Temporary paths of this run that exist now.
static TEMPORARIES: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

fn forget_temporary(path: &Path) {
    if let Ok(mut list) = TEMPORARIES.lock() {
        list.retain(|p| p != path);
    }
}

/// Registers a temporary path of this run for [`remove_temporaries`].
pub fn register_temporary(path: &Path) {
    if let Ok(mut list) = TEMPORARIES.lock() {
        list.push(path.to_path_buf());
    }
}

/// Forgets the temporaries at or under `path` (a folder that was moved into place or removed).
pub fn remove_temporaries_under(path: &Path) {
    if let Ok(mut list) = TEMPORARIES.lock() {
        list.retain(|p| !p.starts_with(path));
    }
}

/// Deletes every temporary file or folder of this run (when it is interrupted).
pub fn remove_temporaries() {
    if let Ok(list) = TEMPORARIES.lock() {
        for path in list.iter() {
            let _ = std::fs::remove_file(path).or_else(|_| std::fs::remove_dir_all(path));
        }
    }
}

/// Whether process `pid` is running (unknown outside Linux: assumed running).
fn running(pid: u32) -> bool {
    !Path::new("/proc/self").exists() || Path::new(&format!("/proc/{pid}")).exists()
}

/// A temporary path beside `path` (hidden, named for the target and this process), registered
/// for [`remove_temporaries`]; temporaries of the same target left by runs that no longer exist
/// are removed.
pub fn temporary(path: &Path) -> PathBuf {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("out");
    let prefix = format!(".{name}.");
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let file = entry.file_name();
            let Some(pid) = file
                .to_str()
                .and_then(|f| f.strip_prefix(&prefix))
                .and_then(|f| f.strip_suffix(".tmp").or_else(|| f.strip_suffix(".old")))
                .and_then(|f| f.parse::<u32>().ok())
            else {
                continue;
            };
            if pid != std::process::id() && !running(pid) {
                let stale = entry.path();
                let _ = std::fs::remove_file(&stale).or_else(|_| std::fs::remove_dir_all(&stale));
            }
        }
    }
    let tmp = dir.join(format!("{prefix}{}.tmp", std::process::id()));
    register_temporary(&tmp);
    tmp
}

/// Refuses to write `output` when it is one of the input files (it would replace a log).
pub fn check_not_input(output: &Path, inputs: &[PathBuf]) -> Result<()> {
    let Ok(out) = std::fs::metadata(output) else {
        return Ok(());
    };
    for input in inputs {
        if std::fs::metadata(input).is_ok_and(|m| same_file(&m, &out)) {
            return Err(Error::Config(format!(
                "{}: this is an input log ({}); write the output somewhere else",
                output.display(),
                input.display()
            )));
        }
    }
    Ok(())
}

#[cfg(unix)]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    a.dev() == b.dev() && a.ino() == b.ino()
}

#[cfg(not(unix))]
fn same_file(a: &std::fs::Metadata, b: &std::fs::Metadata) -> bool {
    a.len() == b.len() && a.modified().ok() == b.modified().ok()
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

/// `<file>.meta.json`, beside JSONL and CSV outputs.
pub fn sidecar(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".meta.json");
    PathBuf::from(name)
}

/// The temporary file behind a buffer, shared by the table writer and the Parquet writer it
/// hands a handle to (polars writes a page at a time: unbuffered, that is a system call each).
#[derive(Clone)]
struct Buffered(std::sync::Arc<std::sync::Mutex<std::io::BufWriter<std::fs::File>>>);

impl Buffered {
    fn new(file: std::fs::File) -> Self {
        Buffered(std::sync::Arc::new(std::sync::Mutex::new(
            std::io::BufWriter::with_capacity(1 << 20, file),
        )))
    }

    fn lock(
        &self,
    ) -> std::io::Result<std::sync::MutexGuard<'_, std::io::BufWriter<std::fs::File>>> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("the output writer was poisoned by a panic"))
    }

    /// Writes out the buffer and waits for the disk.
    fn sync(&self) -> std::io::Result<()> {
        let mut file = self.lock()?;
        file.flush()?;
        file.get_ref().sync_all()
    }
}

impl Write for Buffered {
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
    Parquet(Option<Box<polars::io::parquet::write::BatchedWriter<Buffered>>>),
    Jsonl,
    Csv { header: bool },
}

/// A table written frame by frame to a temporary file beside `path`, renamed into place (with its
/// metadata) by [`TableWriter::finish`]; dropped unfinished, it leaves nothing behind.
pub struct TableWriter {
    path: PathBuf,
    tmp: PathBuf,
    file: Option<Buffered>,
    sink: Sink,
    rows: u64,
}

impl TableWriter {
    pub fn create(path: &Path) -> Result<Self> {
        let format = table_format(path)?;
        let tmp = temporary(path);
        let file = std::fs::File::create(&tmp).map_err(|source| Error::Io {
            path: tmp.clone(),
            cause: source,
        })?;
        Ok(TableWriter {
            path: path.to_path_buf(),
            tmp,
            file: Some(Buffered::new(file)),
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
        let file = self.file.as_mut().expect("open until finished");
        match &mut self.sink {
            Sink::Parquet(writer) => {
                if writer.is_none() {
                    *writer = Some(Box::new(
                        ParquetWriter::new(file.clone()).batched(frame.schema())?,
                    ));
                }
                frame.rechunk_mut();
                writer.as_mut().expect("created above").write_batch(frame)?;
            }
            Sink::Jsonl => JsonWriter::new(file)
                .with_json_format(JsonFormat::JsonLines)
                .finish(frame)?,
            Sink::Csv { header } => {
                CsvWriter::new(file).include_header(*header).finish(frame)?;
                *header = false;
            }
        }
        Ok(())
    }

    /// Ends the file with its metadata (Parquet key-value metadata `credit`, or `<file>.meta.json`
    /// for JSONL and CSV) and moves both into place, the metadata first.
    pub fn finish(mut self, metadata: &serde_json::Value) -> Result<()> {
        let result = self.end(metadata);
        if result.is_err() {
            let _ = std::fs::remove_file(&self.tmp);
        }
        forget_temporary(&self.tmp);
        result
    }

    fn end(&mut self, metadata: &serde_json::Value) -> Result<()> {
        let text =
            serde_json::to_string_pretty(metadata).map_err(|e| Error::Config(e.to_string()))?;
        let file = self.file.take().expect("open until finished");
        match &mut self.sink {
            Sink::Parquet(writer) => {
                let writer = match writer.take() {
                    Some(w) => *w,
                    None => ParquetWriter::new(file.clone()).batched(&Schema::default())?,
                };
                let mut inner = writer.get_writer().lock().map_err(|_| {
                    Error::Config("the Parquet writer was poisoned by a panic".into())
                })?;
                let schema_key = polars_parquet::write::schema_to_metadata_key(inner.schema());
                let key_values = vec![
                    schema_key,
                    polars_parquet::write::KeyValue {
                        key: "credit".into(),
                        value: Some(text.clone()),
                    },
                ];
                inner.end(Some(key_values))?;
            }
            Sink::Jsonl | Sink::Csv { .. } => {
                let meta = sidecar(&self.path);
                write_atomic(&meta, |f| {
                    f.write_all(text.as_bytes()).map_err(|source| Error::Io {
                        path: meta.clone(),
                        cause: source,
                    })
                })?;
            }
        }
        let io = |source| Error::Io {
            path: self.tmp.clone(),
            cause: source,
        };
        file.sync().map_err(io)?;
        drop(file);
        std::fs::rename(&self.tmp, &self.path).map_err(|source| Error::Io {
            path: self.path.clone(),
            cause: source,
        })
    }
}

impl Drop for TableWriter {
    fn drop(&mut self) {
        if self.file.is_some() {
            self.file = None;
            let _ = std::fs::remove_file(&self.tmp);
            forget_temporary(&self.tmp);
        }
    }
}

/// A window's output rows: keys and every method's columns ([`advantages_rows`]).
pub struct OutputRows(DataFrame);

impl OutputRows {
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
pub fn advantages_rows(batch: &StepBatch, results: &[Advantages]) -> Result<OutputRows> {
    Ok(OutputRows(advantages_frame(batch, results)?))
}

impl TableWriter {
    /// Appends rows `selection` of `rows`, in that order.
    pub fn write_rows(&mut self, rows: &OutputRows, selection: &[usize]) -> Result<()> {
        let whole =
            selection.len() == rows.len() && selection.iter().enumerate().all(|(i, &r)| i == r);
        let mut part = if whole {
            rows.0.clone()
        } else {
            let idx: Vec<IdxSize> = selection.iter().map(|&r| r as IdxSize).collect();
            rows.0.take(&IdxCa::from_vec("".into(), idx))?
        };
        self.write(&mut part)
    }
}

/// Writes a whole table with its metadata.
pub fn write_table(path: &Path, frame: &mut DataFrame, metadata: &serde_json::Value) -> Result<()> {
    let mut writer = TableWriter::create(path)?;
    writer.write(frame)?;
    writer.finish(metadata)
}

/// Rows that arrive in windows, out of input order when a log's groups interleave, handed on in
/// input order: each window's rows carry their place in the input (`seq`), and a window's
/// watermark says that no later window holds an earlier row.
pub struct InOrder<C> {
    /// (seq of each row, the rows, which rows were handed on).
    pending: Vec<(Vec<u64>, C, Vec<bool>)>,
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
        let n = seq.len();
        self.pending.push((seq, chunk, vec![false; n]));
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
        for (c, (seq, _, taken)) in self.pending.iter().enumerate() {
            for (r, &s) in seq.iter().enumerate() {
                if !taken[r] && s < watermark {
                    ready.push((s, c, r));
                }
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
            take(&self.pending[c].1, &rows)?;
            for &r in &rows {
                self.pending[c].2[r] = true;
            }
        }
        self.pending
            .retain(|(_, _, taken)| !taken.iter().all(|&t| t));
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
    fn write_atomic_renames_the_temporary_into_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        std::fs::write(&path, "old").unwrap();
        let tmp = dir
            .path()
            .join(format!(".out.json.{}.tmp", std::process::id()));
        write_atomic(&path, |f| {
            // While writing, the data goes to the hidden temporary beside the target, and the
            // target still holds the old content.
            assert!(tmp.exists());
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
            f.write_all(b"new")
                .map_err(|e| Error::Config(e.to_string()))
        })
        .unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        // Only the target is left, and the temporary is no longer registered.
        assert_eq!(names(dir.path()), ["out.json"]);
        assert!(!TEMPORARIES.lock().unwrap().contains(&tmp));
    }

    #[test]
    fn write_atomic_leaves_nothing_on_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        let e = write_atomic(&path, |f| {
            f.write_all(b"half").unwrap();
            Err(Error::Param("failed halfway".into()))
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "failed halfway");
        assert!(names(dir.path()).is_empty());
        // An existing target keeps its content.
        std::fs::write(&path, "kept").unwrap();
        assert!(write_atomic(&path, |_| Err(Error::Param("no".into()))).is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "kept");
        assert_eq!(names(dir.path()), ["out.csv"]);
        // A target in a folder that does not exist: an I/O error naming the temporary.
        let missing = dir.path().join("no/such/out.csv");
        match write_atomic(&missing, |_| Ok(())).unwrap_err() {
            Error::Io { path, .. } => assert!(path.starts_with(dir.path().join("no/such"))),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn temporary_is_hidden_beside_the_target_and_clears_stale_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("adv.parquet");
        // 4194305 is above Linux's largest pid (2^22), so no process has it: stale.
        let stale = dir.path().join(".adv.parquet.4194305.tmp");
        let stale_dir = dir.path().join(".adv.parquet.4194305.old");
        // Another target's temporary and an unrelated file are left alone.
        let other = dir.path().join(".other.parquet.4194305.tmp");
        let unrelated = dir.path().join(".adv.parquet.notapid.tmp");
        std::fs::write(&stale, "").unwrap();
        std::fs::create_dir(&stale_dir).unwrap();
        std::fs::write(&other, "").unwrap();
        std::fs::write(&unrelated, "").unwrap();
        let tmp = temporary(&path);
        assert_eq!(
            tmp,
            dir.path()
                .join(format!(".adv.parquet.{}.tmp", std::process::id()))
        );
        if Path::new("/proc/self").exists() {
            assert!(!stale.exists() && !stale_dir.exists());
        }
        assert!(other.exists() && unrelated.exists());
        // Registered until forgotten; remove_temporaries_under forgets a folder's.
        assert!(TEMPORARIES.lock().unwrap().contains(&tmp));
        remove_temporaries_under(dir.path());
        assert!(!TEMPORARIES.lock().unwrap().contains(&tmp));
        // A bare file name: the temporary goes in the current folder.
        let bare = temporary(Path::new("x.csv"));
        assert_eq!(
            bare,
            Path::new(".").join(format!(".x.csv.{}.tmp", std::process::id()))
        );
        forget_temporary(&bare);
    }

    #[test]
    fn table_writer_finishes_or_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let mut frame = df!("a" => [1i64, 2]).unwrap();
        // Dropped unfinished: nothing left.
        let mut w = TableWriter::create(&path).unwrap();
        w.write(&mut frame).unwrap();
        drop(w);
        assert!(names(dir.path()).is_empty());
        // Finished: the table and its sidecar, no temporary.
        let mut w = TableWriter::create(&path).unwrap();
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
        // The same file by another spelling is still the input.
        let other_spelling = dir.path().join(".").join("log.jsonl");
        let e = check_not_input(&other_spelling, std::slice::from_ref(&log)).unwrap_err();
        assert!(e.to_string().contains("this is an input log"), "{e}");
        // A new file, or another existing one, is fine.
        let out = dir.path().join("out.jsonl");
        assert!(check_not_input(&out, std::slice::from_ref(&log)).is_ok());
        std::fs::write(&out, "").unwrap();
        assert!(check_not_input(&out, &[log]).is_ok());
    }
}
