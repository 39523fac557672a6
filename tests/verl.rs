//! Logs as trainers write them: verl's rollout dumps (`{global_step}.jsonl` with `uid`) read with
//! no configuration, the refusal of dumps without ids, and `integrations/verl_agent_dump.py`'s
//! per-step rows from a batch built here.

use crate::util::{fixture, json, read_jsonl, stderr, Run};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;

/// The `integrations/` folder (the dump module and the patch script).
fn integrations() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("integrations")
}

/// `python3 ARGS` in `run`'s folder, with `CREDIT_LOGS_DIR` set to its `logs` (where the dump
/// writes by default).
fn python3(run: &Run, args: &[&str]) -> Output {
    std::process::Command::new("python3")
        .args(args)
        .current_dir(run.dir.path())
        .env("CREDIT_LOGS_DIR", run.path("logs"))
        .output()
        .expect("python3")
}

/// [`python3`], which must succeed: its standard output.
fn python3_ok(run: &Run, args: &[&str]) -> String {
    let out = python3(run, args);
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn verl_dumps_are_single_turn_groups() {
    // Expected numbers from the files themselves: a group is (step, the sample part of uid).
    let dir = fixture("verl/with_uid/rollout_data_dir");
    let mut groups: BTreeMap<(i64, String), Vec<f64>> = BTreeMap::new();
    for step in 1..=3 {
        for row in read_jsonl(&dir.join(format!("{step}.jsonl"))) {
            let uid = row["uid"].as_str().unwrap();
            let sample = uid.rsplitn(3, '_').nth(2).unwrap().to_string();
            groups
                .entry((row["step"].as_i64().unwrap(), sample))
                .or_default()
                .push(row["score"].as_f64().unwrap());
        }
    }
    let rollouts: usize = groups.values().map(Vec::len).sum();
    let flat = |r: &Vec<f64>| r.iter().all(|&x| x == r[0]);
    let zero_std = groups.values().filter(|r| flat(r)).count();
    let successes = groups.values().flatten().filter(|&&s| s > 0.5).count();

    let run = Run::new();
    let s = json(&run.credit(["analyze", dir.to_str().unwrap(), "--format", "json"]));
    assert_eq!(s["rows"], rollouts);
    assert_eq!(s["groups"], groups.len());
    assert_eq!(s["trajectories"], rollouts);
    assert_eq!(s["iterations"], 3);
    assert!(
        (s["success"]["overall"].as_f64().unwrap() - successes as f64 / rollouts as f64).abs()
            < 1e-12
    );
    let t = &s["single_turn"];
    assert_eq!(t["zero_std_groups"], zero_std);
    assert!(
        zero_std > 0 && zero_std < groups.len(),
        "the fixture has both kinds"
    );
    let effective = (groups.len() - zero_std) as f64 / groups.len() as f64;
    assert!((t["effective_group_fraction"].as_f64().unwrap() - effective).abs() < 1e-12);
    for rate in t["zero_std_per_iteration"].as_array().unwrap() {
        let it: i64 = rate["key"].as_str().unwrap().parse().unwrap();
        let of_it: Vec<_> = groups.iter().filter(|((s, _), _)| *s == it).collect();
        let flat_of_it = of_it.iter().filter(|(_, r)| flat(r)).count();
        assert_eq!(rate["n"], of_it.len());
        assert!(
            (rate["rate"].as_f64().unwrap() - flat_of_it as f64 / of_it.len() as f64).abs() < 1e-12
        );
    }
    let by_size = &t["reward_by_group_size"][0];
    assert_eq!(by_size["group_size"], 4);
    assert_eq!(by_size["rollouts"], rollouts);
    let mean = groups.values().flatten().sum::<f64>() / rollouts as f64;
    assert!((by_size["mean"].as_f64().unwrap() - mean).abs() < 1e-12);
    let uses = s["columns"].as_array().unwrap();
    let group = uses.iter().find(|u| u["field"] == "group_id").unwrap();
    assert_eq!(group["column"], "uid");
    assert!(group["how"].as_str().unwrap().contains("sample part"));
    // The text says why the multi-turn sections are left out.
    let text = crate::util::stdout(&run.credit(["analyze", dir.to_str().unwrap()]));
    assert!(
        text.contains("single-turn logs (one step per rollout)"),
        "{text}"
    );
    assert!(!text.contains("exact-anchor step groups"), "{text}");

    // GRPO under `verl` on these groups: (score − μ)/(σ + 1e-6), σ with ddof 1 over the group.
    let out = run.path("adv.jsonl");
    let o = run.credit([
        "advantages",
        dir.to_str().unwrap(),
        "--methods",
        "grpo",
        "--preset",
        "verl",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let rows = read_jsonl(&out);
    assert_eq!(rows.len(), rollouts);
    let first = read_jsonl(&dir.join("1.jsonl"));
    let sample = |uid: &str| uid.rsplitn(3, '_').nth(2).unwrap().to_string();
    let scores = &groups[&(1, sample(first[0]["uid"].as_str().unwrap()))];
    let mu = scores.iter().sum::<f64>() / scores.len() as f64;
    let sd = (scores.iter().map(|x| (x - mu) * (x - mu)).sum::<f64>() / (scores.len() - 1) as f64)
        .sqrt();
    let expected = (first[0]["score"].as_f64().unwrap() - mu) / (sd + 1e-6);
    assert!((rows[0]["adv_grpo"].as_f64().unwrap() - expected).abs() < 1e-9);
}

#[test]
fn an_extra_reward_field_becomes_the_reward_by_mapping() {
    // verl writes extra reward fields (e.g. `acc`) beside `score`; `--schema` makes one of them
    // the reward, and the episode's reward with it (one step per rollout).
    let run = Run::new();
    let dir = run.path("dump");
    std::fs::create_dir(&dir).unwrap();
    let rows = read_jsonl(&fixture("verl/with_uid/rollout_data_dir/1.jsonl"));
    let mut text = String::new();
    let mut acc_of: BTreeMap<String, f64> = BTreeMap::new();
    for (i, mut row) in rows.into_iter().enumerate() {
        let acc = (i % 3 == 0) as i64 as f64;
        acc_of.insert(row["uid"].as_str().unwrap().to_string(), acc);
        row["acc"] = serde_json::json!(acc);
        text.push_str(&format!("{row}\n"));
    }
    std::fs::write(dir.join("1.jsonl"), text).unwrap();
    let map = run.path("map.toml");
    std::fs::write(&map, "acc = \"reward\"\n").unwrap();
    let (dir, map) = (dir.to_str().unwrap(), map.to_str().unwrap());
    let s = json(&run.credit(["analyze", dir, "--schema", map, "--format", "json"]));
    let uses = s["columns"].as_array().unwrap();
    for field in ["reward", "episode_reward"] {
        let feed = uses.iter().find(|u| u["field"] == field).unwrap();
        assert_eq!(feed["column"], "acc", "{field}");
    }
    let group = uses.iter().find(|u| u["field"] == "group_id").unwrap();
    assert_eq!(group["column"], "uid");
    // GRPO's score and group mean are `acc`'s, recomputed here from the file.
    let out = run.path("adv.jsonl");
    let o = run.credit([
        "advantages",
        dir,
        "--schema",
        map,
        "--methods",
        "grpo",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let sample = |uid: &str| uid.rsplitn(3, '_').nth(2).unwrap().to_string();
    let mut groups: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for (uid, acc) in &acc_of {
        groups.entry(sample(uid)).or_default().push(*acc);
    }
    for row in read_jsonl(&out) {
        let uid = row["traj_id"].as_str().unwrap();
        assert_eq!(row["grpo_score"].as_f64().unwrap(), acc_of[uid], "{uid}");
        let g = &groups[&sample(uid)];
        let mean = g.iter().sum::<f64>() / g.len() as f64;
        assert!(
            (row["grpo_mean"].as_f64().unwrap() - mean).abs() < 1e-12,
            "{uid}"
        );
    }
}

#[test]
fn dumps_without_ids_are_refused_naming_the_verl_version() {
    let run = Run::new();
    let out = run.credit([
        "analyze",
        fixture("verl/without_uid/rollout_data_dir")
            .to_str()
            .unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("1.jsonl:1 (group_id)"), "{err}");
    assert!(
        err.contains("verl ≥ 0.9") && err.contains("trainer.use_v1=false"),
        "{err}"
    );
    assert!(err.contains("integrations/verl_agent_dump.py"), "{err}");
}

/// A verl-agent batch built in Python: 2 groups × 2 trajectories of lengths 3, 2, 1, 2, rows
/// gathered trajectory by trajectory as verl-agent's rollout loop does.
const BATCH: &str = r#"
import sys
sys.path.insert(0, sys.argv[1])
from verl_agent_dump import dump_steps

class Batch:
    def __init__(self, batch, non_tensor_batch):
        self.batch, self.non_tensor_batch = batch, non_tensor_batch

class Tokenizer:
    def batch_decode(self, ids, skip_special_tokens=True):
        return ["text " + " ".join(str(t) for t in row) for row in ids]

lengths = {"t1": 3, "t2": 2, "t3": 1, "t4": 2}
group = {"t1": "g1", "t2": "g1", "t3": "g2", "t4": "g2"}
won = {"t1": True, "t2": False, "t3": True, "t4": False}
rows = [(t, k) for t in ["t1", "t2", "t3", "t4"] for k in range(lengths[t])]
last = lambda t, k: k == lengths[t] - 1
nt = {
    "uid": [group[t] for t, _ in rows],
    "traj_uid": [t for t, _ in rows],
    "anchor_obs": [f"room {k} of {group[t]}" for t, k in rows],
    "rewards": [10.0 if won[t] and last(t, k) else 0.0 for t, k in rows],
    "is_action_valid": [k != 1 for t, k in rows],
    "episode_rewards": [10.0 if won[t] else 0.0 for t, _ in rows],
    "episode_lengths": [float(lengths[t]) for t, _ in rows],
    "data_source": ["alfworld" for _ in rows],
}
batch = Batch({"prompts": [[1, 2]] * len(rows), "responses": [[k, 7] for _, k in rows]}, nt)
print(dump_steps(batch, Tokenizer(), 5, sys.argv[2]))
"#;

/// After [`BATCH`]: the trainer pads the batch with copies of rows (`adjust_batch`), reorders it
/// (`_balance_batch`) and computes token-level advantages, one scalar per row times its
/// `response_mask` (`core_gigpo.py`); row 3's response starts one token later.
const ADVANTAGES: &str = r#"
from verl_agent_dump import dump_advantages

def take(b, order):
    pick = lambda columns: {k: [v[i] for i in order] for k, v in columns.items()}
    return Batch(pick(b.batch), pick(b.non_tensor_batch))

n = len(rows)
order = list(reversed(range(n))) + [2, 5]
trained = take(batch, order)
advantage = [0.25 * i - 1.0 for i in range(n)]
masks = [[0, 1, 1] if i == 3 else [1, 1, 0] for i in range(n)]
trained.batch["response_mask"] = [masks[i] for i in order]
trained.batch["advantages"] = [[advantage[i] * m for m in masks[i]] for i in order]
print(dump_advantages(trained, 5, sys.argv[2]))
"#;

/// `credit advantages logs --methods logged` reads the advantages [`ADVANTAGES`] dumped: row i of
/// the batch (the file's order) has 0.25·i − 1, whatever the trainer's order.
fn logged_is_the_trainers(run: &Run) {
    let o = run.credit([
        "advantages",
        "logs",
        "--methods",
        "logged",
        "-o",
        "adv.jsonl",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let logged: Vec<f64> = read_jsonl(&run.path("adv.jsonl"))
        .iter()
        .map(|r| r["adv_logged"].as_f64().unwrap())
        .collect();
    let expected: Vec<f64> = (0..8).map(|i| 0.25 * i as f64 - 1.0).collect();
    assert_eq!(logged, expected);
}

#[test]
fn the_verl_agent_dump_records_the_trainers_advantages() {
    let run = Run::new();
    python3_ok(
        &run,
        &[
            "-c",
            &format!("{BATCH}{ADVANTAGES}"),
            integrations().to_str().unwrap(),
            run.path("logs").to_str().unwrap(),
        ],
    );
    logged_is_the_trainers(&run);
    let o = run.credit([
        "compare",
        "logs",
        "--methods",
        "logged,gigpo",
        "--preset",
        "verl",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

/// The patch's lifecycle: `dump_steps(advantages_follow=True)` keeps the rows pending under a
/// name credit does not read, `dump_advantages` writes the iteration's file once (so a watch reads
/// it once); the rows of a trainer stopped before `compute_advantage` become their iteration's
/// file at the next call.
#[test]
fn the_patchs_dump_writes_each_iteration_once_and_keeps_a_stopped_trainers_rows() {
    let run = Run::new();
    let pending = BATCH.replace(
        "dump_steps(batch, Tokenizer(), 5, sys.argv[2])",
        "dump_steps(batch, Tokenizer(), 5, sys.argv[2], advantages_follow=True)",
    );
    let listed = "\nimport os\nlisted = lambda: sorted(os.listdir(sys.argv[2]))\n";
    let script = format!(
        "{pending}{listed}assert listed() == ['5.jsonl.gz.pending'], listed()\n{ADVANTAGES}\
         assert listed() == ['5.jsonl.gz'], listed()\n\
         dump_steps(batch, Tokenizer(), 6, sys.argv[2], advantages_follow=True)\n\
         dump_steps(batch, Tokenizer(), 7, sys.argv[2], advantages_follow=True)\n\
         assert listed() == ['5.jsonl.gz', '6.jsonl.gz', '7.jsonl.gz.pending'], listed()\n"
    );
    python3_ok(
        &run,
        &[
            "-c",
            &script,
            integrations().to_str().unwrap(),
            run.path("logs").to_str().unwrap(),
        ],
    );
    std::fs::remove_file(run.path("logs/6.jsonl.gz")).unwrap();
    logged_is_the_trainers(&run);
}

/// The patch's lifecycle under `credit watch --methods logged,grpo` (issue #54): each iteration's
/// rows pending, then written once with the trainer's advantages; the watch prints one line per
/// iteration, once, with `logged`'s check, stops on SIGINT with exit 0, and its last report is
/// `credit report`'s.
#[test]
fn a_watch_follows_the_patchs_dumps_one_line_per_iteration() {
    let run = Run::new();
    std::fs::create_dir(run.path("logs")).unwrap();
    // Iteration IT (argv 3) of the batch, its ids its own.
    let iteration = format!("{BATCH}{ADVANTAGES}")
        .replace(
            "batch = Batch(",
            "IT = int(sys.argv[3])\nnt['traj_uid'] = [f'{IT}-{t}' for t in nt['traj_uid']]\nnt['uid'] = [f'{IT}-{u}' for u in nt['uid']]\nbatch = Batch(",
        )
        .replace(
            "dump_steps(batch, Tokenizer(), 5, sys.argv[2])",
            "dump_steps(batch, Tokenizer(), IT, sys.argv[2], advantages_follow=True)",
        )
        .replace(
            "dump_advantages(trained, 5, sys.argv[2])",
            "dump_advantages(trained, IT, sys.argv[2])",
        );
    let child = crate::watch::spawn(
        &run,
        &[
            "logs",
            "--out",
            "report",
            "--methods",
            "logged,grpo",
            "--interval",
            "0.1",
            "--format",
            "json",
        ],
    );
    let summary_rows = || -> Option<u64> {
        let text = std::fs::read_to_string(run.path("report/summary.json")).ok()?;
        serde_json::from_str::<serde_json::Value>(&text).ok()?["headline"]["rows"].as_u64()
    };
    for it in 1..=3u64 {
        let it_arg = it.to_string();
        python3_ok(
            &run,
            &[
                "-c",
                &iteration,
                integrations().to_str().unwrap(),
                run.path("logs").to_str().unwrap(),
                &it_arg,
            ],
        );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while summary_rows() != Some(8 * it) {
            assert!(
                std::time::Instant::now() < deadline,
                "iteration {it} never landed"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let output = child.wait_with_output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let iterations: Vec<&serde_json::Value> =
        lines.iter().filter_map(|l| l.get("iteration")).collect();
    let numbers: Vec<i64> = iterations
        .iter()
        .map(|l| l["iteration"].as_i64().unwrap())
        .collect();
    assert_eq!(numbers, [1, 2, 3], "{lines:?}");
    assert!(!stderr(&output).contains("reading the run again"));
    // The trainer's advantages (0.25·i − 1 for row i) against GRPO's on each iteration's 8 rows.
    for line in &iterations {
        let logged = &line["logged"][0];
        assert_eq!(logged["method"], "grpo");
        assert_eq!(logged["rows"], 8);
        assert!(logged["max_abs_diff"].as_f64().unwrap() > 0.1, "{logged}");
    }
    let recap = &lines.last().unwrap()["watched"];
    assert_eq!(recap["iterations"], serde_json::json!([1, 2, 3]));
    assert_eq!(recap["rows"], 24);
    let o = run.credit([
        "report",
        "logs",
        "--out",
        "whole",
        "--methods",
        "logged,grpo",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let headline = |dir: &str| -> serde_json::Value {
        let text = std::fs::read_to_string(run.path(dir).join("summary.json")).unwrap();
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["headline"].clone()
    };
    assert_eq!(headline("report"), headline("whole"));
}

/// An empty dump folder: the watch says it started and, stopped with nothing read, says so,
/// writes nothing and exits 0.
#[test]
fn a_watch_of_an_empty_folder_says_so_and_writes_nothing() {
    let run = Run::new();
    std::fs::create_dir(run.path("logs")).unwrap();
    let child = crate::watch::spawn(&run, &["logs", "--out", "report", "--interval", "0.1"]);
    std::thread::sleep(std::time::Duration::from_millis(800));
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let output = child.wait_with_output().unwrap();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{err}");
    assert!(err.contains("watching logs every 0.1 s"), "{err}");
    assert!(
        err.contains("stopped: no step rows were read from logs; nothing written"),
        "{err}"
    );
    assert!(!run.path("report").exists());
}

#[test]
fn the_verl_agent_dump_writes_what_credit_reads() {
    let run = Run::new();
    python3_ok(
        &run,
        &[
            "-c",
            BATCH,
            integrations().to_str().unwrap(),
            run.path("logs").to_str().unwrap(),
        ],
    );
    assert!(run.path("logs/5.jsonl.gz").exists());
    let s = json(&run.credit(["analyze", "logs", "--format", "json"]));
    // Counted from the batch above: 8 turns, 2 groups, 4 trajectories (2 won), one iteration,
    // one invalid action per trajectory with a second turn (t1, t2, t4).
    assert_eq!(s["rows"], 8);
    assert_eq!(s["groups"], 2);
    assert_eq!(s["trajectories"], 4);
    assert_eq!(s["iterations"], 1);
    assert_eq!(s["success"]["overall"], 0.5);
    assert_eq!(s["invalid_actions"]["steps"], 3);
    assert_eq!(s["length"]["success"]["max"], 3);
    assert_eq!(s["length"]["failure"]["trajectories"], 2);
    let steps: BTreeSet<i64> = {
        let out = run.path("adv.jsonl");
        let o = run.credit([
            "advantages",
            "logs",
            "--methods",
            "gigpo",
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{}", stderr(&o));
        read_jsonl(&out)
            .iter()
            .map(|r| r["step"].as_i64().unwrap())
            .collect()
    };
    assert_eq!(
        steps,
        BTreeSet::from([0, 1, 2]),
        "turns numbered from row order"
    );
}

/// Drives a patched copy of `fixtures/verl_agent` (a verl-agent checkout in miniature) for two
/// iterations on a scripted ALFWorld-like environment: 2 groups × 2 trajectories, ALFWorld's
/// `<think>…</think><action>…</action>` answers, `won` and `extra.gamefile` in `infos`. The
/// episode reward of a won game is 0.3, under credit's success threshold: success can only come
/// from `won`. Prints the rows of `credit_logs/1.jsonl.gz`, one JSON object per line.
const DRIVER: &str = r#"
import gzip, json, os, sys
from types import SimpleNamespace as NS
sys.path.insert(0, sys.argv[1])  # the patched checkout
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector

TAGLESS = "I am not sure what to do here, maybe Look Around the room"
def answer(action):
    return f"<think>The goal needs {action}.</think><action>{action.title()}</action>"
# Per environment: (response, reward, done) per turn; won at the last active turn; game file.
GAME = {
    "a": "/data/json_2.1.1/train/pick_and_place_simple-Pen-None-Desk-1/trial_T1/game.tw-pddl",
    "b": "/data/json_2.1.1/train/look_at_obj_in_light-CD-None-DeskLamp-2/trial_T2/game.tw-pddl",
}
PLAN = [
    ("a", True, [(answer("go to desk 1"), 0.0, False), (TAGLESS, 0.0, False), (answer("take pen from desk 1"), 0.3, True)]),
    ("a", False, [(answer("go to shelf 2"), 0.0, False), (answer("open drawer 1"), 0.0, True)]),
    ("b", True, [(answer("use desklamp 1"), 0.3, True)]),
    ("b", False, [(answer("go to bed 1"), 0.0, False), (TAGLESS, 0.0, False), (answer("go to desk 2"), 0.0, False)]),
]
TEXTS = sorted({text for _, _, turns in PLAN for text, _, _ in turns})

class Tokenizer:  # responses are [index into TEXTS]; prompts [length of the observation]
    def batch_decode(self, ids, skip_special_tokens=True):
        return [TEXTS[row[0]] if row[0] < len(TEXTS) else f"{row[0]} characters" for row in ids]

class Envs:
    def reset(self):
        self.turn = [0] * len(PLAN)
        self.last = [None] * len(PLAN)
        return [f"You are in room {g}. Your task is ..." for g, _, _ in PLAN], [{} for _ in PLAN]
    def step(self, text_actions):
        obs, rewards, dones, infos = [], [], [], []
        for i, (game, won, turns) in enumerate(PLAN):
            k = min(self.turn[i], len(turns) - 1)
            text, reward, done = turns[k]
            if self.turn[i] >= len(turns):  # finished: verl-agent's envs repeat themselves
                reward, info = 0.0, self.last[i]
            else:
                assert text_actions[i] == text
                info = {"won": won and k == len(turns) - 1, "extra.gamefile": GAME[game],
                        "is_action_valid": text != TAGLESS}
            self.turn[i] += 1
            self.last[i] = info
            obs.append(f"You are in room {game}, turn {self.turn[i]}.")
            rewards.append(reward)
            dones.append(done)
            infos.append(info)
        return obs, rewards, dones, infos
    def success_evaluator(self, total_infos, total_batch_list, episode_rewards, episode_lengths):
        rates = []
        for turns, infos in zip(total_batch_list, total_infos):
            last = max(k for k, t in enumerate(turns) if t["active_masks"])
            rates.append(float(infos[last]["won"]))
        return {"success_rate": rates}

class Actor:
    def __init__(self, envs):
        self.envs = envs
    def generate_sequences(self, obs):
        picked = []
        for i, (_, _, turns) in enumerate(PLAN):
            k = min(self.envs.turn[i], len(turns) - 1)
            picked.append([TEXTS.index(turns[k][0])])
        return picked

config = NS(
    env=NS(rollout=NS(n=2), max_steps=3),
    data=NS(train_batch_size=4),
    trainer=NS(total_epochs=1, balance_batch=True),
    algorithm=NS(adv_estimator="grpo", gamma=1.0, lam=1.0),
    actor_rollout_ref=NS(rollout=NS(n=2)),
)
envs = Envs()
tokenizer = Tokenizer()
batches = [{"data_source": ["text"] * len(PLAN)} for _ in range(2)]
trainer = RayPPOTrainer(config, tokenizer, TrajectoryCollector(config, tokenizer), envs, envs,
                        Actor(envs), batches)
trainer.fit()
with gzip.open(os.path.join(os.environ["CREDIT_LOGS_DIR"], "1.jsonl.gz"), "rt") as f:
    sys.stdout.write(f.read())
"#;

#[test]
fn the_verl_agent_patch_logs_executed_actions_outcomes_and_task_types() {
    let run = Run::new();
    let checkout = run.path("verl-agent");
    copy_tree(&fixture("verl_agent"), &checkout);
    // The patch as a user applies it: printed, read, `git apply`.
    let patch = python3_ok(
        &run,
        &[
            integrations().join("patch_verl_agent.py").to_str().unwrap(),
            checkout.to_str().unwrap(),
        ],
    );
    for site in [
        "+                    dump_steps(batch, self.tokenizer, self.global_steps, advantages_follow=True)",
        "+                        dump_advantages(batch, self.global_steps)",
        "+        mark_outcomes(total_batch_list, total_infos)",
        "+++ b/verl_agent_dump.py",
    ] {
        assert!(patch.contains(site), "{site} not in\n{patch}");
    }
    std::fs::write(run.path("credit.patch"), &patch).unwrap();
    let applied = std::process::Command::new("git")
        .args(["apply", run.path("credit.patch").to_str().unwrap()])
        .current_dir(&checkout)
        .output()
        .expect("git");
    assert!(applied.status.success(), "{}", stderr(&applied));

    let rows: Vec<serde_json::Value> =
        python3_ok(&run, &["-c", DRIVER, checkout.to_str().unwrap()])
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
    // The plan above, turn by turn: (trajectory, executed action, won, task type).
    let tagless = "I am not sure what to do here, maybe Look Around the room";
    let tagless_tail: String = {
        let lower = tagless.to_lowercase();
        lower[lower.len() - 30..].to_string()
    };
    let expected = [
        (0, "go to desk 1", true, "pick_and_place"),
        (0, tagless_tail.as_str(), true, "pick_and_place"),
        (0, "take pen from desk 1", true, "pick_and_place"),
        (1, "go to shelf 2", false, "pick_and_place"),
        (1, "open drawer 1", false, "pick_and_place"),
        (2, "use desklamp 1", true, "look_at_obj_in_light"),
        (3, "go to bed 1", false, "look_at_obj_in_light"),
        (3, tagless_tail.as_str(), false, "look_at_obj_in_light"),
        (3, "go to desk 2", false, "look_at_obj_in_light"),
    ];
    assert_eq!(rows.len(), expected.len(), "one row per active turn");
    for (row, (_, action, won, task)) in rows.iter().zip(expected) {
        assert_eq!(row["action"], action, "{row}");
        assert_eq!(row["success"], won, "{row}");
        assert_eq!(row["task"], task, "{row}");
        assert_eq!(row["data_source"], "text", "{row}");
        let response = row["response"].as_str().unwrap();
        assert!(
            response == tagless
                || response.starts_with("<think>") && response.to_lowercase().contains(action),
            "the full answer stays in `response`: {row}"
        );
    }
    // `compute_advantage` above: a row's episode reward minus its group's mean over the trained
    // rows, which include `adjust_batch`'s copies of the first three rows (trajectory 0's turns)
    // as in verl-agent: the copies shift group a's mean, and the logged advantage shows it.
    let episode = [0.3, 0.0, 0.3, 0.0];
    let traj: Vec<usize> = expected.iter().map(|e| e.0).collect();
    let trained: Vec<usize> = traj.iter().chain(&traj[..3]).copied().collect();
    let group_mean = |g: usize| {
        let of: Vec<f64> = trained
            .iter()
            .filter(|&&t| t / 2 == g)
            .map(|&t| episode[t])
            .collect();
        of.iter().sum::<f64>() / of.len() as f64
    };
    for (row, &t) in rows.iter().zip(&traj) {
        let expected = episode[t] - group_mean(t / 2);
        assert!(
            (row["advantage"].as_f64().unwrap() - expected).abs() < 1e-12,
            "{row}"
        );
    }

    // credit reads both iterations: success from `won` (the rewards alone would say 0), per task.
    let logs = run.path("logs");
    let s = json(&run.credit(["analyze", logs.to_str().unwrap(), "--format", "json"]));
    assert_eq!(s["iterations"], 2);
    assert_eq!(s["trajectories"], 8);
    assert_eq!(s["success"]["overall"], 0.5);
    let per_task: BTreeMap<String, (u64, f64)> = s["success"]["per_task"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let key = r["key"].as_str().unwrap().to_string();
            (key, (r["n"].as_u64().unwrap(), r["rate"].as_f64().unwrap()))
        })
        .collect();
    assert_eq!(
        per_task,
        BTreeMap::from([
            ("look_at_obj_in_light".to_string(), (4, 0.5)),
            ("pick_and_place".to_string(), (4, 0.5)),
        ])
    );
    assert_eq!(s["invalid_actions"]["steps"], 4);
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn the_verl_agent_patch_names_a_call_site_it_cannot_find() {
    let run = Run::new();
    let checkout = run.path("verl-agent");
    copy_tree(&fixture("verl_agent"), &checkout);
    let trainer = checkout.join("verl/trainer/ppo/ray_trainer.py");
    let source = std::fs::read_to_string(&trainer).unwrap();
    std::fs::write(
        &trainer,
        source.replace("batch = compute_advantage(", "batch = advantage_of("),
    )
    .unwrap();
    let script = integrations().join("patch_verl_agent.py");
    let out = python3(
        &run,
        &[
            script.to_str().unwrap(),
            checkout.to_str().unwrap(),
            "--write",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("ray_trainer.py: no `batch = compute_advantage(...)` in `RayPPOTrainer.fit`"),
        "{err}"
    );
    // Nothing was written: neither file changed, no module copied in.
    assert!(!std::fs::read_to_string(&trainer)
        .unwrap()
        .contains("verl_agent_dump"));
    assert!(!checkout.join("verl_agent_dump.py").exists());
}
