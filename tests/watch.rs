//! `credit watch` (issue #27): iteration files written one by one into a folder (one with a
//! half-written last line, completed later), `summary.json` checked after each lands, then
//! SIGINT; `--once`; `--check --fail-fast`.

use crate::util::{stderr, Run};
use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
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
    Command::new(env!("CARGO_BIN_EXE_credit"))
        .args([
            "watch",
            "logs",
            "--out",
            "report",
            "--methods",
            "grpo,gigpo",
        ])
        .args(["--interval", "0.1", "--format", "json"])
        .args(extra)
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
