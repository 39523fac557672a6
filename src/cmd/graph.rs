//! `credit graph [PATHS] --group ID|--all|--top N --color-by METHOD --out DIR`: GraphGPO state
//! graphs as Graphviz DOT (nodes labelled by distance to goal, edges coloured by a method's mean
//! advantage, with a legend), plus SVG and PNG when Graphviz `dot` is installed.

use super::{Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::{bail, Result};
use credit_output::{Commit, OutputDir, Stale};
use credit_report::graphs::{self, Choice};
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
    if let Some(list) = &args.methods.methods {
        bail!("`credit graph` colours its edges by one method: use `--color-by METHOD`, not `--methods {list}`");
    }
    let method = args.color_by.trim();
    if method.contains(',') || matches!(method, "all" | "verl") {
        bail!(
            "`--color-by {method}`: the edges are coloured by one method, e.g. `--color-by gigpo`"
        );
    }
    // GRPO under the same preset and settings beside it: the trajectory outcome's credit, which
    // `--top` measures each group's step credit against (once, when it colours the edges too).
    let mut request = args.methods.request(&args.globals, &[]);
    request.methods = Some(format!("{method},grpo"));
    let resolved = request.resolve(Some("grpo"))?;
    let run = &resolved.run;
    let choice = match (&args.group, args.all) {
        (Some(id), _) => Choice::Named(id.clone()),
        (None, true) => Choice::All,
        (None, false) => Choice::Top(args.top.unwrap_or(1)),
    };
    let read = resolved.inputs(&request)?;
    let out = OutputDir::open(&args.out, "graph", &read, Commit::Whole)?;
    let dot_available = credit_report::dot::available();
    let drawing = super::reading(&args.globals, |progress| {
        graphs::draw(run, choice.clone(), &args.out, dot_available, progress)
    })?
    .value;
    // Said before the folder is finished: a run that drew nothing leaves no folder it created.
    if let Some(missing) = drawing.missing(&choice) {
        bail!(missing);
    }
    out.finish(Stale::Keep)?;
    let note = (!dot_available).then_some(graphs::DOT_MISSING);
    match args.globals.format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&drawing.json(note))?),
        Format::Text => {
            out!("{}", drawing.text());
            if let Some(note) = note {
                eprintln!("note: {note}");
            }
        }
    }
    Ok(ExitCode::Ok)
}
