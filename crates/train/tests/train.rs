//! Training end to end on a tiny random Qwen2-shaped model written in the Hugging Face layout on
//! the fly (config.json, sharded safetensors with an index, a byte-level tokenizer.json), loaded
//! through the real loading code: every parameter gets a gradient, updates move log-probs in the
//! direction of the advantage, the loss is finite, the checkpoint loads as a model, a resumed
//! run equals an uninterrupted one, and the `credit-train` binary trains from a hand-off file.

mod common;
use candle_core::{DType, Device};
use common::{metrics, run};
use credit_train::checkpoint::{self, METRICS, OPTIMIZER, TRAINER_STATE};
use credit_train::load::{self, ChatFormat, Tokenizer};
use credit_train::test_support::{self, BYTE_LEVEL_VOCAB};
use credit_train::train;
use credit_train::{Config, DeviceKind, Sample, TrainConfig};
use std::path::Path;

/// A tiny model directory: Qwen2 layout, untied head (so `lm_head.weight` is trained too),
/// weights in 3 shards.
fn tiny_model(dir: &Path) -> Config {
    let config = Config {
        tie_word_embeddings: false,
        ..Config::qwen2_tiny(BYTE_LEVEL_VOCAB)
    };
    test_support::write_model_dir(dir, &config, 7, 3, DType::F32).unwrap();
    config
}

/// Steps whose actions share no characters across the two signs; the end-of-turn token every
/// action ends with gets +1 twice and −1 twice, so its pushes cancel.
const STEPS: [(&str, &str, f32); 4] = [
    (
        "You are in a kitchen. There is a door to the north.",
        "go up",
        1.0,
    ),
    ("A locked chest sits here.", "open", 1.0),
    ("You see a rock.", "kick", -1.0),
    ("A wall blocks the way.", "bash wall", -1.0),
];

fn samples(tokenizer: &Tokenizer, old_logprob: &[Option<f32>]) -> Vec<Sample> {
    STEPS
        .iter()
        .zip(old_logprob)
        .map(|(&(obs, action, advantage), &old)| {
            let (input_ids, action_start) = tokenizer
                .encode_step(&tokenizer.chat.wrap_user(obs), action, 512)
                .unwrap();
            Sample {
                input_ids,
                action_start,
                advantage,
                old_logprob: old,
                old_token_logprobs: None,
            }
        })
        .collect()
}

#[test]
fn tokenizer_and_chat_markup_are_read_from_the_model_folder() {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path());
    let tokenizer = Tokenizer::load(dir.path()).unwrap();
    assert_eq!(tokenizer.chat, ChatFormat::ChatMl);
    // Byte tokens have their byte's id; <|im_start|> is 257 and <|im_end|> 258
    // (test_support::SPECIAL_TOKENS).
    let (ids, start) = tokenizer
        .encode_step(
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
            "go",
            512,
        )
        .unwrap();
    assert_eq!(&ids[..2], &[257, b'u' as u32]);
    assert_eq!(&ids[start..], &[b'g' as u32, b'o' as u32, 258]);
    // A long prompt keeps its last tokens.
    let (ids, start) = tokenizer.encode_step("abcdef", "x", 3).unwrap();
    assert_eq!(
        (ids, start),
        (
            vec![b'd' as u32, b'e' as u32, b'f' as u32, b'x' as u32, 258],
            3
        )
    );
}

#[test]
fn every_parameter_receives_a_gradient() {
    let dir = tempfile::tempdir().unwrap();
    let config = tiny_model(dir.path());
    let model = load::load_model(dir.path(), DeviceKind::Cpu).unwrap();
    assert_eq!(model.params().len(), config.parameters().len());
    let tokenizer = Tokenizer::load(dir.path()).unwrap();
    let samples = samples(&tokenizer, &[None; 4]);
    let refs: Vec<&Sample> = samples.iter().collect();
    let prepared = credit_train::data::prepare(&refs, &Device::Cpu).unwrap();
    let logp = model.action_logprobs(&prepared.batch).unwrap();
    let grads = logp.sum_all().unwrap().backward().unwrap();
    for (name, var) in model.params() {
        let g = grads
            .get(var.as_tensor())
            .unwrap_or_else(|| panic!("`{name}` received no gradient"));
        let norm = g
            .sqr()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(
            norm > 0.0 && norm.is_finite(),
            "`{name}`: gradient norm² {norm}"
        );
    }
}

#[test]
fn updates_raise_positive_and_lower_negative_advantage_actions() {
    let dir = tempfile::tempdir().unwrap();
    let (model_dir, out) = (dir.path().join("model"), dir.path().join("ckpt"));
    tiny_model(&model_dir);
    let tokenizer = Tokenizer::load(&model_dir).unwrap();
    // Two steps carry a logged total log-prob (the sequence ratio), two are scored on-policy.
    let initial = load::load_model(&model_dir, DeviceKind::Cpu).unwrap();
    let unlogged = samples(&tokenizer, &[None; 4]);
    let before = train::sequence_logprobs(&initial, &unlogged, 4).unwrap();
    let samples = samples(&tokenizer, &[Some(before[0]), None, Some(before[2]), None]);

    let config = TrainConfig {
        lr: 1e-2,
        steps: Some(6),
        batch_size: 2,
        grad_accum: 2,
        kl_coef: 0.01,
        warmup_steps: 2,
        ..TrainConfig::default()
    };
    let summary = train::train(
        &run(&model_dir, &out, false),
        &config,
        &samples,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!((summary.start_step, summary.steps), (0, 6));

    let trained = load::load_model(&out, DeviceKind::Cpu).unwrap();
    let after = train::sequence_logprobs(&trained, &samples, 4).unwrap();
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        let advantage = STEPS[i].2;
        assert!(
            (a - b) * advantage > 0.5,
            "step {i} (advantage {advantage}): log-prob {b} → {a}"
        );
    }
    let lines = metrics(&out);
    assert_eq!(
        lines.iter().map(|m| m.step).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6]
    );
    for m in &lines {
        assert!(
            m.loss.is_finite() && m.grad_norm.is_finite() && m.updated,
            "{m:?}"
        );
        assert!(
            m.kl.is_some_and(|k| k >= 0.0) && (0.0..=1.0).contains(&m.clip_frac),
            "{m:?}"
        );
        assert_eq!(m.samples, 4);
    }
    // On-policy first step: every ratio is 1 (old = initial model), nothing is clipped, k3 = 0;
    // warm-up halves the first learning rate.
    assert!(
        lines[0].clip_frac == 0.0 && lines[0].kl.unwrap() < 1e-9,
        "{:?}",
        lines[0]
    );
    assert!((lines[0].lr - 5e-3).abs() < 1e-12 && (lines[2].lr - 1e-2).abs() < 1e-12);
    // Later steps drift from the initial policy.
    assert!(lines[5].kl.unwrap() > 0.0);
}

#[test]
fn checkpoint_is_a_hugging_face_model_folder() {
    let dir = tempfile::tempdir().unwrap();
    let (model_dir, out) = (dir.path().join("model"), dir.path().join("ckpt"));
    let config = tiny_model(&model_dir);
    let samples = samples(&Tokenizer::load(&model_dir).unwrap(), &[None; 4]);
    let tc = TrainConfig {
        lr: 1e-3,
        steps: Some(1),
        ..TrainConfig::default()
    };
    train::train(&run(&model_dir, &out, false), &tc, &samples, &mut |_| {}).unwrap();
    for file in [
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "tokenizer_config.json",
        OPTIMIZER,
        TRAINER_STATE,
        METRICS,
    ] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    let leftovers: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");
    let (raw, loaded) = load::read_config(&out).unwrap();
    assert_eq!(loaded, config);
    assert_eq!(raw["torch_dtype"], "float32");
    let (tensors, step) = checkpoint::read_stamped(&out.join("model.safetensors")).unwrap();
    assert_eq!(step, Some(1));
    let mut names: Vec<&String> = tensors.keys().collect();
    names.sort();
    let mut expected: Vec<String> = config.parameters().into_iter().map(|(n, _)| n).collect();
    expected.sort();
    assert_eq!(names, expected.iter().collect::<Vec<_>>());
    assert!(Tokenizer::load(&out).is_ok());

    // The folder is a checkpoint now: a fresh run into it must be asked for explicitly.
    let e = train::train(&run(&model_dir, &out, false), &tc, &samples, &mut |_| {})
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("already holds a checkpoint at step 1") && e.contains("--resume"),
        "{e}"
    );
}

#[test]
fn resumed_run_continues_exactly_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("model");
    tiny_model(&model_dir);
    let samples = samples(&Tokenizer::load(&model_dir).unwrap(), &[None; 4]);
    let config = |steps| TrainConfig {
        lr: 5e-3,
        steps: Some(steps),
        batch_size: 1,
        grad_accum: 2,
        kl_coef: 0.05,
        ..TrainConfig::default()
    };

    let straight = dir.path().join("straight");
    train::train(
        &run(&model_dir, &straight, false),
        &config(4),
        &samples,
        &mut |_| {},
    )
    .unwrap();

    let resumed = dir.path().join("resumed");
    train::train(
        &run(&model_dir, &resumed, false),
        &config(2),
        &samples,
        &mut |_| {},
    )
    .unwrap();
    // A different learning rate is refused; a longer run is not.
    let e = train::train(
        &run(&model_dir, &resumed, true),
        &TrainConfig {
            lr: 1.0,
            ..config(4)
        },
        &samples,
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("other training flags"), "{e}");
    let summary = train::train(
        &run(&model_dir, &resumed, true),
        &config(4),
        &samples,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!((summary.start_step, summary.steps), (2, 4));

    // Nothing left to do is said, not silently skipped.
    let e = train::train(
        &run(&model_dir, &resumed, true),
        &config(4),
        &samples,
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("at step 4") && e.contains("larger --steps"),
        "{e}"
    );

    let (a, _) = checkpoint::read_stamped(&straight.join("model.safetensors")).unwrap();
    let (b, _) = checkpoint::read_stamped(&resumed.join("model.safetensors")).unwrap();
    for (name, ta) in &a {
        let diff = (ta - &b[name])
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap();
        assert!(
            diff <= 1e-6,
            "`{name}` differs by {diff} between the straight and the resumed run"
        );
    }
    let (sa, sb) = (metrics(&straight), metrics(&resumed));
    assert_eq!(sb.iter().map(|m| m.step).collect::<Vec<_>>(), [1, 2, 3, 4]);
    for (x, y) in sa.iter().zip(&sb) {
        assert!(
            (x.loss - y.loss).abs() <= 1e-6 && (x.grad_norm - y.grad_norm).abs() <= 1e-5,
            "{x:?}\n{y:?}"
        );
    }
}

#[test]
fn binary_trains_from_a_handoff_file() {
    let dir = tempfile::tempdir().unwrap();
    let (model_dir, out, handoff) = (
        dir.path().join("model"),
        dir.path().join("ckpt"),
        dir.path().join("h.jsonl"),
    );
    tiny_model(&model_dir);
    let samples = samples(&Tokenizer::load(&model_dir).unwrap(), &[None; 4]);
    let config = TrainConfig {
        lr: 1e-3,
        steps: Some(2),
        ..TrainConfig::default()
    };
    credit_train::data::write_handoff(&handoff, &config, &samples).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_credit-train"))
        .arg(&handoff)
        .args([
            "--model".as_ref(),
            model_dir.as_os_str(),
            "--out".as_ref(),
            out.as_os_str(),
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("trained 2 steps"));
    assert_eq!(metrics(&out).len(), 2);
    // Each step's line is the progress bar's text (`StepMetrics::progress`) and its gradient norm.
    let steps: Vec<&str> = stderr.lines().filter(|l| l.starts_with("step ")).collect();
    assert_eq!(steps.len(), 2, "{stderr}");
    assert!(
        steps[1].starts_with("step 2: loss ") && steps[1].contains(" tok/s · grad-norm "),
        "{stderr}"
    );

    let o = std::process::Command::new(env!("CARGO_BIN_EXE_credit-train"))
        .arg(&handoff)
        .arg("--model")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("a value is required for '--model"));
}
