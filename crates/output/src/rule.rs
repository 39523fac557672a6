//! The output rule: an output is refused when it is, contains, or lies inside an input.

use crate::error::{Error, Result};
use std::collections::HashSet;
use std::path::{Component, Path, PathBuf};

/// What a run reads: the paths as given (files and folders: logs, models, settings) with their
/// resolved forms, and the device and inode of every input file (so that another name of an input,
/// a hard link, is recognised).
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    paths: Vec<(PathBuf, PathBuf)>,
    files: HashSet<(u64, u64)>,
}

impl Inputs {
    /// The inputs named on the command line or in the settings; paths that do not exist are left
    /// for the reader to report.
    pub fn new<P: AsRef<Path>>(paths: impl IntoIterator<Item = P>) -> Self {
        let mut inputs = Inputs::default();
        for path in paths {
            inputs.add(path.as_ref());
        }
        inputs
    }

    /// Adds an input path (a file or a folder).
    pub fn add(&mut self, path: &Path) {
        if let Ok(meta) = std::fs::metadata(path) {
            self.paths.push((path.to_path_buf(), resolve(path)));
            if meta.is_file() {
                self.files.extend(file_id(&meta));
            }
        }
    }

    /// Adds the files a folder input holds by their (device, inode) identities, as the walk that
    /// found them read them: another name of one is an input too.
    pub fn add_file_ids(&mut self, ids: impl IntoIterator<Item = (u64, u64)>) {
        self.files.extend(ids);
    }

    /// Whether an existing file is an input by another name.
    pub(crate) fn holds(&self, meta: &std::fs::Metadata) -> bool {
        file_id(meta).is_some_and(|id| self.files.contains(&id))
    }

    /// Refuses `output` when it is, contains or lies inside an input; nothing has been written.
    pub fn check(&self, output: &Path) -> Result<()> {
        let resolved = resolve(output);
        let refuse = |why: String| {
            Err(Error::refused(
                output,
                format!("{why}; credit never writes over, into or around its inputs: choose an output elsewhere (nothing was written)"),
            ))
        };
        for (given, input) in &self.paths {
            if &resolved == input {
                return refuse(format!("is the input {}", given.display()));
            }
            if resolved.starts_with(input) {
                return refuse(format!("lies inside the input folder {}", given.display()));
            }
            if input.starts_with(&resolved) {
                return refuse(format!("contains the input {}", given.display()));
            }
        }
        if std::fs::metadata(output).is_ok_and(|meta| self.holds(&meta)) {
            return refuse("is an input by another name (a hard link)".into());
        }
        Ok(())
    }
}

/// A file's identity under any of its names: (device, inode) on unix; none elsewhere, where a
/// path is its own file. The reader keeps it for each input file, and the rule compares outputs
/// with it.
#[cfg(unix)]
pub fn file_id(meta: &std::fs::Metadata) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    Some((meta.dev(), meta.ino()))
}

#[cfg(not(unix))]
pub fn file_id(_: &std::fs::Metadata) -> Option<(u64, u64)> {
    None
}

/// `path` absolute with every symlink resolved, also where its last parts do not exist yet (the
/// longest existing prefix is resolved, the rest appended with `..` applied to it).
pub(crate) fn resolve(path: &Path) -> PathBuf {
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut existing = absolute.as_path();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for part in rest.iter().rev() {
                match part {
                    Component::ParentDir => {
                        out.pop();
                    }
                    Component::CurDir => {}
                    other => out.push(other.as_os_str()),
                }
            }
            return out;
        }
        match (existing.parent(), existing.components().next_back()) {
            (Some(parent), Some(last)) => {
                rest.push(last);
                existing = parent;
            }
            _ => return absolute,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_over_into_or_around_inputs_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        let log = logs.join("run.jsonl");
        std::fs::write(&log, "{}").unwrap();
        let inputs = Inputs::new([&logs]);
        let refused = |p: &Path| inputs.check(p).unwrap_err().to_string();
        assert!(
            refused(&logs).contains("is the input"),
            "{}",
            refused(&logs)
        );
        assert!(refused(&log).contains("lies inside the input folder"));
        assert!(refused(&logs.join("new/deeper")).contains("lies inside"));
        assert!(refused(dir.path()).contains("contains the input"));
        // Another spelling of the same place.
        assert!(refused(&logs.join("../logs/./run.jsonl")).contains("lies inside"));
        // Fresh paths beside the inputs are fine.
        assert!(inputs.check(&dir.path().join("out")).is_ok());
        assert!(inputs.check(&dir.path().join("out.parquet")).is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_and_hard_links_to_inputs_are_inputs() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("run.jsonl");
        std::fs::write(&log, "{}").unwrap();
        let mut inputs = Inputs::new([&log]);
        let link = dir.path().join("link.jsonl");
        std::os::unix::fs::symlink(&log, &link).unwrap();
        assert!(inputs
            .check(&link)
            .unwrap_err()
            .to_string()
            .contains("is the input"));
        let hard = dir.path().join("hard.jsonl");
        std::fs::hard_link(&log, &hard).unwrap();
        assert!(inputs
            .check(&hard)
            .unwrap_err()
            .to_string()
            .contains("hard link"));
        // A folder's files count by inode too.
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        std::fs::write(logs.join("a.jsonl"), "{}").unwrap();
        let other = dir.path().join("a-again.jsonl");
        std::fs::hard_link(logs.join("a.jsonl"), &other).unwrap();
        inputs.add(&logs);
        inputs.add_file_ids(file_id(&std::fs::metadata(logs.join("a.jsonl")).unwrap()));
        assert!(inputs.check(&other).is_err());
        // A symlinked folder whose target holds an input.
        let linked_dir = dir.path().join("linked");
        std::os::unix::fs::symlink(&logs, &linked_dir).unwrap();
        assert!(inputs.check(&linked_dir.join("x.csv")).is_err());
    }
}
