//! The two profiles every method follows, and the conventions they share.
//!
//! - `paper`: the papers' equations: statistics over trajectories, sample std (ddof 1) plus ε,
//!   γ = 0.95, no invalid-action penalty unless asked.
//! - `verl`: what the public reference training code computes (verl-agent, ProxMO-RL): statistics
//!   over step rows (`compute_mean_std_cross_steps=True`), ddof 1, ε = 1e-6 added to the std, a
//!   group of one row gets μ = 0 and σ = 1, and an invalid-action penalty of 0.1 subtracted per row
//!   after discounting (`apply_invalid_action_penalty`).

use serde::{Deserialize, Serialize};

/// The profile every method follows (`--preset`, with these words as its help).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// The papers' equations.
    #[default]
    Paper,
    /// What the public reference training code (verl-agent) computes.
    Verl,
}

impl std::str::FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "paper" => Ok(Profile::Paper),
            "verl" => Ok(Profile::Verl),
            other => Err(format!(
                "unknown preset `{other}` (expected `paper` or `verl`)"
            )),
        }
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Profile::Paper => "paper",
            Profile::Verl => "verl",
        })
    }
}

/// Whose values enter a group's mean and std.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StatsOver {
    /// One value per trajectory (its first row's score).
    Trajectories,
    /// One value per step row: a trajectory of T steps counts T times.
    Rows,
}

/// Where the invalid-action penalty c enters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PenaltyMode {
    /// verl-agent: the row's episode score becomes R(τ) − c and its step return R_t − c, after
    /// discounting; nothing propagates to other rows.
    Ref,
    /// r_t ← r_t − c before R(τ) and R_t are computed, so the penalty discounts backwards.
    Reward,
}

/// Conventions shared by the group-based methods; each method's preset copies them.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Conventions {
    /// What the group's mean and std are taken over: its `trajectories` (the papers) or its step
    /// `rows` (verl-agent).
    pub stats_over: StatsOver,
    /// Delta degrees of freedom of the std (1: the sample std, as torch's default).
    pub std_ddof: u32,
    /// ε added to the std before dividing.
    pub eps: f64,
    /// Discount γ of the step returns.
    pub gamma: f64,
    /// Penalty c of an invalid action.
    pub invalid_penalty: f64,
    /// Where the penalty is taken: `ref`, from the row's score and its discounted return; `reward`,
    /// from r_t before discounting.
    pub penalty_mode: PenaltyMode,
}

impl Conventions {
    pub fn of(profile: Profile) -> Self {
        match profile {
            Profile::Paper => Conventions {
                stats_over: StatsOver::Trajectories,
                std_ddof: 1,
                eps: 1e-6,
                gamma: 0.95,
                invalid_penalty: 0.0,
                penalty_mode: PenaltyMode::Ref,
            },
            Profile::Verl => Conventions {
                stats_over: StatsOver::Rows,
                std_ddof: 1,
                eps: 1e-6,
                gamma: 0.95,
                invalid_penalty: 0.1,
                penalty_mode: PenaltyMode::Ref,
            },
        }
    }
}
