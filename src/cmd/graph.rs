//! `credit graph [PATHS] --group ID|--all|--top N --color-by METHOD --out DIR`: GraphGPO state
//! graphs as Graphviz DOT (nodes labelled by distance to goal, edges coloured by a method's mean
//! advantage, with a legend), plus SVG and PNG when Graphviz `dot` is installed.

use super::{Format, Globals, MethodArgs};
use crate::config::ProjectFile;
use crate::exit::ExitCode;
use crate::stage::Stage;
use anyhow::{anyhow, bail, Context, Result};
use credit_core::graph::GroupGraph;
use credit_core::ingest::Event;
use credit_output::{OutputDir, Stale};
use credit_report::dot::{abridge, stderr_head, to_dot};
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub globals: Globals,
    #[command(flatten)]
    pub methods: MethodArgs,
    /// The group to draw (its `group_id`; every iteration's group of that id).
    #[arg(long, value_name = "ID", conflicts_with_all = ["all", "top"])]
    pub group: Option<String>,
    /// Draw every group.
    #[arg(long)]
    pub all: bool,
    /// Draw the N largest groups (by steps) [default: 1 when no group is chosen].
    #[arg(long, value_name = "N")]
    pub top: Option<usize>,
    /// The method whose advantage colours the edges.
    #[arg(long, value_name = "METHOD", default_value = "graphgpo")]
    pub color_by: String,
    /// Output folder: new, empty, or one credit graph wrote before (never a folder of other
    /// files, nor one holding or inside the logs).
    #[arg(short = 'o', long, value_name = "DIR")]
    pub out: PathBuf,
}

/// Which groups to draw.
enum Choice {
    Named(String),
    All,
    Largest(usize),
}

/// A group's graph, drawn: (its first row's place in the input, id, iteration, steps, DOT text).
type Drawn = (u64, String, Option<i64>, usize, String);

pub fn run(args: Args) -> Result<ExitCode> {
    let project = ProjectFile::load(args.globals.config.as_deref())?;
    let mut method_args = args.methods;
    method_args.methods = Some(args.color_by.clone());
    let plan = method_args.plan(&project, &args.color_by)?;
    let hisr = method_args.hisr_params(&project)?;
    let run = super::run_plan(&args.globals, &project, plan, hisr)?;
    let method = &run.methods.methods[0];
    let choice = match (&args.group, args.all) {
        (Some(id), _) => Choice::Named(id.clone()),
        (None, true) => Choice::All,
        (None, false) => Choice::Largest(args.top.unwrap_or(1)),
    };
    let read = super::inputs(&args.globals, &project, &[])?;
    let out = OutputDir::open(&args.out, "graph", &read)?;
    let dot_available = credit_report::dot::available();

    // `--top N` keeps the N largest groups seen so far; a window only draws groups that could
    // still enter them (at least as large as the smallest kept).
    let smallest_kept = std::sync::atomic::AtomicUsize::new(0);
    let mut largest: Vec<Drawn> = Vec::new();
    let mut first_ids: Vec<String> = Vec::new();
    let mut written = Vec::new();
    super::reading(&args.globals, |progress| {
        run.windows(run.methods.unit(), progress, |window| {
            let batch = &window.batch;
            let advantage = method
                .advantages(batch)
                .with_context(|| format!("computing {}", method.label()))?;
            let values = advantage.advantage();
            let floor = smallest_kept.load(std::sync::atomic::Ordering::Relaxed);
            let first_seq = |g: usize| {
                let group = &batch.groups[g];
                window.seq[batch.trajs[group.trajs[0] as usize].rows[0] as usize]
            };
            let mut wanted: Vec<usize> = (0..batch.groups.len())
                .filter(|&g| {
                    let group = &batch.groups[g];
                    match &choice {
                        Choice::Named(id) => &group.id == id,
                        Choice::All => true,
                        Choice::Largest(_) => group.n_rows >= floor,
                    }
                })
                .collect();
            if let Choice::Largest(n) = choice {
                // The N largest overall are among each window's N largest (same order: size,
                // then input order), so only those are drawn.
                wanted.sort_by_key(|&g| (std::cmp::Reverse(batch.groups[g].n_rows), first_seq(g)));
                wanted.truncate(n);
            }
            let drawn: Vec<Drawn> = wanted
                .into_iter()
                .map(|g| {
                    let group = &batch.groups[g];
                    let graph = GroupGraph::build(batch, g);
                    let text = to_dot(batch, g, &graph, values, method.label());
                    (
                        first_seq(g),
                        group.id.clone(),
                        group.iteration,
                        group.n_rows,
                        text,
                    )
                })
                .collect();
            let ids: Vec<String> = batch.groups.iter().map(|g| g.id.clone()).collect();
            Ok((drawn, ids))
        },
        |event| {
            match event {
                Event::Window(_, (drawn, ids)) => {
                    first_ids.extend(ids.into_iter().take(5usize.saturating_sub(first_ids.len())));
                    match choice {
                        Choice::Largest(n) => {
                            largest.extend(drawn);
                            // Largest first; ties in input order (a stable sort of groups by size).
                            largest.sort_by_key(|d| (std::cmp::Reverse(d.3), d.0));
                            largest.truncate(n);
                            if largest.len() == n {
                                let floor = largest.last().map_or(0, |d| d.3);
                                smallest_kept.store(floor, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                        _ => {
                            for d in drawn {
                                write_graph(&args.out, &d, dot_available, &mut written)?;
                            }
                        }
                    }
                }
                Event::Restart => {
                    written.clear();
                    largest.clear();
                    first_ids.clear();
                    smallest_kept.store(0, std::sync::atomic::Ordering::Relaxed);
                }
            }
            Ok(())
        },
    )
    })?;
    for d in &largest {
        write_graph(&args.out, d, dot_available, &mut written)?;
    }
    out.finish(Stale::Keep)?;
    if let (Choice::Named(id), true) = (&choice, written.is_empty()) {
        let first: Vec<String> = first_ids.iter().map(|i| abridge(i, 80)).collect();
        bail!(
            "no group `{}` in the logs (groups include: {})",
            abridge(id, 80),
            first.join(", ")
        );
    }
    let note = (!dot_available).then_some(
        "Graphviz `dot` is not installed: wrote DOT files only (install graphviz for SVG and PNG)",
    );
    match args.globals.format {
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "written": written, "note": note }))?
        ),
        Format::Text => {
            for path in &written {
                outln!("wrote {}", path.display());
            }
            if let Some(note) = note {
                eprintln!("note: {note}");
            }
        }
    }
    Ok(ExitCode::Ok)
}

/// Writes one group's DOT file (and SVG and PNG with Graphviz), listing what it wrote.
fn write_graph(
    out: &Path,
    (_, id, iteration, _, text): &Drawn,
    dot_available: bool,
    written: &mut Vec<PathBuf>,
) -> Result<()> {
    let name = file_stem(id, *iteration);
    let dot_path = out.join(format!("{name}.dot"));
    credit_output::write_file(&dot_path, |f| std::io::Write::write_all(f, text.as_bytes()))?;
    written.push(dot_path.clone());
    if dot_available {
        let drawing = || {
            Stage(format!(
                "drawing the state graph of group `{}`{}",
                abridge(id, 80),
                iteration.map_or(String::new(), |i| format!(" (iteration {i})"))
            ))
        };
        for format in ["svg", "png"] {
            let target = out.join(format!("{name}.{format}"));
            render(&dot_path, &target, format, drawing)?;
            written.push(target);
        }
    }
    Ok(())
}

/// Runs `dot` into the target, written whole or not at all; `dot`'s failures carry the `drawing`
/// stage.
fn render(dot_path: &Path, target: &Path, format: &str, drawing: impl Fn() -> Stage) -> Result<()> {
    credit_output::write_file_at(target, |tmp| -> Result<()> {
        let output = std::process::Command::new("dot")
            .arg(format!("-T{format}"))
            .arg("-o")
            .arg(tmp)
            .arg(dot_path)
            .output()
            .context("Graphviz `dot` could not be run")
            .with_context(&drawing)?;
        if !output.status.success() {
            return Err(anyhow!(
                "Graphviz `dot -T{format}` failed: {}",
                stderr_head(&output.stderr, output.status)
            )
            .context(drawing()));
        }
        Ok(())
    })
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
        let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
        });
        format!("{safe}-{:08x}", hash >> 32)
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
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 4, "{names:?}");
        assert!(names[0].starts_with("group-a_b-"));
    }
}
