//! Segments of a trajectory: runs of consecutive turns that HISR rewards as one (spec-spa-hisr
//! B3), shared by the method, `analyze`'s segment statistics and the segment reward model.
//!
//! - `logged` (default): runs of equal `segment` ids along each trajectory (the paper's GPT-4o
//!   segmentation). Without a `segment` column every turn is its own segment; a trajectory whose
//!   ids are missing or come back after another id (not contiguous) falls back to one segment per
//!   turn, with a note.
//! - `per_turn`: every turn is its own segment.
//! - `rule`: a heuristic for ALFWorld-style commands, *not* the paper's segmentation. A segment
//!   closes after each executed state-changing action (first word take, put, clean, heat, cool,
//!   toggle, use or open), so the navigation and failed turns before it join its segment; the
//!   turns after the last one form the final segment.

use crate::batch::{StepBatch, Traj};
use crate::error::{Error, Result};
use crate::methods::step_rl::StepRl;
use crate::schema::columns::{ACTION, SEGMENT};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::ops::Range;

/// Where the segments come from (see the module's doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Segments {
    /// The `segment` column; one segment per turn without it.
    Logged,
    /// One segment per turn.
    PerTurn,
    /// A segment closes after each executed state-changing action (a heuristic).
    Rule,
}

/// First words of the commands that change ALFWorld's state (`rule` segments).
pub(crate) const STATE_CHANGING: &[&str] = &[
    "take", "put", "clean", "heat", "cool", "toggle", "use", "open",
];

/// Each trajectory's segments, as ranges of positions in its `rows` (contiguous, covering them).
#[derive(Clone, Debug)]
pub struct Segmentation {
    /// Per trajectory, in batch order.
    pub ranges: Vec<Vec<Range<usize>>>,
    /// What made them: `logged` only when the `segment` column was read.
    pub segmenter: Segments,
    /// Trajectories whose logged ids were missing or not contiguous: one segment per turn.
    pub fallback: usize,
}

/// The segments of every trajectory by `segments` (see the module's doc); `rule` also reads
/// `rl`'s grounding (`grounding_pattern`). HISR, `analyze`'s segment statistics and the segment
/// reward model all segment through here.
pub fn segmentation(batch: &StepBatch, segments: Segments, rl: &StepRl) -> Result<Segmentation> {
    let per_turn =
        |traj: &Traj| -> Vec<Range<usize>> { (0..traj.rows.len()).map(|k| k..k + 1).collect() };
    Ok(match (segments, batch.opt_i64s(SEGMENT)) {
        (Segments::Logged, Some(ids)) => {
            let mut fallback = 0;
            let ranges = batch
                .trajs
                .iter()
                .map(|traj| {
                    runs(traj.rows.iter().map(|&r| ids.get(r as usize))).unwrap_or_else(|| {
                        fallback += 1;
                        per_turn(traj)
                    })
                })
                .collect();
            Segmentation {
                ranges,
                segmenter: Segments::Logged,
                fallback,
            }
        }
        (Segments::Logged | Segments::PerTurn, _) => Segmentation {
            ranges: batch.trajs.iter().map(per_turn).collect(),
            segmenter: Segments::PerTurn,
            fallback: 0,
        },
        (Segments::Rule, _) => Segmentation {
            ranges: rule_segments(batch, rl)?,
            segmenter: Segments::Rule,
            fallback: 0,
        },
    })
}

/// `rule` segments: each closes after an executed state-changing action; the rest form the last.
fn rule_segments(batch: &StepBatch, rl: &StepRl) -> Result<Vec<Vec<Range<usize>>>> {
    let actions = batch.texts(ACTION).ok_or_else(|| {
        Error::Param(
            "`hisr.segments = rule` reads the commands from an `action` column, which the logs lack (`logged` or `per_turn` need none)".into(),
        )
    })?;
    let valid = batch.valid();
    let failed = rl.feedback_failed(batch);
    let closes = |r: usize| {
        valid[r]
            && !failed[r]
            && actions
                .get(r)
                .and_then(command_verb)
                .is_some_and(|verb| STATE_CHANGING.contains(&verb.as_str()))
    };
    Ok(batch
        .trajs
        .iter()
        .map(|traj| {
            let mut ranges = Vec::new();
            let mut start = 0;
            for (k, &r) in traj.rows.iter().enumerate() {
                if closes(r as usize) {
                    ranges.push(start..k + 1);
                    start = k + 1;
                }
            }
            if start < traj.rows.len() {
                ranges.push(start..traj.rows.len());
            }
            ranges
        })
        .collect())
}

/// The first word of the command in an action, lower-cased: the command is inside
/// `<action>…</action>` or `\boxed{…}` when present, else after the last `Action:` (ReAct), else
/// the whole text.
pub(crate) fn command_verb(action: &str) -> Option<String> {
    let text = action.to_lowercase();
    let command = between(&text, "<action>", "</action>")
        .or_else(|| between(&text, "\\boxed{", "}"))
        .or_else(|| text.rfind("action:").map(|i| &text[i + "action:".len()..]))
        .unwrap_or(&text);
    command
        .split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric()))
        .find(|w| !w.is_empty())
        .map(str::to_string)
}

/// The text after the first `open` up to the next `close` (or the end).
fn between<'a>(text: &'a str, open: &str, close: &str) -> Option<&'a str> {
    let rest = &text[text.find(open)? + open.len()..];
    Some(rest.find(close).map_or(rest, |end| &rest[..end]))
}

/// Runs of equal ids; `None` when an id is missing or comes back after another one.
fn runs(ids: impl Iterator<Item = Option<i64>>) -> Option<Vec<Range<usize>>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    let mut seen = BTreeSet::new();
    let mut current = None;
    for (k, id) in ids.enumerate() {
        let id = id?;
        if current == Some(id) {
            if let Some(last) = out.last_mut() {
                last.end = k + 1;
            }
        } else {
            if !seen.insert(id) {
                return None;
            }
            out.push(k..k + 1);
            current = Some(id);
        }
    }
    Some(out)
}
