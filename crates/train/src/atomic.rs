//! Files written whole or not at all: a temporary file in the same folder, renamed into place.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Writes `path` through a temporary file in the same folder, renamed into place on success.
pub fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut std::fs::File) -> Result<()>,
) -> Result<()> {
    let tmp = temp_name(path);
    let mut file = std::fs::File::create(&tmp).map_err(|e| Error::io(&tmp, e))?;
    let written = write(&mut file).and_then(|()| file.sync_all().map_err(|e| Error::io(&tmp, e)));
    drop(file);
    match written {
        Ok(()) => std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e)),
        Err(e) => {
            // Best effort: the error being returned matters more than a leftover temp file.
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

fn temp_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}
