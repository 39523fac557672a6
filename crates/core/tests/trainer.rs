//! The trainer held to the reference: logged columns made with known bugs (the real TextWorld
//! fixture, its `advantages` computed by a method under a setting a trainer can get wrong, or
//! altered after), each diagnosed by its pattern and the configuration that reproduces it.

use credit_core::analyses::logged::LoggedCheck;
use credit_core::analyses::patterns::Kind;
use credit_core::ingest::IngestOptions;
use credit_core::methods::hisr;
use credit_core::plan::{ParamValue, Plan};
use credit_core::profile::Profile;
use credit_core::run::{Logged, RunPlan};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/real/textworld.jsonl")
}

fn settings(pairs: &[(&str, &str)]) -> Vec<(String, ParamValue)> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), ParamValue::Text(v.to_string())))
        .collect()
}

fn run(path: &Path, list: &str, profile: Profile, set: &[(&str, &str)]) -> RunPlan {
    RunPlan {
        paths: vec![path.to_path_buf()],
        ingest: IngestOptions::default(),
        methods: Plan::new(profile, list, &settings(set)).unwrap(),
        hisr: hisr::Params::preset(profile),
        against: None,
    }
}

/// `method`'s column on the fixture under `profile` and `set`, in input order.
fn column(method: &str, profile: Profile, set: &[(&str, &str)]) -> Vec<f64> {
    let gathered = run(&fixture(), method, profile, set)
        .gather::<(), credit_core::Error>(&Logged, false, &|_| {}, |_, _, _| Ok(()), |_| Ok(()))
        .unwrap()
        .value;
    gathered.advantages[0].1.clone()
}

/// The fixture with `advantages` logged per line, then `method` (and the other planned ones)
/// against it under `profile`.
fn diagnose(logged: &[f64], list: &str, profile: Profile) -> Vec<LoggedCheck> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("textworld.jsonl");
    let text = std::fs::read_to_string(fixture()).unwrap();
    let lines: Vec<String> = text
        .lines()
        .zip(logged)
        .map(|(line, &a)| {
            let mut row: Value = serde_json::from_str(line).unwrap();
            row["advantages"] = json!(a);
            row.to_string()
        })
        .collect();
    assert_eq!(lines.len(), text.lines().count());
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    run(&path, &format!("logged,{list}"), profile, &[])
        .gather::<(), credit_core::Error>(&Logged, false, &|_| {}, |_, _, _| Ok(()), |_| Ok(()))
        .unwrap()
        .value
        .compare()
        .logged
}

/// The configuration found: method, preset, settings apart from the preset, whether it
/// reproduces the column.
fn found(check: &LoggedCheck) -> (String, Profile, Value, bool) {
    let c = check.configuration.as_ref().expect("a configuration");
    (
        c.method.clone(),
        c.preset,
        serde_json::to_value(&c.settings).unwrap(),
        c.reproduces,
    )
}

fn kinds(check: &LoggedCheck) -> Vec<Kind> {
    check.patterns.iter().map(|p| p.kind).collect()
}

#[test]
fn population_std_is_whole_groups_at_sqrt_n_over_n_minus_1() {
    // ddof 0 instead of 1: σ₀ = σ₁·√((n−1)/n), so logged/grpo = √(n/(n−1)) over a group's n rows.
    let logged = column("grpo", Profile::Verl, &[("grpo.std_ddof", "0")]);
    let checks = diagnose(&logged, "grpo", Profile::Verl);
    let check = &checks[0];
    assert_eq!(kinds(check), [Kind::GroupRatio]);
    for group in &check.patterns[0].first {
        let n = group.rows as f64;
        let expected = (n / (n - 1.0)).sqrt();
        assert!(
            (group.ratio.unwrap() - expected).abs() < 1e-6,
            "{group:?} vs {expected}"
        );
        assert!(group.location.contains("textworld.jsonl:"), "{group:?}");
    }
    assert_eq!(
        found(check),
        ("grpo".into(), Profile::Verl, json!({"std_ddof": 0}), true)
    );
}

#[test]
fn eps_penalty_and_stats_over_are_named_by_their_setting() {
    for (setting, value, expected) in [
        ("eps", "1e-4", json!({"eps": 1e-4})),
        ("invalid_penalty", "0", json!({"invalid_penalty": 0.0})),
        (
            "stats_over",
            "trajectories",
            json!({"stats_over": "trajectories"}),
        ),
    ] {
        let key = format!("gigpo.{setting}");
        let logged = column("gigpo", Profile::Verl, &[(key.as_str(), value)]);
        let checks = diagnose(&logged, "gigpo", Profile::Verl);
        assert!(checks[0].rows_beyond > 0, "{setting}");
        assert_eq!(
            found(&checks[0]),
            ("gigpo".into(), Profile::Verl, expected, true),
            "{setting}"
        );
    }
}

#[test]
fn a_penalty_over_trajectory_statistics_shows_on_the_invalid_rows_only() {
    // Paper GRPO takes a group's statistics over each trajectory's first row; a penalty moves
    // the score of each invalid row (none of them a first step here) and nothing else.
    let logged = column("grpo", Profile::Paper, &[("grpo.invalid_penalty", "0.1")]);
    let checks = diagnose(&logged, "grpo", Profile::Paper);
    assert_eq!(kinds(&checks[0]), [Kind::InvalidOnly]);
    assert_eq!(
        found(&checks[0]),
        (
            "grpo".into(),
            Profile::Paper,
            json!({"invalid_penalty": 0.1}),
            true
        )
    );
}

#[test]
fn a_flipped_trajectory_and_a_zeroed_row_are_no_configuration() {
    let gigpo = column("gigpo", Profile::Verl, &[]);
    // The fixture's first trajectory is lines 1–12 (steps 0–11); line 30 is another's.
    let first_traj = 0..12;
    let mut logged = gigpo.clone();
    for r in first_traj.clone() {
        logged[r] = -gigpo[r];
    }
    logged[29] = 0.0;
    let checks = diagnose(&logged, "gigpo", Profile::Verl);
    let check = &checks[0];
    assert_eq!(kinds(check), [Kind::TrajectoryFlip, Kind::Isolated]);
    let flip = &check.patterns[0];
    let nonzero = first_traj
        .clone()
        .filter(|&r| gigpo[r].abs() > 5e-5)
        .count();
    assert_eq!((flip.rows, flip.instances), (nonzero, 1));
    assert_eq!(
        flip.first[0].trajectory.as_deref(),
        Some("4118cc86-d48e-43ff-a626-16deda89d29c")
    );
    let isolated = &check.patterns[1];
    assert_eq!(isolated.rows, 1);
    assert!(
        isolated.first[0].location.ends_with("textworld.jsonl:30"),
        "{isolated:?}"
    );
    // The closest configuration is GiGPO as planned, off by the flip: 2·max |A| of the
    // trajectory.
    let (method, preset, settings, reproduces) = found(check);
    assert_eq!(
        (method.as_str(), preset, settings, reproduces),
        ("gigpo", Profile::Verl, json!({}), false)
    );
    let flipped = first_traj.map(|r| 2.0 * gigpo[r].abs()).fold(0.0, f64::max);
    let expected = flipped.max(gigpo[29].abs());
    let c = check.configuration.as_ref().unwrap();
    assert!((c.max_abs_diff - expected).abs() < 1e-12, "{c:?}");
    assert_eq!(c.rows_differing, check.rows_beyond);
}

#[test]
fn a_matching_column_searches_nothing() {
    let logged = column("gigpo", Profile::Verl, &[]);
    let checks = diagnose(&logged, "gigpo,grpo", Profile::Verl);
    assert!(checks[0].patterns.is_empty());
    let c = checks[0].configuration.as_ref().unwrap();
    assert_eq!(
        (c.method.as_str(), c.reproduces, c.searched.windows),
        ("gigpo", true, 0)
    );
    // GRPO departs everywhere, and GiGPO is what the trainer ran.
    assert_eq!(found(&checks[1]).0, "gigpo");
}
