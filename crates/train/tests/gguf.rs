//! A model read from a GGUF file, on tiny random Llama models written here as llama.cpp's
//! converter writes them (q/k rows permuted, Q8_0/Q4_1 blocks): the weights come back under
//! Hugging Face names and in Hugging Face's basis (bit-identical to the folder they were written
//! from when stored as F32, so the model computes the same log-probs), the tokenizer is rebuilt
//! from the metadata, LoRA gradients over a quantised base match finite differences (through the
//! attached attention softmax; the off-graph scoring pass gives the same values), a LoRA run
//! writes a PEFT adapter and a merged Hugging Face folder, and malformed files are named.

mod common;
use candle_core::{DType, Device, Tensor};
use common::{metrics, run};
use credit_train::load::{self, ChatFormat, Tokenizer};
use credit_train::lora::{self, LoraConfig, Target};
use credit_train::rng::SplitMix64;
use credit_train::test_support::{self, GGUF_VOCAB};
use credit_train::{checkpoint, train};
use credit_train::{Config, DeviceKind, Sample, TrainConfig};
use std::collections::HashMap;
use std::path::Path;

const SEED: u64 = 11;

fn config() -> Config {
    Config::llama_tiny(GGUF_VOCAB)
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .unwrap()
        .flatten_all()
        .unwrap()
        .to_vec1()
        .unwrap()
}

fn samples(model: &Path) -> Vec<Sample> {
    let tokenizer = Tokenizer::load(model).unwrap();
    [
        ("You are in a kitchen. A door leads north.", "go north", 1.0),
        ("A locked chest sits here; 42 coins.", "open chest", -1.0),
        ("The hall is dark.", "light the torch", 0.5),
    ]
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

fn lora_config(merge: bool) -> LoraConfig {
    LoraConfig {
        rank: 4,
        alpha: 8.0,
        dropout: 0.0,
        targets: Target::ALL.to_vec(),
        merge,
    }
}

#[test]
fn f32_gguf_reads_back_the_hugging_face_weights_and_log_probs() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf, folder) = (dir.path().join("m.gguf"), dir.path().join("hf"));
    let config = config();
    test_support::write_gguf(&gguf, &config, SEED, false).unwrap();
    test_support::write_model_dir(&folder, &config, SEED, 1, DType::F32).unwrap();

    // The metadata stores ε as f32.
    let (json, read) = load::read_config(&gguf).unwrap();
    assert_eq!(
        read,
        Config {
            rms_norm_eps: f64::from(config.rms_norm_eps as f32),
            ..config.clone()
        }
    );
    assert_eq!(json["model_type"], "llama");
    assert_eq!(json["architectures"][0], "LlamaForCausalLM");

    let from_gguf = load::read_weights(&gguf).unwrap();
    let written: HashMap<String, Tensor> = test_support::random_tensors(&config, SEED)
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(from_gguf.len(), written.len());
    for (name, t) in &written {
        let bits = |t: &Tensor| values(t).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        assert!(bits(&from_gguf[name]) == bits(t), "`{name}` differs");
    }

    // The permuted q/k rows were put back: the model is the folder's model.
    let samples = samples(&folder);
    let lp = |path: &Path| {
        let model = load::load_model(path, DeviceKind::Cpu).unwrap();
        train::sequence_logprobs(&model, &samples, 4).unwrap()
    };
    assert_eq!(lp(&gguf), lp(&folder));
}

#[test]
fn tokenizer_and_chat_template_come_from_the_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("m.gguf");
    test_support::write_gguf(&gguf, &config(), SEED, true).unwrap();
    let tokenizer = Tokenizer::load(&gguf).unwrap();
    assert_eq!(tokenizer.chat, ChatFormat::ChatMl);
    // Bytes are ids 0–255 (`t` 116, ` ` 32, `4` 52, `2` 50, `o` 111), specials 256–258, then the
    // merges: `Ġt` 259, `he` 260, `42` 261. Digits are split one by one before BPE (`smollm`), so
    // `42` never merges; no BOS (`add_bos_token` false).
    assert_eq!(
        tokenizer.encode("the 42", true).unwrap(),
        [116, 260, 32, 52, 50]
    );
    assert_eq!(tokenizer.encode(" to", true).unwrap(), [259, 111]);
    assert_eq!(
        tokenizer.encode("<|im_start|>x<|im_end|>", false).unwrap(),
        [257, 120, 258]
    );
}

/// The loss differentiated: Σ over action tokens of w_i · log p_i, with fixed weights w_i; its
/// tensor (for the backward pass) and its value summed in f64 from the f32 log-probs (for finite
/// differences, whose f32 sum of ~40 terms near −5 would round to 2⁻¹⁴).
fn weighted_logprob(
    model: &credit_train::Model,
    prepared: &credit_train::data::Prepared,
) -> (Tensor, f64) {
    let lp = model.action_logprobs(&prepared.batch).unwrap();
    let n = lp.dim(0).unwrap();
    let w: Vec<f32> = (0..n).map(|i| 1.0 - 0.1 * i as f32).collect();
    let value = values(&lp)
        .iter()
        .zip(&w)
        .map(|(l, w)| f64::from(*l) * f64::from(*w))
        .sum();
    let w = Tensor::from_vec(w, n, &Device::Cpu).unwrap();
    ((lp * w).unwrap().sum_all().unwrap(), value)
}

#[test]
fn lora_gradients_over_a_quantised_gguf_base_match_finite_differences() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = dir.path().join("m.gguf");
    let config = config();
    test_support::write_gguf(&gguf, &config, SEED, true).unwrap();
    let lora = lora_config(false);
    // B is zero at initialisation, which would leave A without gradient: both random here.
    let mut rng = SplitMix64(5);
    let adapters: HashMap<String, Tensor> = lora::adapter_shapes(&config, &lora)
        .into_iter()
        .map(|(name, shape)| {
            let n = shape.iter().product();
            let v: Vec<f32> = (0..n).map(|_| 0.2 * rng.next_signed()).collect();
            (name, Tensor::from_vec(v, shape, &Device::Cpu).unwrap())
        })
        .collect();
    // Computed in f64, so that finite differences resolve the gradient (the log-softmax is f32).
    let model = credit_train::Model::from_tensors_lora(
        config,
        load::read_weights(&gguf).unwrap(),
        adapters,
        &lora,
        &Device::Cpu,
        DType::F64,
        &gguf,
    )
    .unwrap();
    let samples = samples(&gguf);
    let refs: Vec<&Sample> = samples.iter().collect();
    let prepared = credit_train::data::prepare(&refs, &Device::Cpu).unwrap();
    let grads = model
        .backward(&weighted_logprob(&model, &prepared).0)
        .unwrap();
    // The scoring pass computes the same values off the graph.
    assert_eq!(
        values(&model.score_logprobs(&prepared.batch).unwrap()),
        values(&model.action_logprobs(&prepared.batch).unwrap())
    );
    let eps = 2e-2f32;
    let (mut checked, mut worst) = (0, 0f64);
    for (name, var) in model.params().iter().step_by(5) {
        let g = values(grads.get(var.as_tensor()).unwrap());
        let base = values(var.as_tensor());
        let shape = var.as_tensor().shape().clone();
        for i in [0, base.len() / 2, base.len() - 1] {
            let at = |delta: f32| {
                let mut v = base.clone();
                v[i] += delta;
                var.set(&Tensor::from_vec(v, shape.clone(), &Device::Cpu).unwrap())
                    .unwrap();
                weighted_logprob(&model, &prepared).1
            };
            let fd = (at(eps) - at(-eps)) / (2.0 * f64::from(eps));
            at(0.0);
            let analytic = f64::from(g[i]);
            assert!(
                (fd - analytic).abs() <= 1e-4 + 3e-3 * analytic.abs(),
                "`{name}`[{i}]: analytic {analytic}, finite difference {fd}"
            );
            worst = worst.max((fd - analytic).abs());
            checked += 1;
        }
    }
    eprintln!("{checked} adapter entries, largest |finite difference − analytic| {worst:.2e}");
    assert!(checked >= 9, "{checked}");
}

#[test]
fn lora_run_on_a_gguf_writes_a_peft_adapter_and_a_merged_hugging_face_folder() {
    let dir = tempfile::tempdir().unwrap();
    let (gguf, out) = (dir.path().join("m.gguf"), dir.path().join("ckpt"));
    let config = config();
    test_support::write_gguf(&gguf, &config, SEED, true).unwrap();
    let samples = samples(&gguf);
    let tc = TrainConfig {
        lr: 2e-2,
        steps: Some(3),
        kl_coef: 0.0,
        lora: Some(lora_config(true)),
        ..TrainConfig::default()
    };
    train::train(&run(&gguf, &out, false), &tc, &samples, &mut |_| {}).unwrap();
    assert_eq!(metrics(&out).len(), 3);

    // PEFT's names in the Hugging Face llama layout.
    let (adapters, _) = checkpoint::read_stamped(&out.join(lora::ADAPTER_WEIGHTS)).unwrap();
    let a = "base_model.model.model.layers.1.self_attn.q_proj.lora_A.weight";
    let b = "base_model.model.model.layers.0.mlp.down_proj.lora_B.weight";
    assert_eq!(adapters[a].dims(), [4, 32]);
    assert_eq!(adapters[b].dims(), [32, 4]);
    assert_eq!(adapters.len(), 2 * 7 * config.num_hidden_layers);
    let peft: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(lora::ADAPTER_CONFIG)).unwrap())
            .unwrap();
    assert!(peft["base_model_name_or_path"]
        .as_str()
        .unwrap()
        .ends_with("m.gguf"));
    assert!(out.join(load::TOKENIZER).is_file() && out.join(load::TOKENIZER_CONFIG).is_file());

    // merged/ is a Hugging Face folder: its config, tokenizer and chat markup load, and it
    // predicts what the GGUF base with the adapter does.
    let merged = out.join(lora::MERGED_DIR);
    assert_eq!(load::model_dir_problem(&merged), None);
    let (json, merged_config) = load::read_config(&merged).unwrap();
    assert_eq!(json["model_type"], "llama");
    assert_eq!(merged_config, load::read_config(&gguf).unwrap().1);
    let tokenizer = Tokenizer::load(&merged).unwrap();
    assert_eq!(tokenizer.chat, ChatFormat::ChatMl);
    let text = "go north; 42";
    assert_eq!(
        tokenizer.encode(text, true).unwrap(),
        Tokenizer::load(&gguf).unwrap().encode(text, true).unwrap()
    );
    let merged_lp = train::sequence_logprobs(
        &load::load_model(&merged, DeviceKind::Cpu).unwrap(),
        &samples,
        4,
    )
    .unwrap();
    let with_adapter =
        load::load_model_lora(&gguf, DeviceKind::Cpu, &lora_config(true), adapters).unwrap();
    let lora_lp = train::sequence_logprobs(&with_adapter, &samples, 4).unwrap();
    for (x, y) in lora_lp.iter().zip(&merged_lp) {
        assert!((x - y).abs() < 1e-4, "{lora_lp:?} vs {merged_lp:?}");
    }
}

#[test]
fn malformed_gguf_files_are_named_with_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let config = config();
    let (metadata, tensors) = test_support::gguf_parts(&config, SEED, false).unwrap();

    let not_gguf = dir.path().join("model.gguf");
    std::fs::write(&not_gguf, "{\"model_type\": \"llama\"}").unwrap();
    let e = load::read_config(&not_gguf).unwrap_err().to_string();
    assert!(e.contains("model.gguf: not a GGUF file"), "{e}");
    let e = load::model_dir_problem(&not_gguf).unwrap();
    assert!(e.starts_with("not a folder, and not a GGUF file"), "{e}");

    let gpt2 = dir.path().join("gpt2.gguf");
    let mut m = metadata.clone();
    m[0].1 = candle_core::quantized::gguf_file::Value::String("gpt2".into());
    test_support::write_gguf_parts(&gpt2, &m, &tensors).unwrap();
    let e = load::read_config(&gpt2).unwrap_err().to_string();
    assert!(
        e.contains("gpt2.gguf: general.architecture `gpt2` is not supported"),
        "{e}"
    );

    let holed = dir.path().join("holed.gguf");
    let t: Vec<_> = tensors
        .into_iter()
        .filter(|(n, _)| n != "blk.1.ffn_up.weight")
        .collect();
    test_support::write_gguf_parts(&holed, &metadata, &t).unwrap();
    let e = load::load_model(&holed, DeviceKind::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("holed.gguf: tensor `blk.1.ffn_up.weight` (Hugging Face `model.layers.1.mlp.up_proj.weight`"),
        "{e}"
    );
}
