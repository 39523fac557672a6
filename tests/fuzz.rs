//! Structured fuzzing of every reader of user input: step-row JSONL, episode-per-line JSONL,
//! Parquet, the schema map (`--schema`), the thresholds file (`--check`) and GGUF model files
//! (`--model`, `--backbone`).
//!
//! Each case mutates a valid seed from `fixtures/fuzz/` (JSON-aware mutations of values, keys and
//! rows, and raw byte mutations) and runs the reader in-process on a thread with a time limit.
//! The invariants: no panic, no hang (10 s a case), and every `Ok` batch satisfies ingest's
//! checks (ids present, steps contiguous from 0 or 1, one group per trajectory, finite rewards,
//! no duplicate (trajectory, step)). A GGUF file is mutated in its header (counts, lengths and
//! types overwritten, entries spliced in with lying counts, metadata values replaced, the file
//! cut short) and read as a model and a tokenizer: every error must name the file. Memory stays
//! within what the file holds by construction (the reader checks each count and length against
//! the bytes left before it allocates), so a case that did not would show as a hang or an abort.
//!
//! Bounded by time: `CREDIT_FUZZ_SECONDS` (default 15; `.ci/run` gives it 90 s, see
//! docs/testing.md for a long run) and reproducible with `CREDIT_FUZZ_SEED`.

use credit_core::ingest::{read_paths, IngestOptions};
use credit_core::schema::ColumnMap;
use credit_core::StepBatch;
use credit_train::test_support::{
    gguf_array, gguf_parts, set_gguf_metadata, splice_gguf_metadata, write_gguf_parts, GgufParts,
    Value as GgufValue, GGUF_ARRAY, GGUF_VOCAB,
};
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// xorshift64*: a small deterministic generator (no dependency).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// Values that break readers: extremes, wrong types, near-misses of the schema.
fn interesting(rng: &mut Rng) -> Value {
    let long = "x".repeat(1 + rng.below(5000));
    let choices = [
        Value::Null,
        json!(true),
        json!(false),
        json!(0),
        json!(-1),
        json!(1),
        json!(2),
        json!(1e308),
        json!(-1e308),
        json!(1e-320),
        json!(9_007_199_254_740_993u64),
        json!(u64::MAX),
        json!(i64::MIN),
        json!(0.5),
        json!("NaN"),
        json!("Infinity"),
        json!(""),
        json!("1"),
        json!("true"),
        json!("success"),
        json!(long),
        json!("é\u{0}\u{1f}\u{feff}"),
        json!([]),
        json!([1, 2]),
        json!({}),
        json!({"a": [1, {"b": null}]}),
    ];
    rng.pick(&choices).clone()
}

const KEYS: &[&str] = &[
    "uid",
    "group_id",
    "index",
    "traj_uid",
    "traj_id",
    "traj_index",
    "step",
    "t",
    "turn",
    "reward",
    "rewards",
    "score",
    "episode_rewards",
    "anchor_obs",
    "obs",
    "next_obs",
    "action",
    "is_action_valid",
    "valid",
    "won",
    "success",
    "done",
    "iteration",
    "global_step",
    "epoch",
    "game",
    "task",
    "cost",
    "logprob",
    "n_tokens",
    "segment",
    "segment_reward",
    "progress",
    "value",
    "prompt",
    "feedback",
    "steps",
];

/// One JSON-aware mutation of an object.
fn mutate_object(rng: &mut Rng, object: &mut Map<String, Value>) {
    let keys: Vec<String> = object.keys().cloned().collect();
    match rng.below(6) {
        0 if !keys.is_empty() => {
            let k = rng.pick(&keys).clone();
            object.insert(k, interesting(rng));
        }
        1 if !keys.is_empty() => {
            let k = rng.pick(&keys).clone();
            object.remove(&k);
        }
        2 if !keys.is_empty() => {
            // Rename a key to another name (an alias, another field, or nonsense).
            let k = rng.pick(&keys).clone();
            if let Some(v) = object.remove(&k) {
                object.insert(rng.pick(KEYS).to_string(), v);
            }
        }
        3 => {
            object.insert(rng.pick(KEYS).to_string(), interesting(rng));
        }
        4 => {
            if let Some(Value::Array(steps)) = object.get_mut("steps") {
                match rng.below(3) {
                    0 if !steps.is_empty() => {
                        let i = rng.below(steps.len());
                        steps.remove(i);
                    }
                    1 if !steps.is_empty() => {
                        let i = rng.below(steps.len());
                        let copy = steps[i].clone();
                        steps.push(copy);
                    }
                    _ => steps.push(interesting(rng)),
                }
            }
        }
        _ => {
            if let Some(Value::Number(n)) = object.get("step") {
                let step = n.as_i64().unwrap_or(0) + rng.below(3) as i64 - 1;
                object.insert("step".into(), json!(step));
            }
        }
    }
}

/// One mutation of a JSONL text: rows, objects or raw bytes.
fn mutate_jsonl(rng: &mut Rng, text: &str) -> Vec<u8> {
    let mut lines: Vec<Vec<u8>> = text.lines().map(|l| l.as_bytes().to_vec()).collect();
    for _ in 0..1 + rng.below(3) {
        if lines.is_empty() {
            lines.push(b"{}".to_vec());
        }
        let i = rng.below(lines.len());
        match rng.below(10) {
            0..=4 => {
                if let Ok(Value::Object(mut object)) = serde_json::from_slice(&lines[i]) {
                    mutate_object(rng, &mut object);
                    if let Some(Value::Array(steps)) = object.get_mut("steps") {
                        if let Some(Value::Object(step)) = steps.first_mut() {
                            mutate_object(rng, step);
                        }
                    }
                    lines[i] = serde_json::to_vec(&Value::Object(object)).unwrap();
                }
            }
            5 => {
                let copy = lines[i].clone();
                lines.insert(rng.below(lines.len() + 1), copy);
            }
            6 => {
                lines.remove(i);
            }
            7 => {
                // Cut the line short, or join it with the next.
                let cut = rng.below(lines[i].len() + 1);
                lines[i].truncate(cut);
            }
            8 => {
                let line = &mut lines[i];
                if !line.is_empty() {
                    let at = rng.below(line.len());
                    let byte = *rng.pick(&[0x00, 0xff, 0xc3, b'"', b'\\', b',', b'}', b'\r', 0x1f]);
                    line[at] = byte;
                }
            }
            _ => {
                // A duplicated key (serde keeps the last), a byte-order mark, or an empty line.
                match rng.below(3) {
                    0 => {
                        let key = rng.pick(KEYS);
                        let injected = format!("{{\"{key}\": {}, ", interesting(rng));
                        if lines[i].first() == Some(&b'{') {
                            lines[i].splice(0..1, injected.into_bytes());
                        }
                    }
                    1 => lines[i].splice(0..0, [0xef, 0xbb, 0xbf]).for_each(drop),
                    _ => lines.insert(i, Vec::new()),
                }
            }
        }
    }
    let mut out = lines.join(&b'\n');
    if rng.chance(2) {
        out.push(b'\n');
    }
    out
}

/// The ingest checks every batch must pass.
fn check_batch(batch: &StepBatch) {
    assert!(!batch.is_empty(), "an Ok batch has rows");
    let rewards = batch.f64s("reward").expect("reward column");
    assert!(rewards.iter().all(|r| r.is_finite()), "rewards are finite");
    let steps = batch.frame().column("step").unwrap().i64().unwrap().clone();
    for traj in &batch.trajs {
        let s: Vec<i64> = traj
            .rows
            .iter()
            .map(|&r| steps.get(r as usize).unwrap())
            .collect();
        assert!(s[0] == 0 || s[0] == 1, "steps start at 0 or 1: {s:?}");
        assert!(
            s.windows(2).all(|w| w[1] == w[0] + 1),
            "steps are contiguous: {s:?}"
        );
        for &r in &traj.rows {
            assert_eq!(
                batch.groups[batch.group_of_row[r as usize] as usize].id,
                batch.groups[traj.group as usize].id,
                "one group per trajectory"
            );
        }
    }
}

/// Runs `case` on a thread; fails on a panic or after 10 s.
fn guarded(what: &str, input: &Path, case: impl FnOnce() + Send + 'static) {
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(case));
        let _ = send.send(outcome.is_ok());
    });
    let outcome = receive.recv_timeout(Duration::from_secs(10));
    if outcome != Ok(true) {
        let kept = std::env::temp_dir().join(format!(
            "credit-fuzz-failure-{}",
            input.file_name().and_then(|n| n.to_str()).unwrap_or("case")
        ));
        let _ = std::fs::copy(input, &kept);
        let how = if outcome.is_ok() { "panicked" } else { "hung" };
        panic!("{what} {how} on the input kept at {}", kept.display());
    }
}

fn seed(name: &str) -> String {
    std::fs::read_to_string(crate::util::fixture(&format!("fuzz/{name}"))).unwrap()
}

fn read(path: PathBuf, lenient: bool) {
    let options = IngestOptions {
        lenient,
        ..IngestOptions::default()
    };
    if let Ok(ingested) = read_paths(&[path], &options) {
        check_batch(&ingested.batch);
    }
}

/// JSON rows as a Parquet file, each column typed by its first value (mixed columns as text).
fn write_parquet(path: &Path, text: &[u8], rng: &mut Rng) -> bool {
    use polars::prelude::*;
    let rows: Vec<Map<String, Value>> = text
        .split(|&b| b == b'\n')
        .filter_map(|l| match serde_json::from_slice(l) {
            Ok(Value::Object(o)) => Some(o),
            _ => None,
        })
        .collect();
    let mut names: Vec<String> = rows.iter().flat_map(|r| r.keys().cloned()).collect();
    names.sort();
    names.dedup();
    let mut columns = Vec::new();
    for name in names.iter().filter(|n| *n != "steps") {
        let values: Vec<Option<&Value>> = rows.iter().map(|r| r.get(name)).collect();
        let first = values.iter().flatten().find(|v| !v.is_null());
        let as_text = rng.chance(8);
        let column = match first {
            Some(Value::Bool(_)) if !as_text => Column::new(
                name.as_str().into(),
                values
                    .iter()
                    .map(|v| v.and_then(|v| v.as_bool()))
                    .collect::<Vec<_>>(),
            ),
            Some(Value::Number(n)) if n.is_i64() && !as_text => Column::new(
                name.as_str().into(),
                values
                    .iter()
                    .map(|v| v.and_then(|v| v.as_i64()))
                    .collect::<Vec<_>>(),
            ),
            Some(Value::Number(_)) if !as_text => Column::new(
                name.as_str().into(),
                values
                    .iter()
                    .map(|v| v.and_then(|v| v.as_f64()))
                    .collect::<Vec<_>>(),
            ),
            _ => Column::new(
                name.as_str().into(),
                values
                    .iter()
                    .map(|v| {
                        v.map(|v| match v {
                            Value::String(s) => s.clone(),
                            other => other.to_string(),
                        })
                    })
                    .collect::<Vec<_>>(),
            ),
        };
        columns.push(column);
    }
    let Ok(mut frame) = DataFrame::new(rows.len(), columns) else {
        return false;
    };
    let Ok(file) = std::fs::File::create(path) else {
        return false;
    };
    ParquetWriter::new(file).finish(&mut frame).is_ok()
}

/// The tiny Llama of the GGUF cases: F32 tensors, so its data is 4 bytes per parameter and
/// everything before it is the header.
fn gguf_model() -> GgufParts {
    gguf_parts(&credit_train::Config::llama_tiny(GGUF_VOCAB), 3, false).unwrap()
}

const GGUF_KEYS: &[&str] = &[
    "general.alignment",
    "general.architecture",
    "llama.block_count",
    "llama.attention.head_count",
    "llama.attention.head_count_kv",
    "llama.feed_forward_length",
    "llama.rope.dimension_count",
    "llama.rope.freq_base",
    "llama.attention.layer_norm_rms_epsilon",
    "llama.context_length",
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.add_bos_token",
    "tokenizer.chat_template",
];

/// Metadata values that break readers: zero, extremes, wrong types, empty and nested arrays.
fn interesting_gguf_value(rng: &mut Rng) -> GgufValue {
    use GgufValue::*;
    let choices = [
        U32(0),
        U32(1),
        U32(3),
        U32(48),
        U32(257),
        U32(u32::MAX),
        I32(-1),
        U64(u64::MAX),
        I64(i64::MIN),
        F32(0.0),
        F32(-1.0),
        F32(f32::NAN),
        F32(f32::INFINITY),
        F64(1e-300),
        Bool(true),
        String("".into()),
        String("llama".into()),
        String("x".repeat(1 + rng.below(5000))),
        Array(vec![]),
        Array(vec![U32(1), U32(2)]),
        Array(vec![String("a".into()), String("".into())]),
        Array(vec![Array(vec![Array(vec![])])]),
    ];
    rng.pick(&choices).clone()
}

/// Numbers that break counts, lengths, types and offsets (`len`: the file's length).
fn interesting_count(rng: &mut Rng, len: u64) -> u64 {
    *rng.pick(&[
        0,
        1,
        2,
        4,
        5,
        8,
        9,
        12,
        13,
        30,
        31,
        32,
        33,
        255,
        u64::from(u32::MAX),
        1 << 32,
        1 << 40,
        u64::MAX,
        i64::MAX as u64,
        len,
        len / 2,
        len + 1,
    ])
}

/// A GGUF file mutated at the level of its header: metadata values replaced, fields overwritten
/// with interesting numbers, entries spliced in (arrays and strings whose counts lie, nested
/// arrays, alignments), bytes flipped, the file cut short.
fn mutate_gguf(rng: &mut Rng) -> Vec<u8> {
    let mut parts = gguf_model();
    if rng.chance(3) {
        let key = rng.pick(GGUF_KEYS);
        set_gguf_metadata(&mut parts, key, interesting_gguf_value(rng));
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("seed.gguf");
    write_gguf_parts(&path, &parts.0, &parts.1).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let header = bytes.len() - 4 * credit_train::Config::llama_tiny(GGUF_VOCAB).n_parameters();
    for _ in 0..1 + rng.below(3) {
        let len = bytes.len() as u64;
        // Within the header, as far as an earlier cut left it.
        let limit = header.min(bytes.len());
        match rng.below(5) {
            0 if limit >= 8 => {
                let at = rng.below(limit - 7);
                let n = interesting_count(rng, len);
                bytes[at..at + 8].copy_from_slice(&n.to_le_bytes());
            }
            1 if limit >= 4 => {
                let at = rng.below(limit - 3);
                let n = interesting_count(rng, len) as u32;
                bytes[at..at + 4].copy_from_slice(&n.to_le_bytes());
            }
            2 => {
                let kind = rng.below(14) as u32;
                let claimed = interesting_count(rng, len);
                let elements: Vec<u8> = (0..rng.below(64)).map(|_| rng.next() as u8).collect();
                let (key, value_kind, value) = match rng.below(4) {
                    0 => (
                        "general.alignment",
                        4,
                        interesting_count(rng, len).to_le_bytes()[..4].to_vec(),
                    ),
                    1 => {
                        let mut string = claimed.to_le_bytes().to_vec();
                        string.extend(&elements);
                        ("credit.fuzz.string", 8, string)
                    }
                    2 => (*rng.pick(GGUF_KEYS), rng.below(14) as u32, elements),
                    _ => (
                        "credit.fuzz.array",
                        GGUF_ARRAY,
                        gguf_array(kind, claimed, &elements),
                    ),
                };
                if let Ok(spliced) = splice_gguf_metadata(&bytes, &[(key, value_kind, value)]) {
                    bytes = spliced;
                }
            }
            3 if limit >= 1 => {
                let at = rng.below(limit);
                bytes[at] = rng.next() as u8;
            }
            _ => {
                let cut = rng.below(bytes.len() + 1);
                bytes.truncate(cut);
            }
        }
    }
    bytes
}

/// Reads `path` as a model and as a tokenizer; each error must name the file.
fn read_gguf(path: PathBuf) {
    use credit_train::load;
    let named = |e: credit_train::Error| {
        let message = e.to_string();
        assert!(
            message.starts_with(&path.display().to_string()),
            "an error that does not name the file: {message}"
        );
    };
    if let Err(e) = load::read_config(&path) {
        named(e);
    }
    if let Err(e) = load::Tokenizer::load(&path) {
        named(e);
    }
    if let Err(e) = load::load_model(&path, credit_train::DeviceKind::Cpu) {
        named(e);
    }
}

#[test]
fn readers_survive_mutated_input() {
    let seconds: u64 = std::env::var("CREDIT_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15);
    let seed_value: u64 = std::env::var("CREDIT_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_c0ffee);
    let mut rng = Rng(seed_value | 1);
    let dir = tempfile::tempdir().unwrap();
    let (steps, episodes) = (seed("steps.jsonl"), seed("episodes.jsonl"));
    let (map, thresholds) = (seed("map.toml"), seed("thresholds.toml"));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut cases = [0u64; 6];
    while Instant::now() < deadline {
        let kind = rng.below(6);
        let n = cases.iter().sum::<u64>();
        match kind {
            0 | 1 => {
                let text = if kind == 0 { &steps } else { &episodes };
                let path = dir.path().join(format!("case{n}.jsonl"));
                std::fs::write(&path, mutate_jsonl(&mut rng, text)).unwrap();
                let lenient = rng.chance(2);
                let p = path.clone();
                guarded("JSONL ingest", &path, move || read(p, lenient));
                std::fs::remove_file(&path).unwrap();
            }
            2 => {
                let path = dir.path().join(format!("case{n}.parquet"));
                let rows = mutate_jsonl(&mut rng, &steps);
                if !write_parquet(&path, &rows, &mut rng) {
                    continue;
                }
                if rng.chance(4) {
                    // A damaged file: bytes of the footer (the metadata: schema, row groups,
                    // page offsets) overwritten. Damaged page *data* is left out: polars 0.55
                    // can abort the process on it (an allocation of a size read from the
                    // damage), which no caller can catch; see the closing note of #13.
                    let mut bytes = std::fs::read(&path).unwrap();
                    let n = bytes.len();
                    let footer =
                        u32::from_le_bytes(bytes[n - 8..n - 4].try_into().unwrap()) as usize;
                    let start = n.saturating_sub(footer + 8);
                    for _ in 0..1 + rng.below(8) {
                        let at = start + rng.below(n - start);
                        bytes[at] = rng.next() as u8;
                    }
                    std::fs::write(&path, bytes).unwrap();
                }
                let lenient = rng.chance(2);
                let p = path.clone();
                guarded("Parquet ingest", &path, move || read(p, lenient));
                std::fs::remove_file(&path).unwrap();
            }
            3 => {
                let text = String::from_utf8_lossy(&mutate_jsonl(&mut rng, &map)).into_owned();
                let path = dir.path().join(format!("case{n}.toml"));
                std::fs::write(&path, &text).unwrap();
                let mut names: Vec<String> = (0..5).map(|_| rng.pick(KEYS).to_string()).collect();
                names.push(text.chars().take(20).collect());
                guarded("schema map", &path, move || {
                    if let Ok(user) = ColumnMap::parse_toml(&text) {
                        let map = ColumnMap {
                            user,
                            ..Default::default()
                        };
                        if map.check().is_ok() {
                            let _ = map.resolve(names.iter().map(String::as_str));
                        }
                    }
                });
            }
            4 => {
                let path = dir.path().join(format!("case{n}.gguf"));
                std::fs::write(&path, mutate_gguf(&mut rng)).unwrap();
                let p = path.clone();
                guarded("GGUF model", &path, move || read_gguf(p));
                std::fs::remove_file(&path).unwrap();
            }
            _ => {
                let text =
                    String::from_utf8_lossy(&mutate_jsonl(&mut rng, &thresholds)).into_owned();
                let path = dir.path().join(format!("case{n}.toml"));
                std::fs::write(&path, &text).unwrap();
                guarded("thresholds", &path, move || {
                    if let Ok(rules) = credit_report::check::parse(&text, "fuzz") {
                        let summary = json!({"headline": {"success_rate": 0.5}});
                        let _ = credit_report::check::evaluate(&rules, &summary, None);
                    }
                });
            }
        }
        cases[kind] += 1;
    }
    eprintln!(
        "fuzz: {} cases in {seconds} s (seed {seed_value}): {} step JSONL, {} episode JSONL, {} Parquet, {} schema maps, {} GGUF models, {} thresholds",
        cases.iter().sum::<u64>(),
        cases[0],
        cases[1],
        cases[2],
        cases[3],
        cases[4],
        cases[5]
    );
    assert!(
        cases.iter().all(|&c| c > 0),
        "every reader was fuzzed: {cases:?}"
    );
}
