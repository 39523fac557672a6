//! `credit train policy` on the real TextWorld fixture with a tiny random Qwen2-shaped model
//! written on the fly: the checkpoint layout, the metrics file, resuming, the hand-off file (whose
//! advantages are the library's), and the errors for a missing or doubled method.
//! Also `credit train progress` and `credit advantages --progress-model` (SPA's ĉ_t), and both
//! from a GGUF file: a tiny random one, and the real SmolLM2-135M-Instruct when
//! `CREDIT_SMOLLM2_GGUF` names it (the CI smoke test of issue #29).

use crate::util::{f, fixture, json, read_jsonl, stderr, Run};
use credit_train::test_support::{
    edit_gguf_tensor, gguf_array, gguf_parts, set_gguf_metadata, smollm2_gguf,
    splice_gguf_metadata, write_gguf, write_gguf_parts, write_model_dir, Value, BYTE_LEVEL_VOCAB,
    GGUF_ARRAY, GGUF_VOCAB,
};
use credit_train::{Config, DType};

fn tiny_model(run: &Run) -> String {
    let dir = run.path("model");
    write_model_dir(
        &dir,
        &Config::qwen2_tiny(BYTE_LEVEL_VOCAB),
        3,
        1,
        DType::F32,
    )
    .expect("write the tiny model");
    dir.display().to_string()
}

fn policy_args(run: &Run, model: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "train",
        "policy",
        &fixture("real/textworld.jsonl").display().to_string(),
        "--model",
        model,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(
        [
            "--method",
            "gigpo",
            "--preset",
            "verl",
            "--max-samples",
            "4",
            "--max-prompt-tokens",
            "64",
            "--batch-size",
            "2",
        ]
        .map(String::from),
    );
    args.extend(["--lr", "1e-3", "--out"].map(String::from));
    args.push(run.path("ckpt").display().to_string());
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

#[test]
fn trains_checkpoints_and_resumes() {
    let run = Run::new();
    let model = tiny_model(&run);
    let out = json(&run.credit(policy_args(
        &run,
        &model,
        &["--steps", "2", "--format", "json"],
    )));
    assert_eq!(
        (
            out["steps"].as_u64(),
            out["samples"].as_u64(),
            out["method"].as_str()
        ),
        (Some(2), Some(4), Some("gigpo"))
    );

    let ckpt = run.path("ckpt");
    for file in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        "optimizer.safetensors",
        "trainer_state.json",
    ] {
        assert!(
            ckpt.join(file).is_file(),
            "{file} missing from the checkpoint"
        );
    }
    let lines = read_jsonl(&ckpt.join("metrics.jsonl"));
    assert_eq!(lines.len(), 2);
    for (i, m) in lines.iter().enumerate() {
        assert_eq!(m["step"].as_u64(), Some(i as u64 + 1));
        for key in [
            "loss",
            "pg_loss",
            "kl",
            "clip_frac",
            "grad_norm",
            "tokens_per_s",
        ] {
            assert!(f(&m[key]).is_finite(), "step {}: {key} = {}", i + 1, m[key]);
        }
    }

    let o = run.credit(policy_args(&run, &model, &["--steps", "3"]));
    assert_eq!(
        o.status.code(),
        Some(2),
        "a second run into a checkpoint needs --resume"
    );
    assert!(stderr(&o).contains("--resume"), "{}", stderr(&o));

    let o = run.credit(policy_args(&run, &model, &["--steps", "3", "--resume"]));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(read_jsonl(&ckpt.join("metrics.jsonl")).len(), 3);
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ckpt.join("trainer_state.json")).unwrap())
            .unwrap();
    assert_eq!(
        (state["step"].as_u64(), state["samples"]["count"].as_u64()),
        (Some(3), Some(4))
    );
}

/// `--lora-rank`: a PEFT adapter folder (no full weights), `--merge` adds the merged model, a
/// resume continues it, and a resume with other LoRA flags is refused naming them.
#[test]
fn lora_adapters_merge_and_resume() {
    let run = Run::new();
    let model = tiny_model(&run);
    let lora = ["--lora-rank", "4", "--lora-targets", "q,v,down", "--merge"];
    let first: Vec<&str> = ["--steps", "2"].iter().chain(&lora).copied().collect();
    let o = run.credit(policy_args(&run, &model, &first));
    assert!(o.status.success(), "{}", stderr(&o));
    let ckpt = run.path("ckpt");
    for file in ["adapter_config.json", "adapter_model.safetensors"] {
        assert!(ckpt.join(file).is_file(), "{file} missing");
    }
    assert!(!ckpt.join("model.safetensors").exists());
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ckpt.join("adapter_config.json")).unwrap())
            .unwrap();
    assert_eq!(config["r"], 4);
    assert!(ckpt.join("merged").join("model.safetensors").is_file());

    let resumed: Vec<&str> = ["--steps", "3", "--resume"]
        .iter()
        .chain(&lora)
        .copied()
        .collect();
    let o = run.credit(policy_args(&run, &model, &resumed));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(read_jsonl(&ckpt.join("metrics.jsonl")).len(), 3);

    let o = run.credit(policy_args(
        &run,
        &model,
        &["--steps", "4", "--resume", "--lora-rank", "8"],
    ));
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("lora"), "{}", stderr(&o));
}

#[test]
fn handoff_carries_the_library_advantages() {
    let run = Run::new();
    let model = tiny_model(&run);
    let mut args = policy_args(&run, &model, &["--handoff", "h.jsonl"]);
    let at = args.iter().position(|a| a == "--out").unwrap();
    args.drain(at..at + 2);
    let o = run.credit(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let lines = read_jsonl(&run.path("h.jsonl"));
    assert_eq!(lines.len(), 5, "a header and 4 samples");
    assert_eq!(lines[0]["config"]["batch_size"].as_u64(), Some(2));

    // Every fixture row has an action, so the 4 samples are rows 0–3.
    let o = run.credit([
        "advantages",
        &fixture("real/textworld.jsonl").display().to_string(),
        "--methods",
        "gigpo",
        "--preset",
        "verl",
        "-o",
        "a.jsonl",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = read_jsonl(&run.path("a.jsonl"));
    for (sample, row) in lines[1..].iter().zip(&rows) {
        assert!(
            (f(&sample["advantage"]) - f(&row["adv_gigpo"])).abs() < 1e-6,
            "{} vs {}",
            sample["advantage"],
            row["adv_gigpo"]
        );
        let (ids, start) = (
            sample["input_ids"].as_array().unwrap(),
            sample["action_start"].as_u64().unwrap() as usize,
        );
        assert!(
            start <= 64 && start < ids.len(),
            "prompt kept to --max-prompt-tokens"
        );
        assert_eq!(
            ids.last().and_then(|v| v.as_u64()),
            Some(258),
            "the action ends with <|im_end|>"
        );
    }
}

#[test]
fn method_must_be_exactly_one() {
    let run = Run::new();
    let model = tiny_model(&run);
    let mut args = policy_args(&run, &model, &[]);
    let at = args.iter().position(|a| a == "--method").unwrap();
    args.drain(at..at + 2);
    let o = run.credit(&args);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--method NAME"), "{}", stderr(&o));

    args.extend(["--method", "grpo,gigpo"].map(String::from));
    let o = run.credit(&args);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("one method's advantages, got 2"),
        "{}",
        stderr(&o)
    );

    // `--methods` (the other commands' flag) is refused, naming the flag to use.
    let at = args.iter().position(|a| a == "--method").unwrap();
    args[at] = "--methods".into();
    args[at + 1] = "gigpo".into();
    let o = run.credit(&args);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("`--method gigpo`, not `--methods`"),
        "{}",
        stderr(&o)
    );
}

/// The README's GGUF command on the real SmolLM2 file (issue #29's, as it is): a PEFT adapter
/// over its Hugging Face llama names (576 wide, 30 blocks), the tokenizer written beside it, one
/// finite step. Four of TextWorld's ~1k-token prompts through 30 blocks keep more activations
/// than half of this machine's memory: the run says it recomputes blocks instead (~5 GB peak).
#[test]
fn policy_lora_on_the_smollm2_gguf() {
    let Some(model) = smollm2_gguf("policy_lora_on_the_smollm2_gguf") else {
        return;
    };
    let run = Run::new();
    let out = run.path("adapter");
    let (logs, model) = (fixture("real/textworld.jsonl"), model.display().to_string());
    let o = run.credit([
        "train",
        "policy",
        &logs.display().to_string(),
        "--model",
        &model,
        "--method",
        "grpo",
        "--lora-rank",
        "4",
        "--steps",
        "1",
        "--max-samples",
        "8",
        "--out",
        "adapter",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("recomputing each block in the backward pass"),
        "{}",
        stderr(&o)
    );
    for file in [
        "adapter_config.json",
        "adapter_model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
    ] {
        assert!(out.join(file).is_file(), "{file} missing from the adapter");
    }
    let (adapters, _) =
        credit_train::checkpoint::read_stamped(&out.join("adapter_model.safetensors")).unwrap();
    assert_eq!(adapters.len(), 30 * 7 * 2);
    let a = &adapters["base_model.model.model.layers.29.self_attn.k_proj.lora_A.weight"];
    let b = &adapters["base_model.model.model.layers.29.self_attn.k_proj.lora_B.weight"];
    assert_eq!((a.dims(), b.dims()), (&[4, 576][..], &[192, 4][..]));
    let m = read_jsonl(&out.join("metrics.jsonl"));
    assert_eq!(m.len(), 1);
    assert!(
        f(&m[0]["loss"]).is_finite() && f(&m[0]["grad_norm"]) > 0.0,
        "{}",
        m[0]
    );
}

/// `--model` and `--backbone` take a GGUF file (a tiny random Llama here).
#[test]
fn policy_and_progress_read_a_gguf_file() {
    let run = Run::new();
    let gguf = run.path("tiny.gguf");
    write_gguf(&gguf, &Config::llama_tiny(GGUF_VOCAB), 3, true).expect("write the tiny GGUF");
    let gguf = gguf.display().to_string();
    let o = run.credit(policy_args(
        &run,
        &gguf,
        &["--steps", "1", "--lora-rank", "2"],
    ));
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(run.path("ckpt/adapter_model.safetensors").is_file());

    let logs = fixture("real/textworld.jsonl").display().to_string();
    let o = run.credit([
        "train",
        "progress",
        &logs,
        "--backbone",
        &gguf,
        "--out",
        "pm",
        "--epochs",
        "1",
        "--folds",
        "0",
        "--max-step-tokens",
        "32",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("pm/config.json")).unwrap())
            .unwrap();
    assert!(config["backbone"].as_str().unwrap().ends_with("tiny.gguf"));

    let not_gguf = run.path("notes.gguf");
    std::fs::write(&not_gguf, "hello").unwrap();
    let o = run.credit(policy_args(
        &run,
        &not_gguf.display().to_string(),
        &["--steps", "1"],
    ));
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("notes.gguf`: not a folder, and not a GGUF file"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn progress_model_fills_spa() {
    let run = Run::new();
    let logs = fixture("real/textworld.jsonl").display().to_string();
    let model = run.path("progress").display().to_string();
    let o = run.credit([
        "train", "progress", &logs, "--out", &model, "--epochs", "3", "--format", "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report = &json(&o)["report"];
    assert_eq!(report["epoch_loss"].as_array().map(Vec::len), Some(3));
    assert_eq!(report["readout"], "step");
    // Three games: each held out once.
    let held = &report["heldout"];
    assert_eq!(
        (held["folds"].as_u64(), held["split_by"].as_str()),
        (Some(3), Some("task"))
    );
    assert_eq!(held["trajectories"].as_u64(), Some(24));
    assert!(f(&held["mse"]).is_finite() && f(&held["constant_mse"]) > 0.0);
    assert!(run.path("progress/model.safetensors").is_file());
    assert!(run.path("progress/config.json").is_file());

    // Without the model, spa (paper variant) needs a logged `progress`; with it, it runs.
    let spa = |extra: &[&str]| {
        let mut args = vec!["advantages", &logs, "--methods", "spa", "-o", "out.jsonl"];
        args.extend_from_slice(extra);
        run.credit(args)
    };
    assert!(!spa(&[]).status.success());
    let o = spa(&["--progress-model", &model]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = read_jsonl(&run.path("out.jsonl"));
    assert_eq!(rows.len(), 404);
    assert!(rows.iter().all(|r| f(&r["adv_spa"]).is_finite()));

    // `analyze --progress-model` calibrates Σ ĉ_t against R: recomputed here from the ĉ_t that
    // `advantages` wrote and the rewards in the raw logs.
    let mut sums: std::collections::BTreeMap<String, (f64, f64)> = Default::default();
    for r in &rows {
        sums.entry(r["traj_id"].as_str().unwrap().into())
            .or_default()
            .0 += f(&r["spa_progress"]);
    }
    for r in read_jsonl(&fixture("real/textworld.jsonl")) {
        sums.get_mut(r["traj_uid"].as_str().unwrap()).unwrap().1 += f(&r["reward"]);
    }
    let mse = sums.values().map(|(c, r)| (c - r).powi(2)).sum::<f64>() / sums.len() as f64;
    let o = run.credit([
        "analyze",
        &logs,
        "--progress-model",
        &model,
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let calibration = &json(&o)["progress"]["calibration"];
    assert!(
        (f(&calibration["mse"]) - mse).abs() < 1e-9,
        "{calibration} vs {mse}"
    );
    assert!(
        stderr(&o).contains("`progress` filled from the model"),
        "{}",
        stderr(&o)
    );

    // A step model is not a segment reward model.
    let o = spa(&["--sprm-model", &model]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("pass it with --progress-model"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn progress_estimator_on_sokoban_beats_the_constant_predictor() {
    // 8 Sokoban seeds × 8 rollouts: 5-fold cross-validation by seed, each seed held out once.
    let run = Run::new();
    let logs = fixture("real/sokoban.jsonl").display().to_string();
    let o = run.credit([
        "train", "progress", &logs, "--out", "pm", "--format", "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let report = &json(&o)["report"];
    let loss: Vec<f64> = report["epoch_loss"]
        .as_array()
        .unwrap()
        .iter()
        .map(f)
        .collect();
    assert!(
        loss.last().unwrap() < &(0.7 * loss[0]),
        "training loss {loss:?}"
    );
    let held = &report["heldout"];
    assert_eq!(
        (held["folds"].as_u64(), held["trajectories"].as_u64()),
        (Some(5), Some(64))
    );
    let (mse, constant) = (f(&held["mse"]), f(&held["constant_mse"]));
    assert!(
        mse < 0.8 * constant,
        "held-out MSE {mse} vs constant {constant}"
    );
    assert!(f(&held["pearson"]) > 0.5, "{held}");
    // The step order counts every pair of steps in one trajectory whose logged rewards differ
    // (counted here from the file), and the held-out ĉ_t order most of them as the rewards do.
    let mut rewards: std::collections::HashMap<String, Vec<f64>> = Default::default();
    for line in std::fs::read_to_string(&logs).unwrap().lines() {
        let row: serde_json::Value = serde_json::from_str(line).unwrap();
        rewards
            .entry(row["traj_uid"].as_str().unwrap().to_string())
            .or_default()
            .push(f(&row["reward"]));
    }
    let pairs: u64 = rewards
        .values()
        .map(|r| {
            let mut n = 0;
            for (i, a) in r.iter().enumerate() {
                n += r[i + 1..].iter().filter(|b| *b != a).count() as u64;
            }
            n
        })
        .sum();
    let order = &held["step_order"];
    assert_eq!(order["pairs"].as_u64(), Some(pairs), "{order}");
    assert!(f(&order["agreement"]) > 0.7, "{order}");
}

/// Where `hisr.segments = rule` closes segments in the TextWorld fixture, recomputed here: after
/// an executed action whose command starts with a state-changing verb, and at the last step.
fn rule_segment_ends(rows: &[serde_json::Value]) -> Vec<bool> {
    const VERBS: [&str; 8] = [
        "take", "put", "clean", "heat", "cool", "toggle", "use", "open",
    ];
    rows.iter()
        .enumerate()
        .map(|(k, r)| {
            let last = rows
                .get(k + 1)
                .is_none_or(|n| n["traj_uid"] != r["traj_uid"]);
            let verb = r["action"]
                .as_str()
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap_or("");
            let executed = r["is_action_valid"].as_bool().unwrap()
                && !r["next_obs"]
                    .as_str()
                    .unwrap_or("")
                    .contains("Nothing happens");
            last || (executed && VERBS.contains(&verb))
        })
        .collect()
}

#[test]
fn segment_reward_model_fills_hisr() {
    let run = Run::new();
    let logs = fixture("real/textworld.jsonl").display().to_string();
    let model = run.path("sprm").display().to_string();
    let o = run.credit([
        "train",
        "sprm",
        &logs,
        "--out",
        &model,
        "--epochs",
        "3",
        "--set",
        "hisr.segments=rule",
        "--format",
        "json",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(json(&o)["report"]["readout"], "segment-end");
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.path("sprm/config.json")).unwrap())
            .unwrap();
    assert_eq!(config["readout"], "segment-end");

    let hisr = |flag: &str| {
        run.credit([
            "advantages",
            &logs,
            "--methods",
            "hisr",
            "--set",
            "hisr.segments=rule",
            flag,
            &model,
            "-o",
            "out.jsonl",
        ])
    };
    let o = hisr("--progress-model");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("pass it with --sprm-model"),
        "{}",
        stderr(&o)
    );
    let o = hisr("--sprm-model");
    assert!(o.status.success(), "{}", stderr(&o));

    // No log-probs: z ≡ 1, so r^him = r̂/Σ|r̂| per segment (T-HISR-4): per trajectory the
    // segments close where the rule says, and Σ|r^him| over them is 1.
    let mut logged: Vec<serde_json::Value> = read_jsonl(&fixture("real/textworld.jsonl"));
    logged.sort_by_key(|r| {
        (
            r["traj_uid"].as_str().unwrap().to_string(),
            r["step"].as_u64(),
        )
    });
    let ends = rule_segment_ends(&logged);
    let mut out = read_jsonl(&run.path("out.jsonl"));
    out.sort_by_key(|r| {
        (
            r["traj_id"].as_str().unwrap().to_string(),
            r["step"].as_u64(),
        )
    });
    assert_eq!(out.len(), logged.len());
    let mut mass: std::collections::BTreeMap<String, f64> = Default::default();
    for (k, (r, l)) in out.iter().zip(&logged).enumerate() {
        assert_eq!(r["traj_id"], l["traj_uid"]);
        let closes = out
            .get(k + 1)
            .is_none_or(|n| n["traj_id"] != r["traj_id"] || n["hisr_segment"] != r["hisr_segment"]);
        assert_eq!(closes, ends[k], "{r}");
        if closes {
            *mass
                .entry(r["traj_id"].as_str().unwrap().into())
                .or_default() += f(&r["hisr_modulated"]).abs();
        }
    }
    assert_eq!(mass.len(), 24);
    assert!(mass.values().all(|m| (m - 1.0).abs() < 1e-9), "{mass:?}");
}

/// The tiny random Llama as a GGUF file at `name`, with `key` set to `value` in its metadata.
fn gguf_with(run: &Run, name: &str, key: &str, value: Value) -> String {
    let mut parts = gguf_parts(&Config::llama_tiny(GGUF_VOCAB), 3, false).expect("GGUF parts");
    set_gguf_metadata(&mut parts, key, value);
    let path = run.path(name);
    write_gguf_parts(&path, &parts.0, &parts.1).expect("write the GGUF");
    path.display().to_string()
}

/// `--handoff FILE` in place of `--out DIR`.
fn handoff_args(run: &Run, model: &str) -> Vec<String> {
    let mut args = policy_args(run, model, &["--handoff", "h.jsonl"]);
    let at = args.iter().position(|a| a == "--out").unwrap();
    args.drain(at..at + 2);
    args
}

/// `general.alignment = 0` divided by zero in candle's reader (a panic) through each flag that
/// takes a model; now it is named, and nothing is written.
#[test]
fn a_gguf_alignment_of_zero_is_an_error_for_model_handoff_and_backbone() {
    let run = Run::new();
    let gguf = gguf_with(&run, "a0.gguf", "general.alignment", Value::U32(0));
    let expected =
        format!("{gguf}: general.alignment is 0: must be a power of two (GGUF's default is 32)");
    let logs = fixture("real/textworld.jsonl").display().to_string();
    let backbone = [
        "train",
        "progress",
        &logs,
        "--backbone",
        &gguf,
        "--out",
        "pm",
        "--epochs",
        "1",
        "--folds",
        "0",
    ]
    .map(String::from)
    .to_vec();
    for (flag, args, output) in [
        (
            "--model",
            policy_args(&run, &gguf, &["--steps", "1"]),
            "ckpt",
        ),
        ("--handoff", handoff_args(&run, &gguf), "h.jsonl"),
        ("--backbone", backbone, "pm"),
    ] {
        let o = run.credit(&args);
        assert_eq!(o.status.code(), Some(2), "{flag}: {}", stderr(&o));
        assert!(stderr(&o).contains(&expected), "{flag}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{flag}: {}", stderr(&o));
        assert!(!run.path(output).exists(), "{flag}: {output} was written");
    }
}

/// Runs `credit ARGS` and returns its exit code, stderr, peak RSS in kilobytes and wall time.
// The child is reaped by `wait4` (which also gives its rusage), not by `Child::wait`.
#[allow(clippy::zombie_processes)]
fn measured(run: &Run, args: &[String]) -> (Option<i32>, String, i64, f64) {
    let err = run.path("measured.stderr");
    let started = std::time::Instant::now();
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_credit"))
        .args(args)
        .current_dir(run.dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("run credit");
    let mut status = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `child` is our own child, not yet waited for.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32, "wait4");
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    let seconds = started.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(&err).unwrap();
    (code, text, usage.ru_maxrss, seconds)
}

/// A metadata array is sized against the file before anything is allocated (one claiming 2⁴⁰
/// elements in a small file is refused at once), and a real 20 MB one is walked past: candle's
/// reader boxed each element as a 32-byte value (640 MB here; 8.2 GB and 172 s for 200 MB).
#[test]
fn gguf_metadata_arrays_stay_within_the_file() {
    let run = Run::new();
    let plain = run.path("plain.gguf");
    write_gguf(&plain, &Config::llama_tiny(GGUF_VOCAB), 3, false).expect("write the tiny GGUF");
    let seed = std::fs::read(&plain).unwrap();
    let key = "tokenizer.ggml.scores";
    let lie = run.path("lie.gguf");
    let bytes =
        splice_gguf_metadata(&seed, &[(key, GGUF_ARRAY, gguf_array(0, 1 << 40, &[0; 8]))]).unwrap();
    std::fs::write(&lie, &bytes).unwrap();
    // The element count, after the 24-byte header, the key, the value type and the element type.
    let at = 24 + 8 + key.len() + 4 + 4;
    let (code, err, _, seconds) = measured(&run, &handoff_args(&run, &lie.display().to_string()));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "{}: at byte {at}, metadata `{key}` claims 1099511627776 elements (1099511627776 bytes) but the file has only {} bytes left",
            lie.display(),
            bytes.len() - at - 8
        )),
        "{err}"
    );
    assert!(seconds < 10.0, "{seconds} s");

    let big = run.path("big.gguf");
    let filler = vec![7u8; 20 << 20];
    let bytes = splice_gguf_metadata(
        &seed,
        &[(key, GGUF_ARRAY, gguf_array(0, 20 << 20, &filler))],
    )
    .unwrap();
    std::fs::write(&big, bytes).unwrap();
    let measure = |model: &std::path::Path| {
        let _ = std::fs::remove_file(run.path("h.jsonl"));
        let (code, err, kb, seconds) =
            measured(&run, &handoff_args(&run, &model.display().to_string()));
        assert_eq!(code, Some(0), "{err}");
        (kb, seconds)
    };
    let ((plain_kb, plain_s), (big_kb, big_s)) = (measure(&plain), measure(&big));
    eprintln!("peak RSS {plain_kb} KB, {plain_s:.2} s without the array; {big_kb} KB, {big_s:.2} s with it");
    assert!(
        big_kb < plain_kb + 32 * 1024,
        "{big_kb} KB vs {plain_kb} KB"
    );
    assert!(big_s < plain_s + 5.0, "{big_s} s vs {plain_s} s");
}

/// Weights that are finite but overflow the logits make every step's loss and gradient NaN:
/// the run used to print "trained steps 1..2" and save the base model; now it fails (exit 2),
/// says how many steps were skipped and why, and writes no checkpoint.
#[test]
fn a_run_that_skips_every_update_exits_2_without_a_checkpoint() {
    let run = Run::new();
    let mut parts = gguf_parts(&Config::llama_tiny(GGUF_VOCAB), 3, false).expect("GGUF parts");
    for name in ["output_norm.weight", "output.weight"] {
        edit_gguf_tensor(&mut parts, name, |v| v.fill(1e30)).unwrap();
    }
    let path = run.path("huge.gguf");
    write_gguf_parts(&path, &parts.0, &parts.1).unwrap();
    let o = run.credit(policy_args(
        &run,
        &path.display().to_string(),
        &["--steps", "2"],
    ));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("every update was skipped: the gradient norm was not finite on all 2 steps (1..2; the loss was not finite on 2 of them)"),
        "{}",
        stderr(&o)
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(!stdout.contains("trained steps"), "{stdout}");
    let ckpt = run.path("ckpt");
    assert!(!ckpt.join("model.safetensors").exists());
    assert!(!ckpt.join("trainer_state.json").exists());
}

/// A training stopped by SIGINT says the step it reached and where its last checkpoint is, and
/// exits as the signal asks (issue #55: it said nothing).
#[test]
fn an_interrupted_training_says_where_it_stopped() {
    let run = Run::new();
    let model = tiny_model(&run);
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_credit"))
        .args(policy_args(
            &run,
            &model,
            &["--steps", "100000", "--save-every", "2"],
        ))
        .current_dir(run.dir.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let metrics = run.path("ckpt").join("metrics.jsonl");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while !metrics.is_file() || read_jsonl(&metrics).len() < 3 {
        assert!(std::time::Instant::now() < deadline, "no third step");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let output = child.wait_with_output().unwrap();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(130), "{err}");
    let line = err
        .lines()
        .find(|l| l.starts_with("interrupted after step "))
        .unwrap_or_else(|| panic!("no interrupted line: {err}"));
    assert!(
        line.contains(" of 100000: the checkpoint of step "),
        "{line}"
    );
    assert!(
        line.ends_with(&format!(
            "is in {}; continue it with the same command and --resume",
            run.path("ckpt").display()
        )),
        "{line}"
    );
    assert!(run.path("ckpt").join("trainer_state.json").is_file());
}
