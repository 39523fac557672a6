//! `credit graph`'s drawing: which groups' state graphs to draw as the logs stream by (a named
//! group, every group, or the N largest), their DOT text, and the files: `<group>.dot`, plus SVG
//! and PNG drawn by Graphviz (`dot::render`), each written whole or not at all.

use crate::dot::{abridge, render, to_dot};
use crate::Error;
use credit_core::graph::GroupGraph;
use credit_core::StepBatch;
use std::hash::Hasher;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Which groups to draw.
pub enum Choice {
    Named(String),
    All,
    Largest(usize),
}

/// A group's graph, drawn.
pub struct Drawn {
    /// Its first row's place in the input (ties in size go to the earlier group).
    first_seq: u64,
    pub id: String,
    pub iteration: Option<i64>,
    steps: usize,
    /// The DOT text.
    pub text: String,
}

/// What to draw of each window (shared by the windows drawn in parallel). `--top N` keeps the N
/// largest groups seen ([`Kept`]); a window only draws groups that could still enter them (at
/// least as large as the smallest kept).
pub struct Picker {
    choice: Choice,
    smallest_kept: AtomicUsize,
}

/// The groups kept as windows arrive in input order.
#[derive(Default)]
pub struct Kept {
    largest: Vec<Drawn>,
    /// The first few group ids seen, to name when a named group is missing.
    pub first_ids: Vec<String>,
}

impl Picker {
    pub fn new(choice: Choice) -> Picker {
        Picker {
            choice,
            smallest_kept: AtomicUsize::new(0),
        }
    }

    /// The graphs of a window's groups that may be drawn (in parallel across windows), coloured
    /// by `values` (the method `label`'s advantage per row); and the window's group ids.
    pub fn look(
        &self,
        batch: &StepBatch,
        seq: &[u64],
        values: &[f64],
        label: &str,
    ) -> (Vec<Drawn>, Vec<String>) {
        let floor = self.smallest_kept.load(Ordering::Relaxed);
        let first_seq = |g: usize| {
            let group = &batch.groups[g];
            seq[batch.trajs[group.trajs[0] as usize].rows[0] as usize]
        };
        let mut wanted: Vec<usize> = (0..batch.groups.len())
            .filter(|&g| {
                let group = &batch.groups[g];
                match &self.choice {
                    Choice::Named(id) => &group.id == id,
                    Choice::All => true,
                    Choice::Largest(_) => group.n_rows >= floor,
                }
            })
            .collect();
        if let Choice::Largest(n) = self.choice {
            // The N largest overall are among each window's N largest (same order: size, then
            // input order), so only those are drawn.
            wanted.sort_by_key(|&g| (std::cmp::Reverse(batch.groups[g].n_rows), first_seq(g)));
            wanted.truncate(n);
        }
        let drawn = wanted
            .into_iter()
            .map(|g| {
                let group = &batch.groups[g];
                let graph = GroupGraph::build(batch, g);
                Drawn {
                    first_seq: first_seq(g),
                    id: group.id.clone(),
                    iteration: group.iteration,
                    steps: group.n_rows,
                    text: to_dot(batch, g, &graph, values, label),
                }
            })
            .collect();
        let ids = batch.groups.iter().map(|g| g.id.clone()).collect();
        (drawn, ids)
    }
}

impl Kept {
    /// Takes a window's drawings in input order: those to write now (every one, unless only the
    /// N largest are wanted: those are kept until [`Kept::finish`]).
    pub fn take(&mut self, picker: &Picker, drawn: Vec<Drawn>, ids: Vec<String>) -> Vec<Drawn> {
        let room = 5usize.saturating_sub(self.first_ids.len());
        self.first_ids.extend(ids.into_iter().take(room));
        let Choice::Largest(n) = picker.choice else {
            return drawn;
        };
        self.largest.extend(drawn);
        // Largest first; ties in input order (a stable sort of groups by size).
        self.largest
            .sort_by_key(|d| (std::cmp::Reverse(d.steps), d.first_seq));
        self.largest.truncate(n);
        if self.largest.len() == n {
            let floor = self.largest.last().map_or(0, |d| d.steps);
            picker.smallest_kept.store(floor, Ordering::Relaxed);
        }
        Vec::new()
    }

    /// Forgets everything: the logs are read again from the start.
    pub fn restart(&mut self, picker: &Picker) {
        self.largest.clear();
        self.first_ids.clear();
        picker.smallest_kept.store(0, Ordering::Relaxed);
    }

    /// The N largest, once every window was taken (nothing for the other choices).
    pub fn finish(self) -> Vec<Drawn> {
        self.largest
    }
}

/// Writes a group's DOT file, and its SVG and PNG when `graphviz` (it is installed); returns the
/// paths written.
pub fn write(out: &Path, drawn: &Drawn, graphviz: bool) -> Result<Vec<PathBuf>, Error> {
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
