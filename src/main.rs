//! `credit`: credit assignment diagnostics for multi-turn LLM-agent RL. This binary only parses
//! flags, resolves them into a plan, and renders what the `credit-core` library computes.

mod cmd;
mod config;
mod exit;
mod progress;

use clap::Parser;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = cmd::Cli::parse();
    match cmd::run(cli) {
        Ok(code) => code.into(),
        Err(err) => {
            if is_broken_pipe(&err) {
                return exit::ExitCode::Ok.into();
            }
            eprintln!("error: {err:#}");
            exit::ExitCode::Error.into()
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
