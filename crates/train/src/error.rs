//! The crate's error: every variant names the file, sample or flag it is about and, where there
//! is one, the fix.

use std::path::PathBuf;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Writing an output, or the output rule's refusal.
    #[error(transparent)]
    Output(#[from] credit_output::Error),
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A malformed JSON file or line (`line` is 1-based; 0 for a whole-file document).
    #[error("{}{}: {message}", path.display(), if *line > 0 { format!(":{line}") } else { String::new() })]
    Json {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// A model directory that cannot be used as it is (missing file, wrong shape, unsupported
    /// architecture).
    #[error("{}: {message}", path.display())]
    Model { path: PathBuf, message: String },
    #[error("{}: {message}", path.display())]
    Tokenizer { path: PathBuf, message: String },
    /// A sample that cannot be trained on (`index` is 0-based in the order given).
    #[error("sample {index}: {message}")]
    Sample { index: usize, message: String },
    /// A checkpoint that cannot be resumed, or an output folder that would be overwritten.
    #[error("{}: {message}", path.display())]
    Checkpoint { path: PathBuf, message: String },
    /// A run that trained nothing: every optimizer step's update was skipped.
    #[error("{0}")]
    Untrained(String),
    /// Bad training parameters; the message names the flag.
    #[error("{0}")]
    Params(String),
    #[error("{context}: {source}")]
    Candle {
        context: String,
        source: candle_core::Error,
    },
}

impl Error {
    pub(crate) fn candle(context: impl Into<String>, source: candle_core::Error) -> Self {
        Error::Candle {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }
}

/// Adds "while doing what" to candle's errors, which name the op but not the step.
pub(crate) trait Context<T> {
    fn ctx(self, context: &str) -> Result<T>;
}

impl<T> Context<T> for candle_core::Result<T> {
    fn ctx(self, context: &str) -> Result<T> {
        self.map_err(|e| Error::candle(context, e))
    }
}
