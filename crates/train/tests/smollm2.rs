//! The real SmolLM2-135M-Instruct (Q4_1 GGUF) against independent numbers from
//! `bench/smollm2_reference.py`, which reads the file with the PyPI `gguf` package, tokenizes
//! with a plain-Python BPE and runs a float64 numpy forward pass in llama.cpp's basis (RoPE on
//! adjacent pairs of the permuted rows): the tokenizer built from the metadata gives the same ids
//! on the fixtures' texts, every next-token log-prob and the top logits agree within 1e-3, and
//! greedy decoding under the chat template gives the same tokens.
//!
//! The model (93 MB) is not in the repository: these tests run when `CREDIT_SMOLLM2_GGUF` names
//! it (`scripts/fetch-smollm2.sh`), say that they did not run otherwise, and fail when
//! `CREDIT_REQUIRE_SMOLLM2=1` (CI) and it is missing.

use candle_core::{DType, Device, Tensor};
use credit_train::load::{self, ChatFormat, Tokenizer};
use credit_train::model::{Batch, Pass};
use credit_train::test_support::smollm2_gguf;
use credit_train::DeviceKind;
use std::path::Path;

fn fixture(name: &str) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/smollm2")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

#[test]
fn tokenizer_from_the_gguf_metadata_matches_an_independent_bpe() {
    let Some(model) = smollm2_gguf("tokenizer_from_the_gguf_metadata_matches_an_independent_bpe")
    else {
        return;
    };
    let tokenizer = Tokenizer::load(&model).unwrap();
    assert_eq!(tokenizer.chat, ChatFormat::ChatMl);
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let texts = fixture("tokens.json");
    let mut tokens = 0;
    for t in texts["texts"].as_array().unwrap() {
        let text = match t.get("text") {
            Some(text) => text.as_str().unwrap().to_string(),
            None => {
                let file = std::fs::read_to_string(root.join(t["file"].as_str().unwrap())).unwrap();
                let line = file
                    .lines()
                    .nth(t["line"].as_u64().unwrap() as usize - 1)
                    .unwrap();
                let row: serde_json::Value = serde_json::from_str(line).unwrap();
                row[t["field"].as_str().unwrap()]
                    .as_str()
                    .unwrap()
                    .to_string()
            }
        };
        let expected = ids(&t["ids"]);
        assert_eq!(tokenizer.encode(&text, true).unwrap(), expected, "{text:?}");
        assert_eq!(tokenizer.decode(&expected).unwrap(), text);
        tokens += expected.len();
    }
    assert!(tokens > 3000, "{tokens}");
}

#[test]
fn forward_pass_and_greedy_decoding_match_a_numpy_llama() {
    let Some(model_path) = smollm2_gguf("forward_pass_and_greedy_decoding_match_a_numpy_llama")
    else {
        return;
    };
    let model = load::load_model(&model_path, DeviceKind::Cpu).unwrap();
    let tokenizer = Tokenizer::load(&model_path).unwrap();
    let embed = model
        .params()
        .iter()
        .find(|(n, _)| n == "model.embed_tokens.weight")
        .unwrap()
        .1
        .as_tensor()
        .clone();
    let dev = Device::Cpu;
    // The logits of the last position of `ids`: the head is tied to the embedding.
    let last_logits = |ids: &[u32]| -> Vec<f32> {
        let t = Tensor::new(ids, &dev).unwrap().unsqueeze(0).unwrap();
        let at = Tensor::new(&[ids.len() as u32 - 1], &dev).unwrap();
        let h = model.hidden_states(&t, &at, Pass::Eval).unwrap();
        h.to_dtype(DType::F32)
            .unwrap()
            .matmul(&embed.t().unwrap())
            .unwrap()
            .squeeze(0)
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let reference = fixture("forward.json");
    for p in reference["prompts"].as_array().unwrap() {
        let prompt = p["prompt"].as_str().unwrap();
        let ids = ids(&p["ids"]);
        assert_eq!(tokenizer.encode(prompt, true).unwrap(), ids);
        let n = ids.len() - 1;
        let batch = Batch {
            ids: Tensor::new(ids.as_slice(), &dev)
                .unwrap()
                .unsqueeze(0)
                .unwrap(),
            positions: Tensor::arange(0u32, n as u32, &dev).unwrap(),
            targets: Tensor::new(&ids[1..], &dev).unwrap(),
        };
        let got: Vec<f32> = model.action_logprobs(&batch).unwrap().to_vec1().unwrap();
        let mut worst = 0f64;
        for (i, (g, e)) in got
            .iter()
            .zip(p["next_logprobs"].as_array().unwrap())
            .enumerate()
        {
            let diff = (f64::from(*g) - e.as_f64().unwrap()).abs();
            assert!(diff <= 1e-3, "position {i}: log-prob {g} vs numpy {e}");
            worst = worst.max(diff);
        }
        let logits = last_logits(&ids);
        for (id, e) in ids_and(&p["top_ids"], &p["top_logits"]) {
            let diff = (f64::from(logits[id as usize]) - e).abs();
            assert!(
                diff <= 1e-3,
                "logit of {id}: {} vs numpy {e}",
                logits[id as usize]
            );
            worst = worst.max(diff);
        }
        let expected = ids_and(&p["top_ids"], &p["top_logits"]);
        let argmax = (0..logits.len())
            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]))
            .unwrap();
        assert_eq!(argmax as u32, expected[0].0);

        let mut seq = ids.clone();
        let want = self::ids(&p["greedy_ids"]);
        while seq.len() < ids.len() + want.len() {
            let l = last_logits(&seq);
            let next = (0..l.len()).max_by(|&a, &b| l[a].total_cmp(&l[b])).unwrap();
            seq.push(next as u32);
        }
        let text = tokenizer.decode(&seq[ids.len()..]).unwrap();
        eprintln!(
            "{:?} → {text:?} (largest difference from numpy {worst:.2e})",
            &prompt[prompt.len().saturating_sub(50)..]
        );
        assert_eq!(
            seq[ids.len()..],
            want[..],
            "greedy: {text:?} vs {:?}",
            p["greedy_text"]
        );
    }
}

fn ids_and(ids: &serde_json::Value, values: &serde_json::Value) -> Vec<(u32, f64)> {
    self::ids(ids)
        .into_iter()
        .zip(
            values
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap()),
        )
        .collect()
}
