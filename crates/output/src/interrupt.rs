//! What SIGINT and SIGTERM do to a run ([`install`]): its temporaries removed and the folder
//! outputs it created but wrote nothing into removed ([`crate::clean_up_before_exit`]), a note of
//! where it stopped said ([`say_when_interrupted`]), then the exit the signal asks for (130,
//! 143). A command that stops by itself at a safe point asks to be told instead
//! ([`stop_gracefully`]); a second signal then ends it. (SIGKILL cannot be caught: the next run
//! removes what it leaves.)

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Set by a command that stops by itself at a safe point: a signal then sets [`STOP`].
static STOP_GRACEFULLY: AtomicBool = AtomicBool::new(false);
/// A signal asked a command that stops gracefully to stop.
static STOP: AtomicBool = AtomicBool::new(false);
/// What a command wants said when a signal ends it, kept current as the command goes.
static ON_INTERRUPT: Mutex<String> = Mutex::new(String::new());

/// Handles SIGINT and SIGTERM for the rest of the process (on a thread of its own).
pub fn install() {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        return;
    };
    std::thread::spawn(move || {
        for signal in signals.forever() {
            if STOP_GRACEFULLY.load(Ordering::SeqCst) && !STOP.swap(true, Ordering::SeqCst) {
                continue;
            }
            crate::clean_up_before_exit();
            if let Some(note) = ON_INTERRUPT.lock().ok().filter(|n| !n.is_empty()) {
                eprintln!("{note}");
            }
            std::process::exit(128 + signal);
        }
    });
}

/// From now on the first signal does not end the run: the returned check says whether one came,
/// for the command to stop at its next safe point (`credit watch`, after the report it is
/// writing).
pub fn stop_gracefully() -> impl Fn() -> bool {
    STOP_GRACEFULLY.store(true, Ordering::SeqCst);
    || STOP.load(Ordering::SeqCst)
}

/// What to say if a signal ends the run now (`credit train policy`: the step it reached and
/// where its last checkpoint is).
pub fn say_when_interrupted(note: String) {
    *ON_INTERRUPT.lock().unwrap_or_else(|p| p.into_inner()) = note;
}
