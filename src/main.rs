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
use std::sync::atomic::{AtomicBool, Ordering};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Set by a command that stops by itself at a safe point (`credit watch` after the report it is
/// writing): SIGINT or SIGTERM then set [`STOP`] instead of ending the run, and a second signal
/// ends it.
pub static STOP_GRACEFULLY: AtomicBool = AtomicBool::new(false);
/// A signal asked a command that stops gracefully to stop.
pub static STOP: AtomicBool = AtomicBool::new(false);
/// What a command wants said when a signal ends it (`credit train policy`: the step it reached
/// and where its last checkpoint is); kept current as the command goes.
pub static ON_INTERRUPT: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// On SIGINT or SIGTERM: remove this run's temporary files, then exit as the signal asks (130,
/// 143); or ask the command to stop ([`STOP_GRACEFULLY`]). (SIGKILL cannot be caught: the next
/// run removes what it leaves.)
fn clean_up_on_signals() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        return;
    };
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if STOP_GRACEFULLY.load(Ordering::SeqCst) && !STOP.swap(true, Ordering::SeqCst) {
                continue;
            }
            credit_output::remove_temporaries();
            if let Some(note) = ON_INTERRUPT.lock().ok().filter(|n| !n.is_empty()) {
                eprintln!("{note}");
            }
            std::process::exit(128 + signal);
        }
    });
}

fn main() -> std::process::ExitCode {
    clean_up_on_signals();
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
