//! Files written whole or not at all.

use crate::error::{Error, Result};
use crate::folder::{self, Claimed};
use crate::temporaries;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// A file being written: bytes go to a hidden temporary beside `target` through a 1 MiB buffer
/// (polars writes a Parquet page at a time: unbuffered, that is a system call each);
/// [`AtomicFile::commit`] syncs it and renames it into place (or, inside a folder output that is
/// written whole, hands it to the folder to rename at its finish). Dropped uncommitted, it leaves
/// nothing behind.
pub struct AtomicFile {
    target: PathBuf,
    /// Where the target lies: claimed before the temporary is made, so that a refused target
    /// (a user's file, a link in a folder output) costs nothing and leaves nothing.
    claimed: Claimed,
    file: Option<BufWriter<tempfile::NamedTempFile>>,
    /// The first write that failed: what a failure is reported as (polars, say, wraps the disk's
    /// "no space left on device" three times over and loses the path).
    failure: Option<std::io::Error>,
}

impl AtomicFile {
    pub fn create(target: &Path) -> Result<Self> {
        let claimed = folder::claimed(target)?;
        let file = temporaries::create(temporaries::parent(target), target)
            .map_err(|cause| Error::write(target, cause))?;
        Ok(AtomicFile {
            target: target.to_path_buf(),
            claimed,
            file: Some(BufWriter::with_capacity(1 << 20, file)),
            failure: None,
        })
    }

    /// The path being written.
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// The temporary's path, for a tool that writes a named file itself (Graphviz, safetensors).
    pub fn temporary(&self) -> &Path {
        self.open().get_ref().path()
    }

    fn open(&self) -> &BufWriter<tempfile::NamedTempFile> {
        self.file.as_ref().expect("open until committed or dropped")
    }

    /// The error to report for a failure while writing: the first I/O error the file itself met,
    /// else `cause`; always naming the target.
    pub fn failed(&mut self, cause: std::io::Error) -> Error {
        Error::write(&self.target, self.failure.take().unwrap_or(cause))
    }

    /// Writes out the buffer and waits for the disk. The temporary is synced by its path: a tool
    /// that wrote it by name may have replaced the file the handle holds.
    fn sync(&mut self) -> Result<()> {
        let file = self.file.as_mut().expect("open until committed or dropped");
        let synced = file
            .flush()
            .and_then(|()| std::fs::File::open(file.get_ref().path())?.sync_all());
        synced.map_err(|cause| self.failed(cause))
    }

    /// Moves the synced temporary into place, or hands it to the folder output written whole
    /// that it lies in.
    fn rename(mut self) -> Result<()> {
        let Claimed::AtFinish(folder) = self.claimed else {
            return self.persist();
        };
        let file = self.file.take().expect("open until committed or dropped");
        let file = file
            .into_inner()
            .map_err(|e| Error::write(&self.target, e.into_error()))?;
        folder::stage(folder, file.into_temp_path(), self.target.clone())
    }

    fn persist(mut self) -> Result<()> {
        let file = self.file.take().expect("open until committed or dropped");
        let file = file
            .into_inner()
            .map_err(|e| Error::write(&self.target, e.into_error()))?;
        temporaries::rename_into_place(file.into_temp_path(), &self.target)
    }

    /// Syncs the file and renames it into place.
    pub fn commit(mut self) -> Result<()> {
        self.sync()?;
        self.rename()
    }
}

impl Write for AtomicFile {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        let file = self.file.as_mut().expect("open until committed or dropped");
        let written = file.write(bytes);
        if let Err(e) = &written {
            self.failure.get_or_insert_with(|| copy(e));
        }
        written
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let file = self.file.as_mut().expect("open until committed or dropped");
        let flushed = file.flush();
        if let Err(e) = &flushed {
            self.failure.get_or_insert_with(|| copy(e));
        }
        flushed
    }
}

/// A copy of an I/O error (which is not `Clone`), keeping the system's error code.
fn copy(error: &std::io::Error) -> std::io::Error {
    match error.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code),
        None => std::io::Error::new(error.kind(), crate::describe(error)),
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if let Some(file) = self.file.take() {
            let temporary = file.get_ref().path().to_path_buf();
            // The temporary deletes itself; an unflushed buffer is dropped with it.
            let (file, _) = file.into_parts();
            drop(file);
            temporaries::forget(&temporary);
        }
    }
}

/// Commits files that belong together (a table and its `.meta.json`): every one is written and
/// synced before any is renamed, so a full disk leaves the old pair, not one of each.
pub fn commit_together(files: Vec<AtomicFile>) -> Result<()> {
    let mut files = files;
    for file in &mut files {
        file.sync()?;
    }
    for file in files {
        file.rename()?;
    }
    Ok(())
}

/// Writes `target` whole or not at all.
pub fn write_file(
    target: &Path,
    write: impl FnOnce(&mut AtomicFile) -> std::io::Result<()>,
) -> Result<()> {
    let mut file = AtomicFile::create(target)?;
    if let Err(cause) = write(&mut file) {
        return Err(file.failed(cause));
    }
    file.commit()
}

/// Writes `target` whole or not at all through a tool that writes a named file: `write` gets the
/// temporary's path.
pub fn write_file_at<E>(
    target: &Path,
    write: impl FnOnce(&Path) -> std::result::Result<(), E>,
) -> std::result::Result<(), E>
where
    E: From<Error>,
{
    let file = AtomicFile::create(target)?;
    {
        // A signal's clean-up waits for the tool: removed before the tool opens it by name, the
        // temporary would be made again after the clean-up.
        let _writing = temporaries::writing_by_name();
        write(file.temporary())?;
    }
    Ok(file.commit()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_file_is_written_whole_or_not_at_all() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.json");
        std::fs::write(&path, "old").unwrap();
        write_file(&path, |f| {
            // While writing, the target still holds the old bytes and a temporary sits beside it.
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "old");
            assert_eq!(names(dir.path()).len(), 2);
            f.write_all(b"new")
        })
        .unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(names(dir.path()), ["out.json"]);
        // A failure names the target and leaves the old bytes.
        let e = write_file(&path, |f| {
            f.write_all(b"half")?;
            Err(std::io::Error::other("failed halfway"))
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("writing {}: failed halfway", path.display())
        );
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "new");
        assert_eq!(names(dir.path()), ["out.json"]);
        // A folder that does not exist: an error naming the target.
        let missing = dir.path().join("no/such/out.csv");
        let e = write_file(&missing, |_| Ok(())).unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("writing {}: ", missing.display())),
            "{e}"
        );
    }

    #[test]
    fn names_of_255_characters_can_be_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a".repeat(250) + ".json");
        write_file(&path, |f| f.write_all(b"{}")).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"{}");
    }

    #[test]
    fn files_that_belong_together_are_renamed_after_both_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let table = dir.path().join("t.csv");
        let meta = dir.path().join("t.csv.meta.json");
        let mut a = AtomicFile::create(&table).unwrap();
        let mut b = AtomicFile::create(&meta).unwrap();
        a.write_all(b"x\n1\n").unwrap();
        b.write_all(b"{}").unwrap();
        commit_together(vec![a, b]).unwrap();
        assert_eq!(names(dir.path()), ["t.csv", "t.csv.meta.json"]);
        // Dropped uncommitted: nothing is left and the old pair stays.
        let mut a = AtomicFile::create(&table).unwrap();
        a.write_all(b"y\n2\n").unwrap();
        drop(a);
        assert_eq!(names(dir.path()), ["t.csv", "t.csv.meta.json"]);
        assert_eq!(std::fs::read_to_string(&table).unwrap(), "x\n1\n");
    }

    #[test]
    fn a_tool_can_write_the_temporary_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("g.svg");
        write_file_at(&target, |tmp| -> Result<()> {
            // As safetensors does: a sibling written and renamed over the temporary.
            let sibling = tmp.with_extension("x");
            std::fs::write(&sibling, "<svg/>").unwrap();
            std::fs::rename(&sibling, tmp).unwrap();
            Ok(())
        })
        .unwrap();
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "<svg/>");
        assert_eq!(names(dir.path()), ["g.svg"]);
    }
}
