//! `credit compare [PATHS] --methods grpo,gigpo,proxmo`: how differently estimators credit the
//! same steps.

use super::{reading, say_methods, write_plots, Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::Result;
use credit_report::{render::text, sections, RunInfo};

#[derive(Debug, clap::Args)]
#[command(mut_arg("methods", |a| super::methods_help(a, credit_core::plan::COMPARE)))]
pub struct Args {
    #[command(flatten)]
    pub globals: Globals,
    #[command(flatten)]
    pub methods: MethodArgs,
    /// Also draw the comparison's figures (PNG and SVG) into this folder.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<std::path::PathBuf>,
    /// Score every method against this one: `oracle` (the empirical-MDP advantage, or a logged
    /// `oracle_advantage`) or `logged` (the trainer's own); added to the run when not among
    /// `--methods`.
    ///
    /// Per method, over all rows: Spearman's ρ, sign accuracy, leakage and the cosine of the
    /// tabular policy gradients, with the reference's coverage (docs/methods.md).
    #[arg(long, value_name = "METHOD")]
    pub against: Option<String>,
    #[command(flatten)]
    pub models: super::signals::SignalModels,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let mut request = args.methods.request(&args.globals, &args.models.paths());
    request.against = args.against.clone();
    let resolved = request.resolve(Some(credit_core::plan::COMPARE))?;
    let run = &resolved.run;
    let fillers = args.models.load(&run.hisr)?;
    let json = args.globals.format == Format::Json;
    let read = resolved.inputs(&request)?;
    if let Some(dir) = &args.plots {
        credit_output::OutputDir::check(dir, "compare --plots", &read)?;
    }
    let finished = reading(&args.globals, |progress| {
        run.gather(
            &fillers,
            args.plots.is_some(),
            progress,
            |_, _, _| Ok(()),
            |_| Ok(()),
        )
    })?;
    let (gathered, mut notes) = (&finished.value, finished.notes.clone());
    let plan = &run.methods;
    let comparison = gathered.compare();
    let scored = run.against(gathered)?;
    let against = scored.map(|(scores, note)| {
        notes.extend(note);
        scores
    });
    let notes = &notes;
    let run_info = RunInfo::of(plan, notes);
    if let (Some(dir), Some(summary)) = (&args.plots, &gathered.summary) {
        let inputs = credit_report::Inputs {
            summary,
            comparison: Some(&comparison),
            advantages: &gathered.advantages,
            proxmo: plan.proxmo(),
            run: run_info.clone(),
            trends: None,
            against: against.as_ref(),
        };
        write_plots(
            dir,
            "compare --plots",
            &read,
            &inputs,
            credit_report::Scope::Compare,
            json,
        )?;
    }
    if json {
        let mut value = serde_json::to_value(&comparison)?;
        value["metadata"] = serde_json::to_value(&run_info)?;
        if let Some(against) = &against {
            value["against"] = serde_json::to_value(against)?;
        }
        outln!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        for note in notes {
            eprintln!("note: {note}");
        }
        say_methods(&resolved, &finished.report)?;
        let mut shown = sections::compare(&comparison);
        shown.extend(against.as_ref().map(sections::compare::against));
        out!("{}", text::sections(&shown));
    }
    Ok(ExitCode::Ok)
}
