//! `credit analyze [PATHS]`: what is in the logs, in one screen (or `--format json`).

use super::{reading, write_plots, Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::Result;
use credit_report::{render::text, sections};

#[derive(Debug, clap::Args)]
// The method flags are taken as every command takes them (users paste them across commands): the
// preset and `--set hisr.…` choose how the segment statistics segment the logs.
#[command(mut_arg("methods", |a| a.hide(true)))]
pub struct Args {
    #[command(flatten)]
    pub globals: Globals,
    #[command(flatten)]
    pub methods: MethodArgs,
    /// Also draw the analysis' figures (PNG and SVG) into this folder.
    #[arg(long, value_name = "DIR")]
    pub plots: Option<std::path::PathBuf>,
    /// Also group steps as verl-agent's GiGPO similarity groups do (`--set gigpo.similarity`) at
    /// these thresholds, and show how the singleton share falls as the threshold drops. Costs a
    /// string-similarity ratio per pair of distinct states in a group (minutes per million rows).
    #[arg(
        long,
        value_name = "THRESHOLDS",
        value_delimiter = ',',
        num_args = 0..,
        require_equals = true,
        default_missing_value = "0.95,0.9,0.8",
        value_parser = similarity_threshold
    )]
    pub similarity: Option<Vec<f64>>,
    #[command(flatten)]
    pub models: super::signals::SignalModels,
}

fn similarity_threshold(text: &str) -> std::result::Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(t) if t > 0.0 && t < 1.0 => Ok(t),
        _ => Err(format!("{text:?} is not a threshold in (0, 1)")),
    }
}

pub fn run(args: Args) -> Result<ExitCode> {
    if let Some(list) = &args.methods.methods {
        anyhow::bail!("`credit analyze` runs no methods (it reads what the logs hold): `credit compare --methods {list}` compares them");
    }
    let request = args.methods.request(&args.globals, &args.models.paths());
    let resolved = request.resolve(None)?;
    let run = &resolved.run;
    let fillers = args.models.load(&run.hisr)?;
    // What the run reads matters to the output rule only where it writes: with `--plots`.
    let read = match &args.plots {
        Some(dir) => {
            let read = resolved.inputs(&request)?;
            credit_output::OutputDir::check(dir, "analyze --plots", &read)?;
            Some(read)
        }
        None => None,
    };
    let thresholds = args.similarity.as_deref().unwrap_or_default();
    let finished = reading(&args.globals, |progress| {
        run.summary(&fillers, thresholds, progress)
    })?;
    for note in &finished.notes {
        eprintln!("note: {note}");
    }
    let summary = finished.value;
    if let (Some(dir), Some(read)) = (&args.plots, &read) {
        let run_info = credit_report::RunInfo::of(&run.methods, &finished.notes);
        let inputs = credit_report::Inputs::summary(&summary, run_info);
        write_plots(
            dir,
            "analyze --plots",
            read,
            &inputs,
            credit_report::Scope::Analyze,
            args.globals.format == Format::Json,
        )?;
    }
    match args.globals.format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&summary)?),
        Format::Text => out!("{}", text::sections(&sections::analyze(&summary))),
    }
    Ok(ExitCode::Ok)
}
