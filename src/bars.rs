//! Progress display on stderr for steps that can take more than a second: a spinner, or a bar of
//! bytes and rows read; hidden when stderr is not a terminal or the output is JSON.

use credit_core::ingest::Progress;
use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Duration;

/// Whether to show progress: on a terminal, and not when printing JSON.
pub fn shown(json: bool) -> bool {
    !json && std::io::stderr().is_terminal()
}

pub fn spinner(message: &str, json: bool) -> ProgressBar {
    if !shown(json) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    bar.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.set_message(message.to_string());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// A bar of the input bytes read, with the rate and rows so far.
pub fn reading(json: bool) -> ProgressBar {
    bar(
        "{spinner} {msg} {bytes}/{total_bytes} ({bytes_per_sec}, eta {eta}) [{elapsed}]",
        json,
    )
}

/// A bar of training passes (each training trajectory once per epoch, in every fit), with the
/// time left.
pub fn passes(message: &str, json: bool) -> ProgressBar {
    let bar = bar(
        "{spinner} {msg} {bar:30} {pos}/{len} trajectory passes (eta {eta}) [{elapsed}]",
        json,
    );
    bar.set_message(message.to_string());
    bar
}

/// A bar of `template` whose length is set as the work goes; hidden where nothing is shown.
fn bar(template: &str, json: bool) -> ProgressBar {
    if !shown(json) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

pub fn update_passes(bar: &ProgressBar, p: credit_train::signal::Passes) {
    bar.set_length(p.total as u64);
    bar.set_position(p.done as u64);
}

pub fn update(bar: &ProgressBar, p: Progress) {
    if bar.is_hidden() {
        return;
    }
    if bar.length() != Some(p.total_bytes) {
        bar.set_length(p.total_bytes);
    }
    bar.set_position(p.bytes.min(p.total_bytes));
    let pass = match p.pass {
        2 => " (indexing)",
        3 => " (second pass)",
        _ => "",
    };
    bar.set_message(format!("reading{pass}: {} rows", p.rows));
}
