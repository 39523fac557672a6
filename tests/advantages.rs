//! `credit advantages`: the binary end to end on the real fixtures, against the reference columns,
//! plus output formats, metadata, and the order-independence and zero-sum properties.

use crate::util::{f, fixture, json, read_jsonl, stderr, Run};
use std::collections::HashMap;

fn advantages(run: &Run, input: &str, extra: &[&str], out: &str) -> Vec<serde_json::Value> {
    let mut args = vec![
        "advantages".to_string(),
        fixture(input).display().to_string(),
        "-o".into(),
        out.into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let o = run.credit(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    read_jsonl(&run.path(out))
}

fn assert_column(
    got: &[serde_json::Value],
    reference: &[serde_json::Value],
    ours: &str,
    theirs: &str,
) {
    assert_eq!(got.len(), reference.len());
    for (i, (g, r)) in got.iter().zip(reference).enumerate() {
        assert_eq!(
            g["traj_id"], r["traj_uid"],
            "row {i}: same row order as the input"
        );
        assert_eq!(g["step"], r["step"]);
        let (a, b) = (f(&g[ours]), f(&r[theirs]));
        assert!(
            (a - b).abs() <= 1e-4,
            "row {i}: {ours} = {a}, reference {theirs} = {b}"
        );
    }
}

#[test]
fn verl_preset_reproduces_reference_columns() {
    for name in ["textworld", "sokoban"] {
        let run = Run::new();
        let input = format!("real/{name}.jsonl");
        let pen01 = read_jsonl(&fixture(&format!("reference/{name}.ref-pen01.jsonl")));
        let pen0 = read_jsonl(&fixture(&format!("reference/{name}.ref.jsonl")));
        let prox = read_jsonl(&fixture(&format!("reference/{name}.proxmo-ref.jsonl")));

        let got = advantages(
            &run,
            &input,
            &[
                "--preset",
                "verl",
                "--methods",
                "grpo,gigpo,proxmo,graphgpo",
            ],
            "a.jsonl",
        );
        assert_column(&got, &pen01, "adv_grpo", "grpo_cross_steps");
        assert_column(&got, &pen01, "adv_graphgpo", "graphgpo_mean_std_norm");
        assert_column(&got, &pen01, "graphgpo_reward", "graph_step_return");
        assert_column(&got, &pen01, "adv_gigpo", "gigpo_mean_std_norm");
        assert_column(&got, &prox, "adv_proxmo", "proxmo_ref_pen01");

        let got = advantages(
            &run,
            &input,
            &[
                "--preset",
                "verl",
                "--methods",
                "grpo,gigpo,proxmo,graphgpo",
                "--invalid-penalty",
                "0",
            ],
            "b.jsonl",
        );
        assert_column(&got, &pen0, "adv_grpo", "grpo_cross_steps");
        assert_column(&got, &pen0, "adv_graphgpo", "graphgpo_mean_std_norm");
        assert_column(&got, &pen0, "graphgpo_reward", "graph_step_return");
        assert_column(&got, &pen0, "adv_gigpo", "gigpo_mean_std_norm");
        assert_column(&got, &prox, "adv_proxmo", "proxmo_ref_pen0");

        let got = advantages(
            &run,
            &input,
            &[
                "--preset",
                "paper",
                "--invalid-penalty",
                "0",
                "--methods",
                "grpo",
            ],
            "c.jsonl",
        );
        assert_column(&got, &pen0, "adv_grpo", "grpo_per_traj");
    }
}

#[test]
fn metadata_records_preset_and_parameters() {
    let run = Run::new();
    advantages(
        &run,
        "real/textworld.jsonl",
        &[
            "--preset",
            "verl",
            "--methods",
            "gigpo",
            "--set",
            "gigpo.omega=0.5",
        ],
        "a.jsonl",
    );
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("a.jsonl.meta.json")).unwrap())
            .unwrap();
    assert_eq!(meta["preset"], "verl");
    assert_eq!(meta["params"]["gigpo"]["omega"], 0.5);
    assert_eq!(meta["params"]["gigpo"]["invalid_penalty"], 0.1);
    assert_eq!(meta["params"]["gigpo"]["stats_over"], "rows");

    // Parquet carries the same metadata in its footer; CSV gets a sidecar.
    let out = run.credit([
        "advantages",
        fixture("real/textworld.jsonl").to_str().unwrap(),
        "--methods",
        "all",
        "-o",
        "a.parquet",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let bytes = std::fs::read(run.path("a.parquet")).unwrap();
    assert_eq!(&bytes[..4], b"PAR1");
    let footer = String::from_utf8_lossy(&bytes);
    assert!(footer.contains("\"preset\": \"paper\"") && footer.contains("credit_version"));
    let out = run.credit([
        "advantages",
        fixture("real/textworld.jsonl").to_str().unwrap(),
        "--methods",
        "grpo,mgr",
        "-o",
        "a.csv",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let csv = std::fs::read_to_string(run.path("a.csv")).unwrap();
    assert_eq!(csv.lines().count(), 405);
    assert!(csv
        .lines()
        .next()
        .unwrap()
        .starts_with("group_id,traj_id,step,adv_grpo"));
    assert!(run.path("a.csv.meta.json").exists());
}

#[test]
fn every_method_writes_its_columns() {
    let run = Run::new();
    let got = advantages(
        &run,
        "real/sokoban.jsonl",
        &["--methods", "all", "--format", "json"],
        "all.jsonl",
    );
    assert_eq!(got.len(), 1078);
    for key in [
        "adv_grpo",
        "adv_drgrpo",
        "adv_rloo",
        "adv_gigpo",
        "gigpo_step",
        "gigpo_group_size",
        "adv_proxmo",
        "proxmo_weight",
        "proxmo_baseline",
        "adv_graphgpo",
        "graphgpo_distance",
        "graphgpo_reward",
        "graphgpo_group_size",
        "adv_mgr",
        "mgr_local",
        "mgr_global",
    ] {
        assert!(got[0].get(key).is_some(), "missing {key}");
    }
    // No advantage column in these logs: `all` leaves `logged` out.
    assert!(got[0].get("adv_logged").is_none());
}

#[test]
fn all_runs_logged_where_the_logs_carry_an_advantage_column() {
    let run = Run::new();
    // A column of the producer's own name, mapped with --schema like any other.
    let mut rows = read_jsonl(&fixture("real/textworld.jsonl"));
    for (i, row) in rows.iter_mut().enumerate() {
        row["trainer_adv"] = (i as f64 * 0.25 - 3.0).into();
    }
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(run.path("logged.jsonl"), text).unwrap();
    std::fs::write(run.path("map.toml"), "trainer_adv = \"advantage\"\n").unwrap();
    let o = run.credit([
        "advantages",
        "logged.jsonl",
        "--schema",
        "map.toml",
        "--methods",
        "all",
        "-o",
        "a.jsonl",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let got = read_jsonl(&run.path("a.jsonl"));
    for (i, row) in got.iter().enumerate() {
        assert_eq!(f(&row["adv_logged"]), i as f64 * 0.25 - 3.0, "row {i}");
        assert!(row.get("adv_gigpo").is_some());
    }
}

#[test]
fn results_do_not_depend_on_row_order() {
    // Reverse the file's lines: every method must give each (traj_id, step) the same value.
    let run = Run::new();
    let text = std::fs::read_to_string(fixture("real/textworld.jsonl")).unwrap();
    let reversed: Vec<&str> = text.lines().rev().collect();
    std::fs::write(run.path("reversed.jsonl"), reversed.join("\n")).unwrap();
    let methods = ["--methods", "all", "--preset", "verl"];
    let forward = advantages(&run, "real/textworld.jsonl", &methods, "f.jsonl");
    let out = run.credit([
        "advantages",
        "reversed.jsonl",
        "--methods",
        "all",
        "--preset",
        "verl",
        "-o",
        "r.jsonl",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let backward = read_jsonl(&run.path("r.jsonl"));
    let key = |r: &serde_json::Value| {
        (
            r["traj_id"].as_str().unwrap().to_string(),
            r["step"].as_i64().unwrap(),
        )
    };
    let by_key: HashMap<_, _> = backward.iter().map(|r| (key(r), r)).collect();
    for row in &forward {
        let other = by_key[&key(row)];
        for (column, value) in row.as_object().unwrap() {
            if let Some(x) = value.as_f64() {
                let y = f(&other[column]);
                assert!(
                    (x - y).abs() < 1e-9,
                    "{column} at {:?}: {x} vs {y}",
                    key(row)
                );
            }
        }
    }
}

#[test]
fn grpo_paper_sums_to_zero_over_each_groups_trajectories() {
    let run = Run::new();
    let got = advantages(
        &run,
        "real/sokoban.jsonl",
        &["--methods", "grpo", "--preset", "paper"],
        "g.jsonl",
    );
    let mut per_traj: HashMap<(String, String), f64> = HashMap::new();
    for r in &got {
        per_traj.insert(
            (
                r["group_id"].as_str().unwrap().into(),
                r["traj_id"].as_str().unwrap().into(),
            ),
            f(&r["adv_grpo"]),
        );
    }
    let mut per_group: HashMap<String, f64> = HashMap::new();
    for ((g, _), a) in per_traj {
        *per_group.entry(g).or_default() += a;
    }
    assert_eq!(per_group.len(), 8);
    for (g, sum) in per_group {
        assert!(sum.abs() < 1e-9, "group {g}: Σ = {sum}");
    }
}

#[test]
fn json_format_describes_the_output() {
    let run = Run::new();
    let out = run.credit([
        "advantages",
        fixture("real/textworld.jsonl").to_str().unwrap(),
        "--methods",
        "grpo",
        "-o",
        "x.parquet",
        "--format",
        "json",
    ]);
    let v = json(&out);
    assert_eq!(v["rows"], 404);
    assert_eq!(v["columns"][3], "adv_grpo");
}

#[test]
#[allow(clippy::approx_constant)] // T-HISR-1's z_2 = e, printed by the spec to 4 decimals
fn spa_and_hisr_reproduce_the_spec_vectors_from_logged_signals() {
    // fixtures/spec/spa-hisr.jsonl: trajectory `a` is T-SPA-1 and trajectory `b` is T-HISR-1 of
    // ../shared/spec/spec-spa-hisr.md (A9, B9), each carrying the other method's columns too.
    let run = Run::new();
    let close = |rows: &[&serde_json::Value], column: &str, expected: &[f64]| {
        assert_eq!(rows.len(), expected.len());
        for (row, e) in rows.iter().zip(expected) {
            assert!(
                (f(&row[column]) - e).abs() <= 1e-4,
                "{column} at step {}: {} vs {e}",
                row["step"],
                row[column]
            );
        }
    };
    let got = advantages(
        &run,
        "spec/spa-hisr.jsonl",
        &["--methods", "spa,hisr"],
        "s.jsonl",
    );
    let (a, b): (Vec<_>, Vec<_>) = got.iter().partition(|r| r["traj_id"] == "a");
    // T-SPA-1 (α = 1, β = 0.5, γ = 0.99, λ = 0.95, V logged).
    close(&a, "spa_reward", &[0.55, 0.70, -0.10, 1.30]);
    close(&a, "spa_potential", &[0.05, 0.25, 0.15, 0.95]);
    close(&a, "spa_return", &[2.4064, 1.8751, 1.1870, 1.3000]);
    close(&a, "adv_spa", &[1.4330, 0.7379, 0.1573, 0.6000]);
    // SPA on `b` by hand: ĉ = [0.1, 0.2, 0.1, 0.3, 0.3], g = [1, 1, 0, 1, 1] → r = ĉ + 0.5·g.
    close(&b, "spa_reward", &[0.6, 0.7, 0.1, 0.8, 0.8]);
    // T-HISR-1 (β = 0.3, α = 0.3, L1, end placement, V logged).
    close(
        &b,
        "hisr_importance",
        &[1.3956, 2.7183, 0.8465, 1.3956, 1.3956],
    );
    close(
        &b,
        "hisr_modulated",
        &[0.0491, 0.3132, 0.3132, 0.6377, 0.6377],
    );
    close(&b, "hisr_reward", &[0.3343, 0.3000, 0.2193, 0.3000, 0.7464]);
    close(&b, "adv_hisr", &[1.2652, 0.8898, 0.6335, 0.3416, -0.0536]);
    // HISR on `a` by hand: z = 1 per turn, z(s) = [2, 2], r̂ = [0.3, 0.7] → r^him = [0.3, 0.7];
    // r = 0.7·[0, 0.3, 0, 0.7] + 0.3·[1, 1, 0, 1] = [0.3, 0.51, 0, 0.79].
    close(&a, "hisr_reward", &[0.3, 0.51, 0.0, 0.79]);

    // Every parameter through `--set`: critic-free SPA (T-SPA-1), spread HISR (T-HISR-1).
    let got = advantages(
        &run,
        "spec/spa-hisr.jsonl",
        &[
            "--methods",
            "spa,hisr",
            "--set",
            "spa.use_value=false",
            "--set",
            "hisr.place=spread",
        ],
        "t.jsonl",
    );
    let (a, b): (Vec<_>, Vec<_>) = got.iter().partition(|r| r["traj_id"] == "a");
    close(&a, "adv_spa", &[2.2014, 1.7559, 1.12265, 1.3000]);
    close(&b, "hisr_reward", &[0.3343, 0.4096, 0.1096, 0.5232, 0.5232]);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("t.jsonl.meta.json")).unwrap())
            .unwrap();
    assert_eq!(meta["params"]["spa"]["use_value"], false);
    assert_eq!(meta["params"]["hisr"]["place"], "spread");
    assert_eq!(meta["params"]["hisr"]["beta"], 0.3);
    assert!(meta["notes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|n| n.as_str().unwrap().starts_with("spa: critic-free")));

    // SPA on logs without `progress`: a parameter error that names the column; nothing written.
    let out = run.credit([
        "advantages",
        fixture("real/textworld.jsonl").to_str().unwrap(),
        "--methods",
        "spa",
        "-o",
        "x.jsonl",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("`progress`"), "{}", stderr(&out));
    assert!(!run.path("x.jsonl").exists());
}

#[test]
fn spa_random_variant_and_hisr_segmenter_through_flags() {
    let run = Run::new();
    // `--seed` reaches SPA's `random` variant: ĉ_t in [0, 1), the same for a seed, new for another.
    let progress = |seed: &str, out: &str| -> Vec<f64> {
        let args = [
            "--methods",
            "spa",
            "--set",
            "spa.variant=random",
            "--seed",
            seed,
        ];
        advantages(&run, "spec/spa-hisr.jsonl", &args, out)
            .iter()
            .map(|r| f(&r["spa_progress"]))
            .collect()
    };
    let first = progress("5", "r1.jsonl");
    assert!(first.iter().all(|c| (0.0..1.0).contains(c)), "{first:?}");
    assert_eq!(progress("5", "r2.jsonl"), first);
    assert_ne!(progress("6", "r3.jsonl"), first);
    let meta: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("r1.jsonl.meta.json")).unwrap())
            .unwrap();
    assert_eq!(meta["params"]["spa"]["variant"], "random");
    assert_eq!(meta["params"]["spa"]["seed"], 5);

    // `hisr.segments`: `per_turn` ignores the logged ids; `rule` needs an `action` column.
    let got = advantages(
        &run,
        "spec/spa-hisr.jsonl",
        &["--methods", "hisr", "--set", "hisr.segments=per_turn"],
        "h.jsonl",
    );
    let segments: Vec<i64> = got
        .iter()
        .filter(|r| r["traj_id"] == "b")
        .map(|r| r["hisr_segment"].as_i64().unwrap())
        .collect();
    assert_eq!(segments, [0, 1, 2, 3, 4]);
    let out = run.credit([
        "advantages",
        fixture("spec/spa-hisr.jsonl").to_str().unwrap(),
        "--methods",
        "hisr",
        "--set",
        "hisr.segments=rule",
        "-o",
        "x.jsonl",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("`action`"), "{}", stderr(&out));
}
