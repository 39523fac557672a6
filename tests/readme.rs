//! The README's examples run as written in a clone (where `credit.toml` names the shipped
//! fixtures as the default input).

use crate::util::stdout;
use std::path::Path;
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The README's fenced block that starts with `first_line`.
fn block(first_line: &str) -> String {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let start = readme
        .find(first_line)
        .unwrap_or_else(|| panic!("README has no block starting {first_line:?}"));
    let body = &readme[start..];
    body[..body.find("```").unwrap()].to_string()
}

#[test]
fn readme_thresholds_pass_on_the_shipped_fixtures() {
    // The README shows the shipped rules, rule for rule.
    let rules = repo().join("fixtures/thresholds.toml");
    let shipped = std::fs::read_to_string(&rules).unwrap();
    let rules_of = |text: &str| text.lines().skip(1).map(str::to_string).collect::<Vec<_>>();
    assert_eq!(
        rules_of(&block("# fixtures/thresholds.toml (shipped")),
        rules_of(&shipped)
    );
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_credit"))
        .args(["report", "--preset", "verl", "--explore-max", "0", "--out"])
        .arg(dir.path().join("report"))
        .arg("--check")
        .arg(&rules)
        .current_dir(repo())
        .output()
        .unwrap();
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert_eq!(
        text.lines().filter(|l| l.starts_with("  pass  ")).count(),
        3,
        "{text}"
    );
}

#[test]
fn readme_commands_without_a_path_read_the_fixtures() {
    let dir = tempfile::tempdir().unwrap();
    for args in [
        vec!["analyze".to_string()],
        vec!["compare".into(), "--methods".into(), "grpo,gigpo".into()],
        vec![
            "advantages".into(),
            "--preset".into(),
            "verl".into(),
            "--methods".into(),
            "grpo,gigpo,proxmo".into(),
            "-o".into(),
            dir.path().join("adv.parquet").display().to_string(),
        ],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_credit"))
            .args(&args)
            .current_dir(repo())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "credit {args:?}");
        let text = stdout(&out);
        assert!(
            text.contains("1482 rows") || text.contains("1,482 rows") || text.contains("grpo"),
            "credit {args:?}: {text}"
        );
    }
}

#[test]
fn readme_logged_example_runs_as_printed() {
    // The block's command on the shipped file prints the block's lines (up to its `…`).
    let block = block("$ credit compare fixtures/logged/");
    let mut lines = block.lines();
    let command = lines.next().unwrap().trim_start_matches("$ credit ");
    let out = Command::new(env!("CARGO_BIN_EXE_credit"))
        .args(command.split_whitespace())
        .current_dir(repo())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = stdout(&out);
    let printed: Vec<&str> = lines.take_while(|l| *l != "…").collect();
    assert_eq!(
        text.lines().take(printed.len()).collect::<Vec<_>>(),
        printed
    );
}

/// docs/python.md names the wheel by the distribution pyproject.toml builds, and the README says
/// how the verl-agent patch's module is made importable.
#[test]
fn the_docs_name_the_wheel_and_the_patch_module_as_they_are() {
    let pyproject = std::fs::read_to_string(repo().join("pyproject.toml")).unwrap();
    let name = pyproject
        .lines()
        .find_map(|l| l.strip_prefix("name = \""))
        .and_then(|rest| rest.strip_suffix('"'))
        .expect("pyproject.toml's name");
    // A wheel's file name spells the distribution with underscores.
    let wheel = format!("{}-", name.replace('-', "_"));
    let python = std::fs::read_to_string(repo().join("docs/python.md")).unwrap();
    for line in python.lines().filter(|l| l.contains(".whl")) {
        assert!(line.contains(&wheel), "{line}");
    }
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(readme.contains("put the checkout on `PYTHONPATH`"));
}
