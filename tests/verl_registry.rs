//! verl's advantage registry through the binary: the commands that reproduce the three
//! configurations of `fixtures/reference/X.verl-registry-ref.jsonl` (verl@1dda039 itself, see
//! `crates/core/tests/verl_registry.rs`), `--methods verl`, and the estimators that need a logged
//! column or cannot run from logs at all (exit 2, naming what is missing).

use crate::util::{f, fixture, read_jsonl, stderr, Run};

/// `credit advantages real/<name>.jsonl <flags> -o out.jsonl`: the output rows.
fn advantages(run: &Run, name: &str, flags: &[String]) -> Vec<serde_json::Value> {
    let out = run.path("out.jsonl");
    let mut args = vec![
        "advantages".to_string(),
        fixture(&format!("real/{name}.jsonl")).display().to_string(),
        "-o".into(),
        out.display().to_string(),
    ];
    args.extend(flags.iter().cloned());
    let o = run.credit(&args);
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    let rows = read_jsonl(&out);
    std::fs::remove_file(&out).unwrap();
    std::fs::remove_file(run.path("out.jsonl.meta.json")).unwrap();
    rows
}

/// The largest |ours − reference| over the rows, checked row for row in input order.
fn max_diff(
    got: &[serde_json::Value],
    reference: &[serde_json::Value],
    ours: &str,
    theirs: &str,
) -> f64 {
    assert_eq!(got.len(), reference.len());
    got.iter()
        .zip(reference)
        .map(|(g, r)| {
            assert_eq!(g["traj_id"], r["traj_uid"]);
            assert_eq!(g["step"], r["step"]);
            (f(&g[ours]) - f(&r[theirs])).abs()
        })
        .fold(0.0, f64::max)
}

fn strings(flags: &[&str]) -> Vec<String> {
    flags.iter().map(|s| s.to_string()).collect()
}

#[test]
fn the_reference_configurations_as_commands() {
    let estimators = [
        "grpo",
        "grpo_vectorized",
        "grpo_passk",
        "rloo",
        "rloo_vectorized",
        "opo",
        "gpg",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
        "gdpo",
    ];
    let traj_sets = |methods: &[&str]| -> Vec<String> {
        methods
            .iter()
            .flat_map(|m| ["--set".to_string(), format!("{m}.stats_over=trajectories")])
            .collect()
    };
    for name in ["textworld", "sokoban"] {
        let run = Run::new();
        let reference = read_jsonl(&fixture(&format!(
            "reference/{name}.verl-registry-ref.jsonl"
        )));
        let mut checked = 0;
        let mut check = |got: &[serde_json::Value], ours: &str, theirs: &str| {
            let d = max_diff(got, &reference, ours, theirs);
            assert!(d <= 1e-4, "{name} {theirs}: max |Δ| = {d:e}");
            checked += 1;
        };
        for (config, base) in [
            (
                "step",
                strings(&["--preset", "verl", "--invalid-penalty", "0"]),
            ),
            ("step01", strings(&["--preset", "verl"])),
            (
                "traj",
                strings(&["--preset", "verl", "--invalid-penalty", "0"]),
            ),
        ] {
            let traj = config == "traj";
            let mut flags = base.clone();
            flags.extend(strings(&["--methods", "verl,drgrpo"]));
            if traj {
                flags.extend(traj_sets(&estimators));
                flags.extend(traj_sets(&["drgrpo"]));
            }
            let got = advantages(&run, name, &flags);
            for m in estimators {
                check(&got, &format!("adv_{m}"), &format!("{config}_{m}"));
            }
            check(&got, "adv_drgrpo", &format!("{config}_grpo__nostd"));
            let mut flags = base.clone();
            flags.extend(strings(&[
                "--methods",
                "grpo_passk",
                "--set",
                "grpo_passk.norm=mean",
            ]));
            if traj {
                flags.extend(traj_sets(&["grpo_passk"]));
            }
            let got = advantages(&run, name, &flags);
            check(
                &got,
                "adv_grpo_passk",
                &format!("{config}_grpo_passk__nostd"),
            );
        }
        let mut flags = strings(&["--preset", "verl", "--invalid-penalty", "0"]);
        flags.extend(strings(&["--methods", "reinforce_plus_plus"]));
        flags.extend(traj_sets(&["reinforce_plus_plus"]));
        flags.extend(strings(&["--set", "reinforce_plus_plus.gamma=0.95"]));
        let got = advantages(&run, name, &flags);
        check(
            &got,
            "adv_reinforce_plus_plus",
            "traj_reinforce_plus_plus__gamma0.95",
        );
        assert_eq!(checked, 37, "every column of the reference");
    }
}

#[test]
fn a_missing_column_or_an_unloggable_estimator_exits_2_naming_it() {
    let run = Run::new();
    let log = fixture("real/textworld.jsonl").display().to_string();
    for (method, needle) in [
        ("remax", "`reward_baseline`"),
        ("gae", "`value`"),
        ("optimal_token_baseline", "sum_pi_squared"),
        ("tir_optimal_token_baseline", "old_log_probs"),
    ] {
        let out_path = run.path("x.jsonl");
        let o = run.credit([
            "advantages",
            &log,
            "--preset",
            "verl",
            "--methods",
            method,
            "-o",
            out_path.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(2), "{method}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{method}: {}", stderr(&o));
        assert!(!out_path.exists(), "{method}: nothing written");
    }
}

#[test]
fn grpo_passk_names_a_group_of_one() {
    let run = Run::new();
    let log = run.path("lonely.jsonl");
    std::fs::write(
        &log,
        concat!(
            r#"{"uid": "g", "traj_uid": "a", "step": 0, "reward": 1.0}"#,
            "\n",
            r#"{"uid": "g", "traj_uid": "b", "step": 0, "reward": 0.0}"#,
            "\n",
            r#"{"uid": "solo", "traj_uid": "c", "step": 0, "reward": 1.0}"#,
            "\n",
        ),
    )
    .unwrap();
    let o = run.credit([
        "advantages",
        log.to_str().unwrap(),
        "--methods",
        "grpo_passk",
        "-o",
        run.path("x.jsonl").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("group `solo`"), "{}", stderr(&o));
}

#[test]
fn help_names_the_registry_and_its_batch_dependence() {
    let o = Run::new().credit(["advantages", "--help"]);
    let help = String::from_utf8_lossy(&o.stdout).into_owned();
    for needle in [
        "`verl`",
        "reinforce_plus_plus_baseline",
        "`iteration`",
        "γ = 1",
    ] {
        assert!(help.contains(needle), "--help lacks {needle}:\n{help}");
    }
}
