//! `credit compare [PATHS] --methods grpo,gigpo,proxmo`: how differently estimators credit the
//! same steps.

use super::{reading, say_methods, write_plots, Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::Result;
use credit_report::{compared::Compared, render::text};

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
    let compared = Compared::new(run, finished.value, finished.notes)?;
    if let (Some(dir), Some(inputs)) = (&args.plots, compared.inputs(run)) {
        let scope = credit_report::Scope::Compare;
        write_plots(dir, "compare --plots", &read, &inputs, scope, json)?;
    }
    if json {
        outln!("{}", serde_json::to_string_pretty(&compared.json()?)?);
    } else {
        for note in &compared.notes {
            eprintln!("note: {note}");
        }
        say_methods(&resolved, &finished.report)?;
        out!("{}", text::sections(&compared.sections()));
    }
    Ok(ExitCode::Ok)
}
