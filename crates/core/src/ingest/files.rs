//! Which files to read: paths as given, directories walked recursively in sorted order (walkdir).
//!
//! Only regular files are read: credit reads its input more than once when a log's groups are not
//! where a single pass expects them (see `stream`), which a FIFO or device cannot give. Inside a
//! directory, symbolic links to files are followed and links to directories are not (no loops,
//! no walk of `/`), and a file reached twice (by links, or given twice) is read once.

use crate::error::{Error, Location, Reason, Result};
use crate::schema::ColumnMap;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Compression {
    None,
    Gzip,
    Zstd,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Jsonl(Compression),
    Parquet,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Jsonl(Compression::None) => "jsonl",
            Format::Jsonl(Compression::Gzip) => "jsonl.gz",
            Format::Jsonl(Compression::Zstd) => "jsonl.zst",
            Format::Parquet => "parquet",
        }
    }
}

pub(crate) fn format_of(path: &Path) -> Option<Format> {
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

/// A file to read.
#[derive(Clone, Debug)]
pub(crate) struct Input {
    pub path: PathBuf,
    pub format: Format,
    /// Bytes to read from `start` (the whole file unless a span says otherwise).
    pub size: u64,
    pub start: u64,
    /// 1-based number of the line at `start`.
    pub first_line: u64,
    /// The file's device and inode (unix): what the output rule knows it by under any name.
    pub id: Option<(u64, u64)>,
}

/// The text of a settings file (`--schema`, `--check`, `--config`, `--baseline`), read whole.
/// Anything but a regular file (after links) is refused before it is opened: opening a FIFO
/// waits for a writer, and reading one or a device may never end.
pub fn read_settings(path: &Path) -> Result<String> {
    let io = |cause| Error::Io {
        path: path.to_path_buf(),
        cause,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if let Some(kind) = not_regular(&meta) {
        return Err(whole_file(
            path,
            format!("is not a regular file ({kind}): give the path of a file"),
        ));
    }
    std::fs::read_to_string(path).map_err(io)
}

/// The pairs of a schema file (`--schema map.toml`, [`ColumnMap::parse_toml`]), errors naming
/// the file.
pub fn read_column_map(path: &Path) -> Result<std::collections::BTreeMap<String, String>> {
    let text = read_settings(path)?;
    ColumnMap::parse_toml(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
}

/// What a path that is not a regular file is, for messages; `None` for a regular file.
fn not_regular(meta: &std::fs::Metadata) -> Option<&'static str> {
    #[cfg(unix)]
    use std::os::unix::fs::FileTypeExt;
    let kind = meta.file_type();
    if kind.is_file() {
        return None;
    }
    if kind.is_dir() {
        return Some("a directory");
    }
    #[cfg(unix)]
    {
        if kind.is_fifo() {
            return Some("a FIFO");
        }
        if kind.is_socket() {
            return Some("a socket");
        }
        if kind.is_block_device() || kind.is_char_device() {
            return Some("a device");
        }
    }
    Some("not a file")
}

fn whole_file(path: &Path, message: impl Into<String>) -> Error {
    Error::input(Location::file(path), Reason::UnreadableFile, message)
}

/// The extensions read, for messages about the files that are not.
const READ_EXTENSIONS: &str = ".jsonl, .ndjson, .json or .parquet (JSONL optionally .gz or .zst)";

/// How many skipped files an error names before it says "and N more".
const NAMED_SKIPPED: usize = 3;

/// Takes only the part of each file in `spans` that `spans` names (plain JSONL alone can be read
/// from the middle: a compressed stream or a Parquet file is read whole).
pub(crate) fn apply_spans(
    inputs: &mut [Input],
    spans: &std::collections::BTreeMap<PathBuf, crate::ingest::Span>,
) -> Result<()> {
    for input in inputs {
        let Some(span) = spans.get(&input.path) else {
            continue;
        };
        if input.format != Format::Jsonl(Compression::None) || span.end < span.start {
            return Err(Error::Config(format!(
                "{}: only plain JSONL is read in part",
                input.path.display()
            )));
        }
        input.start = span.start;
        input.size = span.end - span.start;
        input.first_line = span.first_line;
    }
    Ok(())
}

/// The files under `paths`, in order; `notes` says what was skipped and why. Directories that
/// hold files but none of a type credit reads are an error naming those files: a note would be
/// followed by "no step rows found", which does not say why.
pub(crate) fn collect(paths: &[PathBuf], notes: &mut Vec<String>) -> Result<Vec<Input>> {
    let mut out = Vec::new();
    let mut seen: HashSet<(u64, u64)> = HashSet::new();
    let mut other_types: Vec<PathBuf> = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            cause: source,
        })?;
        if meta.is_dir() {
            walk(path, &mut out, &mut seen, &mut other_types, notes)?;
        } else if !meta.is_file() {
            return Err(whole_file(
                path,
                "not a regular file (a FIFO, socket or device): credit reads logs from files",
            ));
        } else {
            let Some(format) = format_of(path) else {
                return Err(whole_file(
                    path,
                    format!("unknown file type: expected {READ_EXTENSIONS}"),
                ));
            };
            add(path, format, &meta, &mut out, &mut seen, notes);
        }
    }
    if out.is_empty() && !other_types.is_empty() {
        let mut named: Vec<String> = other_types
            .iter()
            .take(NAMED_SKIPPED)
            .map(|p| p.display().to_string())
            .collect();
        if other_types.len() > NAMED_SKIPPED {
            named.push(format!("and {} more", other_types.len() - NAMED_SKIPPED));
        }
        let what: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(Error::input(
            Location::file(what.join(", ")),
            Reason::EmptyInput,
            format!(
                "no log files: credit reads {READ_EXTENSIONS}, and the {} file{} found {} not: {}",
                other_types.len(),
                if other_types.len() == 1 { "" } else { "s" },
                if other_types.len() == 1 { "is" } else { "are" },
                named.join(", ")
            ),
        ));
    }
    Ok(out)
}

fn walk(
    dir: &Path,
    out: &mut Vec<Input>,
    seen: &mut HashSet<(u64, u64)>,
    other_types: &mut Vec<PathBuf>,
    notes: &mut Vec<String>,
) -> Result<()> {
    for entry in walkdir::WalkDir::new(dir).sort_by(|a, b| name(a).cmp(name(b))) {
        let entry = entry.map_err(|e| {
            let path = e.path().unwrap_or(dir).to_path_buf();
            Error::Io {
                path,
                cause: e
                    .into_io_error()
                    .unwrap_or_else(|| std::io::Error::other("cannot walk the directory")),
            }
        })?;
        let path = entry.path();
        if entry.file_type().is_dir() {
            continue;
        }
        // A link is followed to a file, never into a directory.
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) => {
                notes.push(format!("{}: skipped ({e})", path.display()));
                continue;
            }
        };
        if meta.is_dir() {
            notes.push(format!(
                "{}: skipped (a link to a directory; give that directory itself to read it)",
                path.display()
            ));
        } else if !meta.is_file() {
            notes.push(format!(
                "{}: skipped (not a regular file: a FIFO, socket or device)",
                path.display()
            ));
        } else if let Some(format) = format_of(path) {
            add(path, format, &meta, out, seen, notes);
        } else {
            notes.push(format!(
                "{}: skipped (not .jsonl, .ndjson, .json, .parquet, optionally .gz/.zst)",
                path.display()
            ));
            other_types.push(path.to_path_buf());
        }
    }
    Ok(())
}

/// A walked entry's name: the bytes of its path after the last separator (walkdir joins the
/// name to its folder's path), so names compare as `file_name()`s do. `file_name()` parses the
/// path into components on every comparison: sorting 10k names took 20 ms that way.
fn name(entry: &walkdir::DirEntry) -> &[u8] {
    let path = entry.path().as_os_str().as_encoded_bytes();
    let start = path
        .iter()
        .rposition(|&b| std::path::is_separator(b as char))
        .map_or(0, |at| at + 1);
    &path[start..]
}

fn add(
    path: &Path,
    format: Format,
    meta: &std::fs::Metadata,
    out: &mut Vec<Input>,
    seen: &mut HashSet<(u64, u64)>,
    notes: &mut Vec<String>,
) {
    // Without an identity (outside unix) every path counts as its own file.
    let id = credit_output::file_id(meta);
    if id.is_some_and(|id| !seen.insert(id)) {
        notes.push(format!(
            "{}: skipped (the same file as one already read, reached by another path)",
            path.display()
        ));
        return;
    }
    out.push(Input {
        path: path.to_path_buf(),
        format,
        size: meta.len(),
        start: 0,
        first_line: 1,
        id,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names compared as bytes after the last separator give the order walkdir's own
    /// `sort_by_file_name` gives: folders depth first, each one's entries by name (case, digits,
    /// spaces, dots, a name that extends another, non-ASCII).
    #[test]
    fn a_folder_is_walked_in_the_order_of_file_names() {
        let dir = tempfile::tempdir().unwrap();
        let names = [
            "b.jsonl",
            "a.jsonl",
            "a b.jsonl",
            "Z.jsonl",
            "a.jsonl.gz",
            "a10.jsonl",
            "a9.jsonl",
            "é.jsonl",
            "e.jsonl",
            "sub/c.jsonl",
            "sub/B.jsonl",
            "sub/deeper/a.jsonl",
            "sub.jsonl",
            "sub0/x.jsonl",
            ".hidden.jsonl",
        ];
        for name in names {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, "{}\n").unwrap();
        }
        let walked: Vec<PathBuf> = collect(&[dir.path().to_path_buf()], &mut Vec::new())
            .unwrap()
            .into_iter()
            .map(|input| input.path)
            .collect();
        let expected: Vec<PathBuf> = walkdir::WalkDir::new(dir.path())
            .sort_by_file_name()
            .into_iter()
            .map(|entry| entry.unwrap().into_path())
            .filter(|path| path.is_file())
            .collect();
        assert_eq!(walked.len(), names.len());
        assert_eq!(walked, expected);
    }
}
