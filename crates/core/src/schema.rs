//! The input schema: canonical column names, their types, the names other producers use for them,
//! and what happens when one log carries several of those names at once.
//!
//! One table, [`FIELDS`], drives name resolution, type checks, the "accepted names" part of the
//! missing-column message and the collision rules, so `docs/formats.md` and the code cannot drift
//! apart. [`ColumnMap::resolve`] turns the column names of one file (Parquet) or one row (JSONL)
//! into a [`Resolution`]: which column feeds each field, and what became of the others.

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
    /// The reward of the group's greedy rollout (ReMax's baseline, verl's `reward_baselines`).
    pub const REWARD_BASELINE: &str = "reward_baseline";
    pub const ENTROPY: &str = "entropy";
    /// The advantage the trainer computed for the step (method `logged`).
    pub const ADVANTAGE: &str = "advantage";
    /// A ground-truth advantage from a simulator (method `oracle` reads it as its own).
    pub const ORACLE_ADVANTAGE: &str = "oracle_advantage";
    /// The observation text shown to the policy, when it differs from the state (`obs`).
    pub const POLICY_OBS: &str = "policy_obs";
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

/// What happens when one log carries several of a field's accepted names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Collision {
    /// The first name present (in [`Field::sources`] order) feeds the field; the others are not
    /// used, for the reason listed beside a column's name (the reference code's meaning), else
    /// because the first name comes first.
    First(&'static [(&'static str, &'static str)]),
    /// The names mean the same thing: the first non-null value is used and every other non-null
    /// value on the row must equal it; a row where they differ is an error naming both columns.
    Agree,
}

/// One input field: canonical name, kind, whether required, accepted column names and the rule
/// for several of them at once.
#[derive(Debug)]
pub struct Field {
    pub name: &'static str,
    pub kind: Kind,
    pub required: bool,
    /// Every accepted column name, in precedence order; the canonical name is among them.
    pub sources: &'static [&'static str],
    pub collision: Collision,
}

impl Field {
    /// The accepted names other than the canonical one.
    pub fn aliases(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.sources
            .iter()
            .copied()
            .filter(move |s| *s != self.name)
    }
}

use columns::*;

const MODEL_TEXT: &str = "`action` is the action the environment executed; verl-agent's `text_actions` and a `response` or `output` are the model's whole text";

/// Every column `credit` understands (`docs/formats.md`), in a fixed order. The precedence of each
/// field's names follows what verl-agent (and verl, ProxMO-RL, the GraphGPO recipe) mean by them.
pub const FIELDS: &[Field] = &[
    Field {
        name: GROUP_ID,
        kind: Kind::Key,
        required: true,
        sources: &[GROUP_ID, "uid", "group", "task_uid", "index"],
        collision: Collision::First(&[(
            "index",
            "verl and verl-agent group rollouts by `uid` (compute_grpo_outcome_advantage's `index` argument receives `uid`); `index` is the dataset row index, which repeats across iterations",
        )]),
    },
    Field {
        name: TRAJ_ID,
        kind: Kind::Key,
        required: true,
        sources: &[TRAJ_ID, "traj_uid", "traj_index", "episode_id", "trajectory_id"],
        collision: Collision::First(&[(
            "traj_index",
            "verl-agent's GiGPO receives `traj_uid` as its `traj_index`",
        )]),
    },
    Field {
        name: STEP,
        kind: Kind::Int,
        required: true,
        sources: &[STEP, "step_idx", "step_id", "turn", "t"],
        collision: Collision::First(&[]),
    },
    Field {
        name: REWARD,
        kind: Kind::Float,
        required: true,
        sources: &[REWARD, "rewards", "step_reward", "r"],
        collision: Collision::Agree,
    },
    Field {
        name: OBS,
        kind: Kind::Text,
        required: false,
        sources: &["anchor_obs", OBS, "observation", "state"],
        collision: Collision::First(&[(
            OBS,
            "verl-agent's GiGPO groups steps on `anchor_obs`, and the GraphGPO recipe and ProxMO-RL read it; `obs` is then the text shown to the policy",
        )]),
    },
    Field {
        name: POLICY_OBS,
        kind: Kind::Text,
        required: false,
        sources: &[POLICY_OBS],
        collision: Collision::Agree,
    },
    Field {
        name: NEXT_OBS,
        kind: Kind::Text,
        required: false,
        sources: &[NEXT_OBS],
        collision: Collision::Agree,
    },
    Field {
        name: ACTION,
        kind: Kind::Text,
        required: false,
        sources: &[ACTION, "text_actions", "response", "output"],
        collision: Collision::First(&[
            ("text_actions", MODEL_TEXT),
            ("response", MODEL_TEXT),
            ("output", MODEL_TEXT),
        ]),
    },
    Field {
        name: VALID,
        kind: Kind::Bool,
        required: false,
        sources: &[VALID, "is_action_valid", "action_valid"],
        collision: Collision::Agree,
    },
    Field {
        name: SUCCESS,
        kind: Kind::Bool,
        required: false,
        sources: &[SUCCESS, "is_success", "won"],
        collision: Collision::First(&[(
            "won",
            "`success` marks the trajectory on every row, while verl-agent's `won` is set on the winning step only; either way a trajectory succeeds when any of its rows says so",
        )]),
    },
    Field {
        name: EPISODE_REWARD,
        kind: Kind::Float,
        required: false,
        sources: &[EPISODE_REWARD, "episode_rewards", "score"],
        collision: Collision::Agree,
    },
    Field {
        name: DONE,
        kind: Kind::Bool,
        required: false,
        sources: &[DONE, "dones"],
        collision: Collision::Agree,
    },
    Field {
        name: ITERATION,
        kind: Kind::Int,
        required: false,
        sources: &[ITERATION, "global_step", "training_step", "epoch"],
        collision: Collision::First(&[(
            "epoch",
            "a training step is finer than an `epoch` (a pass over the data), and groups never span training steps",
        )]),
    },
    Field {
        name: TASK,
        kind: Kind::Text,
        required: false,
        sources: &[TASK, "task_type", "category", "game", "data_source"],
        collision: Collision::First(&[(
            "data_source",
            "the finer label is the task: verl's `data_source` names the environment (one value for a whole ALFWorld run)",
        )]),
    },
    Field {
        name: COST,
        kind: Kind::Float,
        required: false,
        sources: &[COST, "edge_cost"],
        collision: Collision::Agree,
    },
    Field {
        name: LOGPROB,
        kind: Kind::Float,
        required: false,
        sources: &[LOGPROB, "old_log_prob", "policy_logprob"],
        collision: Collision::Agree,
    },
    Field {
        name: HINDSIGHT_LOGPROB,
        kind: Kind::Float,
        required: false,
        sources: &[HINDSIGHT_LOGPROB],
        collision: Collision::Agree,
    },
    Field {
        name: N_TOKENS,
        kind: Kind::Int,
        required: false,
        sources: &[N_TOKENS, "action_tokens", "response_length"],
        collision: Collision::First(&[(
            "response_length",
            "HISR normalises by the action's own tokens; verl's `response_length` counts the whole response",
        )]),
    },
    Field {
        name: SEGMENT,
        kind: Kind::Int,
        required: false,
        sources: &[SEGMENT, "segment_id", "subgoal"],
        collision: Collision::Agree,
    },
    Field {
        name: SEGMENT_REWARD,
        kind: Kind::Float,
        required: false,
        sources: &[SEGMENT_REWARD],
        collision: Collision::Agree,
    },
    Field {
        name: PROGRESS,
        kind: Kind::Float,
        required: false,
        sources: &[PROGRESS, "contribution", "turn_value"],
        collision: Collision::Agree,
    },
    Field {
        name: VALUE,
        kind: Kind::Float,
        required: false,
        sources: &[VALUE, "values", "critic_value"],
        collision: Collision::Agree,
    },
    Field {
        name: REWARD_BASELINE,
        kind: Kind::Float,
        required: false,
        sources: &[REWARD_BASELINE, "reward_baselines"],
        collision: Collision::Agree,
    },
    Field {
        name: ENTROPY,
        kind: Kind::Float,
        required: false,
        sources: &[ENTROPY, "step_entropy", "mean_entropy"],
        collision: Collision::Agree,
    },
    Field {
        name: ADVANTAGE,
        kind: Kind::Float,
        required: false,
        sources: &[ADVANTAGE, "advantages", "adv"],
        collision: Collision::Agree,
    },
    Field {
        name: ORACLE_ADVANTAGE,
        kind: Kind::Float,
        required: false,
        sources: &[ORACLE_ADVANTAGE, "oracle_advantages", "true_advantage"],
        collision: Collision::Agree,
    },
    Field {
        name: PROMPT,
        kind: Kind::Text,
        required: false,
        sources: &[PROMPT, "input"],
        collision: Collision::Agree,
    },
    Field {
        name: FEEDBACK,
        kind: Kind::Text,
        required: false,
        sources: &[FEEDBACK, "env_feedback"],
        collision: Collision::Agree,
    },
];

/// A column that loses its own field to a higher-precedence name feeds another field instead:
/// beside `anchor_obs`, verl-agent's `obs` is the text shown to the policy.
pub const DEMOTIONS: &[(&str, &str)] = &[(OBS, POLICY_OBS)];

pub fn field(name: &str) -> Option<&'static Field> {
    FIELDS.iter().find(|f| f.name == name)
}

pub fn field_index(name: &str) -> Option<usize> {
    FIELDS.iter().position(|f| f.name == name)
}

/// "`group_id` (or uid, group, task_uid, index)": for messages about a missing column.
pub fn describe_accepted(field: &Field) -> String {
    let aliases: Vec<&str> = field.aliases().collect();
    if aliases.is_empty() {
        format!("`{}`", field.name)
    } else {
        format!("`{}` (or {})", field.name, aliases.join(", "))
    }
}

/// The message for the required fields a file or row lacks (`missing`, at least one), whose
/// columns are `names`: every missing field at once with its accepted names, the columns there
/// are, and the `--schema` file that maps the closest of them ([`closest_columns`]; a commented
/// line where none is close), so that one run says all there is to fix.
pub fn missing_message(missing: &[&Field], names: &[&str]) -> String {
    let accepted: Vec<String> = missing.iter().map(|f| describe_accepted(f)).collect();
    let closest = closest_columns(missing, names);
    let lines: Vec<String> = missing
        .iter()
        .zip(&closest)
        .map(|(field, column)| match column {
            Some(column) => format!("    {column} = \"{}\"", field.name),
            None => format!("    # <column> = \"{}\"", field.name),
        })
        .collect();
    let mut present: Vec<&str> = names.iter().copied().take(NAMED_COLUMNS).collect();
    if names.len() > present.len() {
        present.push("…");
    }
    let (fields, onto) = if missing.len() == 1 {
        ("column", "map another name onto it")
    } else {
        ("columns", "map other names onto them")
    };
    format!(
        "missing required {fields} {}; the columns present: {}; {onto} with `--schema map.toml`, e.g. (the closest names: check them):\n{}",
        accepted.join(", "),
        present.join(", "),
        lines.join("\n")
    )
}

/// For each of `fields`, the column of `names` most like one of its accepted names, each column
/// given to one field at most: the pairs are taken best first, scored by the words (between
/// `_`s) they share that tell the field from the others missing (`group` for `group_id`, `turn`
/// for `step`; not `id` or `index`, which several have), then by difflib's ratio; a pair sharing
/// no such word needs a typo's ratio (`rewrd`). Columns another field already reads are left out.
fn closest_columns<'a>(fields: &[&Field], names: &[&'a str]) -> Vec<Option<&'a str>> {
    use crate::sequence_matcher::{Matcher, Text};
    let words = |name: &str| -> Vec<String> {
        name.split(['_', '-', '.', ' '])
            .filter(|w| !w.is_empty())
            .map(str::to_lowercase)
            .collect()
    };
    let free: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| FIELDS.iter().all(|f| !f.sources.contains(n)))
        .collect();
    let field_words =
        |field: &Field| -> Vec<String> { field.sources.iter().flat_map(|s| words(s)).collect() };
    let mut pairs: Vec<(f64, usize, usize)> = Vec::new();
    for (f, field) in fields.iter().enumerate() {
        let others: Vec<String> = fields
            .iter()
            .filter(|other| other.name != field.name)
            .flat_map(|other| field_words(other))
            .collect();
        let accepted: Vec<String> = field_words(field)
            .into_iter()
            .filter(|w| !others.contains(w))
            .collect();
        let matchers: Vec<Matcher> = field
            .sources
            .iter()
            .map(|s| Matcher::new(Text::new(s)))
            .collect();
        for (c, column) in free.iter().enumerate() {
            let shared = words(column)
                .iter()
                .filter(|w| accepted.contains(w))
                .count();
            let text = Text::new(column);
            let ratio = matchers.iter().map(|m| m.ratio(&text)).fold(0.0, f64::max);
            if shared > 0 || ratio >= 0.85 {
                pairs.push((shared as f64 + ratio, f, c));
            }
        }
    }
    pairs.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut chosen: Vec<Option<&str>> = vec![None; fields.len()];
    let mut taken = vec![false; free.len()];
    for (_, f, c) in pairs {
        if chosen[f].is_none() && !taken[c] {
            chosen[f] = Some(free[c]);
            taken[c] = true;
        }
    }
    chosen
}

/// The names [`ColumnMap::resolve`] reads to recognise verl's rollout dump.
const VERL_DUMP_COLUMNS: [&str; 7] = [
    "input",
    "output",
    "score",
    "step",
    "uid",
    "reward",
    "data_source",
];

/// How many of them a message lists.
const NAMED_COLUMNS: usize = 20;

/// The user's column mapping, from `--schema map.toml` or `[columns]` in `credit.toml`: a mapped
/// column feeds its field ahead of every accepted name, which is how a collision is settled by hand.
#[derive(Clone, Debug, Default)]
pub struct ColumnMap {
    /// source name → canonical name.
    pub user: std::collections::BTreeMap<String, String>,
    /// source name → where the pair was written (`map.toml`), for messages; empty for a mapping
    /// given in code.
    pub origins: std::collections::BTreeMap<String, String>,
}

/// Which column feeds one field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Feed {
    pub column: String,
    /// Further columns that must hold the same value on every row ([`Collision::Agree`]).
    pub agree: Vec<String>,
    /// How the field's value comes from the column's.
    pub derive: Derive,
}

/// How a verl dump's step is taken (a [`ColumnUse`]'s `how`): every rollout is one step, the
/// single-turn layout ([`crate::ingest::first_rows_single_turn`]).
pub const ONE_STEP_PER_ROLLOUT: &str = "0: one step per rollout";

/// How a field's value comes from its column's value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Derive {
    /// As it is.
    #[default]
    Value,
    /// The sample part of a verl `uid` `"{sample}_{session}_{output}"` (the whole id otherwise).
    SamplePart,
    /// Always 0: a single-turn rollout has one step.
    Zero,
}

impl Derive {
    /// The derived text of a key (`SamplePart`); `None` when the value is kept.
    pub fn key(self, id: &str) -> &str {
        match self {
            Derive::SamplePart => {
                let mut parts = id.rsplitn(3, '_');
                let (output, session, sample) = (parts.next(), parts.next(), parts.next());
                let numeric = |p: Option<&str>| {
                    p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
                };
                match sample {
                    Some(sample) if numeric(output) && numeric(session) => sample,
                    _ => id,
                }
            }
            _ => id,
        }
    }
}

/// How the columns of one file (or one JSONL row shape) map onto the fields.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resolution {
    /// One entry per field of [`FIELDS`].
    pub feeds: Vec<Option<Feed>>,
    /// What was decided, for the report: one entry per field fed.
    pub uses: Vec<ColumnUse>,
}

impl Resolution {
    /// The required fields no column feeds, in [`FIELDS`] order.
    pub fn missing_required(&self) -> Vec<&'static Field> {
        FIELDS
            .iter()
            .zip(&self.feeds)
            .filter(|(field, feed)| field.required && feed.is_none())
            .map(|(field, _)| field)
            .collect()
    }
}

/// Which log column feeds a field, and what became of the other columns named for it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct ColumnUse {
    pub field: &'static str,
    pub column: String,
    /// How the value is taken from the column, when not as it is.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub how: String,
    /// Other columns of the log named for the same field.
    pub also: Vec<Also>,
}

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct Also {
    pub column: String,
    /// `agrees` (checked equal on every row), `feeds <field>`, or `not used`.
    pub outcome: String,
    /// Why, when not used.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub why: String,
}

impl ColumnUse {
    /// What the field is, for people: `state (obs)`, `policy text (policy_obs)`, `reward`.
    pub fn label(&self) -> String {
        match self.field {
            OBS => "state (obs)".into(),
            POLICY_OBS => "policy text (policy_obs)".into(),
            other => other.into(),
        }
    }

    /// `state (obs) ← anchor_obs`.
    pub fn short(&self) -> String {
        if self.how.is_empty() {
            format!("{} ← {}", self.label(), self.column)
        } else {
            format!("{} ← {} ({})", self.label(), self.column, self.how)
        }
    }

    /// [`ColumnUse::short`] and what became of the other columns named for the field:
    /// `state (obs) ← anchor_obs (obs also present: feeds policy_obs, …)`.
    pub fn describe(&self) -> String {
        let mut out = self.short();
        for a in &self.also {
            let why = if a.why.is_empty() {
                String::new()
            } else {
                format!(": {}", a.why)
            };
            let outcome = match a.outcome.as_str() {
                "agrees" => "checked equal on every row".to_string(),
                o => o.to_string(),
            };
            out.push_str(&format!("; {} also present: {outcome}{why}", a.column));
        }
        out
    }
}

impl ColumnMap {
    /// The pairs of a schema file's text (`source = "canonical"` lines, at the top level or in a
    /// `[columns]` table); `Err` is the message, to be prefixed with the file's name.
    pub fn parse_toml(text: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
        let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
        let pairs = match table.get("columns") {
            Some(toml::Value::Table(t)) => {
                // A pair beside the table would be read by nothing: the file means one of two
                // layouts and it is not clear which.
                if let Some(stray) = table.keys().find(|k| *k != "columns") {
                    return Err(format!(
                        "`{stray}` is outside the `[columns]` table and would be ignored; put every \
                         pair under [columns], or none"
                    ));
                }
                t.clone()
            }
            _ => table,
        };
        let mut out = std::collections::BTreeMap::new();
        for (source, target) in pairs {
            let Some(target) = target.as_str() else {
                return Err(format!(
                    "`{source}` must map to a column name in quotes (`{source} = \"group_id\"`)"
                ));
            };
            out.insert(source, target.to_string());
        }
        Ok(out)
    }

    /// verl's rollout dump with ids (`input, output, score, step, uid`, written by verl ≥ 0.9's
    /// default trainer and 0.8's `main_ppo_sync` as `{global_step}.jsonl`): single-turn groups.
    /// The group is the sample part of `uid` = `"{sample}_{session}_{output}"`, the trajectory the
    /// whole `uid` (one per rollout and output), the reward `score` (`reward` on validation rows
    /// agrees with it), the iteration verl's `step`, and every rollout has one step 0.
    /// The names it looks at besides the fields' own are [`VERL_DUMP_COLUMNS`].
    fn verl_dump(&self, names: &[&str]) -> Option<Resolution> {
        let has = |n: &str| names.contains(&n);
        let explicit_ids = FIELDS
            .iter()
            .filter(|f| f.name == GROUP_ID || f.name == TRAJ_ID)
            .flat_map(|f| f.sources.iter())
            .any(|s| *s != "uid" && has(s));
        let mapped = self
            .user
            .values()
            .any(|t| t == GROUP_ID || t == TRAJ_ID || t == STEP);
        if !(has("input") && has("output") && has("score") && has("step") && has("uid"))
            || explicit_ids
            || mapped
        {
            return None;
        }
        let mut feeds: Vec<Option<Feed>> = vec![None; FIELDS.len()];
        let mut uses: Vec<ColumnUse> = Vec::new();
        let mut feed =
            |field: &'static str, column: &str, agree: &[&str], derive: Derive, how: &str| {
                let i = field_index(field).expect("canonical field");
                uses.retain(|u| u.field != field);
                let agree: Vec<String> = agree
                    .iter()
                    .filter(|a| has(a))
                    .map(|a| a.to_string())
                    .collect();
                uses.push(ColumnUse {
                    field,
                    column: column.to_string(),
                    how: how.to_string(),
                    also: agree
                        .iter()
                        .map(|a| Also {
                            column: a.clone(),
                            outcome: "agrees".into(),
                            why: String::new(),
                        })
                        .collect(),
                });
                feeds[i] = Some(Feed {
                    column: column.to_string(),
                    agree,
                    derive,
                });
            };
        feed(
            GROUP_ID,
            "uid",
            &[],
            Derive::SamplePart,
            "its sample part: verl's uid is {sample}_{session}_{output}",
        );
        feed(
            TRAJ_ID,
            "uid",
            &[],
            Derive::Value,
            "one trajectory per rollout",
        );
        feed(STEP, "step", &[], Derive::Zero, ONE_STEP_PER_ROLLOUT);
        feed(ITERATION, "step", &[], Derive::Value, "verl's global step");
        feed(REWARD, "score", &["reward"], Derive::Value, "");
        feed(EPISODE_REWARD, "score", &[], Derive::Value, "");
        feed(ACTION, "output", &[], Derive::Value, "the response");
        feed(PROMPT, "input", &[], Derive::Value, "");
        if has("data_source") {
            feed(TASK, "data_source", &[], Derive::Value, "");
        }
        // The user's mapping wins (ids and steps aside: mapping those means it is no plain dump),
        // e.g. `acc = "reward"` to study one of verl's extra reward fields instead of `score`; one
        // step per rollout, so the episode's reward follows unless it is mapped too.
        let mapped_episode = self.user.values().any(|t| t == EPISODE_REWARD);
        for (source, target) in &self.user {
            let Some(mapped) = field(target).filter(|_| has(source)) else {
                continue;
            };
            feed(
                mapped.name,
                source,
                &[],
                Derive::Value,
                "mapped by the user",
            );
            if mapped.name == REWARD && !mapped_episode {
                feed(
                    EPISODE_REWARD,
                    source,
                    &[],
                    Derive::Value,
                    "mapped by the user",
                );
            }
        }
        uses.sort_by_key(|u| field_index(u.field));
        Some(Resolution { feeds, uses })
    }

    /// Checks that every mapping target is a canonical column.
    pub fn check(&self) -> Result<(), String> {
        for (source, target) in &self.user {
            if field(target).is_some() {
                continue;
            }
            // `group_id = "task_group"`: the pair written the other way round, the field first.
            if field(source).is_some() {
                return Err(format!(
                    "column mapping `{source} = \"{target}\"` is reversed: a pair is the log's column, then credit's (write `{target} = \"{source}\"`)"
                ));
            }
            let names: Vec<&str> = FIELDS.iter().map(|f| f.name).collect();
            let hint = crate::sequence_matcher::did_you_mean(target, names.iter().copied(), "");
            return Err(format!(
                "column mapping `{source} = \"{target}\"`: `{target}` is not a credit column (expected one of {}){hint}",
                names.join(", ")
            ));
        }
        Ok(())
    }

    /// The error for mapped columns that no log has (`mapped` holds every mapped column the
    /// logs have, `others` a sample of their other columns): such a pair would be ignored and the
    /// field fed by its accepted names, or by nothing.
    pub fn check_seen(
        &self,
        mapped: &std::collections::BTreeSet<String>,
        others: &std::collections::BTreeSet<String>,
    ) -> Result<(), String> {
        let Some((source, target)) = self.user.iter().find(|(s, _)| !mapped.contains(*s)) else {
            return Ok(());
        };
        let seen: std::collections::BTreeSet<&String> = mapped.iter().chain(others).collect();
        let origin = self
            .origins
            .get(source)
            .map_or(String::new(), |o| format!("{o}: "));
        let hint =
            crate::sequence_matcher::did_you_mean(source, seen.iter().map(|s| s.as_str()), "");
        let mut names: Vec<&str> = seen
            .iter()
            .map(|s| s.as_str())
            .take(NAMED_COLUMNS)
            .collect();
        if seen.len() > names.len() {
            names.push("…");
        }
        Err(format!(
            "{origin}column mapping `{source} = \"{target}\"`: no log has a column `{source}` \
             (the logs' columns: {}){hint}",
            names.join(", ")
        ))
    }

    /// The field a column name feeds on its own (the user's mapping first) and its rank among the
    /// field's names (0: mapped by the user).
    fn candidate(&self, name: &str) -> Option<(usize, usize)> {
        if let Some(target) = self.user.get(name) {
            return field_index(target).map(|i| (i, 0));
        }
        FIELDS.iter().enumerate().find_map(|(i, f)| {
            f.sources
                .iter()
                .position(|s| *s == name)
                .map(|k| (i, k + 1))
        })
    }

    /// Whether [`ColumnMap::resolve`] looks at a column name: an accepted name of a field, a
    /// mapped name, or one of the names that mark verl's rollout dump. The other names of a row
    /// cannot change its resolution, so a reader may leave them out of the shape it caches.
    pub fn reads(&self, name: &str) -> bool {
        static READ: std::sync::OnceLock<std::collections::HashSet<&'static str>> =
            std::sync::OnceLock::new();
        let read = READ.get_or_init(|| {
            FIELDS
                .iter()
                .flat_map(|f| f.sources.iter().copied())
                .chain(VERL_DUMP_COLUMNS)
                .collect()
        });
        read.contains(name) || self.user.contains_key(name)
    }

    /// Resolves the column names of one file or row shape. `Err` when two columns are mapped onto
    /// one field by the user.
    pub fn resolve<'a>(
        &self,
        names: impl IntoIterator<Item = &'a str>,
    ) -> Result<Resolution, String> {
        let names: Vec<&str> = names.into_iter().collect();
        if let Some(resolution) = self.verl_dump(&names) {
            return Ok(resolution);
        }
        let mut candidates: Vec<Vec<(usize, &str)>> = vec![Vec::new(); FIELDS.len()];
        for name in names {
            if let Some((f, rank)) = self.candidate(name) {
                if !candidates[f].iter().any(|(_, n)| *n == name) {
                    candidates[f].push((rank, name));
                }
            }
        }
        let mut feeds: Vec<Option<Feed>> = vec![None; FIELDS.len()];
        let mut uses = Vec::new();
        let mut demoted: Vec<(usize, &str, &str)> = Vec::new();
        for (f, field) in FIELDS.iter().enumerate() {
            let list = &mut candidates[f];
            if list.is_empty() {
                continue;
            }
            list.sort();
            if list.len() > 1 && list[1].0 == 0 {
                return Err(format!(
                    "column mapping: `{}` and `{}` are both mapped to `{}`; map one of them",
                    list[0].1, list[1].1, field.name
                ));
            }
            let (rank, chosen) = list[0];
            let mut feed = Feed {
                column: chosen.to_string(),
                agree: Vec::new(),
                derive: Derive::Value,
            };
            let mut also = Vec::new();
            for &(_, other) in &list[1..] {
                if let Some(&(_, into)) = DEMOTIONS.iter().find(|(s, _)| *s == other) {
                    if rank > 0 || !self.user.contains_key(other) {
                        demoted.push((f, other, into));
                        continue;
                    }
                }
                let (outcome, why) = match (rank, field.collision) {
                    (0, _) => ("not used", format!("the column mapping chooses `{chosen}`")),
                    (_, Collision::Agree) => {
                        feed.agree.push(other.to_string());
                        ("agrees", String::new())
                    }
                    (_, Collision::First(reasons)) => (
                        "not used",
                        reasons.iter().find(|(c, _)| *c == other).map_or_else(
                            || {
                                format!(
                                    "`{chosen}` comes first among the names of `{}`",
                                    field.name
                                )
                            },
                            |(_, why)| why.to_string(),
                        ),
                    ),
                };
                also.push(Also {
                    column: other.to_string(),
                    outcome: outcome.to_string(),
                    why,
                });
            }
            uses.push(ColumnUse {
                field: field.name,
                column: chosen.to_string(),
                how: String::new(),
                also,
            });
            feeds[f] = Some(feed);
        }
        for (from, column, into) in demoted {
            let target = field_index(into).expect("demotion targets a field");
            let outcome = if feeds[target].is_none() {
                feeds[target] = Some(Feed {
                    column: column.to_string(),
                    agree: Vec::new(),
                    derive: Derive::Value,
                });
                uses.push(ColumnUse {
                    field: FIELDS[target].name,
                    column: column.to_string(),
                    how: String::new(),
                    also: Vec::new(),
                });
                (format!("feeds {into}"), String::new())
            } else {
                (
                    "not used".to_string(),
                    format!("`{into}` is logged as well"),
                )
            };
            let why = match FIELDS[from].collision {
                Collision::First(reasons) if outcome.1.is_empty() => reasons
                    .iter()
                    .find(|(c, _)| *c == column)
                    .map_or(String::new(), |(_, why)| why.to_string()),
                _ => outcome.1,
            };
            let entry = uses
                .iter_mut()
                .find(|u| u.field == FIELDS[from].name)
                .expect("the demoting field is fed");
            entry.also.push(Also {
                column: column.to_string(),
                outcome: outcome.0,
                why,
            });
        }
        uses.sort_by_key(|u| field_index(u.field));
        Ok(Resolution { feeds, uses })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(names: &[&str]) -> Resolution {
        ColumnMap::default().resolve(names.iter().copied()).unwrap()
    }

    fn fed(r: &Resolution, field: &str) -> Option<String> {
        r.feeds[field_index(field).unwrap()]
            .as_ref()
            .map(|f| f.column.clone())
    }

    #[test]
    fn anchor_obs_is_the_state_and_obs_the_policy_text() {
        let r = resolve(&["uid", "traj_uid", "step", "reward", "obs", "anchor_obs"]);
        assert_eq!(fed(&r, OBS).as_deref(), Some("anchor_obs"));
        assert_eq!(fed(&r, POLICY_OBS).as_deref(), Some("obs"));
        let state = r.uses.iter().find(|u| u.field == OBS).unwrap();
        assert_eq!(state.also[0].column, "obs");
        assert_eq!(state.also[0].outcome, "feeds policy_obs");
        // Alone, `obs` is the state.
        let r = resolve(&["uid", "traj_uid", "step", "reward", "obs"]);
        assert_eq!(fed(&r, OBS).as_deref(), Some("obs"));
        assert_eq!(fed(&r, POLICY_OBS), None);
    }

    #[test]
    fn precedence_follows_the_reference_meaning() {
        let r = resolve(&[
            "index",
            "uid",
            "traj_index",
            "traj_uid",
            "step",
            "won",
            "success",
            "text_actions",
            "action",
            "epoch",
            "global_step",
            "data_source",
            "task_type",
            "response_length",
            "action_tokens",
            "reward",
        ]);
        for (field, column) in [
            (GROUP_ID, "uid"),
            (TRAJ_ID, "traj_uid"),
            (SUCCESS, "success"),
            (ACTION, "action"),
            (ITERATION, "global_step"),
            (TASK, "task_type"),
            (N_TOKENS, "action_tokens"),
        ] {
            assert_eq!(fed(&r, field).as_deref(), Some(column), "{field}");
            let u = r.uses.iter().find(|u| u.field == field).unwrap();
            assert_eq!(u.also.len(), 1, "{field}");
            assert_eq!(u.also[0].outcome, "not used");
            assert!(!u.also[0].why.is_empty());
        }
    }

    #[test]
    fn same_meaning_names_must_agree() {
        let r = resolve(&[
            "uid",
            "traj_uid",
            "step",
            "reward",
            "rewards",
            "episode_rewards",
            "score",
        ]);
        let reward = r.feeds[field_index(REWARD).unwrap()].as_ref().unwrap();
        assert_eq!(
            (reward.column.as_str(), reward.agree.clone()),
            ("reward", vec!["rewards".to_string()])
        );
        let episode = r.feeds[field_index(EPISODE_REWARD).unwrap()]
            .as_ref()
            .unwrap();
        assert_eq!(episode.column, "episode_rewards");
        assert_eq!(episode.agree, vec!["score".to_string()]);
    }

    #[test]
    fn missing_fields_are_named_together_with_the_schema_that_maps_them() {
        let missing: Vec<&Field> = [GROUP_ID, TRAJ_ID, STEP, REWARD]
            .iter()
            .map(|n| field(n).unwrap())
            .collect();
        let names = [
            "task_group",
            "rollout",
            "turn_index",
            "env_reward",
            "state_text",
        ];
        assert_eq!(
            missing_message(&missing, &names),
            "missing required columns `group_id` (or uid, group, task_uid, index), `traj_id` (or traj_uid, traj_index, episode_id, trajectory_id), `step` (or step_idx, step_id, turn, t), `reward` (or rewards, step_reward, r); \
             the columns present: task_group, rollout, turn_index, env_reward, state_text; \
             map other names onto them with `--schema map.toml`, e.g. (the closest names: check them):\n    \
             task_group = \"group_id\"\n    # <column> = \"traj_id\"\n    turn_index = \"step\"\n    env_reward = \"reward\""
        );
        // One field: said as one, and a typo of its name is close enough.
        let one = missing_message(&missing[3..], &["rewrd", "obs"]);
        assert!(
            one.starts_with("missing required column `reward` (or rewards, step_reward, r); the columns present: rewrd, obs; map another name onto it")
                && one.ends_with("\n    rewrd = \"reward\""),
            "{one}"
        );
    }

    #[test]
    fn a_reversed_or_mistyped_mapping_is_said_so() {
        let map = |source: &str, target: &str| ColumnMap {
            user: [(source.to_string(), target.to_string())].into(),
            ..ColumnMap::default()
        };
        assert_eq!(
            map("group_id", "task_group").check().unwrap_err(),
            "column mapping `group_id = \"task_group\"` is reversed: a pair is the log's column, then credit's (write `task_group = \"group_id\"`)"
        );
        assert!(map("task_group", "group_di")
            .check()
            .unwrap_err()
            .ends_with("; did you mean `group_id`?"));
    }

    #[test]
    fn the_user_mapping_settles_a_collision() {
        let map = ColumnMap {
            user: [
                ("obs".to_string(), "obs".to_string()),
                ("rewards".to_string(), "reward".to_string()),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        let r = map
            .resolve([
                "uid",
                "traj_uid",
                "step",
                "reward",
                "rewards",
                "obs",
                "anchor_obs",
            ])
            .unwrap();
        assert_eq!(fed(&r, OBS).as_deref(), Some("obs"));
        assert_eq!(fed(&r, POLICY_OBS), None);
        assert_eq!(fed(&r, REWARD).as_deref(), Some("rewards"));
        let reward = r.feeds[field_index(REWARD).unwrap()].as_ref().unwrap();
        assert!(reward.agree.is_empty());
        let state = r.uses.iter().find(|u| u.field == OBS).unwrap();
        assert_eq!(state.also[0].column, "anchor_obs");
        assert!(state.also[0].why.contains("column mapping"));
        let two = ColumnMap {
            user: [
                ("a".to_string(), "reward".to_string()),
                ("b".to_string(), "reward".to_string()),
            ]
            .into_iter()
            .collect(),
            ..Default::default()
        };
        assert!(two
            .resolve(["a", "b"])
            .unwrap_err()
            .contains("both mapped to `reward`"));
    }

    #[test]
    fn a_schema_file_is_all_top_level_pairs_or_all_under_columns() {
        let top = ColumnMap::parse_toml("my_group = \"group_id\"\n").unwrap();
        assert_eq!(top["my_group"], "group_id");
        let table = ColumnMap::parse_toml("[columns]\nmy_group = \"group_id\"\n").unwrap();
        assert_eq!(table["my_group"], "group_id");
        let both =
            ColumnMap::parse_toml("my_reward = \"reward\"\n[columns]\nmy_group = \"group_id\"\n")
                .unwrap_err();
        assert!(
            both.contains("`my_reward` is outside the `[columns]` table"),
            "{both}"
        );
        assert!(
            both.contains("put every pair under [columns], or none"),
            "{both}"
        );
    }

    #[test]
    fn a_mapped_column_that_no_log_has_is_an_error() {
        let map = ColumnMap {
            user: [("my_grop".to_string(), "group_id".to_string())].into(),
            origins: [("my_grop".to_string(), "map.toml".to_string())].into(),
        };
        let seen = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
        assert!(map
            .check_seen(&seen(&["my_grop"]), &seen(&["traj_id"]))
            .is_ok());
        let err = map
            .check_seen(
                &seen(&[]),
                &seen(&["my_group", "traj_id", "step", "reward"]),
            )
            .unwrap_err();
        assert_eq!(
            err,
            "map.toml: column mapping `my_grop = \"group_id\"`: no log has a column `my_grop` \
             (the logs' columns: my_group, reward, step, traj_id); did you mean `my_group`?"
        );
    }
}
