//! Errors of the core library. Input errors always carry where: file, line (JSONL) or row (Parquet),
//! and column, so that `Display` reads `logs/a.jsonl:17:reward: expected a finite number, got "n/a"`.

use std::fmt;
use std::path::PathBuf;

/// A position in an input file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub path: PathBuf,
    /// 1-based line (JSONL) or 0-based row (Parquet); `None` for a whole-file problem.
    pub line: Option<u64>,
    pub unit: Unit,
    /// The column (field) concerned, if any; for malformed JSON, the character column.
    pub column: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Line,
    Row,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        match (self.line, self.unit) {
            (Some(l), Unit::Line) => write!(f, ":{l}")?,
            (Some(r), Unit::Row) => write!(f, ":row {r}")?,
            (None, _) => {}
        }
        if let Some(c) = &self.column {
            write!(f, ":{c}")?;
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A problem with the content of an input file.
    #[error("{location}: {message}")]
    Input {
        location: Location,
        reason: Reason,
        message: String,
    },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Param(String),
    #[error("polars: {0}")]
    Polars(#[from] polars::error::PolarsError),
}

/// Why a row was rejected: the key of `--lenient`'s skip counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    MalformedJson,
    InvalidUtf8,
    MissingColumn,
    MissingValue,
    WrongType,
    NonFinite,
    DuplicateStep,
    StepGap,
    TrajectoryInTwoGroups,
    ConflictingColumns,
    EmptyInput,
    UnreadableFile,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::MalformedJson => "malformed JSON",
            Reason::InvalidUtf8 => "invalid UTF-8",
            Reason::MissingColumn => "missing column",
            Reason::MissingValue => "missing value",
            Reason::WrongType => "wrong type",
            Reason::NonFinite => "NaN or infinite number",
            Reason::DuplicateStep => "duplicate (traj_id, step)",
            Reason::StepGap => "gap in step numbering",
            Reason::TrajectoryInTwoGroups => "trajectory in two groups",
            Reason::ConflictingColumns => "columns that disagree",
            Reason::EmptyInput => "empty input",
            Reason::UnreadableFile => "unreadable file",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn input(location: Location, reason: Reason, message: impl Into<String>) -> Self {
        Error::Input {
            location,
            reason,
            message: message.into(),
        }
    }
}
