//! Memory does not grow with the log: two logs generated here (250k and 1M rows of verl-agent-
//! shaped rows with ~600 bytes of observation text each), `credit analyze` and `credit
//! advantages` run on each as child processes, and the peak RSS of each child (from `wait4`)
//! on the 4× larger log must stay within 1.25× of the smaller one's. The same with a group per
//! row, where only what is kept of each group seen may add to that, and with a key of its own per
//! row.

use crate::util::Run;
use std::io::Write;
use std::path::Path;
use std::process::Command;

/// How a log's rows are grouped.
#[derive(Clone, Copy)]
struct Shape {
    trajectories_per_group: usize,
    steps: usize,
    /// Each row carries a key no other row has (trainers that log per-sample fields).
    own_key: bool,
}

/// Groups of 8 trajectories of 20 steps.
const GROUPS_OF_8: Shape = Shape {
    trajectories_per_group: 8,
    steps: 20,
    own_key: false,
};

/// Groups of 8, every row with a key of its own: a row shape per row.
const OWN_KEY_PER_ROW: Shape = Shape {
    own_key: true,
    ..GROUPS_OF_8
};

/// One trajectory of one step per group (verl single-turn logs with n = 1).
const SINGLE_ROW_GROUPS: Shape = Shape {
    trajectories_per_group: 1,
    steps: 1,
    own_key: false,
};

/// Writes `rows` step rows of `shape`, 2560 rows per iteration, each state a room description of
/// ~90 words from a small vocabulary (so TF-IDF has work to do).
fn write_log(path: &Path, rows: usize, shape: Shape) {
    const WORDS: [&str; 24] = [
        "cabinet",
        "drawer",
        "countertop",
        "shelf",
        "fridge",
        "microwave",
        "sinkbasin",
        "apple",
        "mug",
        "knife",
        "bread",
        "egg",
        "lettuce",
        "tomato",
        "plate",
        "bowl",
        "wooden",
        "white",
        "small",
        "large",
        "dusty",
        "polished",
        "near",
        "door",
    ];
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let file = std::fs::File::create(path).unwrap();
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let (mut written, mut group) = (0usize, 0usize);
    while written < rows {
        let room: Vec<&str> = (0..80).map(|_| WORDS[(next() % 24) as usize]).collect();
        let room = room.join(" ");
        for traj in 0..shape.trajectories_per_group {
            let won = next() % 3 == 0;
            for step in 0..shape.steps {
                if written == rows {
                    break;
                }
                let place = next() % 6;
                let last = step + 1 == shape.steps;
                let obs = format!(
                    "You are at {} {place}. {room}. Step {step}.",
                    WORDS[place as usize]
                );
                let own = if shape.own_key {
                    format!(r#", "extra_{written}": 1"#)
                } else {
                    String::new()
                };
                writeln!(
                    out,
                    r#"{{"uid": "g{group}", "traj_uid": "g{group}-t{traj}", "iteration": {}, "step": {step}, "anchor_obs": "{obs}", "action": "go to {} {}", "is_action_valid": {}, "reward": {}, "won": {}{own}}}"#,
                    group * shape.trajectories_per_group * shape.steps / 2560,
                    WORDS[(next() % 24) as usize],
                    next() % 4,
                    next() % 20 != 0,
                    if last && won { 10.0 } else { 0.0 },
                    last && won,
                )
                .unwrap();
                written += 1;
            }
        }
        group += 1;
    }
    out.flush().unwrap();
}

/// Runs `credit ARGS` and returns its peak resident set size in kilobytes.
// The child is reaped by `wait4` (which also gives its rusage), not by `Child::wait`.
#[allow(clippy::zombie_processes)]
fn peak_rss_kb(run: &Run, args: &[&str]) -> i64 {
    let child = Command::new(env!("CARGO_BIN_EXE_credit"))
        .args(args)
        // A quarter of the default sizes of what is held in flight (chunks, quiet bytes, the
        // budget of open units): both logs fill them, so the smaller one's peak is the steady
        // state and not how far the readers ran ahead of it, and growth weighs more against it.
        .env("CREDIT_CHUNK_BYTES", (1 << 20).to_string())
        .env("CREDIT_QUIET_BYTES", (8 << 20).to_string())
        .env("CREDIT_BUDGET_BYTES", (64 << 20).to_string())
        .current_dir(run.dir.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("run credit");
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `child` is our own child, not yet waited for.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "credit {args:?} failed ({status})"
    );
    usage.ru_maxrss
}

/// Runs each command on a log of `shape` with `small` rows and on one with 4× as many, and
/// asserts that the peak RSS of the larger stays within 1.25× of the smaller's, plus
/// [`LEVEL_OFF_KB`], plus `per_extra_group` bytes for each group the larger log has more.
/// The allocator's pages still grow from the smaller log to the larger before they level off
/// (not per-row state: 1M to 4M rows adds almost nothing); on ~130 MB peaks the larger log's
/// lowest run has come out at up to 1.27× the smaller's, in builds before and after #25's
/// group-cost work alike. A leak of 80 bytes a row still fails.
const LEVEL_OFF_KB: f64 = 24.0 * 1024.0;

fn assert_flat(shape: Shape, small: usize, per_extra_group: usize, commands: &[&[&str]]) {
    let run = Run::new();
    let large = 4 * small;
    let (small_log, large_log) = (run.path("small.jsonl"), run.path("large.jsonl"));
    write_log(&small_log, small, shape);
    write_log(&large_log, large, shape);
    let rows_per_group = shape.trajectories_per_group * shape.steps;
    let allowance_kb = ((large - small) / rows_per_group * per_extra_group / 1024) as f64;
    for command in commands {
        let rss = |log: &Path| {
            let mut args = command.to_vec();
            args.insert(1, log.to_str().unwrap());
            // The lowest of three runs: how far the reader runs ahead of the windows, and so the
            // peak, varies from run to run by up to ~20% (growth with the log shows in every run).
            (0..3).map(|_| peak_rss_kb(&run, &args)).min().unwrap()
        };
        let (a, b) = (rss(&small_log), rss(&large_log));
        eprintln!(
            "{}: peak RSS {a} KB on {small} rows, {b} KB on {large} rows",
            command[0]
        );
        assert!(
            (b as f64) <= 1.25 * a as f64 + LEVEL_OFF_KB + allowance_kb,
            "{}: peak RSS grew from {a} KB ({small} rows) to {b} KB ({large} rows)",
            command[0]
        );
    }
}

#[test]
fn peak_memory_does_not_grow_with_the_log() {
    assert_flat(
        GROUPS_OF_8,
        250_000,
        0,
        &[
            &["analyze", "--format", "json"],
            &[
                "advantages",
                "--methods",
                "grpo,rloo,gigpo,proxmo,mgr,graphgpo",
                "-o",
                "out.parquet",
            ],
        ],
    );
}

/// A log of single-row groups: what grows is only what is kept of every unit and trajectory
/// seen, to catch one that comes back (a 128-bit identity each, the trajectory's group and first
/// row: 72 bytes, in tables at most 3/4 full and sized ahead for the whole log: ~150 bytes a
/// group at the end).
#[test]
fn peak_memory_grows_only_by_the_groups_seen_with_single_row_groups() {
    assert_flat(
        SINGLE_ROW_GROUPS,
        250_000,
        192,
        &[&["analyze", "--format", "json"]],
    );
}

/// Every row with a key of its own: the row shapes seen do not accumulate.
#[test]
fn peak_memory_does_not_grow_with_a_key_of_its_own_per_row() {
    assert_flat(
        OWN_KEY_PER_ROW,
        250_000,
        0,
        &[&["analyze", "--format", "json"]],
    );
}
