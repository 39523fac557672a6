//! Reference outputs: every method in both profiles on the real fixtures (`fixtures/real/`)
//! against what the public reference code computed for the same rows (`fixtures/reference/`,
//! copied from `../shared/data`; see `fixtures/README.md`). The reference computes in float32, so
//! "equal" is |Δ| ≤ 1e-4.

use credit_core::ingest::{read_paths, IngestOptions};
use credit_core::methods::{Method, Values};
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

/// The reference rows, checked to be aligned with the batch (same uid, traj_uid, step per row).
fn reference(batch: &StepBatch, file: &str) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(fixture(&format!("reference/{file}"))).unwrap();
    let rows: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        rows.len(),
        batch.len(),
        "{file}: one reference row per input row"
    );
    let frame = batch.frame();
    let traj = frame.column("traj_id").unwrap().str().unwrap();
    let step = frame.column("step").unwrap().i64().unwrap();
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r["traj_uid"].as_str(), traj.get(i), "{file} row {i}");
        assert_eq!(r["step"].as_i64(), step.get(i), "{file} row {i}");
    }
    rows
}

fn run(
    batch: &StepBatch,
    name: &str,
    profile: Profile,
    settings: &[(&str, &str)],
) -> credit_core::methods::Advantages {
    let mut method = Method::preset(name, profile).unwrap();
    for (k, v) in settings {
        method
            .set(k, &credit_core::plan::ParamValue::Text(v.to_string()))
            .unwrap();
    }
    method.check().unwrap();
    method.advantages(batch).unwrap()
}

fn column<'a>(a: &'a credit_core::methods::Advantages, name: &str) -> &'a [f64] {
    match a.column(name) {
        Some(Values::F64(v)) => v,
        _ => panic!("no column {name}"),
    }
}

fn assert_matches(got: &[f64], rows: &[serde_json::Value], key: &str, what: &str) {
    let mut worst = (0.0f64, 0usize);
    for (i, r) in rows.iter().enumerate() {
        let expected = r[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} missing in row {i}"));
        let d = (got[i] - expected).abs();
        if d > worst.0 {
            worst = (d, i);
        }
    }
    assert!(
        worst.0 <= TOL,
        "{what}: {key} differs by {} at row {} (got {}, reference {})",
        worst.0,
        worst.1,
        got[worst.1],
        rows[worst.1][key]
    );
}

fn verl_grpo_gigpo_graphgpo(name: &str, file: &str, penalty: &str) {
    let batch = load(name);
    let rows = reference(&batch, file);
    let p = [("invalid_penalty", penalty)];
    let grpo = run(&batch, "grpo", Profile::Verl, &p);
    assert_matches(
        grpo.advantage(),
        &rows,
        "grpo_cross_steps",
        &format!("{file} verl grpo"),
    );
    let gigpo = run(&batch, "gigpo", Profile::Verl, &p);
    assert_matches(
        gigpo.advantage(),
        &rows,
        "gigpo_mean_std_norm",
        &format!("{file} verl gigpo"),
    );
    assert_matches(
        column(&gigpo, "gigpo_step_return"),
        &rows,
        "gigpo_step_return",
        &format!("{file} verl gigpo"),
    );
    let mean_norm = run(
        &batch,
        "gigpo",
        Profile::Verl,
        &[("invalid_penalty", penalty), ("mode", "mean_norm")],
    );
    assert_matches(
        mean_norm.advantage(),
        &rows,
        "gigpo_mean_norm",
        &format!("{file} verl gigpo mean_norm"),
    );
    let graphgpo = run(&batch, "graphgpo", Profile::Verl, &p);
    assert_matches(
        graphgpo.advantage(),
        &rows,
        "graphgpo_mean_std_norm",
        &format!("{file} verl graphgpo"),
    );
    assert_matches(
        column(&graphgpo, "graphgpo_reward"),
        &rows,
        "graph_step_return",
        &format!("{file} verl graphgpo"),
    );
    // `paper` with the reference's penalty: one score per trajectory (`grpo_per_traj`).
    let paper = run(&batch, "grpo", Profile::Paper, &p);
    assert_matches(
        paper.advantage(),
        &rows,
        "grpo_per_traj",
        &format!("{file} paper grpo"),
    );
}

#[test]
fn textworld_grpo_gigpo_graphgpo_penalty_0() {
    verl_grpo_gigpo_graphgpo("textworld", "textworld.ref.jsonl", "0");
}

#[test]
fn textworld_grpo_gigpo_graphgpo_penalty_01() {
    verl_grpo_gigpo_graphgpo("textworld", "textworld.ref-pen01.jsonl", "0.1");
}

#[test]
fn sokoban_grpo_gigpo_graphgpo_penalty_0() {
    verl_grpo_gigpo_graphgpo("sokoban", "sokoban.ref.jsonl", "0");
}

#[test]
fn sokoban_grpo_gigpo_graphgpo_penalty_01() {
    verl_grpo_gigpo_graphgpo("sokoban", "sokoban.ref-pen01.jsonl", "0.1");
}

fn proxmo(name: &str) {
    let batch = load(name);
    let file = format!("{name}.proxmo-ref.jsonl");
    let rows = reference(&batch, &file);
    for (cfg, settings) in [
        ("pen01", vec![]),
        ("pen0", vec![("invalid_penalty", "0")]),
        (
            "psa_only_pen0",
            vec![("invalid_penalty", "0"), ("psc", "false")],
        ),
    ] {
        let a = run(&batch, "proxmo", Profile::Verl, &settings);
        let what = format!("{file} verl proxmo {cfg}");
        assert_matches(a.advantage(), &rows, &format!("proxmo_ref_{cfg}"), &what);
        assert_matches(
            column(&a, "proxmo_episode"),
            &rows,
            &format!("proxmo_ref_{cfg}_episode"),
            &what,
        );
        assert_matches(
            column(&a, "proxmo_step"),
            &rows,
            &format!("proxmo_ref_{cfg}_step"),
            &what,
        );
        assert_matches(
            column(&a, "proxmo_baseline"),
            &rows,
            &format!("proxmo_ref_{cfg}_baseline"),
            &what,
        );
        assert_matches(
            column(&a, "proxmo_step_return"),
            &rows,
            &format!("proxmo_ref_{cfg}_step_return"),
            &what,
        );
    }
}

#[test]
fn textworld_proxmo_verl() {
    proxmo("textworld");
}

#[test]
fn sokoban_proxmo_verl() {
    proxmo("sokoban");
}

/// `paper` ProxMO, PSC off, mean-only episode part, same penalty as the reference: only the
/// statistics differ (trajectories vs rows), so the PSA step part must still equal the reference's.
#[test]
fn proxmo_paper_step_part_is_profile_independent() {
    for name in ["textworld", "sokoban"] {
        let batch = load(name);
        let rows = reference(&batch, &format!("{name}.proxmo-ref.jsonl"));
        let a = run(
            &batch,
            "proxmo",
            Profile::Paper,
            &[("psc", "false"), ("episode_norm", "mean")],
        );
        assert_matches(
            column(&a, "proxmo_step"),
            &rows,
            "proxmo_ref_psa_only_pen0_step",
            name,
        );
    }
}

/// The difflib port against CPython 3.11's `difflib.SequenceMatcher(None, a, b).ratio()` on 300
/// pairs of the fixtures' states and 200 random texts over a small alphabet with `√` and `é`
/// (`fixtures/reference/difflib-ratios.jsonl`): equal to the last bit.
#[test]
fn difflib_ratios_match_cpython() {
    use credit_core::sequence_matcher::{Matcher, Text};
    let text = std::fs::read_to_string(fixture("reference/difflib-ratios.jsonl")).unwrap();
    let mut n = 0;
    for (i, line) in text.lines().enumerate() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        let (a, b) = (row["a"].as_str().unwrap(), row["b"].as_str().unwrap());
        let got = Matcher::new(Text::new(b)).ratio(&Text::new(a));
        assert_eq!(got, row["ratio"].as_f64().unwrap(), "pair {i}");
        n += 1;
    }
    assert_eq!(n, 500);
}

/// verl-agent's similarity-based GiGPO (`enable_similarity=True`, `build_step_group` run unchanged,
/// `fixtures/reference/generator/`): the clusters, row by row, and both modes at θ = 0.95, 0.9, 0.8.
fn gigpo_similarity(name: &str) {
    let batch = load(name);
    let file = format!("{name}.gigpo-similarity-ref.jsonl");
    let rows = reference(&batch, &file);
    for (tag, theta) in [("sim095", "0.95"), ("sim090", "0.9"), ("sim080", "0.8")] {
        let what = format!("{file} verl gigpo similarity {theta}");
        let settings = [("invalid_penalty", "0"), ("similarity", theta)];
        let a = run(&batch, "gigpo", Profile::Verl, &settings);
        assert_matches(
            a.advantage(),
            &rows,
            &format!("{tag}_gigpo_mean_std_norm"),
            &what,
        );
        let sizes = match a.column("gigpo_group_size") {
            Some(Values::I64(v)) => v,
            _ => panic!("no gigpo_group_size"),
        };
        // Same partition: the reference numbers clusters by first appearance, so map ours.
        let mut ours_to_theirs = std::collections::HashMap::new();
        let clusters =
            credit_core::methods::gigpo::anchor_clusters(&batch, Some(theta.parse().unwrap()));
        let mut cluster_of = vec![0usize; batch.len()];
        for (k, c) in clusters.iter().enumerate() {
            for &r in c {
                cluster_of[r as usize] = k;
            }
        }
        for (i, r) in rows.iter().enumerate() {
            assert_eq!(
                sizes[i],
                r[format!("{tag}_group_size")].as_i64().unwrap(),
                "{what}: cluster size of row {i}"
            );
            let theirs = r[format!("{tag}_group")].as_i64().unwrap();
            let mapped = *ours_to_theirs.entry(cluster_of[i]).or_insert(theirs);
            assert_eq!(mapped, theirs, "{what}: row {i} is in another cluster");
        }
        let settings = [
            ("invalid_penalty", "0"),
            ("similarity", theta),
            ("mode", "mean_norm"),
        ];
        let a = run(&batch, "gigpo", Profile::Verl, &settings);
        assert_matches(
            a.advantage(),
            &rows,
            &format!("{tag}_gigpo_mean_norm"),
            &what,
        );
    }
}

#[test]
fn textworld_gigpo_similarity_verl() {
    gigpo_similarity("textworld");
}

#[test]
fn sokoban_gigpo_similarity_verl() {
    gigpo_similarity("sokoban");
}

/// verl-agent's HGPO recipe (`core_hgpo.compute_hgpo_outcome_advantage` run unchanged, penalty 0,
/// `fixtures/reference/generator/`): K = 2 and 4, both modes, with and without the base group.
fn hgpo(name: &str) {
    let batch = load(name);
    let file = format!("{name}.hgpo-ref.jsonl");
    let rows = reference(&batch, &file);
    for k in ["2", "4"] {
        for mode in ["mean_std_norm", "mean_norm"] {
            for base in [false, true] {
                let settings = [
                    ("invalid_penalty", "0"),
                    ("history_length", k),
                    ("mode", mode),
                    ("base_group", if base { "true" } else { "false" }),
                ];
                let a = run(&batch, "hgpo", Profile::Verl, &settings);
                let key = format!("hgpo_k{k}_{mode}{}", if base { "_base" } else { "" });
                assert_matches(a.advantage(), &rows, &key, &format!("{file} verl {key}"));
            }
        }
    }
    let a = run(&batch, "hgpo", Profile::Verl, &[("invalid_penalty", "0")]);
    assert_matches(
        column(&a, "hgpo_step_return"),
        &rows,
        "step_return",
        &format!("{file} verl hgpo"),
    );
}

#[test]
fn textworld_hgpo_verl() {
    hgpo("textworld");
}

#[test]
fn sokoban_hgpo_verl() {
    hgpo("sokoban");
}

/// Every method's columns on `name`'s fixture with `progress` and `segment_reward` filled in (ĉ_t =
/// r_t, one segment per turn with r̂ = r_t) and an `entropy`, so that SPA, HISR and EMPG run as well.
fn every_method(batch: &mut StepBatch, profile: Profile) -> Vec<(String, Vec<Values>)> {
    let rewards = batch.f64s("reward").unwrap().to_vec();
    batch.with_column_f64("progress", rewards.clone()).unwrap();
    let entropy = (0..batch.len()).map(|r| (r % 7) as f64 / 3.0).collect();
    batch.with_column_f64("entropy", entropy).unwrap();
    batch
        .with_column_opt_f64(
            "segment_reward",
            rewards.iter().copied().map(Some).collect(),
        )
        .unwrap();
    let logged = rewards
        .iter()
        .enumerate()
        .map(|(r, x)| x - r as f64)
        .collect();
    batch.with_column_f64("advantage", logged).unwrap();
    credit_core::methods::ALL
        .iter()
        .map(|name| {
            let settings: &[(&str, &str)] = if *name == "hisr" {
                &[("segments", "per_turn")]
            } else {
                &[]
            };
            let a = run(batch, name, profile, settings);
            (
                name.to_string(),
                a.columns.into_iter().map(|c| c.values).collect(),
            )
        })
        .collect()
}

#[test]
fn obs_beside_anchor_obs_changes_no_advantage() {
    // `formats/X.with-obs.*` are the real fixtures with an `obs` column holding each step's
    // feedback (sokoban's `feedback`, textworld's `next_obs`), which differs from `anchor_obs` on
    // 1078 of 1078 and 401 of 404 rows. verl-agent keys states on `anchor_obs`: every method, in
    // both profiles, must give exactly what the plain fixture gives.
    for (name, variant) in [
        ("textworld", "formats/textworld.with-obs.jsonl"),
        ("sokoban", "formats/sokoban.with-obs.jsonl"),
        ("sokoban", "formats/sokoban.with-obs.parquet"),
    ] {
        let read = |path: PathBuf| read_paths(&[path], &IngestOptions::default()).unwrap();
        let with_obs = read(fixture(variant));
        let state = with_obs
            .report
            .columns
            .iter()
            .find(|u| u.field == "obs")
            .unwrap();
        assert_eq!(state.column, "anchor_obs", "{variant}");
        assert_eq!(state.also[0].outcome, "feeds policy_obs", "{variant}");
        for profile in [Profile::Paper, Profile::Verl] {
            let mut plain = load(name);
            let mut other = with_obs.batch.clone();
            let expected = every_method(&mut plain, profile);
            let got = every_method(&mut other, profile);
            assert_eq!(expected.len(), credit_core::methods::ALL.len());
            for ((method, a), (_, b)) in expected.iter().zip(&got) {
                for (x, y) in a.iter().zip(b) {
                    match (x, y) {
                        (Values::F64(x), Values::F64(y)) => {
                            assert!(
                                x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()),
                                "{variant} {profile:?} {method}"
                            )
                        }
                        (Values::I64(x), Values::I64(y)) => {
                            assert_eq!(x, y, "{variant} {profile:?} {method}")
                        }
                        _ => panic!("{variant} {method}: column types differ"),
                    }
                }
            }
        }
    }
}
