//! A model read from a GGUF file, on tiny random Llama models written here as llama.cpp's
//! converter writes them (q/k rows permuted, Q8_0/Q4_1 blocks): the weights come back under
//! Hugging Face names and in Hugging Face's basis (bit-identical to the folder they were written
//! from when stored as F32, so the model computes the same log-probs), the tokenizer is rebuilt
//! from the metadata, LoRA gradients over a quantised base match finite differences (through the
//! attached attention softmax; the off-graph scoring pass gives the same values), a LoRA run
//! writes a PEFT adapter and a merged Hugging Face folder, and malformed files are named: counts
//! and lengths past the file's end, alignments, hyper-parameters and non-finite weights. A large
//! metadata array is walked past in little time, and a run whose every update is skipped fails.

mod common;
use candle_core::{DType, Device, Tensor};
use common::{metrics, run};
use credit_train::load::{self, ChatFormat, Tokenizer};
use credit_train::lora::{self, LoraConfig, Target};
use credit_train::rng::SplitMix64;
use credit_train::test_support::{self, Value, GGUF_VOCAB};
use credit_train::{checkpoint, train};
use credit_train::{Config, DeviceKind, Sample, TrainConfig};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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
    m[0].1 = Value::String("gpt2".into());
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

/// A tiny GGUF file's bytes with `entries` spliced in before its metadata.
fn spliced(entries: &[(&str, u32, Vec<u8>)]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seed.gguf");
    test_support::write_gguf(&path, &config(), SEED, false).unwrap();
    test_support::splice_gguf_metadata(&std::fs::read(&path).unwrap(), entries).unwrap()
}

/// Where the element count of the array value of a first spliced entry `key` lies: after the
/// 24-byte header, the key (its u64 length and bytes), the value type and the element type.
fn count_at(key: &str) -> usize {
    24 + 8 + key.len() + 4 + 4
}

#[test]
fn metadata_arrays_are_sized_against_the_file_before_anything_is_allocated() {
    let dir = tempfile::tempdir().unwrap();
    const U8: u32 = 0;
    const STRING: u32 = 8;
    for (kind, unit, what) in [(U8, 1u64, ""), (STRING, 8, "at least ")] {
        let key = "credit.test.lie";
        let claimed = 1u64 << 40;
        let bytes = spliced(&[(
            key,
            test_support::GGUF_ARRAY,
            test_support::gguf_array(kind, claimed, &[0; 16]),
        )]);
        let path = dir.path().join("lie.gguf");
        std::fs::write(&path, &bytes).unwrap();
        let at = count_at(key);
        let started = std::time::Instant::now();
        let e = load::read_config(&path).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}: at byte {at}, metadata `{key}` claims {claimed} elements ({what}{} bytes) but the file has only {} bytes left",
                path.display(),
                claimed * unit,
                bytes.len() - at - 8
            )
        );
        assert!(
            started.elapsed().as_secs_f64() < 1.0,
            "{:?}",
            started.elapsed()
        );
    }

    // A string longer than the rest of the file, and a file cut short inside the metadata.
    let key = "credit.test.long";
    let mut value = u64::MAX.to_le_bytes().to_vec();
    value.extend(b"abc");
    let bytes = spliced(&[(key, STRING, value)]);
    let path = dir.path().join("long.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let e = load::read_config(&path).unwrap_err().to_string();
    let at = 24 + 8 + key.len() + 4;
    assert_eq!(
        e,
        format!(
            "{}: at byte {at}, metadata `{key}` has a string of {} bytes but the file has only {} bytes left",
            path.display(),
            u64::MAX,
            bytes.len() - at - 8
        )
    );
    std::fs::write(&path, &bytes[..30]).unwrap();
    let e = load::read_config(&path).unwrap_err().to_string();
    let count = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
    let (tensors, entries) = (count(8), count(16));
    assert_eq!(
        e,
        format!(
            "{}: at byte 16, the header claims {tensors} tensors and {entries} metadata entries (at least {} bytes) but the file has only 6 bytes left",
            path.display(),
            13 * entries + 24 * tensors
        )
    );
    std::fs::write(&path, &bytes[..20]).unwrap();
    let e = load::read_config(&path).unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{}: at byte 16, the header is cut short: the file ends at byte 20",
            path.display()
        )
    );
}

/// A 20 MB array that no one reads (as a tokenizer's scores can be) is walked past, not read:
/// the model and its tokenizer load as fast as without it.
#[test]
fn a_large_metadata_array_is_skipped_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.gguf");
    let bytes = spliced(&[(
        "credit.test.filler",
        test_support::GGUF_ARRAY,
        test_support::gguf_array(0, 20 << 20, &vec![7; 20 << 20]),
    )]);
    std::fs::write(&path, &bytes).unwrap();
    let started = std::time::Instant::now();
    let (_, read) = load::read_config(&path).unwrap();
    assert_eq!(read.vocab_size, GGUF_VOCAB);
    let tokenizer = Tokenizer::load(&path).unwrap();
    assert_eq!(tokenizer.encode(" to", true).unwrap(), [259, 111]);
    load::load_model(&path, DeviceKind::Cpu).unwrap();
    let took = started.elapsed().as_secs_f64();
    assert!(took < 5.0, "{took} s");
}

/// The tiny model with the metadata `key` set to `value`, written to `dir/name`.
fn with_metadata(dir: &Path, name: &str, key: &str, value: Value) -> PathBuf {
    let mut parts = test_support::gguf_parts(&config(), SEED, false).unwrap();
    test_support::set_gguf_metadata(&mut parts, key, value);
    let path = dir.join(name);
    test_support::write_gguf_parts(&path, &parts.0, &parts.1).unwrap();
    path
}

#[test]
fn alignment_must_be_a_power_of_two() {
    let dir = tempfile::tempdir().unwrap();
    for (value, shown) in [
        (Value::U32(0), "0"),
        (Value::U32(48), "48"),
        (Value::I32(-32), "-32"),
        (Value::String("32".into()), "\"32\""),
    ] {
        let path = with_metadata(dir.path(), "a.gguf", "general.alignment", value);
        let expected = format!(
            "{}: general.alignment is {shown}: must be a power of two (GGUF's default is 32)",
            path.display()
        );
        let e = load::read_config(&path).unwrap_err().to_string();
        assert_eq!(e, expected);
        let e = Tokenizer::load(&path).err().unwrap().to_string();
        assert_eq!(e, expected);
    }
    let path = with_metadata(dir.path(), "a.gguf", "general.alignment", Value::U32(32));
    load::load_model(&path, DeviceKind::Cpu).unwrap();
}

#[test]
fn rope_base_and_norm_epsilon_must_be_positive() {
    let dir = tempfile::tempdir().unwrap();
    for key in [
        "llama.rope.freq_base",
        "llama.attention.layer_norm_rms_epsilon",
    ] {
        for (value, shown) in [
            (Value::F32(0.0), "0"),
            (Value::F32(-1.0), "-1"),
            (Value::F32(f32::NAN), "NaN"),
            (Value::F32(f32::INFINITY), "inf"),
            (Value::String("1e-5".into()), "\"1e-5\""),
        ] {
            let path = with_metadata(dir.path(), "h.gguf", key, value);
            let e = load::read_config(&path).unwrap_err().to_string();
            assert_eq!(
                e,
                format!(
                    "{}: metadata `{key}` = {shown}: must be a positive number",
                    path.display()
                )
            );
        }
    }
}

/// A change to a tensor's values.
type Edit = fn(&mut [f32]);

/// The tiny model with each GGUF tensor of `edits` edited (stored as F32), written to
/// `dir/name`.
fn with_tensors(dir: &Path, name: &str, edits: &[(&str, Edit)]) -> PathBuf {
    let mut parts = test_support::gguf_parts(&config(), SEED, false).unwrap();
    for (tensor, edit) in edits {
        test_support::edit_gguf_tensor(&mut parts, tensor, edit).unwrap();
    }
    let path = dir.join(name);
    test_support::write_gguf_parts(&path, &parts.0, &parts.1).unwrap();
    path
}

#[test]
fn non_finite_weights_are_named_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = with_tensors(
        dir.path(),
        "nan.gguf",
        &[("blk.0.ffn_up.weight", |v| {
            v[7] = f32::NAN;
            v[9] = f32::INFINITY;
            v[10] = f32::NAN;
        })],
    );
    let e = load::load_model(&path, DeviceKind::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert_eq!(
        e,
        format!(
            "{}: tensor `model.layers.0.mlp.up_proj.weight` (`blk.0.ffn_up.weight` in the GGUF file) holds 2 NaN and 1 infinite values, the first at index 7: every training step on it would be skipped",
            path.display()
        )
    );
    let e = load::load_model_lora(&path, DeviceKind::Cpu, &lora_config(false), HashMap::new())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("holds 2 NaN and 1 infinite values"), "{e}");
}

/// Weights that are finite but overflow the logits: every step's loss and gradient are NaN, so
/// every update is skipped, and the run fails instead of saving the base model as trained.
#[test]
fn a_run_that_skips_every_update_fails_without_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let huge: Edit = |v| v.fill(1e30);
    let path = with_tensors(
        dir.path(),
        "huge.gguf",
        &[("output_norm.weight", huge), ("output.weight", huge)],
    );
    let out = dir.path().join("ckpt");
    let tc = TrainConfig {
        steps: Some(2),
        batch_size: 1,
        ..TrainConfig::default()
    };
    let e = train::train(&run(&path, &out, false), &tc, &samples(&path), &mut |_| {})
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "every update was skipped: the gradient norm was not finite on all 2 steps (1..2; the loss was not finite on 2 of them), so the model did not change and is not saved as trained. Check the model's weights and hyper-parameters, or lower --lr"
    );
    // JSON has no NaN: the lines hold the loss as null.
    let lines = std::fs::read_to_string(out.join(checkpoint::METRICS)).unwrap();
    let lines: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(lines
        .iter()
        .all(|m| m["updated"] == false && m["loss"].is_null()));
    assert!(checkpoint::read_state(&out).unwrap().is_none());
    assert!(!out.join(load::WEIGHTS).exists());
}

#[test]
fn metadata_of_the_wrong_type_is_named() {
    let dir = tempfile::tempdir().unwrap();
    for (key, value, expected) in [
        (
            "llama.block_count",
            Value::String("x".into()),
            "metadata `llama.block_count` = \"x\" is not a count",
        ),
        (
            "tokenizer.ggml.tokens",
            Value::U32(5),
            "metadata `tokenizer.ggml.tokens` = 5 is not an array",
        ),
        (
            "tokenizer.ggml.pre",
            Value::U32(1),
            "metadata `tokenizer.ggml.pre` = 1 is not a string",
        ),
        (
            "tokenizer.ggml.token_type",
            Value::Array(vec![Value::F32(1.0)]),
            "metadata `tokenizer.ggml.token_type` is an array of f32, not of integers",
        ),
    ] {
        let path = with_metadata(dir.path(), "t.gguf", key, value);
        let e = match load::read_config(&path) {
            Err(e) => e.to_string(),
            Ok(_) => Tokenizer::load(&path).err().unwrap().to_string(),
        };
        assert_eq!(e, format!("{}: {expected}", path.display()));
    }
}
