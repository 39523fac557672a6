//! `credit graph [PATHS] --group ID|--all|--top N --color-by METHOD --out DIR`: GraphGPO state
//! graphs as Graphviz DOT (nodes labelled by distance to goal, edges coloured by a method's mean
//! advantage, with a legend), plus SVG and PNG when Graphviz `dot` is installed.

use super::{Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::{bail, Context, Result};
use credit_core::ingest::Event;
use credit_core::project::ProjectFile;
use credit_output::{Commit, OutputDir, Stale};
use credit_report::dot::abridge;
use credit_report::graphs::{self, Choice, Kept, Picker};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
// The graph is coloured by one method, `--color-by`; a `--methods` list would be ignored.
#[command(mut_arg("methods", |a| a.hide(true)))]
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
    /// Draw the N most telling groups [default: 1 when no group is chosen]: those with both a
    /// success and a failure first, then those whose credit departs most from GRPO's (mean
    /// |method − GRPO| a step), then the larger; each one's reason is printed.
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

pub fn run(args: Args) -> Result<ExitCode> {
    let project = ProjectFile::load(args.globals.config.as_deref())?;
    let mut method_args = args.methods;
    if let Some(list) = method_args.methods.replace(args.color_by.clone()) {
        bail!("`credit graph` colours its edges by one method: use `--color-by METHOD`, not `--methods {list}`");
    }
    let plan = method_args.plan(&args.globals, &project, &args.color_by)?;
    // GRPO under the same preset and settings: the trajectory outcome's credit, which `--top`
    // measures each group's step credit against.
    method_args.methods = Some("grpo".into());
    let outcome_method = method_args
        .plan(&args.globals, &project, "grpo")?
        .methods
        .remove(0);
    let hisr = method_args.hisr_params(&project)?;
    let run = super::run_plan(&args.globals, &project, plan, hisr)?;
    let method = &run.methods.methods[0];
    let choice = match (&args.group, args.all) {
        (Some(id), _) => Choice::Named(id.clone()),
        (None, true) => Choice::All,
        (None, false) => Choice::Top(args.top.unwrap_or(1)),
    };
    let read = super::inputs(&args.globals, &project, &[])?;
    let out = OutputDir::open(&args.out, "graph", &read, Commit::Whole)?;
    let dot_available = credit_report::dot::available();
    let picker = Picker::new(choice);
    let mut kept = Kept::default();
    let mut written = Vec::new();
    super::reading(&args.globals, |progress| {
        run.windows(
            run.methods.unit(),
            progress,
            |window| {
                let advantage = method
                    .advantages(&window.batch)
                    .with_context(|| format!("computing {}", method.label()))?;
                let outcome = outcome_method
                    .advantages(&window.batch)
                    .context("computing grpo")?;
                Ok(picker.look(
                    &window.batch,
                    &window.seq,
                    advantage.advantage(),
                    outcome.advantage(),
                    method.label(),
                ))
            },
            |event| {
                match event {
                    Event::Window(_, (drawn, ids)) => {
                        for d in kept.take(&picker, drawn, ids) {
                            written.extend(graphs::write(&args.out, &d, dot_available)?);
                        }
                    }
                    Event::Restart => {
                        written.clear();
                        kept.restart();
                    }
                }
                Ok(())
            },
        )
    })?;
    let first_ids: Vec<String> = kept.first_ids.iter().map(|i| abridge(i, 80)).collect();
    // `--top`'s groups, most telling first, with why each was picked.
    let mut picked = Vec::new();
    for d in kept.finish() {
        written.extend(graphs::write(&args.out, &d, dot_available)?);
        picked.push(serde_json::json!({"group": d.id, "iteration": d.iteration, "why": d.why}));
    }
    out.finish(Stale::Keep)?;
    if let (Some(id), true) = (&args.group, written.is_empty()) {
        bail!(
            "no group `{}` in the logs (groups include: {})",
            abridge(id, 80),
            first_ids.join(", ")
        );
    }
    let note = (!dot_available).then_some(
        "Graphviz `dot` is not installed: wrote DOT files only (install graphviz for SVG and PNG)",
    );
    match args.globals.format {
        Format::Json => outln!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({ "written": written, "picked": picked, "note": note })
            )?
        ),
        Format::Text => {
            for p in &picked {
                let iteration = p["iteration"]
                    .as_i64()
                    .map_or(String::new(), |i| format!(" (iteration {i})"));
                let group = p["group"].as_str().unwrap_or_default();
                outln!(
                    "group {}{iteration}: {}",
                    abridge(group, 60),
                    p["why"].as_str().unwrap_or_default()
                );
            }
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
