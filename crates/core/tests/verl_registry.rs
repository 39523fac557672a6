//! verl's advantage registry against verl itself: every column of
//! `fixtures/reference/X.verl-registry-ref.jsonl` (verl-project/verl@1dda039 `core_algos.py` run
//! unmodified in float32 on `fixtures/real/X.jsonl` as one batch, copied from `../shared/data`)
//! recomputed with the settings of the CLI commands that reproduce it:
//!
//! - `step_<m>`: `--preset verl --invalid-penalty 0 --methods <m>` (verl-agent's layout);
//! - `step01_<m>`: `--preset verl --methods <m>` (its invalid-action penalty 0.1);
//! - `traj_<m>`: `--preset verl --invalid-penalty 0 --set <m>.stats_over=trajectories` (verl's own
//!   multi-turn agent loop);
//! - `<m>__nostd`: `--set <m>.norm=mean` (`grpo__nostd` is `drgrpo`), and
//!   `traj_reinforce_plus_plus__gamma0.95`: `--set reinforce_plus_plus.gamma=0.95`.
//!
//! The reference computes in float32, so "equal" is |Δ| ≤ 1e-4.

use credit_core::ingest::{read_paths, IngestOptions};
use credit_core::methods::{Advantages, VERL};
use credit_core::plan::{ParamValue, Plan, Setting};
use credit_core::profile::Profile;
use credit_core::StepBatch;
use std::path::PathBuf;

const TOL: f64 = 1e-4;

fn fixture(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures")
        .join(path)
}

fn load(name: &str) -> StepBatch {
    read_paths(
        &[fixture(&format!("real/{name}.jsonl"))],
        &IngestOptions::default(),
    )
    .expect("fixture reads")
    .batch
}

fn reference(batch: &StepBatch, name: &str) -> Vec<serde_json::Map<String, serde_json::Value>> {
    let file = format!("reference/{name}.verl-registry-ref.jsonl");
    let text = std::fs::read_to_string(fixture(&file)).unwrap();
    let rows: Vec<serde_json::Map<String, serde_json::Value>> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), batch.len(), "{file}: one row per input row");
    let traj = batch.frame().column("traj_id").unwrap().str().unwrap();
    let step = batch.frame().column("step").unwrap().i64().unwrap();
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["traj_uid"].as_str(), traj.get(i), "{file} row {i}");
        assert_eq!(r["step"].as_i64(), step.get(i), "{file} row {i}");
    }
    rows
}

/// The method and settings that reproduce the reference column `column`.
fn command(column: &str) -> (String, Vec<Setting>) {
    let (config, rest) = column.split_once('_').unwrap();
    let (method, variant) = rest.split_once("__").unwrap_or((rest, ""));
    let text = |k: &str, v: &str| (k.to_string(), ParamValue::Text(v.to_string()));
    let label = match (method, variant) {
        ("grpo", "nostd") => "drgrpo",
        _ => method,
    };
    let mut settings = Vec::new();
    match config {
        "step" => settings.push(text("invalid_penalty", "0")),
        "step01" => {}
        "traj" => {
            settings.push(text("invalid_penalty", "0"));
            settings.push(text(&format!("{label}.stats_over"), "trajectories"));
        }
        other => panic!("unknown configuration `{other}` in `{column}`"),
    }
    match variant {
        "" => {}
        "nostd" if label == "drgrpo" => {}
        "nostd" => settings.push(text(&format!("{label}.norm"), "mean")),
        "gamma0.95" => settings.push(text(&format!("{label}.gamma"), "0.95")),
        other => panic!("unknown variant `{other}` in `{column}`"),
    }
    (label.to_string(), settings)
}

/// The largest |credit − verl| of `column` and the row where it is.
fn worst(
    a: &Advantages,
    rows: &[serde_json::Map<String, serde_json::Value>],
    column: &str,
) -> (f64, usize) {
    a.advantage()
        .iter()
        .zip(rows)
        .map(|(got, r)| {
            let expected = r[column]
                .as_f64()
                .unwrap_or_else(|| panic!("{column}: not a number: {}", r[column]));
            (got - expected).abs()
        })
        .enumerate()
        .fold(
            (0.0, 0),
            |(w, at), (i, d)| if d > w { (d, i) } else { (w, at) },
        )
}

#[test]
fn every_reference_column_in_every_configuration() {
    let mut table = Vec::new();
    for name in ["textworld", "sokoban"] {
        let batch = load(name);
        let rows = reference(&batch, name);
        let columns: Vec<&String> = rows[0]
            .keys()
            .filter(|k| !["uid", "traj_uid", "step", "params"].contains(&k.as_str()))
            .collect();
        assert_eq!(columns.len(), 37, "{name}: the README's 37 columns");
        for column in columns {
            let (method, settings) = command(column);
            let plan = Plan::new(Profile::Verl, &method, &settings).unwrap();
            let a = plan.run(&batch).unwrap().remove(0);
            let (d, at) = worst(&a, &rows, column);
            table.push(format!("{name:9} {column:40} {d:.1e}"));
            assert!(
                d <= TOL,
                "{name} {column}: |Δ| = {d:e} at row {at} (credit {}, verl {})",
                a.advantage()[at],
                rows[at][column]
            );
        }
    }
    // `cargo test --test verl_registry -- --nocapture` prints the table.
    println!("{}", table.join("\n"));
}

#[test]
fn every_estimator_the_reference_holds_is_in_methods_verl() {
    let rows = reference(&load("textworld"), "textworld");
    for column in rows[0].keys().filter(|k| k.starts_with("step_")) {
        let (method, _) = command(column);
        assert!(
            method == "drgrpo" || VERL.contains(&method.as_str()),
            "{method} is missing from `--methods verl`"
        );
    }
}

#[test]
fn grpo_passk_over_step_rows_is_zero_with_a_note() {
    // verl-agent's layout: each group's two best rows are steps of the winning trajectory.
    let batch = load("textworld");
    let settings = [("invalid_penalty".to_string(), ParamValue::Number(0.0))];
    let plan = Plan::new(Profile::Verl, "grpo_passk", &settings).unwrap();
    let a = plan.run(&batch).unwrap().remove(0);
    assert!(a.advantage().iter().all(|&x| x == 0.0));
    assert!(a.notes[0].contains("in 3 of 3 groups"), "{:?}", a.notes);
}
