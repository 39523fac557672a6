//! Folder outputs (`report --out DIR`, `graph --out DIR`, `train … --out DIR`) and their manifest.
//!
//! A command opens its folder once ([`OutputDir::open`]); while it is open, every file written
//! inside it through [`crate::AtomicFile`] is claimed: refused when a file of that name exists
//! that credit did not write, or when any part of its path inside the folder is a symbolic link
//! (credit never writes or removes through a link), and listed in the folder's [`MANIFEST`]
//! before it appears. A folder opened whole ([`Commit::Whole`]) receives this run's files only at
//! [`OutputDir::finish`], all together: until then they are hidden temporaries, so an error, a
//! full disk or a signal leaves the earlier output as it was. One run at a time writes a folder:
//! it holds the folder's lock ([`hold`]) from open to finish.

use crate::error::{Error, Result};
use crate::rule::{resolve, Inputs};
use crate::temporaries;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

/// The file in a folder output that lists what credit wrote there.
pub const MANIFEST: &str = ".credit-manifest.json";

#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    /// The command that wrote the folder (`report`, `graph`, `train policy`, …).
    command: String,
    /// What credit wrote, as paths relative to the folder.
    files: BTreeSet<String>,
}

/// What is done with the files an earlier run wrote and this one did not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stale {
    /// Removed: the folder holds one run's output (a report, a checkpoint).
    Remove,
    /// Kept: runs add to the folder (graphs of other groups).
    Keep,
}

/// When the files a run writes into its folder appear there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Commit {
    /// All together at [`OutputDir::finish`]: the folder holds the earlier run's output or this
    /// one's, never a mix (a report, graphs, figures).
    Whole,
    /// Each as it is written: a long run's progress is kept if it stops (a training run's
    /// checkpoints, read back by `--resume`).
    AsWritten,
}

/// A file written whole into a [`Commit::Whole`] folder, synced, waiting for the run to finish.
struct Staged {
    /// `None` once renamed into place.
    temporary: Option<tempfile::TempPath>,
    target: PathBuf,
}

impl Drop for Staged {
    fn drop(&mut self) {
        // An unfinished run's temporary deletes itself.
        if let Some(temporary) = self.temporary.take() {
            let path = temporary.to_path_buf();
            drop(temporary);
            temporaries::forget(&path);
        }
    }
}

struct Open {
    id: u64,
    /// The folder as given, made absolute but with no link followed: a claimed path is found
    /// inside it by its spelling, so that a link inside the folder is seen, not followed.
    given: PathBuf,
    /// The folder, resolved.
    root: PathBuf,
    command: String,
    /// Listed by the earlier run's manifest.
    earlier: BTreeSet<String>,
    /// Written by this run.
    written: BTreeSet<String>,
    inputs: Inputs,
    /// `Some` for a [`Commit::Whole`] folder: this run's files, to be renamed into place at finish.
    staged: Option<Vec<Staged>>,
    /// The topmost folder this run created for the output (the output folder or a folder above
    /// it), as spelled: removed again by [`Open::abandon`] when the run does not finish.
    created: Option<PathBuf>,
    _lock: Hold,
}

impl Open {
    fn write_manifest(&self, files: BTreeSet<String>) -> Result<()> {
        let manifest = Manifest {
            command: self.command.clone(),
            files,
        };
        let path = self.root.join(MANIFEST);
        let text = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| Error::write(&path, std::io::Error::other(e)))?;
        temporaries::write_whole(&path, &text)
    }

    /// An unfinished run's folder: its staged files are deleted, and a folder this run created
    /// is removed again when it holds nothing but credit's manifest, so that a failed or
    /// interrupted run leaves no empty output behind. A folder that was there before, or that
    /// holds anything else (a training run's checkpoints), stays; only empty folders are removed
    /// (`remove_dir`), so nothing but the manifest is ever deleted. Whether it was removed.
    fn abandon(mut self) -> bool {
        self.staged = None;
        let Some(top) = self.created.take() else {
            return false;
        };
        if !entries(&self.root).is_ok_and(|others| others.is_empty()) {
            return false;
        }
        let manifest = self.root.join(MANIFEST);
        if !std::fs::symlink_metadata(&manifest).is_ok_and(|m| m.is_file())
            || std::fs::remove_file(&manifest).is_err()
        {
            return false;
        }
        let mut dir = self.given.as_path();
        while std::fs::remove_dir(dir).is_ok() && dir != top {
            match dir.parent() {
                Some(parent) => dir = parent,
                None => break,
            }
        }
        true
    }

    /// Everything credit wrote there: the earlier run's files and this run's.
    fn listed(&self) -> BTreeSet<String> {
        self.earlier.union(&self.written).cloned().collect()
    }

    /// Where `target` lies inside this folder, as its parts below it; `None` when outside.
    fn parts_of(&self, target: &Path) -> Option<Vec<OsString>> {
        let lexical = std::path::absolute(target).ok()?;
        let relative = match lexical.strip_prefix(&self.given) {
            Ok(relative) => relative.to_path_buf(),
            Err(_) => resolve(target).strip_prefix(&self.root).ok()?.to_path_buf(),
        };
        let mut parts = Vec::new();
        for part in relative.components() {
            match part {
                Component::Normal(name) => parts.push(name.to_os_string()),
                Component::CurDir => {}
                // `..` inside a spelling: where it leads is decided by the resolved path alone.
                _ => {
                    let resolved = resolve(target);
                    let inside = resolved.strip_prefix(&self.root).ok()?;
                    return Some(inside.iter().map(|p| p.to_os_string()).collect());
                }
            }
        }
        Some(parts)
    }
}

/// Refuses a path inside a folder output when a part of it is a symbolic link (or, for the
/// folders above the file, not a folder): `parts` below `root`. The file itself may be missing.
fn no_links(root: &Path, parts: &[OsString], shown: &Path) -> Result<()> {
    let mut at = root.to_path_buf();
    for (i, part) in parts.iter().enumerate() {
        at.push(part);
        let Ok(meta) = std::fs::symlink_metadata(&at) else {
            return Ok(());
        };
        let last = i + 1 == parts.len();
        let inside = at.strip_prefix(root).unwrap_or(&at).display();
        if meta.file_type().is_symlink() {
            let to = std::fs::read_link(&at)
                .map(|t| format!(" (to {})", t.display()))
                .unwrap_or_default();
            let what = if last { "is" } else { "lies under" };
            return Err(Error::refused(
                shown,
                format!(
                    "{what} a symbolic link inside the folder output, {inside}{to}: credit never writes or removes through a link; remove the link or choose another folder (nothing was written)"
                ),
            ));
        }
        if !last && !meta.is_dir() {
            return Err(Error::refused(
                shown,
                format!(
                    "lies under {inside}, which is a file, not a folder: left as it is; choose another folder (nothing was written)"
                ),
            ));
        }
    }
    Ok(())
}

static OPEN: Mutex<Vec<Open>> = Mutex::new(Vec::new());
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn open_folders() -> std::sync::MutexGuard<'static, Vec<Open>> {
    OPEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A folder output, open for writing.
pub struct OutputDir {
    id: u64,
    path: PathBuf,
}

impl OutputDir {
    /// Refuses `path` as `command`'s folder output when it is, contains or lies inside an input,
    /// is a file, holds another command's output, holds files credit did not write, or is being
    /// written by another run; writes nothing (a command checks before its work and opens after
    /// it).
    pub fn check(path: &Path, command: &str, inputs: &Inputs) -> Result<()> {
        earlier(path, command, inputs)?;
        if path.is_dir() {
            hold(path)?;
        }
        Ok(())
    }

    /// Opens `path` for `command`'s output, as [`OutputDir::check`] allows, to receive its
    /// files as `commit` says; a new folder is created, the folder's lock taken, and the
    /// manifest written before any file.
    pub fn open(path: &Path, command: &str, inputs: &Inputs, commit: Commit) -> Result<OutputDir> {
        inputs.check(path)?;
        // Created and listed under one lock: an interrupted run's clean-up sees the folder.
        let mut folders = open_folders();
        let given = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let mut created = None;
        if !path.exists() {
            let mut top = given.as_path();
            while let Some(parent) = top.parent().filter(|p| !p.exists()) {
                top = parent;
            }
            created = Some(top.to_path_buf());
            std::fs::create_dir_all(path).map_err(|cause| Error::write(path, cause))?;
        }
        // What the folder holds is read under its lock: a run that finished meanwhile has
        // written its manifest.
        let lock = hold(path)?;
        let earlier = earlier(path, command, inputs)?.unwrap_or_default();
        let open = Open {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            given,
            root: resolve(path),
            command: command.to_string(),
            earlier,
            written: BTreeSet::new(),
            inputs: inputs.clone(),
            staged: (commit == Commit::Whole).then(Vec::new),
            created,
            _lock: lock,
        };
        open.write_manifest(open.listed())?;
        let id = open.id;
        folders.push(open);
        Ok(OutputDir {
            id,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `relative` inside the folder.
    pub fn join(&self, relative: impl AsRef<Path>) -> PathBuf {
        self.path.join(relative)
    }

    /// Whether an earlier run of the same command wrote this folder.
    pub fn had_output(&self) -> bool {
        open_folders()
            .iter()
            .any(|o| o.id == self.id && !o.earlier.is_empty())
    }

    /// Ends the run: this run's files are renamed into place (a [`Commit::Whole`] folder); with
    /// [`Stale::Remove`], the files the earlier run wrote and this one did not are removed; the
    /// manifest then lists what the folder holds of credit's.
    pub fn finish(self, stale: Stale) -> Result<()> {
        let mut folders = open_folders();
        let Some(at) = folders.iter().position(|o| o.id == self.id) else {
            return Ok(());
        };
        let mut open = folders.remove(at);
        drop(folders);
        // A signal waits for the renames: the folder is left with one run's output, not a mix.
        let _committing = temporaries::committing();
        if let Some(staged) = open.staged.take() {
            // Listed first: a run stopped among the renames leaves a folder credit knows.
            open.write_manifest(open.listed())?;
            for file in staged {
                persist(file)?;
            }
        }
        let files = match stale {
            Stale::Keep => open.listed(),
            Stale::Remove => {
                for name in open.earlier.difference(&open.written) {
                    let parts: Vec<OsString> = name.split('/').map(OsString::from).collect();
                    let path = open.root.join(name);
                    if no_links(&open.root, &parts, &path).is_err() {
                        continue;
                    }
                    let ours = std::fs::symlink_metadata(&path)
                        .is_ok_and(|m| m.is_file() && !open.inputs.holds(&m));
                    if ours {
                        std::fs::remove_file(&path).map_err(|cause| Error::write(&path, cause))?;
                    }
                }
                open.written.clone()
            }
        };
        open.write_manifest(files)
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        // Unfinished: its staged files are deleted, the earlier output stays as it was, and a
        // folder the run created goes again.
        let mut folders = open_folders();
        if let Some(at) = folders.iter().position(|o| o.id == self.id) {
            let open = folders.remove(at);
            drop(folders);
            open.abandon();
        }
    }
}

/// Abandons every folder output still open (a run interrupted by a signal, which ends it
/// without unwinding), once `first` has run with the list locked (no folder opens meanwhile):
/// the folders it created and left holding only their manifest are removed, and said so on
/// stderr. The list stays locked until the exit that follows.
pub(crate) fn abandon_open_after(first: impl FnOnce()) {
    let mut open = open_folders();
    first();
    for folder in open.drain(..) {
        let path = folder.given.clone();
        if folder.abandon() {
            eprintln!(
                "removed {}, which this run created: nothing was written there",
                path.display()
            );
        }
    }
    std::mem::forget(open);
}

fn persist(mut file: Staged) -> Result<()> {
    match file.temporary.take() {
        Some(temporary) => temporaries::rename_into_place(temporary, &file.target),
        None => Ok(()),
    }
}

/// What credit wrote in `path` before, or `None` when there is no folder yet; refused as
/// [`OutputDir::check`] says.
fn earlier(path: &Path, command: &str, inputs: &Inputs) -> Result<Option<BTreeSet<String>>> {
    inputs.check(path)?;
    let refuse = |reason: String| Err(Error::refused(path, reason));
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(cause) => Err(Error::write(path, cause)),
        Ok(meta) if !meta.is_dir() => {
            refuse("is a file, not a folder: choose a new folder for --out".into())
        }
        Ok(_) => match read_manifest(path)? {
            Some(manifest) if manifest.command != command => refuse(format!(
                "holds the output of `credit {}`, not of `credit {command}`: choose another folder (nothing was written)",
                manifest.command
            )),
            Some(manifest) => Ok(Some(manifest.files)),
            None => {
                let others = entries(path).map_err(|cause| Error::write(path, cause))?;
                if others.is_empty() {
                    return Ok(Some(BTreeSet::new()));
                }
                let shown: Vec<&str> = others.iter().take(3).map(String::as_str).collect();
                refuse(format!(
                    "is a folder of other files ({} {}: {}{}); credit writes a folder output only into a new or empty folder, or one holding its own earlier output: choose another folder (nothing was written)",
                    others.len(),
                    if others.len() == 1 { "entry" } else { "entries" },
                    shown.join(", "),
                    if others.len() > shown.len() { ", …" } else { "" }
                ))
            }
        },
    }
}

/// The folder's manifest, if it has one; a manifest that is not credit's is refused.
fn read_manifest(dir: &Path) -> Result<Option<Manifest>> {
    let path = dir.join(MANIFEST);
    // Looked at before it is opened: a FIFO would block the open, a link lead elsewhere.
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(cause) => return Err(Error::write(&path, cause)),
        Ok(meta) if !meta.is_file() => {
            return Err(Error::refused(
                &path,
                format!(
                "is {}, not a manifest credit wrote: choose another folder (nothing was written)",
                kind_of(&meta)
            ),
            ))
        }
        Ok(_) => {}
    }
    let text = std::fs::read(&path).map_err(|cause| Error::write(&path, cause))?;
    let manifest: Manifest = serde_json::from_slice(&text).map_err(|e| {
        Error::refused(
            &path,
            format!("is not a manifest credit wrote ({e}): choose another folder"),
        )
    })?;
    // Names that lead out of the folder would let a crafted manifest remove other files.
    if let Some(bad) = manifest.files.iter().find(|f| !is_plain_relative(f)) {
        return Err(Error::refused(
            &path,
            format!("lists `{bad}`, which is not a path inside the folder: choose another folder"),
        ));
    }
    Ok(Some(manifest))
}

/// What a file that is not a plain file is, for messages: `a FIFO`, `a symbolic link`, ….
pub(crate) fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    let kind = meta.file_type();
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_fifo() {
            return "a FIFO";
        }
        if kind.is_socket() {
            return "a socket";
        }
        if kind.is_block_device() || kind.is_char_device() {
            return "a device";
        }
    }
    if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_dir() {
        "a folder"
    } else if kind.is_file() {
        "a file"
    } else {
        "not a plain file"
    }
}

fn is_plain_relative(name: &str) -> bool {
    let path = Path::new(name);
    !name.is_empty() && path.components().all(|c| matches!(c, Component::Normal(_)))
}

/// The folder's entries other than credit's manifest, sorted.
fn entries(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name != MANIFEST {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// How a claimed file reaches its place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Claimed {
    /// Outside every open folder, or in a [`Commit::AsWritten`] one: renamed into place when
    /// committed.
    Now,
    /// In the [`Commit::Whole`] folder of this id: handed to it when committed ([`stage`]).
    AtFinish(u64),
}

/// Before `target` is written: when it lies in an open folder output, lists it as this run's, or
/// refuses it when a file of that name exists that credit did not write there or a part of its
/// path inside the folder is a link. A [`Commit::AsWritten`] folder's manifest is written at
/// once (the file may appear any time after); a [`Commit::Whole`] folder lists its files at
/// finish, before they appear. ([`crate::AtomicFile`] claims what it writes; a file appended to
/// is claimed before it is opened.)
pub fn claim(target: &Path) -> Result<()> {
    claimed(target).map(drop)
}

pub(crate) fn claimed(target: &Path) -> Result<Claimed> {
    let mut folders = open_folders();
    if folders.is_empty() {
        return Ok(Claimed::Now);
    }
    let Some((open, parts)) = folders
        .iter_mut()
        .filter_map(|o| o.parts_of(target).map(|parts| (o, parts)))
        .max_by_key(|(o, _)| o.root.as_os_str().len())
    else {
        return Ok(Claimed::Now);
    };
    if parts.is_empty() {
        return Err(Error::refused(
            target,
            "is the folder output itself, not a file in it",
        ));
    }
    let name = parts
        .iter()
        .map(|c| c.to_string_lossy())
        .collect::<Vec<_>>()
        .join("/");
    if name == MANIFEST {
        return Ok(Claimed::Now);
    }
    no_links(&open.root, &parts, target)?;
    let existing = std::fs::symlink_metadata(target).ok();
    if existing.as_ref().is_some_and(|m| open.inputs.holds(m)) {
        return Err(Error::refused(
            target,
            "is an input by another name (a hard link): left as it is (nothing was written)",
        ));
    }
    let how = match open.staged {
        Some(_) => Claimed::AtFinish(open.id),
        None => Claimed::Now,
    };
    if open.written.contains(&name) || open.earlier.contains(&name) {
        open.written.insert(name);
        return Ok(how);
    }
    if existing.is_some() {
        return Err(Error::refused(
            target,
            format!("was not written by credit (not listed in {MANIFEST}): left as it is; choose another folder"),
        ));
    }
    open.written.insert(name);
    if how == Claimed::Now {
        open.write_manifest(open.listed())?;
    }
    Ok(how)
}

/// Hands a synced temporary to the open folder `id`, to be renamed to `target` at finish; a
/// file written twice keeps its last version. A folder no longer open has it renamed now.
pub(crate) fn stage(id: u64, temporary: tempfile::TempPath, target: PathBuf) -> Result<()> {
    let file = Staged {
        temporary: Some(temporary),
        target,
    };
    let mut folders = open_folders();
    let Some(staged) = folders
        .iter_mut()
        .find(|o| o.id == id)
        .and_then(|o| o.staged.as_mut())
    else {
        drop(folders);
        return persist(file);
    };
    staged.retain(|s| s.target != file.target);
    staged.push(file);
    Ok(())
}

/// A folder output's lock: held by the run writing the folder, from open to finish (and by
/// `credit watch` between its reports). Within one process it is shared; another process that
/// asks for it is refused, naming the run that holds it. (`flock` on the folder itself: nothing
/// is added to it, and the lock goes with the process however it ends.)
#[derive(Clone)]
pub struct Hold {
    /// The locked folder, open while any holder lives (`None` where the file system has no
    /// locks); closing it releases the lock.
    _folder: Option<Arc<std::fs::File>>,
}

static HELD: Mutex<Vec<(PathBuf, Weak<std::fs::File>)>> = Mutex::new(Vec::new());

/// Takes the lock of the folder `path` (which exists) for this process.
pub fn hold(path: &Path) -> Result<Hold> {
    let resolved = resolve(path);
    let mut held = HELD.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    held.retain(|(_, file)| file.strong_count() > 0);
    if let Some(file) = held
        .iter()
        .find(|(p, _)| *p == resolved)
        .and_then(|(_, file)| file.upgrade())
    {
        return Ok(Hold {
            _folder: Some(file),
        });
    }
    let file = std::fs::File::open(path).map_err(|cause| Error::write(path, cause))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            return Err(Error::refused(
                path,
                format!(
                    "is being written by another credit run ({}): wait for it to end, or choose another folder (nothing was written)",
                    holder(&file).unwrap_or_else(|| "on this or another machine".into())
                ),
            ))
        }
        // A file system without locks: one run at a time is then up to the user.
        Err(std::fs::TryLockError::Error(_)) => return Ok(Hold { _folder: None }),
    }
    let file = Arc::new(file);
    held.push((resolved, Arc::downgrade(&file)));
    Ok(Hold {
        _folder: Some(file),
    })
}

/// The process holding `folder`'s lock and its command line, where this machine's lock table
/// shows it (`/proc/locks`: the folder's device and inode).
#[cfg(target_os = "linux")]
fn holder(folder: &std::fs::File) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = folder.metadata().ok()?;
    let dev = meta.dev();
    let (major, minor) = (
        ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff),
        (dev & 0xff) | ((dev >> 12) & !0xff),
    );
    let id = format!("{major:02x}:{minor:02x}:{}", meta.ino());
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let pid = locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&"FLOCK") && fields.get(5) == Some(&id.as_str()))
            .then(|| fields.get(4)?.parse::<u32>().ok())
            .flatten()
    })?;
    let command = std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .map(|bytes| {
            bytes
                .split(|b| *b == 0)
                .filter(|part| !part.is_empty())
                .map(|part| String::from_utf8_lossy(part).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .filter(|c| !c.is_empty());
    Some(match command {
        Some(command) => format!("pid {pid}: {command}"),
        None => format!("pid {pid}"),
    })
}

#[cfg(not(target_os = "linux"))]
fn holder(_: &std::fs::File) -> Option<String> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write_file;
    use std::io::Write;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = walk(dir, dir);
        v.sort();
        v
    }

    fn walk(root: &Path, dir: &Path) -> Vec<String> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                out.extend(walk(root, &p));
            } else {
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().into_owned());
            }
        }
        out
    }

    fn manifest(dir: &Path) -> Manifest {
        serde_json::from_slice(&std::fs::read(dir.join(MANIFEST)).unwrap()).unwrap()
    }

    #[test]
    fn a_folder_output_replaces_only_what_its_manifest_lists() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("report");
        let inputs = Inputs::default();
        let dir = OutputDir::open(&out, "report", &inputs, Commit::AsWritten).unwrap();
        std::fs::create_dir(dir.join("figures")).unwrap();
        for name in ["report.html", "figures/a.png", "figures/b.png"] {
            write_file(&dir.join(name), |f| f.write_all(name.as_bytes())).unwrap();
        }
        // Listed before the run ends: a crash leaves a folder credit still knows as its own.
        assert_eq!(manifest(&out).files.len(), 3);
        dir.finish(Stale::Remove).unwrap();

        // A user's file added to the folder is never touched.
        std::fs::write(out.join("notes.txt"), "mine").unwrap();
        let dir = OutputDir::open(&out, "report", &inputs, Commit::Whole).unwrap();
        assert!(dir.had_output());
        write_file(&dir.join("report.html"), |f| f.write_all(b"v2")).unwrap();
        write_file(&dir.join("figures/a.png"), |f| f.write_all(b"v2")).unwrap();
        let e = write_file(&dir.join("notes.txt"), |f| f.write_all(b"x")).unwrap_err();
        assert!(e.to_string().contains("was not written by credit"), "{e}");
        dir.finish(Stale::Remove).unwrap();
        assert_eq!(
            names(&out),
            [MANIFEST, "figures/a.png", "notes.txt", "report.html"]
        );
        assert_eq!(
            std::fs::read_to_string(out.join("notes.txt")).unwrap(),
            "mine"
        );
        assert_eq!(
            manifest(&out).files.into_iter().collect::<Vec<_>>(),
            ["figures/a.png", "report.html"]
        );
    }

    #[test]
    fn folders_of_other_files_files_and_other_commands_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let inputs = Inputs::default();
        let theirs = tmp.path().join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::write(theirs.join("a.txt"), "a").unwrap();
        let e = OutputDir::open(&theirs, "report", &inputs, Commit::Whole)
            .err()
            .unwrap();
        assert!(
            e.to_string()
                .contains("is a folder of other files (1 entry: a.txt)"),
            "{e}"
        );
        assert_eq!(names(&theirs), ["a.txt"]);
        let file = tmp.path().join("x.jsonl");
        std::fs::write(&file, "{}").unwrap();
        let e = OutputDir::open(&file, "report", &inputs, Commit::Whole)
            .err()
            .unwrap();
        assert!(e.to_string().contains("is a file"), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "{}");
        let graphs = tmp.path().join("graphs");
        OutputDir::open(&graphs, "graph", &inputs, Commit::Whole)
            .unwrap()
            .finish(Stale::Keep)
            .unwrap();
        let e = OutputDir::open(&graphs, "report", &inputs, Commit::Whole)
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("holds the output of `credit graph`"),
            "{e}"
        );
        // An empty folder is fine, and so is a new one several levels down.
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(OutputDir::open(&empty, "report", &inputs, Commit::Whole).is_ok());
        assert!(
            OutputDir::open(&tmp.path().join("a/b/c"), "report", &inputs, Commit::Whole).is_ok()
        );
    }

    #[test]
    fn a_crafted_manifest_cannot_reach_outside_the_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        std::fs::create_dir(&out).unwrap();
        std::fs::write(tmp.path().join("precious"), "keep").unwrap();
        std::fs::write(
            out.join(MANIFEST),
            r#"{"command": "report", "files": ["../precious"]}"#,
        )
        .unwrap();
        let e = OutputDir::open(&out, "report", &Inputs::default(), Commit::Whole)
            .err()
            .unwrap();
        assert!(
            e.to_string().contains("not a path inside the folder"),
            "{e}"
        );
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("precious")).unwrap(),
            "keep"
        );
    }

    #[test]
    fn an_unfinished_run_removes_the_folders_it_created_and_nothing_else() {
        let tmp = tempfile::tempdir().unwrap();
        let inputs = Inputs::default();
        // A new folder two levels down, dropped unfinished: both levels go again.
        let out = tmp.path().join("a/b");
        let dir = OutputDir::open(&out, "graph", &inputs, Commit::Whole).unwrap();
        write_file(&dir.join("g.dot"), |f| f.write_all(b"digraph {}")).unwrap();
        drop(dir);
        assert!(!tmp.path().join("a").exists());
        // A folder that was there before stays.
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        drop(OutputDir::open(&empty, "graph", &inputs, Commit::Whole).unwrap());
        assert!(empty.is_dir());
        // A new folder that received a file as it was written (a checkpoint) stays with it.
        let ckpt = tmp.path().join("ckpt");
        let dir = OutputDir::open(&ckpt, "train policy", &inputs, Commit::AsWritten).unwrap();
        write_file(&dir.join("step-1.bin"), |f| f.write_all(b"x")).unwrap();
        drop(dir);
        assert_eq!(names(&ckpt), [MANIFEST, "step-1.bin"]);
        // So does one where something else appeared meanwhile.
        let other = tmp.path().join("other");
        let dir = OutputDir::open(&other, "graph", &inputs, Commit::Whole).unwrap();
        std::fs::write(other.join("notes.txt"), "mine").unwrap();
        drop(dir);
        assert_eq!(names(&other), [MANIFEST, "notes.txt"]);
    }

    #[test]
    fn kept_outputs_accumulate() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("g");
        for name in ["a.dot", "b.dot"] {
            let dir = OutputDir::open(&out, "graph", &Inputs::default(), Commit::Whole).unwrap();
            write_file(&dir.join(name), |f| f.write_all(b"digraph {}")).unwrap();
            dir.finish(Stale::Keep).unwrap();
        }
        assert_eq!(names(&out), [MANIFEST, "a.dot", "b.dot"]);
    }

    #[test]
    fn a_folder_written_whole_holds_one_runs_output_until_it_finishes() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("report");
        let inputs = Inputs::default();
        let dir = OutputDir::open(&out, "report", &inputs, Commit::Whole).unwrap();
        std::fs::create_dir(dir.join("figures")).unwrap();
        for name in ["report.html", "figures/a.png"] {
            write_file(&dir.join(name), |f| f.write_all(b"v1")).unwrap();
        }
        dir.finish(Stale::Remove).unwrap();
        assert_eq!(names(&out), [MANIFEST, "figures/a.png", "report.html"]);

        // A second run: its files are temporaries until it finishes, and one that stops (an
        // error, a full disk) leaves the first run's output as it was.
        let dir = OutputDir::open(&out, "report", &inputs, Commit::Whole).unwrap();
        write_file(&dir.join("report.html"), |f| f.write_all(b"v2")).unwrap();
        write_file(&dir.join("figures/b.png"), |f| f.write_all(b"v2")).unwrap();
        assert_eq!(
            std::fs::read_to_string(out.join("report.html")).unwrap(),
            "v1"
        );
        assert!(!out.join("figures/b.png").exists());
        drop(dir);
        assert_eq!(names(&out), [MANIFEST, "figures/a.png", "report.html"]);
        assert_eq!(
            std::fs::read_to_string(out.join("report.html")).unwrap(),
            "v1"
        );

        // A third run finishes: its files, all at once, and the first run's stale one removed.
        let dir = OutputDir::open(&out, "report", &inputs, Commit::Whole).unwrap();
        write_file(&dir.join("report.html"), |f| f.write_all(b"v3")).unwrap();
        write_file(&dir.join("report.html"), |f| f.write_all(b"v3, again")).unwrap();
        write_file(&dir.join("figures/b.png"), |f| f.write_all(b"v3")).unwrap();
        dir.finish(Stale::Remove).unwrap();
        assert_eq!(names(&out), [MANIFEST, "figures/b.png", "report.html"]);
        assert_eq!(
            std::fs::read_to_string(out.join("report.html")).unwrap(),
            "v3, again"
        );
        assert_eq!(
            manifest(&out).files.into_iter().collect::<Vec<_>>(),
            ["figures/b.png", "report.html"]
        );
    }

    #[cfg(unix)]
    #[test]
    fn nothing_is_written_or_removed_through_a_link_inside_the_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("report");
        let outside = tmp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("a.png"), "the user's").unwrap();
        let inputs = Inputs::default();
        let dir = OutputDir::open(&out, "report", &inputs, Commit::Whole).unwrap();
        std::fs::create_dir(dir.join("figures")).unwrap();
        write_file(&dir.join("figures/a.png"), |f| f.write_all(b"ours")).unwrap();
        write_file(&dir.join("g.dot"), |f| f.write_all(b"ours")).unwrap();
        dir.finish(Stale::Remove).unwrap();

        // The subfolder replaced by a link out of the folder, the file by a link to a user's.
        std::fs::remove_dir_all(out.join("figures")).unwrap();
        std::os::unix::fs::symlink("../outside", out.join("figures")).unwrap();
        std::fs::remove_file(out.join("g.dot")).unwrap();
        std::os::unix::fs::symlink("../outside/a.png", out.join("g.dot")).unwrap();
        let dir = OutputDir::open(&out, "report", &inputs, Commit::Whole).unwrap();
        let e = write_file(&dir.join("figures/a.png"), |f| f.write_all(b"new")).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: lies under a symbolic link inside the folder output, figures (to ../outside): credit never writes or removes through a link; remove the link or choose another folder (nothing was written)",
                out.join("figures/a.png").display()
            )
        );
        let e = write_file(&dir.join("g.dot"), |f| f.write_all(b"new")).unwrap_err();
        assert!(
            e.to_string().contains(
                "is a symbolic link inside the folder output, g.dot (to ../outside/a.png)"
            ),
            "{e}"
        );
        // Finishing removes the earlier run's files it did not write again: not through links.
        dir.finish(Stale::Remove).unwrap();
        assert_eq!(names(&outside), ["a.png"]);
        assert_eq!(
            std::fs::read_to_string(outside.join("a.png")).unwrap(),
            "the user's"
        );
        assert!(std::fs::symlink_metadata(out.join("g.dot"))
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[cfg(unix)]
    #[test]
    fn a_manifest_that_is_a_fifo_or_a_link_is_refused_without_opening_it() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        std::fs::create_dir(&out).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(out.join(MANIFEST))
            .status()
            .unwrap();
        assert!(made.success());
        let e = OutputDir::open(&out, "report", &Inputs::default(), Commit::Whole)
            .err()
            .unwrap();
        assert_eq!(
            e.to_string(),
            format!(
                "{}: is a FIFO, not a manifest credit wrote: choose another folder (nothing was written)",
                out.join(MANIFEST).display()
            )
        );
        std::fs::remove_file(out.join(MANIFEST)).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", out.join(MANIFEST)).unwrap();
        let e = OutputDir::check(&out, "report", &Inputs::default()).unwrap_err();
        assert!(
            e.to_string().contains("is a symbolic link, not a manifest"),
            "{e}"
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_folder_another_run_is_writing_is_refused_naming_it() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        std::fs::create_dir(&out).unwrap();
        // Another process holds the folder's lock, as a credit run writing it does.
        // (`-o`: the lock is flock's own, not passed on to `sleep`, so it ends with `flock`.)
        let mut other = std::process::Command::new("flock")
            .arg("-o")
            .arg(&out)
            .args(["sleep", "30"])
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let refused = loop {
            match OutputDir::open(&out, "report", &Inputs::default(), Commit::Whole) {
                Err(e) => break e.to_string(),
                Ok(dir) => {
                    drop(dir);
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the lock was never taken"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
            }
        };
        let checked = OutputDir::check(&out, "report", &Inputs::default()).unwrap_err();
        let _ = other.kill();
        let _ = other.wait();
        let pid = other.id();
        assert!(
            refused.contains("is being written by another credit run (pid ")
                && refused.contains(&format!("pid {pid}: flock -o "))
                && refused.ends_with(
                    "wait for it to end, or choose another folder (nothing was written)"
                ),
            "{refused}"
        );
        assert_eq!(checked.to_string(), refused);
        // Within one process the lock is shared; once the other run ends, it is free.
        let a = OutputDir::open(&out, "report", &Inputs::default(), Commit::Whole).unwrap();
        let b = hold(&out).unwrap();
        drop(b);
        a.finish(Stale::Remove).unwrap();
        assert_eq!(names(&out), [MANIFEST]);
    }
}
