//! Policy samples from the logs: one per step with an action (prompt text, action text, the
//! method's advantage, the logged log-prob), tokenized for `credit_train::train`.
//!
//! The prompt of a step is its `prompt` column when logged (wrapped in the model's chat markup
//! unless it already carries it), else [`template`]: the task, the last two (obs, action) pairs of
//! the trajectory and the current obs. See docs/training.md.

use anyhow::{bail, Context, Result};
use credit_core::schema::columns::{ACTION, LOGPROB, PROMPT, TASK};
use credit_core::StepBatch;
use credit_train::load::{ChatFormat, Tokenizer};
use credit_train::Sample;

/// Steps of history in a templated prompt.
const HISTORY: usize = 2;

/// One sample per row with an action, in input order: (samples, rows skipped for lack of one).
pub fn samples(
    batch: &StepBatch,
    advantage: &[f64],
    tokenizer: &Tokenizer,
    max_prompt: usize,
    limit: Option<usize>,
) -> Result<(Vec<Sample>, usize)> {
    let Some(actions) = batch.texts(ACTION) else {
        bail!("the logs have no `action` column (or text_actions, response, output): training needs each step's action text");
    };
    let (prompts, obs, tasks, logprobs) = (
        batch.texts(PROMPT),
        batch.policy_texts(),
        batch.texts(TASK),
        batch.opt_f64s(LOGPROB),
    );
    let mut out = Vec::new();
    let mut skipped = 0;
    for row in 0..batch.len() {
        if limit.is_some_and(|n| out.len() >= n) {
            break;
        }
        let Some(action) = actions.get(row) else {
            skipped += 1;
            continue;
        };
        let a = advantage.get(row).copied().unwrap_or(f64::NAN);
        if !a.is_finite() {
            bail!("row {row}: the advantage is {a}, not a finite number");
        }
        let prompt = match prompts.and_then(|p| p.get(row)) {
            Some(p) if tokenizer.chat.is_rendered(p) => p.to_string(),
            Some(p) => render(tokenizer.chat, p),
            None => {
                let traj = &batch.trajs[batch.traj_of_row[row] as usize];
                let k = batch.position[row] as usize;
                let history: Vec<(Option<&str>, Option<&str>)> = traj.rows
                    [k.saturating_sub(HISTORY)..k]
                    .iter()
                    .map(|&r| (obs.and_then(|o| o.get(r as usize)), actions.get(r as usize)))
                    .collect();
                render(
                    tokenizer.chat,
                    &template(
                        tasks.and_then(|t| t.get(row)),
                        &history,
                        obs.and_then(|o| o.get(row)),
                    ),
                )
            }
        };
        let (input_ids, action_start) = tokenizer
            .encode_step(&prompt, action, max_prompt)
            .with_context(|| format!("tokenizing row {row}"))?;
        let old_logprob = logprobs.and_then(|c| c.get(row)).map(|lp| lp as f32);
        out.push(Sample {
            input_ids,
            action_start,
            advantage: a as f32,
            old_logprob,
            old_token_logprobs: None,
        });
    }
    Ok((out, skipped))
}

/// The user turn in the model's chat markup; plain text ends with a newline so the action
/// starts on its own line.
fn render(chat: ChatFormat, body: &str) -> String {
    match chat {
        ChatFormat::Plain => format!("{body}\n"),
        markup => markup.wrap_user(body),
    }
}

/// The prompt of a step whose producer did not log one:
///
/// ```text
/// Task: {task}
///
/// Recent steps:
/// Observation: {obs_{t-2}}
/// Action: {action_{t-2}}
/// Observation: {obs_{t-1}}
/// Action: {action_{t-1}}
///
/// Current observation:
/// {obs_t}
///
/// What is your next action?
/// ```
///
/// Lines whose column is not logged are left out.
pub fn template(
    task: Option<&str>,
    history: &[(Option<&str>, Option<&str>)],
    obs: Option<&str>,
) -> String {
    let mut s = String::new();
    if let Some(task) = task {
        s.push_str(&format!("Task: {task}\n\n"));
    }
    if !history.is_empty() {
        s.push_str("Recent steps:\n");
        for (o, a) in history {
            if let Some(o) = o {
                s.push_str(&format!("Observation: {o}\n"));
            }
            if let Some(a) = a {
                s.push_str(&format!("Action: {a}\n"));
            }
        }
        s.push('\n');
    }
    if let Some(obs) = obs {
        s.push_str(&format!("Current observation:\n{obs}\n\n"));
    }
    s.push_str("What is your next action?");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_shows_task_history_and_current_obs() {
        let got = template(
            Some("find the key"),
            &[(Some("hall"), Some("go north")), (None, Some("look"))],
            Some("a room"),
        );
        assert_eq!(
            got,
            "Task: find the key\n\nRecent steps:\nObservation: hall\nAction: go north\nAction: look\n\nCurrent observation:\na room\n\nWhat is your next action?"
        );
        assert_eq!(template(None, &[], None), "What is your next action?");
        assert_eq!(
            render(ChatFormat::ChatMl, "hi"),
            "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(render(ChatFormat::Plain, "hi"), "hi\n");
    }
}
