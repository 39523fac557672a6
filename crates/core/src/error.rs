//! Errors of the core library. Input errors always carry where: file, line (JSONL) or row (Parquet),
//! and column, so that `Display` reads `logs/a.jsonl:17:reward: expected a finite number, got "n/a"`.

use std::fmt;
use std::path::PathBuf;

/// A position in an input file. One format everywhere: `file:line:column (field)` for text
/// (JSONL: 1-based line and character column) and `file:row N (field)` for Parquet (0-based row).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Location {
    pub path: PathBuf,
    /// 1-based line (JSONL) or 0-based row (Parquet); `None` for a whole-file problem.
    pub line: Option<u64>,
    #[serde(skip)]
    pub unit: Unit,
    /// 1-based character column within the line (JSONL), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub char_column: Option<u64>,
    /// The log column (field) concerned, if any.
    #[serde(rename = "field", skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Line,
    Row,
}

impl Location {
    /// The whole file.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Location {
            path: path.into(),
            line: None,
            unit: Unit::Line,
            char_column: None,
            column: None,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        match (self.line, self.unit) {
            (Some(l), Unit::Line) => {
                write!(f, ":{l}")?;
                if let Some(c) = self.char_column {
                    write!(f, ":{c}")?;
                }
            }
            (Some(r), Unit::Row) => write!(f, ":row {r}")?,
            (None, _) => {}
        }
        if let Some(c) = &self.column {
            write!(f, " ({c})")?;
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
    /// Not `#[source]`: the message already says it, and a chain printed with `{:#}` would
    /// repeat it.
    #[error("{path}: {}", io_message(cause))]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
    #[error("{0}")]
    Param(String),
    /// A result that is not a finite number (rewards that overflow the arithmetic).
    #[error("{0}")]
    Numbers(String),
    #[error("polars: {0}")]
    Polars(#[from] polars::error::PolarsError),
    /// Writing an output, or the output rule's refusal.
    #[error(transparent)]
    Output(#[from] credit_output::Error),
    /// A signal model ([`crate::run::Fill`]) failed: its own words.
    #[error("{0}")]
    Fill(String),
    /// An error met while looking into the logs before the run (a method list that depends on
    /// their columns, the files a folder holds), said as one of reading them.
    #[error("reading the logs")]
    Reading(#[source] Box<Error>),
}

impl Error {
    /// Where and why the input is bad, for a bad-input error (also one said as reading the logs).
    pub fn bad_input(&self) -> Option<(&Location, &Reason)> {
        match self {
            Error::Input {
                location, reason, ..
            } => Some((location, reason)),
            Error::Reading(inner) => inner.bad_input(),
            _ => None,
        }
    }
}

/// Why a row was rejected: the key of `--lenient`'s skip counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    MalformedJson,
    DuplicateKey,
    InvalidUtf8,
    MissingColumn,
    MissingValue,
    WrongType,
    NonFinite,
    DuplicateStep,
    EmptyEpisode,
    StepGap,
    TrajectoryInTwoGroups,
    TrajectoryInTwoIterations,
    EpisodeRewardChanges,
    ConflictingColumns,
    EmptyInput,
    UnreadableFile,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::MalformedJson => "malformed JSON",
            Reason::DuplicateKey => "duplicate key",
            Reason::InvalidUtf8 => "invalid UTF-8",
            Reason::MissingColumn => "missing column",
            Reason::MissingValue => "missing value",
            Reason::WrongType => "wrong type",
            Reason::NonFinite => "NaN or infinite number",
            Reason::DuplicateStep => "duplicate (traj_id, step)",
            Reason::EmptyEpisode => "episode with no steps",
            Reason::StepGap => "gap in step numbering",
            Reason::TrajectoryInTwoGroups => "trajectory in two groups",
            Reason::TrajectoryInTwoIterations => "trajectory in two iterations",
            Reason::EpisodeRewardChanges => "episode reward that changes within a trajectory",
            Reason::ConflictingColumns => "columns that disagree",
            Reason::EmptyInput => "empty input",
            Reason::UnreadableFile => "unreadable file",
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

use credit_output::describe as io_message;

impl Error {
    pub fn input(location: Location, reason: Reason, message: impl Into<String>) -> Self {
        Error::Input {
            location,
            reason,
            message: message.into(),
        }
    }
}
