//! `credit watch` (issue #27): iteration files written one by one into a folder (one with a
//! half-written last line, completed later), `summary.json` checked after each lands, then
//! SIGINT; `--once`; `--check --fail-fast`. Issue #50: files it cannot read are named (and exit
//! 2), a log rewritten in place or appended faster than `--interval`, `--lenient`'s skips, logs
//! without an iteration, a folder that is not there yet.

use crate::util::{fixture, stderr, Run};
use std::io::{BufRead, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Iteration `it` as step rows: 3 groups of 4 rollouts of 2–4 steps (10 or more per group, what
/// the explorer needs to pick a group), some successful, some invalid actions, observations
/// shared within a group.
fn iteration(it: i64) -> String {
    let mut text = String::new();
    for g in 0..3 {
        for r in 0..4 {
            let steps = 2 + (g + r + it as usize) % 3;
            let success = (g * 3 + r + it as usize).is_multiple_of(4) || (g == 1 && r == 0);
            for s in 0..steps {
                let last = s + 1 == steps;
                let reward = if last && success { 1.0 } else { 0.0 };
                text.push_str(&format!(
                    "{{\"uid\": \"it{it}-g{g}\", \"traj_uid\": \"it{it}-g{g}-r{r}\", \"iteration\": {it}, \"step\": {s}, \"anchor_obs\": \"room {}\", \"action\": \"go {}\", \"is_action_valid\": {}, \"reward\": {reward}, \"done\": {last}}}\n",
                    (s + r) % 3,
                    (s * 7 + r) % 4,
                    (s + r + g) % 5 != 0,
                ));
            }
        }
    }
    text
}

fn rows(text: &str) -> u64 {
    text.lines().count() as u64
}

/// `summary.json`'s headline, once it says `rows` rows (waits up to 20 s).
fn headline_with(out: &Path, rows: u64) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last = serde_json::Value::Null;
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(out.join("summary.json")) {
            let summary: serde_json::Value =
                serde_json::from_str(&text).expect("summary.json is whole whenever it is there");
            if summary["headline"]["rows"] == rows {
                return summary["headline"].clone();
            }
            last = summary["headline"]["rows"].clone();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("summary.json never said {rows} rows (last: {last})");
}

fn watch(run: &Run, extra: &[&str]) -> Child {
    watch_every(run, "0.1", extra)
}

/// `credit watch logs` polling every `interval` seconds.
fn watch_every(run: &Run, interval: &str, extra: &[&str]) -> Child {
    let mut args = vec!["logs", "--out", "report", "--methods", "grpo,gigpo"];
    args.extend(["--interval", interval, "--format", "json"]);
    args.extend(extra);
    spawn(run, &args)
}

/// `credit watch ARGS` in `run`'s folder, its output piped.
pub(crate) fn spawn(run: &Run, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_credit"))
        .arg("watch")
        .args(args)
        .current_dir(run.dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run credit watch")
}

/// The child's exit code, waiting up to 20 s.
fn exit_code(child: &mut Child) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    panic!("credit watch did not exit");
}

/// The explorer's data embedded in a report.html, if it has one.
fn explorer_data(html: &str) -> Option<&str> {
    let start = html.find("id=\"credit-explorer-data\">")?;
    let data = &html[start..];
    Some(&data[..data.find("</script>")?])
}

#[test]
fn follows_iterations_as_they_land_then_stops_on_sigint() {
    let run = Run::new();
    let logs = run.path("logs");
    std::fs::create_dir(&logs).unwrap();
    let out = run.path("report");
    let mut child = watch(&run, &[]);
    let (one, two, three) = (iteration(1), iteration(2), iteration(3));

    std::fs::write(logs.join("1.jsonl"), &one).unwrap();
    let first = headline_with(&out, rows(&one));
    assert!(first["singleton_step_share"].is_number(), "{first}");

    // A half-written last line is waited for; the group it belongs to is read whole again when
    // the line is complete.
    let cut = two.len() - 20;
    let mut file = std::fs::File::create(logs.join("2.jsonl")).unwrap();
    file.write_all(&two.as_bytes()[..cut]).unwrap();
    file.flush().unwrap();
    headline_with(&out, rows(&one) + rows(&two) - 1);
    file.write_all(&two.as_bytes()[cut..]).unwrap();
    drop(file);
    headline_with(&out, rows(&one) + rows(&two));

    std::fs::write(logs.join("3.jsonl"), &three).unwrap();
    let last = headline_with(&out, rows(&one) + rows(&two) + rows(&three));
    // Reports written while the run goes on leave the explorer's drawings out (Graphviz).
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(explorer_data(&html).is_none());

    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(exit_code(&mut child), Some(0));
    let output = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("reading the run again"), "{err}");
    // One JSON line per iteration landed (iteration 2 twice: part, then whole).
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let landed: Vec<i64> = lines
        .iter()
        .filter_map(|l| l["iteration"]["iteration"].as_i64())
        .collect();
    assert_eq!(landed.first(), Some(&1), "{lines:?}");
    assert_eq!(landed.last(), Some(&3), "{lines:?}");
    assert!(lines[0]["iteration"]["spearman"]["grpo~gigpo"].is_number());

    // The report is whole and the same as `credit report` on the same logs.
    for name in ["report.html", "report.md", "summary.json"] {
        assert!(out.join(name).is_file(), "{name}");
    }
    let report = run.credit([
        "report",
        "logs",
        "--out",
        "whole",
        "--methods",
        "grpo,gigpo",
    ]);
    assert!(report.status.success(), "{}", stderr(&report));
    let whole: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("whole/summary.json")).unwrap())
            .unwrap();
    assert_eq!(whole["headline"], last);
    // The last report, written when the watch stopped, has the explorer `credit report` has.
    let html = |dir: &Path| std::fs::read_to_string(dir.join("report.html")).unwrap();
    let (watched, reported) = (html(&out), html(&run.path("whole")));
    assert!(explorer_data(&reported).is_some());
    assert_eq!(explorer_data(&watched), explorer_data(&reported));
    let names: Vec<String> = std::fs::read_dir(&logs)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.len(),
        3,
        "the logs folder is never written: {names:?}"
    );
}

#[test]
fn once_reads_what_is_there_and_fail_fast_stops_at_a_failing_rule() {
    let run = Run::new();
    let logs = run.path("logs");
    std::fs::create_dir(&logs).unwrap();
    std::fs::write(logs.join("1.jsonl"), iteration(1)).unwrap();
    std::fs::write(logs.join("2.jsonl"), iteration(2)).unwrap();

    let mut once = watch(&run, &["--once"]);
    assert_eq!(exit_code(&mut once), Some(0));
    headline_with(
        &run.path("report"),
        rows(&iteration(1)) + rows(&iteration(2)),
    );
    // Files read together still give each iteration its own line and agreement.
    let output = once.wait_with_output().unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // The iterations' lines, then the recap.
    let (recap, lines) = lines.split_last().unwrap();
    assert_eq!(recap["watched"]["iterations"], serde_json::json!([1, 2]));
    assert_eq!(
        recap["watched"]["rows"],
        rows(&iteration(1)) + rows(&iteration(2))
    );
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (line, it) in lines.iter().zip([1, 2]) {
        assert_eq!(line["iteration"]["iteration"], it);
        assert!(line["iteration"]["spearman"]["grpo~gigpo"].is_number());
    }

    std::fs::write(
        run.path("rules.toml"),
        "[[rule]]\nkey = \"headline.success_rate\"\nmax = 0.01\n",
    )
    .unwrap();
    let mut gate = watch(&run, &["--check", "rules.toml", "--fail-fast"]);
    assert_eq!(exit_code(&mut gate), Some(1), "exits at once, no signal");
    let output = gate.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("check_failed"), "{stdout}");
}

/// `summary.json`'s notes.
fn notes(out: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(out.join("summary.json")).unwrap();
    let summary: serde_json::Value = serde_json::from_str(&text).unwrap();
    summary["metadata"]["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

/// Waits (up to 20 s) until `summary.json`'s notes have one that contains `text`.
fn note_with(out: &Path, text: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if out.join("summary.json").is_file() {
            if let Some(note) = notes(out).into_iter().find(|n| n.contains(text)) {
                return note;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("summary.json never had a note with {text:?}");
}

/// The first half of a fixture's bytes: a compressed stream or Parquet file cut short, as a
/// trainer that died while writing it leaves it.
fn cut_short(name: &str) -> Vec<u8> {
    let bytes = std::fs::read(fixture(name)).unwrap();
    bytes[..bytes.len() / 2].to_vec()
}

/// The stdout of a finished watch, one JSON value a line.
fn json_lines(output: &std::process::Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A running child's stderr, line by line as it comes.
struct Stderr {
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Stderr {
    fn of(child: &mut Child) -> Stderr {
        let pipe = std::io::BufReader::new(child.stderr.take().unwrap());
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in pipe.lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Stderr {
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (up to 20 s) for a line that is `line`.
    fn wait_for(&mut self, line: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.seen.iter().any(|l| l == line) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => self.seen.push(l),
                Err(_) => panic!("no line {line:?} on stderr; saw {:?}", self.seen),
            }
        }
    }

    /// Everything said, once the child has exited.
    fn all(mut self) -> String {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(20)) {
                Ok(l) => self.seen.push(l),
                Err(RecvTimeoutError::Disconnected) => return self.seen.join("\n"),
                Err(RecvTimeoutError::Timeout) => panic!("stderr never closed"),
            }
        }
    }
}

/// Files `credit report` stops at are read as far as they go and named: a `.gz`, `.zst` and
/// Parquet file cut short (the watch goes on with the others, exit 2), and a last line without
/// its line break, which `--once` reads as `credit report` does.
#[test]
fn once_names_every_file_it_cannot_read_and_exits_2() {
    let run = Run::new();
    let logs = run.path("logs");
    std::fs::create_dir(&logs).unwrap();
    let (one, two) = (iteration(1), iteration(2));
    std::fs::write(logs.join("1.jsonl"), &one).unwrap();
    std::fs::write(logs.join("2.jsonl"), two.trim_end()).unwrap();
    std::fs::write(
        logs.join("3.jsonl.gz"),
        cut_short("formats/textworld.jsonl.gz"),
    )
    .unwrap();
    std::fs::write(
        logs.join("4.jsonl.zst"),
        cut_short("formats/textworld.jsonl.zst"),
    )
    .unwrap();
    std::fs::write(
        logs.join("5.parquet"),
        cut_short("formats/textworld.parquet"),
    )
    .unwrap();

    let report = run.credit(["report", "logs", "--out", "whole", "--methods", "grpo"]);
    assert_eq!(report.status.code(), Some(2));
    assert!(
        stderr(&report).contains("logs/3.jsonl.gz"),
        "{}",
        stderr(&report)
    );

    let once = watch(&run, &["--once"]);
    let output = once.wait_with_output().unwrap();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    headline_with(&run.path("report"), rows(&one) + rows(&two));
    let noted = notes(&run.path("report"));
    let said: Vec<serde_json::Value> = json_lines(&output)
        .into_iter()
        .filter_map(|l| l.get("note").cloned())
        .collect();
    for name in ["3.jsonl.gz", "4.jsonl.zst", "5.parquet"] {
        let note = noted
            .iter()
            .find(|n| n.contains(name))
            .unwrap_or_else(|| panic!("no note on {name}: {noted:?}"));
        assert!(note.contains(&format!("logs/{name}")), "{note}");
        assert!(note.contains("not read: "), "{note}");
        assert!(err.contains(&format!("note: {note}")), "{err}");
        assert!(said.contains(&serde_json::json!(note)), "{said:?}");
    }
    assert!(
        err.contains("3 log files could not be read (see the notes above and in summary.json): logs/3.jsonl.gz, logs/4.jsonl.zst, logs/5.parquet"),
        "{err}"
    );

    // A rule failing at once does not hide them: still 2.
    std::fs::write(
        run.path("rules.toml"),
        "[[rule]]\nkey = \"headline.success_rate\"\nmax = 0.01\n",
    )
    .unwrap();
    let gate = watch(&run, &["--once", "--check", "rules.toml", "--fail-fast"]);
    let output = gate.wait_with_output().unwrap();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(String::from_utf8_lossy(&output.stdout).contains("check_failed"));
    assert!(err.contains("3 log files could not be read"), "{err}");

    // Nothing that reads: no report, the same error.
    let bad = Run::new();
    std::fs::create_dir(bad.path("logs")).unwrap();
    std::fs::write(
        bad.path("logs/1.jsonl.gz"),
        cut_short("formats/textworld.jsonl.gz"),
    )
    .unwrap();
    let output = watch(&bad, &["--once"]).wait_with_output().unwrap();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(err.contains("note: not read: logs/1.jsonl.gz"), "{err}");
    assert!(
        err.contains(
            "1 log file could not be read (see the notes above; no rows read): logs/1.jsonl.gz"
        ),
        "{err}"
    );
    assert!(!bad.path("report/summary.json").exists());
}

/// While watching, a last line without its line break is read once it stayed so a while (and
/// read again when it goes on); a file cut short is named once it stayed so, and the watch goes
/// on; stopped, it exits 2.
#[test]
fn a_live_watch_reads_what_stays_incomplete_and_names_what_does_not_read() {
    let run = Run::new();
    let logs = run.path("logs");
    std::fs::create_dir(&logs).unwrap();
    let out = run.path("report");
    let (one, two, three) = (iteration(1), iteration(2), iteration(3));
    std::fs::write(logs.join("1.jsonl"), &one).unwrap();
    std::fs::write(logs.join("2.jsonl"), two.trim_end()).unwrap();
    std::fs::write(
        logs.join("bad.jsonl.gz"),
        cut_short("formats/textworld.jsonl.gz"),
    )
    .unwrap();
    let mut child = watch(&run, &[]);
    headline_with(&out, rows(&one) + rows(&two));
    let note = note_with(&out, "logs/bad.jsonl.gz");
    assert!(note.contains("not read: "), "{note}");

    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(logs.join("2.jsonl"))
        .unwrap();
    file.write_all(format!("\n{three}").as_bytes()).unwrap();
    drop(file);
    headline_with(&out, rows(&one) + rows(&two) + rows(&three));

    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(exit_code(&mut child), Some(2));
    let err = stderr(&child.wait_with_output().unwrap());
    assert!(
        err.contains("note: logs/2.jsonl: its last line, read without a line break, went on: reading the run again, this file from its start"),
        "{err}"
    );
    assert!(err.contains(&format!("note: {note}")), "{err}");
    assert!(
        err.contains("1 log file could not be read (see the notes above and in summary.json): logs/bad.jsonl.gz"),
        "{err}"
    );
}

/// A watch stopped while a last line or a compressed stream is being written says it left them
/// out (exit 0: they are not known to be broken).
#[test]
fn a_stopped_watch_names_a_last_line_still_being_written() {
    let run = Run::new();
    let logs = run.path("logs");
    std::fs::create_dir(&logs).unwrap();
    let out = run.path("report");
    let (one, two) = (iteration(1), iteration(2));
    std::fs::write(logs.join("1.jsonl"), &one).unwrap();
    std::fs::write(logs.join("2.jsonl"), &two[..two.len() - 20]).unwrap();
    std::fs::write(
        logs.join("3.jsonl.gz"),
        cut_short("formats/textworld.jsonl.gz"),
    )
    .unwrap();
    // Polls half a second apart: the cut line is far from stale when the signal comes.
    let mut child = watch_every(&run, "0.5", &[]);
    headline_with(&out, rows(&one) + rows(&two) - 1);
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(exit_code(&mut child), Some(0));
    let err = stderr(&child.wait_with_output().unwrap());
    for said in [
        "logs/2.jsonl: its last line had no line break yet when the watch stopped: left out",
        "logs/3.jsonl.gz: not complete yet (a compressed stream or Parquet file cut short) when the watch stopped: left out",
    ] {
        assert!(err.contains(&format!("note: {said}")), "{err}");
        assert!(notes(&out).contains(&said.to_string()), "{:?}", notes(&out));
    }
}

/// A single-turn log (verl's dump) rewritten in place with more bytes between two polls is read
/// again from its start, not from where the last read ended.
#[test]
fn a_log_rewritten_in_place_is_read_again_from_its_start() {
    let run = Run::new();
    let logs = run.path("logs");
    std::fs::create_dir(&logs).unwrap();
    let out = run.path("report");
    let dump = |n: u32| {
        std::fs::read_to_string(fixture(&format!(
            "verl/with_uid/rollout_data_dir/{n}.jsonl"
        )))
        .unwrap()
    };
    std::fs::write(logs.join("steps.jsonl"), dump(1)).unwrap();
    let mut child = watch(&run, &[]);
    headline_with(&out, rows(&dump(1)));
    // Written over from its first byte, not truncated first.
    let longer = dump(2) + &dump(3);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(logs.join("steps.jsonl"))
        .unwrap();
    file.write_all(longer.as_bytes()).unwrap();
    drop(file);
    let last = headline_with(&out, rows(&longer));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(exit_code(&mut child), Some(0));
    let err = stderr(&child.wait_with_output().unwrap());
    assert!(
        err.contains("note: logs/steps.jsonl: rewritten in place after it was read (the bytes read changed): reading the run again, this file from its start"),
        "{err}"
    );
    let report = run.credit([
        "report",
        "logs",
        "--out",
        "whole",
        "--methods",
        "grpo,gigpo",
    ]);
    assert!(report.status.success(), "{}", stderr(&report));
    let whole: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("whole/summary.json")).unwrap())
            .unwrap();
    assert_eq!(whole["headline"], last);
}

/// A file appended to more often than the watch polls is read while it grows, and said so.
#[test]
fn a_file_appended_faster_than_the_interval_is_read_while_it_grows() {
    let run = Run::new();
    let logs = run.path("logs");
    std::fs::create_dir(&logs).unwrap();
    let out = run.path("report");
    let path = logs.join("run.jsonl");
    std::fs::write(&path, iteration(1)).unwrap();
    let mut child = watch(&run, &[]);
    let writer = std::thread::spawn(move || {
        let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        for it in 2..=60 {
            file.write_all(iteration(it).as_bytes()).unwrap();
            std::thread::sleep(Duration::from_millis(40));
        }
    });
    let mut read_while_growing = false;
    while !writer.is_finished() {
        read_while_growing |= out.join("summary.json").is_file();
        std::thread::sleep(Duration::from_millis(20));
    }
    writer.join().unwrap();
    assert!(read_while_growing, "nothing read while the file grew");
    let all: u64 = (1..=60).map(|it| rows(&iteration(it))).sum();
    headline_with(&out, all);
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(exit_code(&mut child), Some(0));
    let err = stderr(&child.wait_with_output().unwrap());
    assert!(
        err.contains("note: logs/run.jsonl: still growing after 4 polls: what of it is complete is read without waiting for it to hold still"),
        "{err}"
    );
}

/// `--lenient`'s skips are said and kept in `summary.json`'s notes.
#[test]
fn lenient_skips_are_said_and_kept_in_the_notes() {
    let run = Run::new();
    let logs = run.path("logs");
    std::fs::create_dir(&logs).unwrap();
    let one = iteration(1);
    std::fs::write(logs.join("1.jsonl"), format!("{one}{{\"uid\": \n")).unwrap();
    let output = watch(&run, &["--once", "--lenient"])
        .wait_with_output()
        .unwrap();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{err}");
    let note = format!(
        "--lenient skipped 1 row: 1 malformed JSON (the first: logs/1.jsonl:{}:",
        rows(&one) + 1
    );
    assert!(err.contains(&format!("note: {note}")), "{err}");
    let noted = notes(&run.path("report"));
    assert!(noted.iter().any(|n| n.starts_with(&note)), "{noted:?}");
}

/// Logs without an iteration: one line per poll that read rows, numbered, however many files it
/// read; files of one iteration read in one poll: one line for it, without an agreement of its
/// own.
#[test]
fn several_files_read_together_get_a_line_per_read_or_iteration() {
    for (kept, iteration_of) in [("", None), ("\"iteration\": 0, ", Some(0))] {
        let run = Run::new();
        let logs = run.path("logs");
        std::fs::create_dir(&logs).unwrap();
        let text = iteration(1).replace("\"iteration\": 1, ", kept);
        for name in ["a.jsonl", "b.jsonl", "c.jsonl"] {
            let renamed = text.replace("it1-", &format!("{name}-"));
            std::fs::write(logs.join(name), renamed).unwrap();
        }
        let output = watch(&run, &["--once"]).wait_with_output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let lines = json_lines(&output);
        let (recap, lines) = lines.split_last().unwrap();
        assert_eq!(recap["watched"]["rows"], 3 * rows(&text));
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = &lines[0]["iteration"];
        assert_eq!(line["iteration"], serde_json::json!(iteration_of));
        assert_eq!(line["read"], 1);
        assert_eq!(line["rows"], 3 * rows(&text));
        if iteration_of.is_some() {
            assert_eq!(line["spearman"]["grpo~gigpo"], serde_json::Value::Null);
        }
    }
}

/// A folder not made yet is waited for, then one holding only a trainer's hidden temporary files.
#[test]
fn a_folder_not_there_yet_or_holding_only_temporary_files_is_waited_for() {
    let run = Run::new();
    let logs = run.path("logs");
    let out = run.path("report");
    let mut child = watch(&run, &[]);
    let mut err = Stderr::of(&mut child);
    err.wait_for("waiting for logs to appear");
    std::fs::create_dir(&logs).unwrap();
    std::fs::write(logs.join(".tmp-xyz"), "{").unwrap();
    std::fs::write(logs.join(".1.jsonl.swp"), "{").unwrap();
    err.wait_for("waiting for a log file in logs");
    let one = iteration(1);
    std::fs::write(logs.join("1.jsonl"), &one).unwrap();
    headline_with(&out, rows(&one));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(exit_code(&mut child), Some(0));
    let err = err.all();
    assert!(!err.contains("error"), "{err}");
}

#[test]
fn a_second_run_on_a_watched_folder_is_refused_naming_the_watch() {
    let run = Run::new();
    let logs = run.path("logs");
    std::fs::create_dir(&logs).unwrap();
    std::fs::write(logs.join("1.jsonl"), iteration(1)).unwrap();
    let mut first = watch(&run, &[]);
    headline_with(&run.path("report"), rows(&iteration(1)));
    // Between the watch's reports too: the folder stays the watch's until it stops.
    std::thread::sleep(Duration::from_millis(300));
    for command in [
        &["report", "logs", "--out", "report"][..],
        &["watch", "logs", "--out", "report", "--once"][..],
    ] {
        let out = run.credit(command);
        assert_eq!(out.status.code(), Some(2), "{command:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!(
                "report: is being written by another credit run (pid {}: ",
                first.id()
            )) && stderr(&out).contains("credit watch logs --out report"),
            "{command:?}: {}",
            stderr(&out)
        );
    }
    let _ = Command::new("kill")
        .args(["-INT", &first.id().to_string()])
        .status();
    assert_eq!(exit_code(&mut first), Some(0));
    let out = run.credit(["report", "logs", "--out", "report"]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn each_iteration_line_scores_the_methods_against_the_reference() {
    let run = Run::new();
    let logs = run.path("logs");
    std::fs::create_dir(&logs).unwrap();
    let mut child = watch(&run, &["--against", "oracle"]);
    let (one, two) = (iteration(1), iteration(2));
    std::fs::write(logs.join("1.jsonl"), &one).unwrap();
    headline_with(&run.path("report"), rows(&one));
    std::fs::write(logs.join("2.jsonl"), &two).unwrap();
    headline_with(&run.path("report"), rows(&one) + rows(&two));
    let _ = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status();
    assert_eq!(exit_code(&mut child), Some(0));
    let output = child.wait_with_output().unwrap();
    let lines: Vec<serde_json::Value> = json_lines(&output)
        .into_iter()
        .filter_map(|l| l.get("iteration").cloned())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    for (line, file) in lines.iter().zip(["1.jsonl", "2.jsonl"]) {
        // The same scores as `credit compare` on that iteration's file alone.
        let path = format!("logs/{file}");
        let out = run.credit([
            "compare",
            &path,
            "--methods",
            "grpo,gigpo",
            "--against",
            "oracle",
            "--format",
            "json",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let expected: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(line["against"], expected["against"], "{file}: {line}");
        assert_eq!(line["against"]["method"], "oracle");
        assert!(line["against"]["scores"]["gigpo"]["spearman"].is_number());
    }
    // The report holds the whole run's scores.
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("report/summary.json")).unwrap())
            .unwrap();
    assert_eq!(summary["against"]["method"], "oracle");
}
