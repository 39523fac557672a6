//! `credit compare [PATHS] --methods grpo,gigpo,proxmo`: how differently estimators credit the
//! same steps.

use super::{reading, run_plan, write_plots, Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::Result;
use credit_core::project::ProjectFile;
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
    #[command(flatten)]
    pub models: super::signals::SignalModels,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let project = ProjectFile::load(args.globals.config.as_deref())?;
    let plan = args
        .methods
        .plan(&args.globals, &project, credit_core::plan::COMPARE)?;
    let hisr = args.methods.hisr_params(&project)?;
    let fillers = args.models.load(&hisr)?;
    let json = args.globals.format == Format::Json;
    let read = super::inputs(&args.globals, &project, &args.models.paths())?;
    if let Some(dir) = &args.plots {
        credit_output::OutputDir::check(dir, "compare --plots", &read)?;
    }
    let run = run_plan(&args.globals, &project, plan, hisr)?;
    let finished = reading(&args.globals, |progress| {
        run.gather(
            &fillers,
            args.plots.is_some(),
            progress,
            |_, _, _| Ok(()),
            |_| Ok(()),
        )
    })?;
    let (gathered, notes) = (&finished.value, &finished.notes);
    let plan = &run.methods;
    let comparison = gathered.compare();
    let run_info = RunInfo::of(plan, notes);
    if let (Some(dir), Some(summary)) = (&args.plots, &gathered.summary) {
        let inputs = credit_report::Inputs {
            summary,
            comparison: Some(&comparison),
            advantages: &gathered.advantages,
            proxmo: plan.proxmo(),
            run: run_info.clone(),
            trends: None,
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
        outln!("{}", serde_json::to_string_pretty(&value)?);
    } else {
        for note in notes {
            eprintln!("note: {note}");
        }
        args.methods.say(&project, plan, &finished.report)?;
        out!("{}", text::sections(&sections::compare(&comparison)));
    }
    Ok(ExitCode::Ok)
}
