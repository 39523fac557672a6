//! credit's one output layer: every file a command writes goes through it.
//!
//! - [`AtomicFile`], [`write_file`]: a file is written to a hidden temporary beside its target
//!   (`.credit-PID-XXXXXX.tmp`, short, so that every legal output name stays legal), synced, and
//!   renamed into place. On an error or an interruption nothing is left, and an existing target
//!   keeps its bytes.
//! - [`Inputs`]: the output rule. An output is refused, before anything is written, when it is,
//!   contains, or lies inside an input (symlinks resolved; hard links by device and inode).
//! - [`OutputDir`]: a folder output is written only into a new or empty folder, or into one that
//!   holds credit's own earlier output of the same command, as listed in its
//!   [`MANIFEST`]; only the files that manifest lists are ever replaced or removed, a user's
//!   file is never renamed aside, nothing is written or removed through a link inside the
//!   folder, one run at a time writes it ([`hold`]), and a report's folder receives its files
//!   all together at the end ([`Commit::Whole`]).
//! - [`interrupt`]: SIGINT and SIGTERM remove a run's temporaries before it exits.

mod atomic;
mod error;
mod folder;
pub mod interrupt;
mod rule;
mod temporaries;

pub use atomic::{commit_together, write_file, write_file_at, AtomicFile};
pub use error::{describe, Error, Result};
pub use folder::{claim, hold, Commit, Hold, OutputDir, Stale, MANIFEST};
pub use rule::{file_id, Inputs};

/// What a run interrupted by a signal (SIGINT, SIGTERM) leaves of its output: its temporaries
/// deleted (once a folder output being committed is whole), then the folder outputs it created
/// and wrote nothing into removed. The locks are taken in the order the writers take them and
/// kept until the exit that must follow: no thread opens a folder, makes a temporary or renames
/// one into place after this.
fn clean_up_before_exit() {
    folder::abandon_open_after(temporaries::remove_all_before_exit);
}
