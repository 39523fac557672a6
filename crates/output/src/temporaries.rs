//! The hidden temporaries of this run: created beside their targets, registered while they exist
//! so that [`remove_temporaries`] can delete them when the run is interrupted (SIGINT, SIGTERM),
//! and cleared from a folder when a run that was killed outright (SIGKILL) left some.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

const PREFIX: &str = ".credit-";

static TEMPORARIES: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
/// Folders already cleared of stale temporaries by this run (a `graph --all` writes thousands of
/// files into one folder: clear it once, not once per file).
static CLEARED: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// A new temporary file in `dir`: `.credit-PID-XXXXXX.tmp`, plus the target's extension when it
/// has a short one (plotters picks the image format from the name).
pub(crate) fn create(dir: &Path, target: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    clear_stale(dir);
    let extension = target
        .extension()
        .and_then(|e| e.to_str())
        .filter(|e| e.len() <= 8 && e.chars().all(|c| c.is_ascii_alphanumeric()))
        .map_or(String::new(), |e| format!(".{e}"));
    let (prefix, suffix) = (
        format!("{PREFIX}{}-", std::process::id()),
        format!(".tmp{extension}"),
    );
    let mut builder = tempfile::Builder::new();
    builder.prefix(&prefix).suffix(&suffix).rand_bytes(6);
    // An output is the user's file like any other: 0666 less the umask, not a temporary's 0600.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    let file = builder.tempfile_in(dir)?;
    if let Ok(mut list) = TEMPORARIES.lock() {
        list.push(file.path().to_path_buf());
    }
    Ok(file)
}

/// Forgets a temporary that was renamed into place or removed.
pub(crate) fn forget(path: &Path) {
    if let Ok(mut list) = TEMPORARIES.lock() {
        list.retain(|p| p != path);
    }
}

/// Deletes every temporary file of this run (when it is interrupted).
pub fn remove_temporaries() {
    if let Ok(list) = TEMPORARIES.lock() {
        for path in list.iter() {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The process that made a temporary of this run's naming, if `name` is one.
fn owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(PREFIX)?;
    let (pid, rest) = rest.split_once('-')?;
    rest.contains(".tmp").then_some(())?;
    pid.parse().ok()
}

/// Whether process `pid` is running (unknown outside Linux: assumed running, so nothing is removed).
fn running(pid: u32) -> bool {
    !Path::new("/proc/self").exists() || Path::new(&format!("/proc/{pid}")).exists()
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
        let stale = name
            .to_str()
            .and_then(owner)
            .is_some_and(|pid| pid != std::process::id() && !running(pid));
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
        assert!(
            name.starts_with(&format!(".credit-{}-", std::process::id())),
            "{name}"
        );
        assert!(name.ends_with(".tmp.png") && name.len() < 40, "{name}");
        assert_eq!(owner(&name), Some(std::process::id()));
        assert!(TEMPORARIES
            .lock()
            .unwrap()
            .contains(&file.path().to_path_buf()));
        let path = file.path().to_path_buf();
        forget(&path);
        assert!(!TEMPORARIES.lock().unwrap().contains(&path));
    }

    #[test]
    fn stale_temporaries_of_dead_runs_are_cleared_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        // 4194305 is above Linux's largest pid (2^22): no process has it.
        let stale = dir.path().join(".credit-4194305-abcdef.tmp");
        let stale_png = dir.path().join(".credit-4194305-abcdef.tmp.png");
        let users = [
            dir.path().join(".credit-notapid-abcdef.tmp"),
            dir.path().join(".credit-4194305.txt"),
            dir.path().join("credit-4194305-abcdef.tmp"),
        ];
        for path in users.iter().chain([&stale, &stale_png]) {
            std::fs::write(path, "").unwrap();
        }
        drop(create(dir.path(), Path::new("out.csv")).unwrap());
        if Path::new("/proc/self").exists() {
            assert!(!stale.exists() && !stale_png.exists());
        }
        assert!(users.iter().all(|p| p.exists()));
    }
}
