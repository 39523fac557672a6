//! LoRA on a tiny random Qwen2-shaped model in the Hugging Face layout: only the adapters train
//! (the frozen base gets no gradient and stays bit-identical), the loss falls, the checkpoint is a
//! PEFT adapter with PEFT's names and shapes, `--merge` writes W + (α/r)·B A (checked against a
//! product computed here with plain loops), a resumed run equals an uninterrupted one, and
//! activation checkpointing leaves every gradient unchanged.

mod common;
use candle_core::{DType, Device, Tensor};
use common::{metrics, run};
use credit_train::checkpoint;
use credit_train::load::{self, Tokenizer};
use credit_train::lora::{self, LoraConfig, Target};
use credit_train::optim::{AdamW, AdamWConfig};
use credit_train::test_support::{self, BYTE_LEVEL_VOCAB};
use credit_train::train;
use credit_train::{Config, DeviceKind, Sample, TrainConfig};
use std::collections::HashMap;
use std::path::Path;

fn tiny_model(dir: &Path) -> Config {
    let config = Config {
        tie_word_embeddings: false,
        ..Config::qwen2_tiny(BYTE_LEVEL_VOCAB)
    };
    test_support::write_model_dir(dir, &config, 7, 1, DType::F32).unwrap();
    config
}

const STEPS: [(&str, &str, f32); 4] = [
    ("You are in a kitchen. A door leads north.", "go up", 1.0),
    ("A locked chest sits here.", "open", 1.0),
    ("You see a rock.", "kick", -1.0),
    ("A wall blocks the way.", "bash wall", -1.0),
];

fn samples(dir: &Path) -> Vec<Sample> {
    let tokenizer = Tokenizer::load(dir).unwrap();
    STEPS
        .iter()
        .map(|&(obs, action, advantage)| {
            let (input_ids, action_start) = tokenizer
                .encode_step(&tokenizer.chat.wrap_user(obs), action, 512)
                .unwrap();
            Sample {
                input_ids,
                action_start,
                advantage,
                old_logprob: None,
                old_token_logprobs: None,
            }
        })
        .collect()
}

fn lora_config(targets: &[Target], merge: bool) -> LoraConfig {
    LoraConfig {
        rank: 4,
        alpha: 8.0,
        dropout: 0.0,
        targets: targets.to_vec(),
        merge,
    }
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn fresh_lora_model(dir: &Path, lora: &LoraConfig) -> credit_train::Model {
    let (_, config) = load::read_config(dir).unwrap();
    let adapters = lora::init_adapters(&config, lora, 3).unwrap();
    load::load_model_lora(dir, DeviceKind::Cpu, lora, adapters.into_iter().collect()).unwrap()
}

fn batch(samples: &[Sample]) -> credit_train::data::Prepared {
    let refs: Vec<&Sample> = samples.iter().collect();
    credit_train::data::prepare(&refs, &Device::Cpu).unwrap()
}

#[test]
fn only_adapters_train_and_the_base_stays_bit_identical() {
    let dir = tempfile::tempdir().unwrap();
    let config = tiny_model(dir.path());
    let lora = lora_config(&Target::ALL, false);
    let model = fresh_lora_model(dir.path(), &lora);
    // 2 layers × 7 projections × (A, B) trained; every base parameter frozen.
    assert_eq!(model.params().len(), 28);
    assert_eq!(model.frozen().len(), config.parameters().len());
    let samples = samples(dir.path());
    let prepared = batch(&samples);

    // B starts at zero: the adapted model is the base model.
    let base = load::load_model(dir.path(), DeviceKind::Cpu).unwrap();
    let (a, b) = (
        values(&base.action_logprobs(&prepared.batch).unwrap()),
        values(&model.action_logprobs(&prepared.batch).unwrap()),
    );
    let worst = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max);
    assert!(
        worst <= 1e-6,
        "initial LoRA model differs from the base by {worst}"
    );

    let before: Vec<(String, Vec<u32>)> = model
        .frozen()
        .iter()
        .map(|(n, t)| (n.clone(), values(t).iter().map(|v| v.to_bits()).collect()))
        .collect();
    let advantages: Vec<f32> = prepared
        .segment
        .iter()
        .map(|&s| STEPS[s as usize].2)
        .collect();
    let advantages = Tensor::new(advantages.as_slice(), &Device::Cpu).unwrap();
    let mut optimizer = AdamW::new(model.params(), AdamWConfig::default()).unwrap();
    let mut losses = Vec::new();
    for step in 0..8 {
        // −Σ A·log π: raise the positive-advantage actions, lower the others.
        let logp = model.train_logprobs(&prepared.batch, step).unwrap();
        let loss = (logp * &advantages)
            .unwrap()
            .sum_all()
            .unwrap()
            .neg()
            .unwrap();
        losses.push(loss.to_scalar::<f32>().unwrap());
        let grads = model.backward(&loss).unwrap();
        for (name, t) in model.frozen() {
            assert!(grads.get(t).is_none(), "frozen `{name}` got a gradient");
        }
        let g: Vec<Tensor> = model
            .params()
            .iter()
            .map(|(name, v)| {
                let g = grads.get(v.as_tensor());
                // At step 0, B = 0 makes A's gradient zero, but every B's is not.
                if step == 0 && name.contains("lora_B") {
                    let n: f32 = values(g.unwrap()).iter().map(|x| x * x).sum();
                    assert!(n > 0.0, "`{name}` got no gradient");
                }
                g.cloned()
                    .unwrap_or_else(|| v.as_tensor().zeros_like().unwrap())
            })
            .collect();
        optimizer.step(&g, 1e-2).unwrap();
    }
    assert!(
        losses[7] < losses[0] - 1.0,
        "LoRA loss did not fall: {losses:?}"
    );
    for ((name, bits), (_, t)) in before.iter().zip(model.frozen()) {
        let now: Vec<u32> = values(t).iter().map(|v| v.to_bits()).collect();
        assert!(&now == bits, "frozen `{name}` changed");
    }
}

#[test]
fn run_writes_a_peft_adapter_and_merge_equals_base_plus_scaled_ba() {
    let dir = tempfile::tempdir().unwrap();
    let (model_dir, out) = (dir.path().join("model"), dir.path().join("ckpt"));
    let config = tiny_model(&model_dir);
    let samples = samples(&model_dir);
    let targets = [Target::Q, Target::V, Target::Gate, Target::Down];
    let tc = TrainConfig {
        lr: 2e-2,
        steps: Some(6),
        kl_coef: 0.0,
        lora: Some(lora_config(&targets, true)),
        ..TrainConfig::default()
    };
    let before = train::sequence_logprobs(
        &load::load_model(&model_dir, DeviceKind::Cpu).unwrap(),
        &samples,
        4,
    )
    .unwrap();
    train::train(&run(&model_dir, &out, false), &tc, &samples, &mut |_| {}).unwrap();

    // The surrogate falls and the actions move with their advantages.
    let m = metrics(&out);
    assert_eq!(m.len(), 6);
    assert!(m[5].loss < m[0].loss, "{:?} → {:?}", m[0].loss, m[5].loss);
    let merged_dir = out.join(lora::MERGED_DIR);
    let merged = load::load_model(&merged_dir, DeviceKind::Cpu).unwrap();
    let after = train::sequence_logprobs(&merged, &samples, 4).unwrap();
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!((a - b) * STEPS[i].2 > 0.0, "step {i}: {b} → {a}");
    }

    // PEFT's files, keys and config; no full weights at the top level.
    assert!(!out.join("model.safetensors").exists() && !out.join("config.json").exists());
    let peft: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(lora::ADAPTER_CONFIG)).unwrap())
            .unwrap();
    assert_eq!(peft["peft_type"], "LORA");
    assert_eq!(peft["task_type"], "CAUSAL_LM");
    assert_eq!(
        (peft["r"].as_u64(), peft["lora_alpha"].as_f64()),
        (Some(4), Some(8.0))
    );
    assert_eq!(
        peft["target_modules"],
        serde_json::json!(["q_proj", "v_proj", "gate_proj", "down_proj"])
    );
    let (adapters, step) = checkpoint::read_stamped(&out.join(lora::ADAPTER_WEIGHTS)).unwrap();
    assert_eq!(step, Some(6));
    // Tiny Qwen2: hidden 32, q 4×8, k/v 2×8, intermediate 64; A is [r, in], B [out, r].
    let mut expected: Vec<(String, Vec<usize>)> = Vec::new();
    for l in 0..2 {
        for (module, inp, outp) in [
            ("self_attn.q_proj", 32, 32),
            ("self_attn.v_proj", 32, 16),
            ("mlp.gate_proj", 32, 64),
            ("mlp.down_proj", 64, 32),
        ] {
            let p = format!("base_model.model.model.layers.{l}.{module}");
            expected.push((format!("{p}.lora_A.weight"), vec![4, inp]));
            expected.push((format!("{p}.lora_B.weight"), vec![outp, 4]));
        }
    }
    expected.sort();
    let mut got: Vec<(String, Vec<usize>)> = adapters
        .iter()
        .map(|(n, t)| (n.clone(), t.dims().to_vec()))
        .collect();
    got.sort();
    assert_eq!(got, expected);

    // merged = base + (α/r)·B·A, the product done here with loops; other tensors bit-identical.
    let base = load::read_tensors(&load::weight_files(&model_dir).unwrap()).unwrap();
    let (merged_tensors, _) =
        checkpoint::read_stamped(&merged_dir.join("model.safetensors")).unwrap();
    assert_eq!(merged_tensors.len(), config.parameters().len());
    let scale = 8.0 / 4.0;
    for (name, w) in &merged_tensors {
        let w0 = values(&base[name]);
        let w1 = values(w);
        let module = name.trim_end_matches(".weight");
        let a_name = format!("base_model.model.{module}.lora_A.weight");
        let b_name = format!("base_model.model.{module}.lora_B.weight");
        let Some(a) = adapters.get(&a_name) else {
            let same = w0.iter().zip(&w1).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "`{name}` has no adapter but changed in the merge");
            continue;
        };
        let (a, b) = (values(a), values(&adapters[&b_name]));
        let (outp, inp) = w.dims2().unwrap();
        let mut moved = 0f32;
        for o in 0..outp {
            for i in 0..inp {
                let ba: f64 = (0..4)
                    .map(|k| b[o * 4 + k] as f64 * a[k * inp + i] as f64)
                    .sum();
                let want = w0[o * inp + i] as f64 + scale * ba;
                let got = w1[o * inp + i] as f64;
                assert!(
                    (got - want).abs() <= 1e-6,
                    "`{name}`[{o},{i}]: {got} vs {want}"
                );
                moved = moved.max((w1[o * inp + i] - w0[o * inp + i]).abs());
            }
        }
        assert!(moved > 0.0, "`{name}`: the adapter did not train");
    }

    // The merged model predicts what the base with the adapter does.
    let with_adapter = load::load_model_lora(
        &model_dir,
        DeviceKind::Cpu,
        &lora_config(&targets, true),
        adapters,
    )
    .unwrap();
    let lora_lp = train::sequence_logprobs(&with_adapter, &samples, 4).unwrap();
    for (x, y) in lora_lp.iter().zip(&after) {
        assert!((x - y).abs() < 1e-4, "{lora_lp:?} vs {after:?}");
    }
}

#[test]
fn resumed_lora_run_equals_an_uninterrupted_one() {
    let dir = tempfile::tempdir().unwrap();
    let model_dir = dir.path().join("model");
    tiny_model(&model_dir);
    let samples = samples(&model_dir);
    let config = |steps| TrainConfig {
        lr: 1e-2,
        steps: Some(steps),
        batch_size: 2,
        kl_coef: 0.05,
        // Dropout on: its masks come from the seed and the step, so the resumed run draws the
        // ones the uninterrupted run drew.
        lora: Some(LoraConfig {
            dropout: 0.25,
            ..lora_config(&[Target::Q, Target::Up], false)
        }),
        ..TrainConfig::default()
    };
    let (straight, resumed) = (dir.path().join("a"), dir.path().join("b"));
    train::train(
        &run(&model_dir, &straight, false),
        &config(4),
        &samples,
        &mut |_| {},
    )
    .unwrap();
    train::train(
        &run(&model_dir, &resumed, false),
        &config(2),
        &samples,
        &mut |_| {},
    )
    .unwrap();
    // A different rank is refused; merging and checkpointing may change.
    let mut other = config(4);
    other.lora.as_mut().unwrap().rank = 2;
    let e = train::train(
        &run(&model_dir, &resumed, true),
        &other,
        &samples,
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("other training flags"), "{e}");
    let mut changed = config(4);
    changed.lora.as_mut().unwrap().merge = true;
    changed.checkpoint_layers = true;
    let s = train::train(
        &run(&model_dir, &resumed, true),
        &changed,
        &samples,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!((s.start_step, s.steps), (2, 4));
    assert!(resumed
        .join(lora::MERGED_DIR)
        .join("model.safetensors")
        .is_file());

    let (a, _) = checkpoint::read_stamped(&straight.join(lora::ADAPTER_WEIGHTS)).unwrap();
    let (b, _) = checkpoint::read_stamped(&resumed.join(lora::ADAPTER_WEIGHTS)).unwrap();
    assert_eq!(a.len(), 2 * 2 * 2);
    for (name, ta) in &a {
        let diff = values(ta)
            .iter()
            .zip(values(&b[name]))
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        assert!(diff <= 1e-6, "`{name}` differs by {diff}");
    }
}

/// Every trained tensor's gradient of Σ log π over the batch, by name.
fn gradients(model: &credit_train::Model, samples: &[Sample]) -> HashMap<String, Vec<f32>> {
    let logp = model.train_logprobs(&batch(samples).batch, 0).unwrap();
    let grads = model.backward(&logp.sum_all().unwrap()).unwrap();
    model
        .params()
        .iter()
        .map(|(n, v)| (n.clone(), values(grads.get(v.as_tensor()).unwrap())))
        .collect()
}

#[test]
fn activation_checkpointing_leaves_gradients_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    tiny_model(dir.path());
    let samples = samples(dir.path());
    // Full fine-tuning and LoRA (B made non-zero by one update, so A's gradients are too).
    let full = load::load_model(dir.path(), DeviceKind::Cpu).unwrap();
    let adapted = fresh_lora_model(dir.path(), &lora_config(&Target::ALL, false));
    for (_, v) in adapted.params() {
        v.set(&(v.as_tensor() + 0.05).unwrap()).unwrap();
    }
    for mut model in [full, adapted] {
        let plain = gradients(&model, &samples);
        model.set_checkpointing(true);
        let recomputed = gradients(&model, &samples);
        assert_eq!(plain.len(), recomputed.len());
        for (name, g) in &plain {
            let r = &recomputed[name];
            let norm: f32 = g.iter().map(|x| x * x).sum::<f32>().sqrt();
            let diff: f32 = g
                .iter()
                .zip(r)
                .map(|(x, y)| (x - y).powi(2))
                .sum::<f32>()
                .sqrt();
            assert!(norm > 0.0, "`{name}`: zero gradient");
            assert!(
                diff <= 1e-5 * norm.max(1.0),
                "`{name}`: {diff} off a norm of {norm}"
            );
        }
    }
}
