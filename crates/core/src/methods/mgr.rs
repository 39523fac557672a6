//! MGR: multiplicative gated rewards (anonymous ICLR 2026 submission "Both Local Validity and
//! Global Effectiveness Matter", Eq. 3–7, Alg. 1; `spec-mgr.md` §1).
//!
//! R_final,t from a local signal L = R_local,t and a global magnitude G = R_global(τ):
//! - v_t ∈ {−1, +1} (§3.2.1): −1 if the action is invalid (`valid`), the environment feedback
//!   after it matches an error pattern, or the raw action breaks the format rules.
//! - L = v_t + h^temporal + h^repeat (Eq. 3–4): ±β on recovering from / falling into an error;
//!   −α·(N − q) for a valid action whose string occurred N > q times among the trajectory's valid
//!   actions so far (the current one included).
//! - G = m/(m−1)·(S_i − mean_j S_j) (Eq. 5), the leave-one-out baseline over the group's m
//!   trajectories; 0 for m = 1 and for |G| < 1e-12.
//! - Fusion (Eq. 6): sign(L) = sign(G) → L·|G|; G > 0 > L → γ₊·L·|G|; G < 0 < L → γ₋·g·L·|G|;
//!   else 0. The gate g (Eq. 7) is +1 with probability p_retain(C_batch, V_batch), one draw per failed
//!   trajectory (§3.4), from a seeded hash of the trajectory id, so runs reproduce and row order
//!   does not matter. C_batch and V_batch are taken per iteration (the whole input without one).
//! - Advantage = R_final (the critic-free variant); `return_to_go` = γd gives Σ_k γd^k R_final,t+k.
//!
//! Profiles: no public code exists, so `verl` equals `paper`; the γ's (unspecified in the paper)
//! default to 0.5, as the spec's vectors use.

use super::{uniform, Advantages, Values};
use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::profile::Profile;
use crate::schema::columns::{ACTION, FEEDBACK, NEXT_OBS};
use polars::prelude::PlHashMap;
use serde::{Deserialize, Serialize};

/// Environment-feedback error patterns of the paper (App. A.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeedbackRules {
    None,
    /// Regexes on the lower-cased, stripped feedback (`^nothing happens\.?$`, `you can't see that`, …).
    Alfworld,
    /// Case-sensitive substrings of the execution feedback (`Execution failed`, `Traceback:`, …).
    Appworld,
}

/// Format rules on the raw action (`action` column).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FormatRules {
    None,
    /// Reasoning inside `<think>…</think>`, the action inside `<action>…</action>`.
    ThinkAction,
    /// Code in a ```python block containing `api_pattern`; an unclosed `<think>` longer than
    /// `max_think_chars` is invalid.
    Appworld,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Gate {
    /// Seeded Bernoulli(p_retain) per failed trajectory.
    Sample,
    /// E[g] = 2·p_retain − 1, deterministic.
    Expected,
    /// g ≡ +1 (the "w/o gating" ablation).
    Retain,
    /// g ≡ −1.
    Flip,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Params {
    /// β of the temporal term.
    pub beta_temporal: f64,
    /// α of the repetition penalty.
    pub alpha_repeat: f64,
    /// q, repetitions allowed before the penalty.
    pub repeat_threshold: u64,
    /// γ of case 2 (valid trajectory, negative local signal).
    pub gamma_conflict_pos: f64,
    /// γ of case 3 (failed trajectory, positive local signal).
    pub gamma_conflict_neg: f64,
    pub theta_v: f64,
    pub theta_c1: f64,
    pub theta_c2: f64,
    pub alpha_decay: f64,
    pub p_min: f64,
    pub gate: Gate,
    /// One gate draw per step instead of per trajectory (Alg. 1 line 28).
    pub gate_per_step: bool,
    pub seed: u64,
    pub feedback_rules: FeedbackRules,
    /// An extra regex; feedback matching it makes the step invalid.
    pub error_pattern: Option<String>,
    pub format_rules: FormatRules,
    pub api_pattern: String,
    pub max_think_chars: u64,
    /// γd of the optional return-to-go (an extension; absent: advantage = R_final).
    pub return_to_go: Option<f64>,
}

impl Params {
    pub fn paper() -> Self {
        Params {
            beta_temporal: 0.1,
            alpha_repeat: 0.5,
            repeat_threshold: 2,
            gamma_conflict_pos: 0.5,
            gamma_conflict_neg: 0.5,
            theta_v: 0.4,
            theta_c1: 0.1,
            theta_c2: 0.6,
            alpha_decay: 1.5,
            p_min: 0.1,
            gate: Gate::Sample,
            gate_per_step: false,
            seed: 0,
            feedback_rules: FeedbackRules::None,
            error_pattern: None,
            format_rules: FormatRules::None,
            api_pattern: "apis.".into(),
            max_think_chars: 4000,
            return_to_go: None,
        }
    }

    pub fn preset(_profile: Profile) -> Self {
        Self::paper()
    }

    pub fn check(&self) -> Result<()> {
        for (name, g) in [
            ("gamma_conflict_pos", self.gamma_conflict_pos),
            ("gamma_conflict_neg", self.gamma_conflict_neg),
        ] {
            if !(g > 0.0 && g <= 1.0) {
                return Err(Error::Param(format!("mgr.{name} = {g} must be in (0, 1]")));
            }
        }
        if let Some(p) = &self.error_pattern {
            regex::Regex::new(p).map_err(|e| Error::Param(format!("mgr.error_pattern: {e}")))?;
        }
        Ok(())
    }

    /// p_retain(C, V) of §1.6, clamped to [p_min, 1].
    pub fn p_retain(&self, completion: f64, validity: f64) -> f64 {
        let p = if validity < self.theta_v || completion < self.theta_c1 {
            1.0
        } else if completion < self.theta_c2 {
            1.0 - self.alpha_decay * completion
        } else {
            self.p_min
        };
        p.clamp(self.p_min, 1.0)
    }
}

/// R_local per step of one trajectory (Eq. 3–4): `valid` and `actions` in step order.
pub fn local_signal(valid: &[bool], actions: &[&str], params: &Params) -> Vec<f64> {
    let mut seen: PlHashMap<&str, u64> = PlHashMap::default();
    let mut out = Vec::with_capacity(valid.len());
    for t in 0..valid.len() {
        let v = if valid[t] { 1.0 } else { -1.0 };
        let temporal = match (t, valid[t]) {
            (0, _) => 0.0,
            (_, true) if !valid[t - 1] => params.beta_temporal,
            (_, false) if valid[t - 1] => -params.beta_temporal,
            _ => 0.0,
        };
        let repeat = if valid[t] {
            let n = seen.entry(actions[t]).or_default();
            *n += 1;
            if *n > params.repeat_threshold {
                -params.alpha_repeat * (*n - params.repeat_threshold) as f64
            } else {
                0.0
            }
        } else {
            0.0
        };
        out.push(v + temporal + repeat);
    }
    out
}

/// Eq. 6: R_final from L, G and the gate g.
pub fn fuse(local: f64, global: f64, gate: f64, params: &Params) -> f64 {
    let sign = |x: f64| {
        if x > 0.0 {
            1
        } else if x < 0.0 {
            -1
        } else {
            0
        }
    };
    match (sign(local), sign(global)) {
        (_, 0) | (0, _) => 0.0,
        (l, g) if l == g => local * global.abs(),
        (-1, 1) => params.gamma_conflict_pos * local * global.abs(),
        _ => params.gamma_conflict_neg * gate * local * global.abs(),
    }
}

/// v_t per row: `valid`, the feedback rules and the format rules.
fn validity(batch: &StepBatch, params: &Params) -> Result<Vec<bool>> {
    let mut valid = batch.valid();
    let feedback = batch.texts(FEEDBACK).or_else(|| batch.texts(NEXT_OBS));
    let alfworld = [
        r"^nothing happens\.?$",
        "you don't see that",
        "you can't see that",
        "that command is not understood",
        "you haven't got",
        "you are not",
        "you need to",
        "you must",
        "you have to",
        "that's not",
        "not a valid",
        "not valid",
        "you cannot",
        "you can not",
        "not available",
    ];
    let appworld = [
        "Execution failed",
        "Traceback:",
        "SyntaxError",
        "Exception",
        "Error:",
        "Maximum number of executions",
        "timed out after",
        "No code available to execute",
    ];
    let alf = regex::RegexSet::new(alfworld).map_err(|e| Error::Param(e.to_string()))?;
    let user = params
        .error_pattern
        .as_deref()
        .map(regex::Regex::new)
        .transpose()
        .map_err(|e| Error::Param(e.to_string()))?;
    if let Some(feedback) = feedback {
        for (r, text) in feedback.iter().enumerate() {
            let Some(text) = text else { continue };
            let bad = match params.feedback_rules {
                FeedbackRules::None => false,
                FeedbackRules::Alfworld => alf.is_match(text.trim().to_lowercase().as_str()),
                FeedbackRules::Appworld => appworld.iter().any(|p| text.contains(p)),
            } || user.as_ref().is_some_and(|re| re.is_match(text));
            if bad {
                valid[r] = false;
            }
        }
    }
    if params.format_rules != FormatRules::None {
        let actions = batch
            .texts(ACTION)
            .ok_or_else(|| Error::Param("mgr.format_rules needs an `action` column".into()))?;
        for (r, action) in actions.iter().enumerate() {
            if !format_ok(action.unwrap_or(""), params) {
                valid[r] = false;
            }
        }
    }
    Ok(valid)
}

fn format_ok(action: &str, params: &Params) -> bool {
    let enclosed = |open: &str, close: &str| match (action.find(open), action.find(close)) {
        (Some(a), Some(b)) => a < b,
        _ => false,
    };
    match params.format_rules {
        FormatRules::None => true,
        FormatRules::ThinkAction => {
            enclosed("<think>", "</think>") && enclosed("<action>", "</action>")
        }
        FormatRules::Appworld => {
            if let Some(start) = action.find("<think>") {
                if !action[start..].contains("</think>")
                    && action.len() - start > params.max_think_chars as usize
                {
                    return false;
                }
            }
            match action.find("```python") {
                Some(start) => {
                    let body = &action[start + "```python".len()..];
                    match body.find("```") {
                        Some(end) => body[..end].contains(params.api_pattern.as_str()),
                        None => false,
                    }
                }
                None => false,
            }
        }
    }
}

/// Columns `adv_mgr`, `mgr_validity` (±1), `mgr_local`, `mgr_global`, `mgr_gate`, `mgr_p_retain`,
/// `mgr_final`.
pub fn advantages(batch: &StepBatch, params: &Params) -> Result<Advantages> {
    let n = batch.len();
    let valid = validity(batch, params)?;
    let actions = batch.texts(ACTION);

    // C_batch, V_batch per iteration.
    let mut totals: PlHashMap<Option<i64>, (f64, f64, f64, f64)> = PlHashMap::default(); // (succ, trajs, valid, steps)
    for traj in &batch.trajs {
        let e = totals
            .entry(batch.groups[traj.group as usize].iteration)
            .or_default();
        e.0 += traj.success as u8 as f64;
        e.1 += 1.0;
        e.2 += traj.rows.iter().filter(|&&r| valid[r as usize]).count() as f64;
        e.3 += traj.rows.len() as f64;
    }
    let p_retain_of: PlHashMap<Option<i64>, f64> = totals
        .iter()
        .map(|(&it, &(s, t, v, n))| (it, params.p_retain(s / t, v / n)))
        .collect();

    let mut local = vec![0.0; n];
    let mut global = vec![0.0; n];
    let mut gate = vec![1.0; n];
    let mut p_retain = vec![1.0; n];
    let mut final_reward = vec![0.0; n];
    for group in &batch.groups {
        let m = group.trajs.len();
        let s: Vec<f64> = group
            .trajs
            .iter()
            .map(|&t| batch.trajs[t as usize].success as u8 as f64)
            .collect();
        let mean = s.iter().sum::<f64>() / m as f64;
        let p = p_retain_of[&group.iteration];
        for (k, &t) in group.trajs.iter().enumerate() {
            let traj = &batch.trajs[t as usize];
            let mut g_value = if m > 1 {
                m as f64 / (m - 1) as f64 * (s[k] - mean)
            } else {
                0.0
            };
            if g_value.abs() < 1e-12 {
                g_value = 0.0;
            }
            let v: Vec<bool> = traj.rows.iter().map(|&r| valid[r as usize]).collect();
            let a: Vec<&str> = traj
                .rows
                .iter()
                .map(|&r| actions.and_then(|c| c.get(r as usize)).unwrap_or(""))
                .collect();
            let l = local_signal(&v, &a, params);
            let draw = |salt: u64| -> f64 {
                match params.gate {
                    Gate::Sample => {
                        let key = format!("{:?}/{}", group.iteration, traj.id);
                        if uniform(params.seed, &key, salt) < p {
                            1.0
                        } else {
                            -1.0
                        }
                    }
                    Gate::Expected => 2.0 * p - 1.0,
                    Gate::Retain => 1.0,
                    Gate::Flip => -1.0,
                }
            };
            let trajectory_gate = draw(0);
            for (pos, &r) in traj.rows.iter().enumerate() {
                let r = r as usize;
                let g_t = if params.gate_per_step {
                    draw(pos as u64 + 1)
                } else {
                    trajectory_gate
                };
                local[r] = l[pos];
                global[r] = g_value;
                gate[r] = g_t;
                p_retain[r] = p;
                final_reward[r] = fuse(l[pos], g_value, g_t, params);
            }
        }
    }
    let advantage = match params.return_to_go {
        Some(gd) => batch.discounted_returns(&final_reward, gd),
        None => final_reward.clone(),
    };
    Ok(Advantages::new("mgr", advantage)
        .part(
            "mgr",
            "validity",
            Values::I64(valid.iter().map(|&v| if v { 1 } else { -1 }).collect()),
        )
        .part("mgr", "local", Values::F64(local))
        .part("mgr", "global", Values::F64(global))
        .part("mgr", "gate", Values::F64(gate))
        .part("mgr", "p_retain", Values::F64(p_retain))
        .part("mgr", "final", Values::F64(final_reward)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::testing::{assert_close, batch_with};

    fn p() -> Params {
        Params::paper()
    }

    #[test]
    fn vector_3_local_signal() {
        // spec-mgr.md §3, unit vectors for R_local (β = 0.1, α = 0.5, q = 2).
        assert_close(
            &local_signal(&[true; 6], &["look"; 6], &p()),
            &[1.0, 1.0, 0.5, 0.0, -0.5, -1.0],
            1e-12,
        );
        assert_close(
            &local_signal(
                &[false, true, true, true, true],
                &["x", "look", "look", "look", "look"],
                &p(),
            ),
            &[-1.0, 1.1, 1.0, 0.5, 0.0],
            1e-12,
        );
        assert_close(
            &local_signal(
                &[true, false, false, true, true, true],
                &["a", "b", "c", "a", "a", "a"],
                &p(),
            ),
            &[1.0, -1.1, -1.0, 1.1, 0.5, 0.0],
            1e-12,
        );
    }

    #[test]
    fn vector_3_fusion_with_repetition() {
        let l = [1.0, 1.0, 0.5, 0.0, -0.5];
        let g = 2.0 / 3.0;
        let fused = |global: f64, gate: f64| {
            l.iter()
                .map(|&x| fuse(x, global, gate, &p()))
                .collect::<Vec<_>>()
        };
        assert_close(
            &fused(g, 1.0),
            &[0.6667, 0.6667, 0.3333, 0.0, -0.1667],
            1e-4,
        );
        assert_close(
            &fused(-g, 1.0),
            &[0.3333, 0.3333, 0.1667, 0.0, -0.3333],
            1e-4,
        );
        assert_close(
            &fused(-g, -1.0),
            &[-0.3333, -0.3333, -0.1667, 0.0, -0.3333],
            1e-4,
        );
    }

    #[test]
    fn vector_3_p_retain_schedule() {
        let cases = [
            ((0.05, 0.9), 1.0),
            ((0.5, 0.3), 1.0),
            ((0.9, 0.39), 1.0),
            ((0.1, 0.5), 0.85),
            ((0.3, 0.8), 0.55),
            ((0.5, 0.7), 0.25),
            ((0.59, 0.9), 0.115),
            ((0.6, 0.9), 0.1),
            ((0.9, 0.9), 0.1),
        ];
        for ((c, v), expected) in cases {
            assert!(
                (p().p_retain(c, v) - expected).abs() < 1e-9,
                "p_retain({c}, {v})"
            );
        }
    }

    /// spec-mgr.md §3 worked group: m = 4, S = [1, 1, 0, 0].
    fn worked_group() -> StepBatch {
        let rows = [
            ("g", "1", 1, "A", 0.0, true),
            ("g", "1", 2, "B", 0.0, false),
            ("g", "1", 3, "B", 0.0, true),
            ("g", "1", 4, "C", 10.0, true),
            ("g", "2", 1, "A", 0.0, true),
            ("g", "2", 2, "B", 0.0, true),
            ("g", "2", 3, "C", 10.0, true),
            ("g", "3", 1, "A", 0.0, true),
            ("g", "3", 2, "D", 0.0, true),
            ("g", "3", 3, "D", 0.0, true),
            ("g", "3", 4, "D", 0.0, true),
            ("g", "4", 1, "A", 0.0, false),
            ("g", "4", 2, "A", 0.0, true),
            ("g", "4", 3, "B", 0.0, false),
            ("g", "4", 4, "B", 0.0, false),
        ];
        let actions = [
            "go to countertop 1",
            "take apple from countertop",
            "take apple 1 from countertop 1",
            "put apple 1 in/on fridge 1",
            "go to countertop 1",
            "take apple 1 from countertop 1",
            "put apple 1 in/on fridge 1",
            "go to cabinet 1",
            "look",
            "look",
            "look",
            "go to countertop 1",
            "go to countertop 1",
            "take apple from countertop",
            "take apple from countertop",
        ];
        batch_with(&rows, &actions)
    }

    #[test]
    fn vector_3_worked_group() {
        let b = worked_group();
        let run = |gate| advantages(&b, &Params { gate, ..p() }).unwrap();
        let retain = [
            0.6667, -0.3667, 0.7333, 0.6667, 0.6667, 0.6667, 0.6667, 0.3333, 0.3333, 0.3333,
            0.1667, -0.6667, 0.3667, -0.7333, -0.6667,
        ];
        let flip = [
            0.6667, -0.3667, 0.7333, 0.6667, 0.6667, 0.6667, 0.6667, -0.3333, -0.3333, -0.3333,
            -0.1667, -0.6667, -0.3667, -0.7333, -0.6667,
        ];
        let expected = [
            0.6667, -0.3667, 0.7333, 0.6667, 0.6667, 0.6667, 0.6667, -0.1667, -0.1667, -0.1667,
            -0.0833, -0.6667, -0.1833, -0.7333, -0.6667,
        ];
        assert_close(run(Gate::Retain).advantage(), &retain, 1e-4);
        assert_close(run(Gate::Flip).advantage(), &flip, 1e-4);
        let e = run(Gate::Expected);
        assert_close(e.advantage(), &expected, 1e-4);
        match e.column("mgr_p_retain") {
            Some(Values::F64(v)) => assert!((v[0] - 0.25).abs() < 1e-12),
            _ => panic!(),
        }
        // Sampled: each failed trajectory shares one gate; every value is the retain or flip value.
        let s = run(Gate::Sample);
        let sampled = s.advantage();
        for (i, x) in sampled.iter().enumerate() {
            assert!((x - retain[i]).abs() < 1e-4 || (x - flip[i]).abs() < 1e-4);
        }
        let same_sign =
            |rows: std::ops::Range<usize>| rows.map(|i| sampled[i] > 0.0).collect::<Vec<_>>();
        assert!(same_sign(7..11).windows(2).all(|w| w[0] == w[1]));
        // Reproducible for a seed.
        assert_eq!(run(Gate::Sample).advantage(), sampled);
    }

    #[test]
    fn uniform_group_gives_zero() {
        let rows = [
            ("g", "a", 0, "x", 1.0, true),
            ("g", "b", 0, "x", 1.0, false),
            ("g", "c", 0, "x", 1.0, true),
        ];
        let a = advantages(&batch_with(&rows, &["a", "b", "c"]), &p()).unwrap();
        assert_close(a.advantage(), &[0.0, 0.0, 0.0], 0.0);
    }

    #[test]
    fn feedback_and_format_rules() {
        let q = Params {
            feedback_rules: FeedbackRules::Alfworld,
            format_rules: FormatRules::ThinkAction,
            ..p()
        };
        assert!(format_ok("<think>hm</think><action>look</action>", &q));
        assert!(!format_ok("look", &q));
        let app = Params {
            format_rules: FormatRules::Appworld,
            ..p()
        };
        assert!(format_ok("```python\napis.spotify.login()\n```", &app));
        assert!(!format_ok("```python\nprint('thinking')\n```", &app));
    }
}
