//! The input schema: canonical column names, their types, and the aliases other producers use.
//!
//! One table, [`FIELDS`], drives alias resolution, type checks and the "accepted aliases" part of the
//! missing-column message, so `docs/formats.md` and the code cannot drift apart.

/// Canonical column names, as polars does with its output field names.
pub mod columns {
    pub const GROUP_ID: &str = "group_id";
    pub const TRAJ_ID: &str = "traj_id";
    pub const STEP: &str = "step";
    pub const REWARD: &str = "reward";
    pub const OBS: &str = "obs";
    pub const NEXT_OBS: &str = "next_obs";
    pub const ACTION: &str = "action";
    pub const VALID: &str = "valid";
    pub const SUCCESS: &str = "success";
    pub const EPISODE_REWARD: &str = "episode_reward";
    pub const DONE: &str = "done";
    pub const ITERATION: &str = "iteration";
    pub const TASK: &str = "task";
    pub const COST: &str = "cost";
    pub const LOGPROB: &str = "logprob";
    pub const HINDSIGHT_LOGPROB: &str = "hindsight_logprob";
    pub const N_TOKENS: &str = "n_tokens";
    pub const SEGMENT: &str = "segment";
    pub const SEGMENT_REWARD: &str = "segment_reward";
    pub const PROGRESS: &str = "progress";
    pub const VALUE: &str = "value";
    pub const PROMPT: &str = "prompt";
    pub const FEEDBACK: &str = "feedback";
    /// Derived: R(τ) of the row's trajectory.
    pub const EPISODE_RETURN: &str = "episode_return";
    /// Derived: whether the row's trajectory succeeded.
    pub const TRAJ_SUCCESS: &str = "traj_success";
    /// Derived: number of steps of the row's trajectory.
    pub const TRAJ_LENGTH: &str = "traj_length";
    /// Derived: discounted return-to-go R_t at the ingest γ.
    pub const RETURN_TO_GO: &str = "return_to_go";
}

/// How a column's values are read and stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A string or integer id, stored as a string.
    Key,
    Int,
    Float,
    Bool,
    Text,
}

impl Kind {
    pub fn expected(self) -> &'static str {
        match self {
            Kind::Key => "a string or integer id",
            Kind::Int => "an integer",
            Kind::Float => "a finite number",
            Kind::Bool => "a boolean",
            Kind::Text => "a string",
        }
    }
}

/// One input column: canonical name, kind, whether required, accepted aliases.
#[derive(Debug)]
pub struct Field {
    pub name: &'static str,
    pub kind: Kind,
    pub required: bool,
    pub aliases: &'static [&'static str],
}

use columns::*;

/// Every column `credit` understands (`../shared/spec/schema.md`), in a fixed order.
pub const FIELDS: &[Field] = &[
    Field {
        name: GROUP_ID,
        kind: Kind::Key,
        required: true,
        aliases: &["uid", "index", "group", "task_uid"],
    },
    Field {
        name: TRAJ_ID,
        kind: Kind::Key,
        required: true,
        aliases: &["traj_uid", "traj_index", "episode_id", "trajectory_id"],
    },
    Field {
        name: STEP,
        kind: Kind::Int,
        required: true,
        aliases: &["t", "turn", "step_idx", "step_id"],
    },
    Field {
        name: REWARD,
        kind: Kind::Float,
        required: true,
        aliases: &["rewards", "r", "step_reward"],
    },
    Field {
        name: OBS,
        kind: Kind::Text,
        required: false,
        aliases: &["anchor_obs", "observation", "state"],
    },
    Field {
        name: NEXT_OBS,
        kind: Kind::Text,
        required: false,
        aliases: &[],
    },
    Field {
        name: ACTION,
        kind: Kind::Text,
        required: false,
        aliases: &["text_actions", "response", "output"],
    },
    Field {
        name: VALID,
        kind: Kind::Bool,
        required: false,
        aliases: &["is_action_valid", "action_valid"],
    },
    Field {
        name: SUCCESS,
        kind: Kind::Bool,
        required: false,
        aliases: &["won", "is_success"],
    },
    Field {
        name: EPISODE_REWARD,
        kind: Kind::Float,
        required: false,
        aliases: &["episode_rewards", "score"],
    },
    Field {
        name: DONE,
        kind: Kind::Bool,
        required: false,
        aliases: &["dones"],
    },
    Field {
        name: ITERATION,
        kind: Kind::Int,
        required: false,
        aliases: &["global_step", "training_step", "epoch"],
    },
    Field {
        name: TASK,
        kind: Kind::Text,
        required: false,
        aliases: &["data_source", "task_type", "category", "game"],
    },
    Field {
        name: COST,
        kind: Kind::Float,
        required: false,
        aliases: &["edge_cost"],
    },
    Field {
        name: LOGPROB,
        kind: Kind::Float,
        required: false,
        aliases: &["old_log_prob", "policy_logprob"],
    },
    Field {
        name: HINDSIGHT_LOGPROB,
        kind: Kind::Float,
        required: false,
        aliases: &[],
    },
    Field {
        name: N_TOKENS,
        kind: Kind::Int,
        required: false,
        aliases: &["response_length", "action_tokens"],
    },
    Field {
        name: SEGMENT,
        kind: Kind::Int,
        required: false,
        aliases: &["segment_id", "subgoal"],
    },
    Field {
        name: SEGMENT_REWARD,
        kind: Kind::Float,
        required: false,
        aliases: &[],
    },
    Field {
        name: PROGRESS,
        kind: Kind::Float,
        required: false,
        aliases: &["contribution", "turn_value"],
    },
    Field {
        name: VALUE,
        kind: Kind::Float,
        required: false,
        aliases: &["values", "critic_value"],
    },
    Field {
        name: PROMPT,
        kind: Kind::Text,
        required: false,
        aliases: &["input"],
    },
    Field {
        name: FEEDBACK,
        kind: Kind::Text,
        required: false,
        aliases: &["env_feedback"],
    },
];

pub fn field(name: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.name == name)
}

/// "`group_id` (or uid, index, group, task_uid)": for messages about a missing column.
pub fn describe_accepted(field: &Field) -> String {
    if field.aliases.is_empty() {
        format!("`{}`", field.name)
    } else {
        format!("`{}` (or {})", field.name, field.aliases.join(", "))
    }
}

/// Maps source column names onto canonical fields: the user's mapping first, then canonical
/// names, then aliases. When a row carries several names for one field (`won` and `success`),
/// the canonical name wins, then the alias listed first.
#[derive(Clone, Debug, Default)]
pub struct ColumnMap {
    /// source name → canonical name, from `--schema map.toml` or `[columns]` in `credit.toml`.
    pub user: std::collections::BTreeMap<String, String>,
}

impl ColumnMap {
    /// The field index in [`FIELDS`] and the precedence rank (lower wins) of a source name.
    pub fn resolve(&self, source: &str) -> Option<(usize, u8)> {
        if let Some(target) = self.user.get(source) {
            return FIELDS.iter().position(|f| f.name == target).map(|i| (i, 0));
        }
        for (i, f) in FIELDS.iter().enumerate() {
            if f.name == source {
                return Some((i, 1));
            }
            if let Some(k) = f.aliases.iter().position(|a| *a == source) {
                return Some((i, 2 + k as u8));
            }
        }
        None
    }

    /// Checks that every mapping target is a canonical column.
    pub fn check(&self) -> Result<(), String> {
        for (source, target) in &self.user {
            if field(target).is_none() {
                let names: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
                return Err(format!(
                    "column mapping `{source} = \"{target}\"`: `{target}` is not a credit column (expected one of {})",
                    names.join(", ")
                ));
            }
        }
        Ok(())
    }
}
