//! Exit codes: 0 ok, 1 a CI gate (threshold) failed, 2 error.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitCode {
    Ok,
    GateFailed,
    Error,
}

impl From<ExitCode> for std::process::ExitCode {
    fn from(code: ExitCode) -> Self {
        match code {
            ExitCode::Ok => std::process::ExitCode::from(0),
            ExitCode::GateFailed => std::process::ExitCode::from(1),
            ExitCode::Error => std::process::ExitCode::from(2),
        }
    }
}
