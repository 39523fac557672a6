//! `credit`: credit assignment diagnostics for multi-turn LLM-agent RL. This binary only parses
//! flags, resolves them into a plan, and renders what the `credit-core` library computes.

/// `println!` that returns the error (a closed pipe ends the run quietly, see `main`) instead of
/// panicking.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)?;
    }};
}

/// `print!` that returns the error instead of panicking.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)?;
    }};
}

mod bars;
mod cmd;
mod exit;

use clap::Parser;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    credit_output::interrupt::install();
    let cli = cmd::Cli::parse();
    let json = cli.json();
    match cmd::run(cli) {
        Ok(code) => code.into(),
        Err(err) => {
            if is_broken_pipe(&err) {
                return exit::ExitCode::Ok.into();
            }
            if json {
                eprintln!("{}", error_json(&err));
            } else {
                eprintln!("error: {err:#}");
            }
            exit::ExitCode::Error.into()
        }
    }
}

/// An error as one JSON object (`--format json`): the message, and for bad input the location
/// and the reason.
fn error_json(err: &anyhow::Error) -> serde_json::Value {
    let mut value = serde_json::json!({ "error": { "message": format!("{err:#}") } });
    let input = err
        .chain()
        .find_map(|e| e.downcast_ref::<credit_core::Error>()?.bad_input());
    if let Some((location, reason)) = input {
        value["error"]["location"] = serde_json::to_value(location).unwrap_or_default();
        value["error"]["reason"] = serde_json::to_value(reason).unwrap_or_default();
    }
    value
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
