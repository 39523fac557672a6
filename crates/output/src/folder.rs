//! Folder outputs (`report --out DIR`, `graph --out DIR`, `train … --out DIR`) and their manifest.
//!
//! A command opens its folder once ([`OutputDir::open`]); while it is open, every file written
//! inside it through [`crate::AtomicFile`] is claimed: listed in the folder's [`MANIFEST`] before
//! it appears, and refused when a file of that name exists that credit did not write.

use crate::atomic::AtomicFile;
use crate::error::{Error, Result};
use crate::rule::{resolve, Inputs};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::Mutex;

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

struct Open {
    id: u64,
    /// The folder, resolved (what claimed paths are matched against).
    root: PathBuf,
    command: String,
    /// Listed by the earlier run's manifest.
    earlier: BTreeSet<String>,
    /// Written by this run.
    written: BTreeSet<String>,
    inputs: Inputs,
}

impl Open {
    fn write_manifest(&self, files: BTreeSet<String>) -> Result<()> {
        let manifest = Manifest {
            command: self.command.clone(),
            files,
        };
        let path = self.root.join(MANIFEST);
        let mut file = AtomicFile::create(&path)?;
        let text = serde_json::to_vec_pretty(&manifest).map_err(std::io::Error::other);
        if let Err(cause) = text.and_then(|t| file.write_all(&t)) {
            return Err(file.failed(cause));
        }
        file.commit_manifest()
    }

    /// Everything credit wrote there: the earlier run's files and this run's.
    fn listed(&self) -> BTreeSet<String> {
        self.earlier.union(&self.written).cloned().collect()
    }
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
    /// is a file, holds another command's output, or holds files credit did not write; writes
    /// nothing (a command checks before its work and opens after it).
    pub fn check(path: &Path, command: &str, inputs: &Inputs) -> Result<()> {
        earlier(path, command, inputs).map(drop)
    }

    /// Opens `path` for `command`'s output, as [`OutputDir::check`] allows; a new folder is
    /// created, and the manifest is written before any file.
    pub fn open(path: &Path, command: &str, inputs: &Inputs) -> Result<OutputDir> {
        let earlier = match earlier(path, command, inputs)? {
            Some(files) => files,
            None => {
                std::fs::create_dir_all(path).map_err(|cause| Error::write(path, cause))?;
                BTreeSet::new()
            }
        };
        let open = Open {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            root: resolve(path),
            command: command.to_string(),
            earlier,
            written: BTreeSet::new(),
            inputs: inputs.clone(),
        };
        open.write_manifest(open.listed())?;
        let id = open.id;
        open_folders().push(open);
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

    /// Ends the run: with [`Stale::Remove`], the files the earlier run wrote and this one did not
    /// are removed; the manifest then lists what the folder holds of credit's.
    pub fn finish(self, stale: Stale) -> Result<()> {
        let mut folders = open_folders();
        let Some(at) = folders.iter().position(|o| o.id == self.id) else {
            return Ok(());
        };
        let open = folders.remove(at);
        drop(folders);
        let files = match stale {
            Stale::Keep => open.listed(),
            Stale::Remove => {
                for name in open.earlier.difference(&open.written) {
                    let path = open.root.join(name);
                    let ours = std::fs::symlink_metadata(&path)
                        .is_ok_and(|m| !m.is_dir() && !open.inputs.holds(&m));
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
        open_folders().retain(|o| o.id != self.id);
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
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(cause) => return Err(Error::write(&path, cause)),
    };
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

/// Before `target` appears: when it lies in an open folder output, lists it in the folder's
/// manifest, or refuses it when a file of that name exists that credit did not write there.
/// ([`crate::AtomicFile`] claims what it writes; a file appended to is claimed before it is
/// opened.)
pub fn claim(target: &Path) -> Result<()> {
    let mut folders = open_folders();
    if folders.is_empty() {
        return Ok(());
    }
    let resolved = resolve(target);
    let Some(open) = folders
        .iter_mut()
        .filter(|o| resolved.starts_with(&o.root))
        .max_by_key(|o| o.root.as_os_str().len())
    else {
        return Ok(());
    };
    let Ok(relative) = resolved.strip_prefix(&open.root) else {
        return Ok(());
    };
    let name = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/");
    if name == MANIFEST {
        return Ok(());
    }
    let existing = std::fs::symlink_metadata(target).ok();
    if existing.as_ref().is_some_and(|m| open.inputs.holds(m)) {
        return Err(Error::refused(
            target,
            "is an input by another name (a hard link): left as it is (nothing was written)",
        ));
    }
    if open.written.contains(&name) || open.earlier.contains(&name) {
        open.written.insert(name);
        return Ok(());
    }
    if existing.is_some() {
        return Err(Error::refused(
            target,
            format!("was not written by credit (not listed in {MANIFEST}): left as it is; choose another folder"),
        ));
    }
    open.written.insert(name);
    open.write_manifest(open.listed())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::write_file;

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
        let dir = OutputDir::open(&out, "report", &inputs).unwrap();
        std::fs::create_dir(dir.join("figures")).unwrap();
        for name in ["report.html", "figures/a.png", "figures/b.png"] {
            write_file(&dir.join(name), |f| f.write_all(name.as_bytes())).unwrap();
        }
        // Listed before the run ends: a crash leaves a folder credit still knows as its own.
        assert_eq!(manifest(&out).files.len(), 3);
        dir.finish(Stale::Remove).unwrap();

        // A user's file added to the folder is never touched.
        std::fs::write(out.join("notes.txt"), "mine").unwrap();
        let dir = OutputDir::open(&out, "report", &inputs).unwrap();
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
        let e = OutputDir::open(&theirs, "report", &inputs).err().unwrap();
        assert!(
            e.to_string()
                .contains("is a folder of other files (1 entry: a.txt)"),
            "{e}"
        );
        assert_eq!(names(&theirs), ["a.txt"]);
        let file = tmp.path().join("x.jsonl");
        std::fs::write(&file, "{}").unwrap();
        let e = OutputDir::open(&file, "report", &inputs).err().unwrap();
        assert!(e.to_string().contains("is a file"), "{e}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "{}");
        let graphs = tmp.path().join("graphs");
        OutputDir::open(&graphs, "graph", &inputs)
            .unwrap()
            .finish(Stale::Keep)
            .unwrap();
        let e = OutputDir::open(&graphs, "report", &inputs).err().unwrap();
        assert!(
            e.to_string().contains("holds the output of `credit graph`"),
            "{e}"
        );
        // An empty folder is fine, and so is a new one several levels down.
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert!(OutputDir::open(&empty, "report", &inputs).is_ok());
        assert!(OutputDir::open(&tmp.path().join("a/b/c"), "report", &inputs).is_ok());
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
        let e = OutputDir::open(&out, "report", &Inputs::default())
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
    fn kept_outputs_accumulate() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("g");
        for name in ["a.dot", "b.dot"] {
            let dir = OutputDir::open(&out, "graph", &Inputs::default()).unwrap();
            write_file(&dir.join(name), |f| f.write_all(b"digraph {}")).unwrap();
            dir.finish(Stale::Keep).unwrap();
        }
        assert_eq!(names(&out), [MANIFEST, "a.dot", "b.dot"]);
    }
}
