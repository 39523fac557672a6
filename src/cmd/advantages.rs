//! `credit advantages [PATHS] --methods … -o FILE`: per-step advantages of any methods.

use super::{reading, say_methods, Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::Result;
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
#[command(mut_arg("methods", |a| super::methods_help(a, credit_core::plan::ADVANTAGES)))]
pub struct Args {
    #[command(flatten)]
    pub globals: Globals,
    #[command(flatten)]
    pub methods: MethodArgs,
    /// Output file: .parquet, .jsonl or .csv (written atomically; JSONL and CSV get a .meta.json).
    #[arg(
        short = 'o',
        long = "out",
        visible_alias = "output",
        value_name = "FILE"
    )]
    pub output: PathBuf,
    #[command(flatten)]
    pub models: super::signals::SignalModels,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let request = args.methods.request(&args.globals, &args.models.paths());
    let resolved = request.resolve(Some(credit_core::plan::ADVANTAGES))?;
    credit_core::table_writer::table_format(&args.output)?;
    let run = &resolved.run;
    let fillers = args.models.load(&run.hisr)?;
    let json = args.globals.format == Format::Json;
    let read = resolved.inputs(&request)?;
    let finished = reading(&args.globals, |progress| {
        Ok(run.write_advantages(&fillers, &args.output, &read, progress)?)
    })?;
    let (table, notes) = (&finished.value, &finished.notes);
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "output": args.output,
                "rows": table.rows,
                "columns": table.columns,
                "metadata": table.metadata,
            }))?
        );
    } else {
        for note in notes {
            eprintln!("note: {note}");
        }
        say_methods(&resolved, &finished.report)?;
        outln!(
            "wrote {} rows × {} columns to {}",
            table.rows,
            table.columns.len(),
            args.output.display()
        );
    }
    Ok(ExitCode::Ok)
}
