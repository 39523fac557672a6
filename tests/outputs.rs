//! The output rule, for every writing command: an output that is, contains or lies inside an input
//! is refused (exit 2, nothing written); a folder output goes only into a new or empty folder or
//! credit's own earlier output of the same command, and only what its manifest lists is replaced;
//! a write that fails names the output and leaves the old one whole.
//!
//! `fuzz_outputs_never_touch_inputs` drives the writing commands with outputs drawn from {an
//! input file, an input folder, its parent, a folder of other files, a fresh path, a symlink or a
//! hard link to an input, a path inside an input} and checks that no input byte changes and no
//! file outside credit's manifests disappears or changes. Bounded by `CREDIT_FUZZ_SECONDS` (as
//! the ingest fuzzer, `tests/fuzz.rs`; CI runs both for longer) and reproducible with
//! `CREDIT_FUZZ_SEED`.

use crate::util::{fixture, stderr, Run};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::{Duration, Instant};

/// Every file under `root` (symlinks as their target text), by path relative to it.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let key = path.strip_prefix(root).unwrap().to_path_buf();
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(key, target.as_os_str().as_encoded_bytes().to_vec());
            } else if meta.is_dir() {
                walk(root, &path, out);
            } else {
                out.insert(key, std::fs::read(&path).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The files credit's manifests under `root` list (relative to `root`), and the manifests.
fn credits_files(files: &BTreeMap<PathBuf, Vec<u8>>) -> Vec<PathBuf> {
    let mut listed = Vec::new();
    for (path, bytes) in files {
        if path
            .file_name()
            .is_some_and(|n| n == ".credit-manifest.json")
        {
            listed.push(path.clone());
            let manifest: serde_json::Value = serde_json::from_slice(bytes).unwrap();
            let dir = path.parent().unwrap_or(Path::new(""));
            for file in manifest["files"].as_array().unwrap() {
                listed.push(dir.join(file.as_str().unwrap()));
            }
        }
    }
    listed
}

/// A workspace: `logs/` (a JSONL and a Parquet log), `other/` (a user's files), a symlink to a
/// log and to the folder, a hard link to a log.
fn workspace(run: &Run) {
    let logs = run.path("logs");
    std::fs::create_dir(&logs).unwrap();
    std::fs::copy(fixture("real/textworld.jsonl"), logs.join("a.jsonl")).unwrap();
    std::fs::copy(fixture("formats/textworld.parquet"), logs.join("b.parquet")).unwrap();
    std::fs::create_dir(run.path("other")).unwrap();
    std::fs::write(run.path("other/notes.txt"), "my notes").unwrap();
    std::fs::write(run.path("other/report.html"), "<p>my page</p>").unwrap();
    std::os::unix::fs::symlink("logs/a.jsonl", run.path("link.jsonl")).unwrap();
    std::os::unix::fs::symlink("logs", run.path("linkdir")).unwrap();
    std::fs::hard_link(logs.join("a.jsonl"), run.path("hard.jsonl")).unwrap();
}

/// What the property test adds to [`workspace`]: credit folder outputs whose subfolder or file
/// was replaced by a link to the user's `other/`, and temporaries of runs elsewhere.
fn hostile(run: &Run) {
    for (dir, command, linked) in [("rep", "report", "figures"), ("g", "graph", "x.dot")] {
        std::fs::create_dir(run.path(dir)).unwrap();
        let manifest = serde_json::json!({
            "command": command,
            "files": ["figures/success.png", "x.dot", "report.html"],
        });
        std::fs::write(
            run.path(&format!("{dir}/.credit-manifest.json")),
            serde_json::to_vec(&manifest).unwrap(),
        )
        .unwrap();
        std::fs::write(run.path(&format!("{dir}/report.html")), "old").unwrap();
        let to = if linked == "figures" {
            "../other"
        } else {
            "../other/notes.txt"
        };
        std::os::unix::fs::symlink(to, run.path(&format!("{dir}/{linked}"))).unwrap();
    }
    std::fs::write(run.path("other/success.png"), "the user's").unwrap();
    for name in [
        ".credit-4194305-0badf00d-abcdef.tmp",
        "other/.credit-4194305-abcdef.tmp",
    ] {
        std::fs::write(run.path(name), "theirs").unwrap();
    }
}

fn exit(out: &Output) -> Option<i32> {
    out.status.code()
}

/// Refused: exit 2 with `expected` in the message, and nothing in the workspace changed.
fn assert_refused(run: &Run, args: &[&str], expected: &str) {
    let before = snapshot(run.dir.path());
    let out = run.credit(args);
    assert_eq!(exit(&out), Some(2), "{args:?}: {}", stderr(&out));
    assert!(
        stderr(&out).contains(expected),
        "{args:?}: expected `{expected}` in: {}",
        stderr(&out)
    );
    assert_eq!(snapshot(run.dir.path()), before, "{args:?} changed files");
}

#[cfg(unix)]
#[test]
fn outputs_over_into_or_around_inputs_are_refused() {
    let run = Run::new();
    workspace(&run);
    // The report that used to delete the logs, and the log renamed aside.
    assert_refused(
        &run,
        &["report", "logs", "--out", "logs"],
        "is the input logs",
    );
    assert_refused(
        &run,
        &["report", "logs/a.jsonl", "--out", "logs"],
        "contains the input logs/a.jsonl",
    );
    assert_refused(
        &run,
        &["report", "logs/a.jsonl", "--out", "logs/a.jsonl"],
        "is the input",
    );
    assert_refused(
        &run,
        &["report", "logs", "--out", "logs/report"],
        "lies inside the input folder logs",
    );
    assert_refused(
        &run,
        &["report", "logs", "--out", "."],
        "contains the input logs",
    );
    assert_refused(
        &run,
        &["report", "logs", "--out", "linkdir"],
        "is the input logs",
    );
    // A folder of other files, and a file, are not report folders.
    assert_refused(
        &run,
        &["report", "logs", "--out", "other"],
        "is a folder of other files (2 entries: notes.txt, report.html)",
    );
    assert_refused(
        &run,
        &["report", "logs/a.jsonl", "--out", "hard.jsonl"],
        "is an input by another name (a hard link)",
    );
    assert_refused(
        &run,
        &["report", "logs/a.jsonl", "--out", "other/notes.txt"],
        "is a file, not a folder",
    );
    // The other writing commands, under the same rule.
    for args in [
        &["advantages", "logs", "-o", "logs/adv.parquet"][..],
        &["advantages", "logs/a.jsonl", "-o", "link.jsonl"],
        &["advantages", "logs/a.jsonl", "-o", "hard.jsonl"],
        &["graph", "logs", "--out", "logs"],
        &["graph", "logs", "--out", "other"],
        &["analyze", "logs", "--plots", "logs/plots"],
        &["compare", "logs", "--plots", "other"],
        &["train", "progress", "logs", "--out", "logs"],
        &["train", "sprm", "logs", "--out", "other"],
        &[
            "train",
            "policy",
            "logs",
            "--model",
            "other",
            "--method",
            "grpo",
            "--out",
            "logs/ckpt",
        ],
        &[
            "train",
            "policy",
            "logs",
            "--model",
            "other",
            "--method",
            "grpo",
            "--handoff",
            "hard.jsonl",
        ],
    ] {
        let before = snapshot(run.dir.path());
        let out = run.credit(args);
        assert_eq!(exit(&out), Some(2), "{args:?}: {}", stderr(&out));
        let message = stderr(&out);
        assert!(
            [
                "is the input",
                "lies inside",
                "contains the input",
                "hard link",
                "folder of other files"
            ]
            .iter()
            .any(|m| message.contains(m)),
            "{args:?}: {message}"
        );
        assert_eq!(snapshot(run.dir.path()), before, "{args:?} changed files");
    }
}

#[cfg(unix)]
#[test]
fn a_report_folder_is_credits_and_keeps_a_users_file() {
    let run = Run::new();
    workspace(&run);
    let out = run.credit(["report", "logs", "--out", "rep", "--explore-max", "0"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.path("rep/.credit-manifest.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["command"], "report");
    let listed: Vec<&str> = manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    for file in [
        "report.html",
        "report.md",
        "summary.json",
        "figures/success.png",
    ] {
        assert!(listed.contains(&file), "{file} not in {listed:?}");
    }
    // A user's file put in the folder, and a figure of the earlier run that the next one does
    // not draw: the first is kept, the second (credit's) removed.
    std::fs::write(run.path("rep/my-notes.md"), "keep me").unwrap();
    std::fs::write(run.path("rep/figures/old-figure.svg"), "").unwrap();
    let mut manifest = manifest;
    manifest["files"]
        .as_array_mut()
        .unwrap()
        .push("figures/old-figure.svg".into());
    std::fs::write(
        run.path("rep/.credit-manifest.json"),
        serde_json::to_vec(&manifest).unwrap(),
    )
    .unwrap();
    let out = run.credit(["report", "logs", "--out", "rep/", "--explore-max", "0"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_to_string(run.path("rep/my-notes.md")).unwrap(),
        "keep me"
    );
    assert!(!run.path("rep/figures/old-figure.svg").exists());
    assert!(run.path("rep/report.html").is_file());
    // Another command's folder is not a report's.
    assert_refused(
        &run,
        &["graph", "logs", "--out", "rep"],
        "holds the output of `credit report`",
    );
    // No temporaries anywhere.
    let left: Vec<_> = snapshot(run.dir.path())
        .into_keys()
        .filter(|p| {
            p.to_string_lossy().contains(".credit-") && !p.ends_with(".credit-manifest.json")
        })
        .collect();
    assert!(left.is_empty(), "temporaries left: {left:?}");
}

/// The `.credit-` temporaries under the workspace that were not there before the run.
fn new_temporaries(
    before: &BTreeMap<PathBuf, Vec<u8>>,
    after: &BTreeMap<PathBuf, Vec<u8>>,
) -> Vec<PathBuf> {
    after
        .keys()
        .filter(|p| {
            p.to_string_lossy().contains(".credit-")
                && !p.ends_with(".credit-manifest.json")
                && !before.contains_key(*p)
        })
        .cloned()
        .collect()
}

#[cfg(unix)]
#[test]
fn nothing_is_written_or_removed_through_a_link_inside_a_folder_output() {
    let run = Run::new();
    workspace(&run);
    let report = ["report", "logs", "--out", "rep", "--explore-max", "0"];
    let out = run.credit(report);
    assert!(out.status.success(), "{}", stderr(&out));
    // The figures folder, restored from a CI artifact as a link to another folder holding a
    // user's files of the same names.
    std::fs::create_dir(run.path("outside")).unwrap();
    for entry in std::fs::read_dir(run.path("rep/figures")).unwrap() {
        let name = entry.unwrap().file_name();
        std::fs::write(run.path("outside").join(&name), "the user's").unwrap();
    }
    std::fs::remove_dir_all(run.path("rep/figures")).unwrap();
    std::os::unix::fs::symlink("../outside", run.path("rep/figures")).unwrap();
    let before = snapshot(run.dir.path());
    let out = run.credit(report);
    assert_eq!(exit(&out), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(
            "lies under a symbolic link inside the folder output, figures (to ../outside): credit never writes or removes through a link; remove the link or choose another folder (nothing was written)"
        ),
        "{}",
        stderr(&out)
    );
    // The user's files, the earlier report and its manifest: all as they were.
    assert_eq!(snapshot(run.dir.path()), before);

    // A graph folder whose file was replaced by a link to a user's file.
    let graph = ["graph", "logs", "--out", "g", "--top", "1"];
    let out = run.credit(graph);
    assert!(out.status.success(), "{}", stderr(&out));
    let dot = std::fs::read_dir(run.path("g"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "dot"))
        .unwrap();
    std::fs::remove_file(&dot).unwrap();
    std::os::unix::fs::symlink("../other/notes.txt", &dot).unwrap();
    let before = snapshot(run.dir.path());
    let out = run.credit(graph);
    assert_eq!(exit(&out), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("is a symbolic link inside the folder output")
            && stderr(&out).contains("(to ../other/notes.txt)"),
        "{}",
        stderr(&out)
    );
    assert_eq!(snapshot(run.dir.path()), before);
}

#[cfg(unix)]
#[test]
fn temporaries_of_other_runs_and_look_alikes_are_left_alone() {
    let run = Run::new();
    workspace(&run);
    // A live run in another container or host sharing the disk (its pid means nothing here), an
    // earlier version's temporary, and a user's files that look like temporaries.
    let theirs = [
        ".credit-4194305-0badf00d-abcdef.tmp",
        ".credit-1-0badf00d-abcdef.tmp.png",
        ".credit-4194305-abcdef.tmp",
        ".credit-notes.tmp",
    ];
    for name in theirs {
        std::fs::write(run.path(name), "theirs").unwrap();
    }
    let out = run.credit(["advantages", "logs", "--methods", "grpo", "-o", "adv.csv"]);
    assert!(out.status.success(), "{}", stderr(&out));
    for name in theirs {
        assert_eq!(
            std::fs::read_to_string(run.path(name)).unwrap(),
            "theirs",
            "{name}"
        );
    }
}

#[cfg(unix)]
#[test]
fn concurrent_runs_on_one_folder_output_take_turns_or_are_refused_naming_the_other() {
    let run = Run::new();
    workspace(&run);
    for (command, out_dir) in [
        (["report", "logs", "--out", "r", "--explore-max", "1"], "r"),
        (["graph", "logs", "--out", "g", "--top", "2"], "g"),
    ] {
        for _ in 0..3 {
            let spawn = || {
                std::process::Command::new(env!("CARGO_BIN_EXE_credit"))
                    .args(command)
                    .current_dir(run.dir.path())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            };
            let (a, b) = (spawn(), spawn());
            let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
            let mut succeeded = 0;
            for out in &outs {
                match exit(out) {
                    Some(0) => succeeded += 1,
                    Some(2) => assert!(
                        stderr(out).contains("is being written by another credit run (pid ")
                            && stderr(out).contains(
                                "wait for it to end, or choose another folder (nothing was written)"
                            ),
                        "{command:?}: {}",
                        stderr(out)
                    ),
                    code => panic!("{command:?}: exit {code:?}: {}", stderr(out)),
                }
            }
            assert!(succeeded >= 1, "{command:?}: neither run wrote");
            // The folder is whole and credit's: every file its manifest lists is there, and the
            // next run writes it.
            let files = snapshot(&run.path(out_dir));
            for listed in credits_files(&files) {
                assert!(
                    files.contains_key(&listed),
                    "{command:?}: {listed:?} missing"
                );
            }
            let out = run.credit(command);
            assert!(out.status.success(), "{command:?}: {}", stderr(&out));
        }
    }
}

#[test]
fn output_names_of_251_to_255_characters_are_written() {
    // The hidden temporary beside the output has a short name of its own: it never makes a legal
    // name illegal.
    let run = Run::new();
    let input = fixture("real/textworld.jsonl");
    let input = input.to_str().unwrap();
    for length in [251, 255] {
        let name = format!("{}.parquet", "a".repeat(length - 8));
        let out = run.credit(["advantages", input, "--methods", "grpo", "-o", &name]);
        assert!(out.status.success(), "{length}: {}", stderr(&out));
        assert!(run.path(&name).is_file());
    }
    // A CSV whose `.meta.json` would pass 255 bytes: refused before any work, nothing written.
    let name = format!("{}.csv", "c".repeat(251));
    let out = run.credit(["advantages", input, "--methods", "grpo", "-o", &name]);
    assert_eq!(exit(&out), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("longer than 255 bytes"),
        "{}",
        stderr(&out)
    );
    assert!(!run.path(&name).exists());
}

/// `credit` with ingest's windows shrunk so that a log whose groups interleave is read twice.
fn read_twice(run: &Run, args: &[&str]) -> Output {
    run.credit_tiny_windows(args)
}

#[test]
fn advantages_survive_the_second_pass_in_every_format() {
    // A group that comes back after its window closed makes the reader start again; the writer
    // of the first pass is replaced by a new one while it is still open.
    let run = Run::new();
    let input = fixture("formats/sokoban.interleaved.jsonl");
    for name in ["out.jsonl", "out.parquet", "out.csv"] {
        let args = [
            "advantages",
            input.to_str().unwrap(),
            "--methods",
            "grpo",
            "-o",
            name,
        ];
        let out = read_twice(&run, &args);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("read the logs twice"),
            "{name}: the second pass ran: {}",
            stderr(&out)
        );
        let twice = table(&run.path(name));
        let out = run.credit(args);
        assert!(out.status.success(), "{name}: {}", stderr(&out));
        assert!(twice.equals_missing(&table(&run.path(name))), "{name}");
    }
}

/// An output table's contents (a Parquet file's row groups follow the windows it was written in:
/// compare what it holds, not its bytes).
fn table(path: &std::path::Path) -> polars::prelude::DataFrame {
    use polars::prelude::*;
    let file = std::fs::File::open(path).unwrap();
    match path.extension().and_then(|e| e.to_str()) {
        Some("parquet") => ParquetReader::new(file).finish().unwrap(),
        Some("csv") => CsvReader::new(file).finish().unwrap(),
        _ => JsonReader::new(file)
            .with_json_format(JsonFormat::JsonLines)
            .finish()
            .unwrap(),
    }
}

/// Fills `full/` but for 8 KiB (sh).
const FILL: &str =
    "head -c $(( ($(df -k full | awk 'NR==2 {print $4}') - 8) * 1024 )) /dev/zero > full/filler";

/// Runs `script` (sh) with a 1 MiB file system mounted at `full/`, in a private mount namespace
/// (`unshare`: no root needed where user namespaces are allowed, and nothing outlives the run).
fn on_a_small_disk(run: &Run, script: &str) -> Output {
    std::fs::create_dir_all(run.path("full")).unwrap();
    let out = std::process::Command::new("unshare")
        .args(["-rm", "sh", "-c"])
        .arg(format!("mount -t tmpfs -o size=1m tmpfs full && {script}"))
        .current_dir(run.dir.path())
        .env("CREDIT", env!("CARGO_BIN_EXE_credit"))
        .output()
        .expect("unshare (util-linux) runs");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("mount:"),
        "a private tmpfs could not be mounted: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[cfg(target_os = "linux")]
#[test]
fn a_full_disk_is_a_write_error_naming_the_output_and_keeps_the_old_one() {
    let run = Run::new();
    let input = fixture("real/sokoban.jsonl");
    let input = input.display();
    // The output fits; then the disk fills, and the next one does not. Each format, then the report: the error names
    // the file and the disk's reason once, the stage is writing, and the old output is whole.
    for name in ["adv.csv", "adv.jsonl", "adv.parquet"] {
        let out = on_a_small_disk(
            &run,
            &format!(
                "$CREDIT advantages {input} --methods grpo -o full/{name} --set grpo.gamma=1 >/dev/null 2>&1 \
                 && cp full/{name} full/{name}.before \
                 && {FILL} \
                 && $CREDIT advantages {input} --methods all -o full/{name}; code=$?; \
                 cmp full/{name} full/{name}.before && echo SAME; ls -a full; exit $code"
            ),
        );
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(2), "{name}: {stdout}{stderr}");
        assert!(
            stderr.contains(&format!(
                "error: writing full/{name}: no space left on device"
            )),
            "{name}: {stderr}"
        );
        assert_eq!(
            stderr.matches("no space left").count(),
            1,
            "{name}: {stderr}"
        );
        assert!(!stderr.contains("reading the logs"), "{name}: {stderr}");
        assert!(
            stdout.contains("SAME"),
            "{name}: the old output is whole: {stdout}"
        );
        assert!(
            !stdout.contains(".credit-"),
            "{name}: temporaries left: {stdout}"
        );
    }
    // A report over an earlier one: the disk fills while its files are written, and the earlier
    // report stays whole (no new figure beside the old page).
    let sums = "(cd full/rep && find . -type f | sort | xargs md5sum)";
    let out = on_a_small_disk(
        &run,
        &format!(
            "$CREDIT report {input} --out full/rep --explore-max 0 --methods grpo >/dev/null 2>&1 && echo FIRST \
             && {sums} > sums.before && {FILL} \
             && $CREDIT report {input} --out full/rep --methods all; code=$?; \
             {sums} > sums.after; cmp sums.before sums.after && echo SAME; ls -a full/rep; exit $code"
        ),
    );
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        stdout.contains("FIRST"),
        "the first report fits: {stdout}{stderr}"
    );
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("error: writing full/rep/") && stderr.contains("no space left on device"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("Error(") && !stderr.contains("Custom"),
        "{stderr}"
    );
    assert!(
        stdout.contains("SAME"),
        "the earlier report is whole: {stdout}"
    );
    assert!(!stdout.contains(".tmp"), "temporaries left: {stdout}");
}

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

#[cfg(unix)]
#[test]
fn fuzz_outputs_never_touch_inputs() {
    let seconds: u64 = std::env::var("CREDIT_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    let seed: u64 = std::env::var("CREDIT_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_c0ffee);
    let mut rng = Rng(seed | 1);
    let model = Run::new();
    let model_dir = model.path("model");
    credit_train::test_support::write_model_dir(
        &model_dir,
        &credit_train::Config::qwen2_tiny(credit_train::test_support::BYTE_LEVEL_VOCAB),
        3,
        1,
        credit_train::DType::F32,
    )
    .unwrap();
    let model_dir = model_dir.display().to_string();
    // (what is written, the output's flag and extension)
    let commands: [(&[&str], &str, &str); 8] = [
        (&["advantages", "--methods", "grpo,gigpo"], "-o", ".parquet"),
        (&["advantages", "--methods", "grpo"], "-o", ".csv"),
        (&["report", "--explore-max", "1"], "--out", ""),
        (&["graph", "--top", "1"], "--out", ""),
        (&["analyze", "--format", "json"], "--plots", ""),
        (&["compare", "--format", "json"], "--plots", ""),
        (
            &["train", "progress", "--epochs", "1", "--folds", "1"],
            "--out",
            "",
        ),
        (
            &[
                "train",
                "policy",
                "--model",
                &model_dir,
                "--method",
                "grpo",
                "--steps",
                "1",
                "--max-samples",
                "2",
                "--max-prompt-tokens",
                "32",
                "--batch-size",
                "1",
            ],
            "--out",
            "",
        ),
    ];
    let outputs = [
        "logs/a.jsonl",
        "logs",
        ".",
        "other",
        "other/report.html",
        "fresh",
        "deep/er/fresh",
        "link.jsonl",
        "linkdir",
        "hard.jsonl",
        "logs/inside",
        "linkdir/inside",
        "rep",
        "g",
    ];
    let inputs = ["logs", "logs/a.jsonl", "linkdir", "logs/b.parquet"];
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let (mut cases, mut written, mut refused) = (0u32, 0u32, 0u32);
    while Instant::now() < deadline {
        let run = Run::new();
        workspace(&run);
        hostile(&run);
        let (command, flag, extension) = *rng.pick(&commands);
        let input = *rng.pick(&inputs);
        let output = *rng.pick(&outputs);
        let output = if output.contains("fresh") {
            format!("{output}{extension}")
        } else {
            output.to_string()
        };
        let mut args: Vec<&str> = command[..1].to_vec();
        if command[0] == "train" {
            args.push(command[1]);
            args.push(input);
            args.extend(&command[2..]);
        } else {
            args.push(input);
            args.extend(&command[1..]);
        }
        args.extend([flag, output.as_str()]);
        let before = snapshot(run.dir.path());
        // One run in four races a second one on the same output.
        let concurrent = rng.next().is_multiple_of(4);
        let outs: Vec<Output> = if concurrent {
            let spawn = || {
                std::process::Command::new(env!("CARGO_BIN_EXE_credit"))
                    .args(&args)
                    .current_dir(run.dir.path())
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            };
            let (a, b) = (spawn(), spawn());
            vec![a.wait_with_output().unwrap(), b.wait_with_output().unwrap()]
        } else {
            vec![run.credit(&args)]
        };
        let after = snapshot(run.dir.path());
        for out in &outs {
            let code = exit(out);
            assert!(
                code == Some(0) || code == Some(2),
                "seed {seed}, {args:?}: exit {code:?}: {}",
                stderr(out)
            );
        }
        let out = &outs[0];
        let code = exit(out);
        // What credit may have replaced: the file the user named as the table output (when it is
        // no input) and its metadata, and what a manifest lists.
        let mut ours = credits_files(&after);
        if flag == "-o" {
            ours.push(PathBuf::from(&output));
            ours.push(PathBuf::from(format!("{output}.meta.json")));
        }
        for (path, bytes) in &before {
            // link.jsonl and hard.jsonl are logs/a.jsonl by other names: inputs when it is read.
            let other_name = path.ends_with("link.jsonl") || path.ends_with("hard.jsonl");
            let input_file = path.starts_with("logs") || (other_name && input != "logs/b.parquet");
            if input_file || !ours.contains(path) {
                assert!(
                    after.get(path) == Some(bytes),
                    "seed {seed}, {args:?} (exit {code:?}) changed or removed {} ({} bytes before, {:?} after): {}",
                    path.display(),
                    bytes.len(),
                    after.get(path).map(Vec::len),
                    stderr(out)
                );
            }
        }
        let temporaries = new_temporaries(&before, &after);
        assert!(
            temporaries.is_empty(),
            "seed {seed}, {args:?}: {temporaries:?}"
        );
        cases += 1;
        match code {
            Some(0) => written += 1,
            _ => refused += 1,
        }
    }
    eprintln!("fuzz: {cases} output cases in {seconds} s (seed {seed}): {written} written, {refused} refused");
    assert!(
        written > 0 && refused > 0,
        "both outcomes were exercised: {written} written, {refused} refused"
    );
}

#[cfg(unix)]
#[test]
fn a_report_interrupted_at_any_moment_leaves_the_earlier_one_whole() {
    let run = Run::new();
    let rows = std::fs::read_to_string(fixture("real/sokoban.jsonl")).unwrap();
    let mut text = String::new();
    for i in 0..60 {
        text.push_str(
            &rows
                .replace("\"uid\": \"", &format!("\"uid\": \"{i}-"))
                .replace("\"traj_uid\": \"", &format!("\"traj_uid\": \"{i}-")),
        );
    }
    std::fs::write(run.path("big.jsonl"), text).unwrap();
    let out = run.credit(["report", "big.jsonl", "--out", "rep", "--methods", "grpo"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let earlier = snapshot(&run.path("rep"));
    // SIGTERM at moments spread over the run (reading, computing, drawing, writing): either the
    // run finished first and its report is whole, or the earlier report is there byte for byte.
    let (mut interrupted, mut finished) = (0, 0);
    for delay_ms in [150, 400, 700, 1000, 1400, 2000, 3000] {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_credit"))
            .args(["report", "big.jsonl", "--out", "rep", "--methods", "all"])
            .current_dir(run.dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let status = child.wait_with_output().unwrap().status;
        let now = snapshot(&run.path("rep"));
        let temporaries = new_temporaries(&BTreeMap::new(), &now);
        assert!(temporaries.is_empty(), "{delay_ms} ms: {temporaries:?}");
        if status.success() {
            finished += 1;
            for listed in credits_files(&now) {
                assert!(
                    now.contains_key(&listed),
                    "{delay_ms} ms: {listed:?} missing"
                );
            }
            // The next rounds interrupt a run over this report.
            let out = run.credit(["report", "big.jsonl", "--out", "rep", "--methods", "grpo"]);
            assert!(out.status.success(), "{}", stderr(&out));
        } else {
            interrupted += 1;
            assert_eq!(
                status.code(),
                Some(143),
                "{delay_ms} ms: exit as SIGTERM asks"
            );
            assert!(now == earlier, "{delay_ms} ms: the earlier report changed");
        }
    }
    eprintln!("interrupted {interrupted}, finished first {finished}");
    assert!(interrupted > 0, "no run was interrupted");
}
