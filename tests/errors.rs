//! Every bad-input fixture (`fixtures/bad/`): exit 2, a message naming file, line or row, and
//! column, and no output written. `--lenient` skips and counts instead.

use crate::util::{fixture, json, stderr, Run};

/// (fixture, what stderr must contain: the location and the expectation)
const CASES: &[(&str, &[&str])] = &[
    (
        "malformed-json.jsonl",
        &["malformed-json.jsonl:2:", "malformed JSON"],
    ),
    (
        "missing-column.jsonl",
        &[
            "missing-column.jsonl:1:traj_id",
            "traj_uid",
            "missing required column",
        ],
    ),
    (
        "wrong-type.jsonl",
        &[
            "wrong-type.jsonl:2:reward",
            "expected a finite number",
            "\"n/a\"",
        ],
    ),
    ("nan-reward.jsonl", &["nan-reward.jsonl:3:reward", "NaN"]),
    (
        "infinite-reward.jsonl",
        &["infinite-reward.jsonl:4:reward", "Infinity"],
    ),
    (
        "duplicate-step.jsonl",
        &[
            "duplicate-step.jsonl:3:step",
            "duplicate step 1 of trajectory `a`",
            "duplicate-step.jsonl:2",
        ],
    ),
    (
        "step-gap.jsonl",
        &["step-gap.jsonl:3:step", "step 2 is missing"],
    ),
    (
        "trajectory-in-two-groups.jsonl",
        &[
            "trajectory-in-two-groups.jsonl:5:group_id",
            "group `g2`",
            "group `g1`",
        ],
    ),
    (
        "invalid-utf8.jsonl",
        &["invalid-utf8.jsonl:2:byte", "invalid UTF-8"],
    ),
    ("empty.jsonl", &["empty.jsonl", "no step rows found"]),
    (
        "verl-rollout-dump.jsonl",
        &[
            "verl-rollout-dump.jsonl:1:",
            "rollout dump",
            "`group_id`",
            "`traj_id`",
            "uid",
        ],
    ),
    (
        "wrong-type.parquet",
        &[
            "wrong-type.parquet:row 0:reward",
            "expected a finite number",
        ],
    ),
    (
        "nan-reward.parquet",
        &["nan-reward.parquet:row 1:reward", "NaN"],
    ),
    (
        "conflicting-rewards.jsonl",
        &[
            "conflicting-rewards.jsonl:3:rewards",
            "`rewards` = 0.5 but `reward` = 1",
            "--schema",
        ],
    ),
    (
        "conflicting-episode-rewards.parquet",
        &[
            "conflicting-episode-rewards.parquet:row 4:score",
            "`score` = 1 but `episode_rewards` = 0",
            "--schema",
        ],
    ),
];

#[test]
fn every_bad_input_is_located_and_writes_nothing() {
    for (name, needles) in CASES {
        let run = Run::new();
        let input = fixture(&format!("bad/{name}"));
        let out = run.credit([
            "advantages",
            input.to_str().unwrap(),
            "--methods",
            "grpo",
            "-o",
            "out.parquet",
        ]);
        let err = stderr(&out);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{name}: exit {:?}, stderr {err}",
            out.status.code()
        );
        for needle in *needles {
            assert!(
                err.contains(needle),
                "{name}: stderr lacks {needle:?}:\n{err}"
            );
        }
        assert!(!err.contains("panicked"), "{name}: {err}");
        let left: Vec<_> = std::fs::read_dir(run.dir.path()).unwrap().collect();
        assert!(left.is_empty(), "{name}: something was written: {left:?}");
    }
}

#[test]
fn lenient_skips_and_counts_per_reason() {
    // (fixture, expected skip counts). A skipped row leaves a gap in its trajectory, so the rest of
    // that trajectory is skipped too (its returns could not be computed).
    let cases: &[(&str, &[(&str, u64)])] = &[
        (
            "wrong-type.jsonl",
            &[("wrong type", 1), ("gap in step numbering", 2)],
        ),
        ("nan-reward.jsonl", &[("NaN or infinite number", 1)]),
        ("step-gap.jsonl", &[("gap in step numbering", 3)]),
        ("duplicate-step.jsonl", &[("duplicate (traj_id, step)", 1)]),
        ("conflicting-rewards.jsonl", &[("columns that disagree", 1)]),
        (
            "malformed-json.jsonl",
            &[("malformed JSON", 1), ("gap in step numbering", 2)],
        ),
    ];
    for (name, counts) in cases {
        let run = Run::new();
        let input = fixture(&format!("bad/{name}"));
        let out = run.credit([
            "analyze",
            input.to_str().unwrap(),
            "--lenient",
            "--format",
            "json",
        ]);
        let s = json(&out);
        let skipped = s["skipped"].as_object().unwrap();
        assert_eq!(skipped.len(), counts.len(), "{name}: {skipped:?}");
        for (reason, n) in *counts {
            assert_eq!(skipped[*reason], *n, "{name}: {reason}");
        }
        let total: u64 = counts.iter().map(|c| c.1).sum();
        assert_eq!(
            s["rows"].as_u64().unwrap() + total,
            crate::util::read_lines(&input),
            "{name}"
        );
        assert!(stderr(&out).contains("--lenient skipped"), "{name}");
    }
}

#[test]
fn unknown_method_and_parameter_are_errors() {
    let run = Run::new();
    let input = fixture("real/textworld.jsonl");
    let out = run.credit([
        "advantages",
        input.to_str().unwrap(),
        "--methods",
        "nope",
        "-o",
        "o.parquet",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("unknown method `nope`"));
    let out = run.credit([
        "advantages",
        input.to_str().unwrap(),
        "--methods",
        "gigpo",
        "--set",
        "gigpo.omgea=1",
        "-o",
        "o.parquet",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown parameter `gigpo.omgea`") && stderr(&out).contains("omega"),
        "{}",
        stderr(&out)
    );
    let out = run.credit([
        "advantages",
        input.to_str().unwrap(),
        "--methods",
        "gigpo",
        "-o",
        "o.txt",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains(".parquet, .jsonl or .csv"));
    assert!(std::fs::read_dir(run.dir.path()).unwrap().next().is_none());
}

#[test]
fn a_column_mapping_settles_disagreeing_columns() {
    // `rewards = "reward"` makes `rewards` the step reward: `reward` is then not read, so its
    // different value on line 3 is no longer a conflict, and the report says so.
    let run = Run::new();
    std::fs::write(run.path("map.toml"), "rewards = \"reward\"\n").unwrap();
    let input = fixture("bad/conflicting-rewards.jsonl");
    let out = run.credit([
        "analyze",
        input.to_str().unwrap(),
        "--schema",
        "map.toml",
        "--format",
        "json",
    ]);
    let s = json(&out);
    assert_eq!(s["rows"], 5);
    let reward = s["columns"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["field"] == "reward")
        .unwrap();
    assert_eq!(reward["column"], "rewards");
    assert_eq!(reward["also"][0]["column"], "reward");
    assert_eq!(reward["also"][0]["outcome"], "not used");
    assert!(reward["also"][0]["why"]
        .as_str()
        .unwrap()
        .contains("column mapping"));
}
