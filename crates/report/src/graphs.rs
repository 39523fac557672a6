//! `credit graph`'s drawing: which groups' state graphs to draw as the logs stream by (a named
//! group, every group, or the N most telling), their DOT text, and the files: `<group>.dot`, plus
//! SVG and PNG drawn by Graphviz (`dot::render`), each written whole or not at all.

use crate::dot::{abridge, render, to_dot};
use crate::Error;
use credit_core::graph::GroupGraph;
use credit_core::ingest::Event;
use credit_core::run::{Finished, Logged, OnProgress, RunPlan};
use credit_core::wording::{num, plural};
use credit_core::StepBatch;
use std::cmp::Ordering;
use std::hash::Hasher;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Which groups to draw.
#[derive(Clone)]
pub enum Choice {
    Named(String),
    All,
    /// The N most telling groups ([`Telling`]).
    Top(usize),
}

/// How much a group's graph shows, in the order `--top` picks: groups with both a success and a
/// failure first (their graph has paths to the goal to hold failures against), then groups that
/// always succeeded, then those that never did (every state labelled `no path`); then those whose step credit departs most from the
/// trajectory outcome's (mean |method − GRPO| over its steps: where step-level credit says
/// something GRPO cannot), then the larger, then the earlier.
#[derive(Clone, Copy, Debug)]
struct Telling {
    /// 2: successes and failures, 1: only successes, 0: no success.
    outcomes: u8,
    /// Trajectories that succeeded, of how many.
    successes: usize,
    trajectories: usize,
    departure: f64,
    steps: usize,
    first_seq: u64,
}

impl Telling {
    fn order(&self, other: &Telling) -> Ordering {
        other
            .outcomes
            .cmp(&self.outcomes)
            .then_with(|| other.departure.total_cmp(&self.departure))
            .then_with(|| other.steps.cmp(&self.steps))
            .then_with(|| self.first_seq.cmp(&other.first_seq))
    }

    /// Why the group was picked, in words.
    fn why(&self, method: &str) -> String {
        let outcomes = match self.successes {
            0 => "no trajectory succeeded (every state reads `no path`)".to_string(),
            s if s == self.trajectories => "every trajectory succeeded".to_string(),
            s => format!(
                "{s} of {} succeeded",
                plural(self.trajectories, "trajectory")
            ),
        };
        format!(
            "{outcomes}; {method} departs from GRPO by {} a step on average; {}",
            num(self.departure, 3),
            plural(self.steps, "step")
        )
    }
}

/// A group's graph, drawn.
pub struct Drawn {
    telling: Telling,
    pub id: String,
    pub iteration: Option<i64>,
    /// Why `--top` picked it (empty for the other choices).
    pub why: String,
    /// The DOT text.
    pub text: String,
}

/// What to draw of each window (shared by the windows drawn in parallel).
struct Picker {
    choice: Choice,
}

/// The groups kept as windows arrive in input order.
#[derive(Default)]
struct Kept {
    top: Vec<Drawn>,
    /// The first few group ids seen, to name when a named group is missing.
    first_ids: Vec<String>,
}

impl Picker {
    fn new(choice: Choice) -> Picker {
        Picker { choice }
    }

    /// The graphs of a window's groups that may be drawn (in parallel across windows), coloured
    /// by `values` (the method `label`'s advantage per row; `outcome` is GRPO's, which `--top`
    /// measures it against); and the window's group ids.
    fn look(
        &self,
        batch: &StepBatch,
        seq: &[u64],
        values: &[f64],
        outcome: &[f64],
        label: &str,
    ) -> (Vec<Drawn>, Vec<String>) {
        let telling = |g: usize| {
            let group = &batch.groups[g];
            let successes = group
                .trajs
                .iter()
                .filter(|&&t| batch.trajs[t as usize].success)
                .count();
            let rows: Vec<u32> = batch.group_rows(g).collect();
            let departure = rows
                .iter()
                .map(|&r| (values[r as usize] - outcome[r as usize]).abs())
                .sum::<f64>()
                / rows.len().max(1) as f64;
            Telling {
                outcomes: match successes {
                    0 => 0,
                    s if s == group.trajs.len() => 1,
                    _ => 2,
                },
                successes,
                trajectories: group.trajs.len(),
                departure,
                steps: group.n_rows,
                first_seq: seq[rows[0] as usize],
            }
        };
        let mut wanted: Vec<(usize, Telling)> = (0..batch.groups.len())
            .filter(|&g| match &self.choice {
                Choice::Named(id) => batch.groups[g].id == id,
                Choice::All | Choice::Top(_) => true,
            })
            .map(|g| (g, telling(g)))
            .collect();
        if let Choice::Top(n) = self.choice {
            // The N most telling overall are among each window's N most telling: only those are
            // drawn.
            wanted.sort_by(|a, b| a.1.order(&b.1));
            wanted.truncate(n);
        }
        let drawn = wanted
            .into_iter()
            .map(|(g, telling)| {
                let group = &batch.groups[g];
                let graph = GroupGraph::build(batch, g);
                Drawn {
                    telling,
                    id: group.id.to_string(),
                    iteration: group.iteration,
                    why: match self.choice {
                        Choice::Top(_) => telling.why(label),
                        _ => String::new(),
                    },
                    text: to_dot(batch, g, &graph, values, label),
                }
            })
            .collect();
        let ids = batch.groups.iter().map(|g| g.id.to_string()).collect();
        (drawn, ids)
    }
}

impl Kept {
    /// Takes a window's drawings in input order: those to write now (every one, unless only the
    /// N most telling are wanted: those are kept until [`Kept::finish`]).
    fn take(&mut self, picker: &Picker, drawn: Vec<Drawn>, ids: Vec<String>) -> Vec<Drawn> {
        let room = 5usize.saturating_sub(self.first_ids.len());
        self.first_ids.extend(ids.into_iter().take(room));
        let Choice::Top(n) = picker.choice else {
            return drawn;
        };
        self.top.extend(drawn);
        self.top.sort_by(|a, b| a.telling.order(&b.telling));
        self.top.truncate(n);
        Vec::new()
    }

    /// Forgets everything: the logs are read again from the start.
    fn restart(&mut self) {
        self.top.clear();
        self.first_ids.clear();
    }

    /// The N most telling, once every window was taken (nothing for the other choices).
    fn finish(self) -> Vec<Drawn> {
        self.top
    }
}

/// What `credit graph` drew: the files written, `--top`'s groups (most telling first, with why
/// each was picked), and the first group ids seen (to name when a named group is missing).
#[derive(Default)]
pub struct Drawing {
    pub written: Vec<PathBuf>,
    pub picked: Vec<Picked>,
    pub first_ids: Vec<String>,
}

impl Drawing {
    /// The error of a named group (`choice`) the logs lack, naming the first groups they have.
    pub fn missing(&self, choice: &Choice) -> Option<String> {
        match choice {
            Choice::Named(id) if self.written.is_empty() => Some(format!(
                "no group `{}` in the logs (groups include: {})",
                abridge(id, 80),
                self.first_ids.join(", ")
            )),
            _ => None,
        }
    }

    /// `credit graph --format json`'s object (`note`: the run's note, if any).
    pub fn json(&self, note: Option<&str>) -> serde_json::Value {
        serde_json::json!({ "written": self.written, "picked": self.picked, "note": note })
    }

    /// What `credit graph` prints: why each group was picked, then the files written.
    pub fn text(&self) -> String {
        let picked = self.picked.iter().map(|p| {
            let iteration = p
                .iteration
                .map_or(String::new(), |i| format!(" (iteration {i})"));
            format!("group {}{iteration}: {}\n", abridge(&p.group, 60), p.why)
        });
        let written = self
            .written
            .iter()
            .map(|path| format!("wrote {}\n", path.display()));
        picked.chain(written).collect()
    }
}

/// The note of a drawing without Graphviz `dot`.
pub const DOT_MISSING: &str =
    "Graphviz `dot` is not installed: wrote DOT files only (install graphviz for SVG and PNG)";

/// A group `--top` picked.
#[derive(serde::Serialize)]
pub struct Picked {
    pub group: String,
    pub iteration: Option<i64>,
    pub why: String,
}

/// Draws the groups of `choice` into the folder `out` (which the caller holds open) as the logs
/// of `run` stream by: the run's first method colours the edges, its last (GRPO, the trajectory
/// outcome's credit) is what `--top` measures each group's step credit against.
pub fn draw<E: From<credit_core::Error> + From<Error> + Send>(
    run: &RunPlan,
    choice: Choice,
    out: &Path,
    graphviz: bool,
    progress: OnProgress,
) -> Result<Finished<Drawing>, E> {
    let label = run.methods.methods.first().map_or("", |m| m.label());
    let outcome = run.methods.methods.len().saturating_sub(1);
    let picker = Picker::new(choice);
    let mut kept = Kept::default();
    let mut written = Vec::new();
    let finished = run.windows(
        run.methods.unit(),
        progress,
        |window| -> Result<_, E> {
            let computed = run.compute(&Logged, window)?;
            Ok(picker.look(
                &computed.batch,
                &window.seq,
                computed.results[0].advantage(),
                computed.results[outcome].advantage(),
                label,
            ))
        },
        |event| {
            match event {
                Event::Window(_, (drawn, ids)) => {
                    for d in kept.take(&picker, drawn, ids) {
                        written.extend(write(out, &d, graphviz)?);
                    }
                }
                Event::Restart => {
                    written.clear();
                    kept.restart();
                }
            }
            Ok(())
        },
    )?;
    let first_ids = kept.first_ids.iter().map(|i| abridge(i, 80)).collect();
    let mut picked = Vec::new();
    for d in kept.finish() {
        written.extend(write(out, &d, graphviz)?);
        picked.push(Picked {
            group: d.id,
            iteration: d.iteration,
            why: d.why,
        });
    }
    Ok(Finished {
        value: Drawing {
            written,
            picked,
            first_ids,
        },
        notes: finished.notes,
        report: finished.report,
    })
}

/// Writes a group's DOT file, and its SVG and PNG when `graphviz` (it is installed); returns the
/// paths written.
fn write(out: &Path, drawn: &Drawn, graphviz: bool) -> Result<Vec<PathBuf>, Error> {
    let name = file_stem(&drawn.id, drawn.iteration);
    let dot_path = out.join(format!("{name}.dot"));
    credit_output::write_file(&dot_path, |f| f.write_all(drawn.text.as_bytes()))?;
    let mut written = vec![dot_path];
    if graphviz {
        let what = format!(
            "the state graph of group `{}`{}",
            abridge(&drawn.id, 80),
            drawn
                .iteration
                .map_or(String::new(), |i| format!(" (iteration {i})"))
        );
        for format in ["svg", "png"] {
            let target = out.join(format!("{name}.{format}"));
            let drawing = render(&drawn.text, format, &what)?;
            credit_output::write_file(&target, |f| f.write_all(&drawing))?;
            written.push(target);
        }
    }
    Ok(written)
}

/// A file name for a group: its id with every character outside `[A-Za-z0-9_-]` replaced by `_`
/// (64 at most), plus a hash of the id whenever that changed it, so that `a/b`, `a_b` and `a:b`
/// get three different files.
fn file_stem(id: &str, iteration: Option<i64>) -> String {
    let safe: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(64)
        .collect();
    let safe = if safe == id {
        safe
    } else {
        // FNV-1a: stable across runs and platforms.
        let mut hash = fnv::FnvHasher::default();
        hash.write(id.as_bytes());
        format!("{safe}-{:08x}", hash.finish() >> 32)
    };
    match iteration {
        Some(i) => format!("group-{safe}-it{i}"),
        None => format!("group-{safe}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn file_names_of_different_ids_differ() {
        let names: Vec<String> = ["a/b", "a_b", "a:b", "a b"]
            .iter()
            .map(|id| super::file_stem(id, None))
            .collect();
        assert_eq!(names[1], "group-a_b");
        // The hash part is FNV-1a's, as before the `fnv` crate: the files keep their names.
        assert_eq!(names[0], "group-a_b-e620c319");
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 4, "{names:?}");
    }
}
