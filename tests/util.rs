//! Helpers: run the binary in a fresh temporary folder (so no `credit.toml` is picked up), find
//! fixtures, read JSONL.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub fn fixture(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(path)
}

/// Ingest's sizes shrunk so that every unit closes as early as it can (a log whose groups
/// interleave is then read twice): 3,000-byte chunks, a quiet distance of one byte.
pub const TINY_WINDOWS: &[(&str, &str)] =
    &[("CREDIT_CHUNK_BYTES", "3000"), ("CREDIT_QUIET_BYTES", "1")];

pub struct Run {
    pub dir: tempfile::TempDir,
}

impl Run {
    pub fn new() -> Self {
        Run {
            dir: tempfile::tempdir().expect("temp dir"),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn credit<I, S>(&self, args: I) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        self.credit_with(args, &[])
    }

    /// [`Run::credit`] with ingest's windows shrunk to nothing ([`TINY_WINDOWS`]).
    pub fn credit_tiny_windows<S: AsRef<std::ffi::OsStr>>(&self, args: &[S]) -> Output {
        self.credit_with(args, TINY_WINDOWS)
    }

    /// [`Run::credit`] with environment variables set (ingest's sizes, for one).
    pub fn credit_with<I, S>(&self, args: I, env: &[(&str, &str)]) -> Output
    where
        I: IntoIterator<Item = S>,
        S: AsRef<std::ffi::OsStr>,
    {
        Command::new(env!("CARGO_BIN_EXE_credit"))
            .args(args)
            .current_dir(self.dir.path())
            .envs(env.iter().copied())
            .output()
            .expect("run credit")
    }
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts success and parses stdout as JSON.
pub fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "exit {:?}\nstderr: {}",
        out.status.code(),
        stderr(out)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", stdout(out)))
}

pub fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

pub fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Non-empty lines of a file (raw bytes: the file may not be UTF-8).
pub fn read_lines(path: &Path) -> u64 {
    std::fs::read(path)
        .unwrap()
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count() as u64
}
