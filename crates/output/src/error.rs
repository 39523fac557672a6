use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write failed: `writing PATH: no space left on device`, naming the user's path (never the
    /// temporary's).
    #[error("writing {}: {}", path.display(), describe(cause))]
    Write {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// The output rule refused an output; nothing was written.
    #[error("{}: {reason}", path.display())]
    Refused { path: PathBuf, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn write(path: &std::path::Path, cause: std::io::Error) -> Self {
        Error::Write {
            path: path.to_path_buf(),
            cause,
        }
    }

    pub(crate) fn refused(path: &std::path::Path, reason: impl Into<String>) -> Self {
        Error::Refused {
            path: path.to_path_buf(),
            reason: reason.into(),
        }
    }
}

/// An I/O error as a sentence part: `no space left on device`, without std's `(os error 28)`.
pub fn describe(cause: &std::io::Error) -> String {
    // The system's reason where there is one, beneath any wrapping (tempfile adds "at path
    // .credit-….tmp", a path the user never chose, and hides its cause from `source()`).
    let mut text = cause.to_string();
    if let Some(code) = os_error(cause).or_else(|| {
        let (_, rest) = text.split_once("(os error ")?;
        rest.split(')').next()?.parse().ok()
    }) {
        text = std::io::Error::from_raw_os_error(code).to_string();
    }
    let text = match text.rfind(" (os error ") {
        Some(i) if text.ends_with(')') => text[..i].to_string(),
        _ => text,
    };
    let mut chars = text.chars();
    match (chars.next(), chars.clone().next()) {
        // Lower-case a capitalised first word ("No space"), not an acronym ("JSON").
        (Some(first), second)
            if first.is_uppercase() && !second.is_some_and(char::is_uppercase) =>
        {
            first.to_lowercase().chain(chars).collect()
        }
        _ => text,
    }
}

/// The system's error code of `cause` or of an I/O error beneath it.
fn os_error(cause: &std::io::Error) -> Option<i32> {
    let mut layer: Option<&(dyn std::error::Error + 'static)> = Some(cause);
    while let Some(error) = layer {
        if let Some(code) = error
            .downcast_ref::<std::io::Error>()
            .and_then(|e| e.raw_os_error())
        {
            return Some(code);
        }
        layer = error.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_errors_read_as_sentence_parts() {
        let full = std::io::Error::from_raw_os_error(28);
        assert_eq!(describe(&full), "no space left on device");
        let e = Error::write(std::path::Path::new("out/a.csv"), full);
        assert_eq!(e.to_string(), "writing out/a.csv: no space left on device");
        assert_eq!(describe(&std::io::Error::other("JSON broke")), "JSON broke");
        let wrapped = std::io::Error::other(Wrapped(std::io::Error::from_raw_os_error(28)));
        assert_eq!(describe(&wrapped), "no space left on device");
        let said = std::io::Error::other("No such file or directory (os error 2) at path \"x\"");
        assert_eq!(describe(&said), "no such file or directory");
    }

    /// An error that says more than its cause, as tempfile's "… at path …" does.
    #[derive(Debug)]
    struct Wrapped(std::io::Error);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{} at path .credit-1-x.tmp", self.0)
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
}
