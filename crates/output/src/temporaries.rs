//! The hidden temporaries of this run: created beside their targets, registered while they exist
//! so that [`remove_all_before_exit`] can delete them when the run is interrupted (SIGINT, SIGTERM),
//! and cleared from a folder when a run that was killed outright (SIGKILL) left some.
//!
//! A temporary's name says which run made it: `.credit-PID-MACHINE-XXXXXX.tmp`, where MACHINE
//! tags the space its pid means something in (this boot of this kernel, this pid namespace).
//! Another run's temporary is removed only when it is provably dead: made in this same space by
//! a pid that no longer runs. A run in another container or on another host sharing the disk is
//! never judged by this machine's processes, and a file that merely looks like a temporary is not
//! credit's to remove.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

const PREFIX: &str = ".credit-";

/// `None` once an interrupted run has removed them ([`remove_all_before_exit`]).
static TEMPORARIES: Mutex<Option<Vec<PathBuf>>> = Mutex::new(Some(Vec::new()));
/// Folders already cleared of stale temporaries by this run (a `graph --all` writes thousands of
/// files into one folder: clear it once, not once per file).
static CLEARED: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// A new temporary file in `dir`: `.credit-PID-MACHINE-XXXXXX.tmp`, plus the target's extension
/// when it has a short one (plotters picks the image format from the name).
pub(crate) fn create(dir: &Path, target: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    clear_stale(dir);
    let extension = target
        .extension()
        .and_then(|e| e.to_str())
        .filter(|e| e.len() <= 8 && e.chars().all(|c| c.is_ascii_alphanumeric()))
        .map_or(String::new(), |e| format!(".{e}"));
    let (prefix, suffix) = (
        format!(
            "{PREFIX}{}-{}-",
            std::process::id(),
            machine().unwrap_or("0")
        ),
        format!(".tmp{extension}"),
    );
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(&suffix).rand_bytes(6);
    // An output is the user's file like any other: 0666 less the umask, not a temporary's 0600.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    // Made and listed under one lock: an interrupted run's clean-up sees every temporary that
    // exists, and none is made after it.
    let mut guard = temporaries();
    let Some(list) = guard.as_mut() else {
        // The run is ending on a signal: this thread waits for the exit.
        drop(guard);
        loop {
            std::thread::park();
        }
    };
    let file = builder.tempfile_in(dir)?;
    list.push(file.path().to_path_buf());
    Ok(file)
}

/// The folder a path is written in (`.` for a bare file name).
pub(crate) fn parent(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

/// Writes `bytes` to `target` whole or not at all: a temporary beside it, synced, renamed into
/// place. For a folder's manifest, which lists the files claimed in the folder and so is not
/// claimed itself ([`crate::AtomicFile`] claims every file it writes).
pub(crate) fn write_whole(target: &Path, bytes: &[u8]) -> crate::Result<()> {
    let failed = |cause| crate::Error::write(target, cause);
    let mut file = create(parent(target), target).map_err(failed)?;
    let written =
        std::io::Write::write_all(&mut file, bytes).and_then(|()| file.as_file().sync_all());
    if let Err(cause) = written {
        let path = file.path().to_path_buf();
        drop(file);
        forget(&path);
        return Err(failed(cause));
    }
    rename_into_place(file.into_temp_path(), target)
}

/// Renames a synced temporary of this run to `target` and forgets it (renamed or, on an error,
/// deleted as the temporary drops).
pub(crate) fn rename_into_place(temporary: tempfile::TempPath, target: &Path) -> crate::Result<()> {
    let path = temporary.to_path_buf();
    let renamed = temporary
        .persist(target)
        .map_err(|e| crate::Error::write(target, e.error));
    forget(&path);
    renamed
}

/// Forgets a temporary that was renamed into place or removed.
pub(crate) fn forget(path: &Path) {
    if let Some(list) = temporaries().as_mut() {
        list.retain(|p| p != path);
    }
}

fn temporaries() -> std::sync::MutexGuard<'static, Option<Vec<PathBuf>>> {
    TEMPORARIES
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Taken while a folder output's files are renamed into place: [`remove_all_before_exit`] waits for
/// it, so a signal ends the run before the renames or after them, never among them.
static COMMITTING: Mutex<()> = Mutex::new(());

pub(crate) fn committing() -> std::sync::MutexGuard<'static, ()> {
    COMMITTING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Held (shared) while a tool writes a temporary by its name ([`crate::write_file_at`]).
static WRITING_BY_NAME: RwLock<()> = RwLock::new(());

pub(crate) fn writing_by_name() -> std::sync::RwLockReadGuard<'static, ()> {
    WRITING_BY_NAME
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Deletes every temporary file of this run (when it is interrupted), once a folder output being
/// committed is whole and the tools writing temporaries by name are done. Until the process
/// exits, no thread makes another temporary, renames one into place or hands one to a tool (the
/// locks are kept).
pub(crate) fn remove_all_before_exit() {
    std::mem::forget(committing());
    std::mem::forget(
        WRITING_BY_NAME
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()),
    );
    for path in temporaries().take().into_iter().flatten() {
        let _ = std::fs::remove_file(path);
    }
}

/// This machine's tag (8 hex digits): a hash of the kernel's boot id and this process's pid
/// namespace, read once. `None` where either cannot be read (outside Linux): no temporary of
/// another run is then ever removed.
fn machine() -> Option<&'static str> {
    static TAG: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    TAG.get_or_init(|| {
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
        let namespace = std::fs::read_link("/proc/self/ns/pid").ok()?;
        // FNV-1a: stable across builds and versions of credit, unlike std's hasher.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in boot
            .trim()
            .bytes()
            .chain([0])
            .chain(namespace.as_os_str().as_encoded_bytes().iter().copied())
        {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        Some(format!("{:08x}", (hash >> 32) ^ (hash & 0xffff_ffff)))
    })
    .as_deref()
}

/// The process and machine that made a temporary of credit's naming, if `name` is one.
fn owner(name: &str) -> Option<(u32, &str)> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, rest) = rest.split_once('-')?;
    let (tag, rest) = rest.split_once('-')?;
    rest.contains(".tmp").then_some(())?;
    (tag.len() == 8 && tag.bytes().all(|b| b.is_ascii_hexdigit())).then_some(())?;
    Some((pid.parse().ok()?, tag))
}

/// Whether process `pid` of this machine's pid namespace is running.
fn running(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Whether the temporary named `name` was made by a run of this machine that has ended.
fn dead(name: &str) -> bool {
    let Some(machine) = machine() else {
        return false;
    };
    owner(name)
        .is_some_and(|(pid, tag)| tag == machine && pid != std::process::id() && !running(pid))
}

/// Removes the temporaries in `dir` of credit runs that no longer exist.
fn clear_stale(dir: &Path) {
    let Ok(mut cleared) = CLEARED.lock() else {
        return;
    };
    if !cleared
        .get_or_insert_with(HashSet::new)
        .insert(dir.to_path_buf())
    {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let stale = name.to_str().is_some_and(dead);
        if stale && entry.file_type().is_ok_and(|t| t.is_file()) {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporaries_are_short_hidden_and_keep_the_extension() {
        let dir = tempfile::tempdir().unwrap();
        let long = "x".repeat(251) + ".png";
        let file = create(dir.path(), Path::new(&long)).unwrap();
        let name = file
            .path()
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let machine = machine().expect("Linux: a boot id and a pid namespace");
        assert!(
            name.starts_with(&format!(".credit-{}-{machine}-", std::process::id())),
            "{name}"
        );
        assert!(name.ends_with(".tmp.png") && name.len() < 48, "{name}");
        assert_eq!(owner(&name), Some((std::process::id(), machine)));
        let listed = |path: &Path| temporaries().as_ref().unwrap().iter().any(|p| p == path);
        assert!(listed(file.path()));
        let path = file.path().to_path_buf();
        forget(&path);
        assert!(!listed(&path));
    }

    #[test]
    fn only_temporaries_of_dead_runs_of_this_machine_are_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let machine = machine().expect("Linux: a boot id and a pid namespace");
        let other = if machine == "00000000" {
            "00000001"
        } else {
            "00000000"
        };
        // 4194305 is above Linux's largest pid (2^22): no process has it.
        let stale = dir
            .path()
            .join(format!(".credit-4194305-{machine}-abcdef.tmp"));
        let stale_png = dir
            .path()
            .join(format!(".credit-4194305-{machine}-abcdef.tmp.png"));
        let kept = [
            // Another container's or host's run (its pid says nothing here), live or not.
            dir.path()
                .join(format!(".credit-4194305-{other}-abcdef.tmp")),
            // A live run of this machine (this very process, as another run would be).
            dir.path().join(format!(".credit-1-{machine}-abcdef.tmp")),
            // Earlier versions' names, which say no machine, and a user's look-alikes.
            dir.path().join(".credit-4194305-abcdef.tmp"),
            dir.path().join(".credit-notapid-abcdef.tmp"),
            dir.path().join(".credit-4194305.txt"),
            dir.path().join("credit-4194305-abcdef.tmp"),
        ];
        for path in kept.iter().chain([&stale, &stale_png]) {
            std::fs::write(path, "").unwrap();
        }
        drop(create(dir.path(), Path::new("out.csv")).unwrap());
        assert!(!stale.exists() && !stale_png.exists());
        for path in &kept {
            assert!(path.exists(), "{} was removed", path.display());
        }
    }
}
