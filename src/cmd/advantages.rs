//! `credit advantages [PATHS] --methods … -o FILE`: per-step advantages of any methods.

use super::{reading, say_methods, Format, Globals, MethodArgs};
use crate::exit::ExitCode;
use anyhow::Result;
use credit_core::run::Rows;
use credit_core::table_writer::{table_format, TableWriter};
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
    table_format(&args.output)?;
    let run = &resolved.run;
    let fillers = args.models.load(&run.hisr)?;
    let json = args.globals.format == Format::Json;
    let read = resolved.inputs(&request)?;
    let mut writer = TableWriter::create(&args.output, &read)?;
    let mut columns: Vec<String> = Vec::new();
    let finished = reading(&args.globals, |progress| {
        run.advantages(&fillers, progress, |rows| {
            match rows {
                Rows::Rows(rows, selection) => {
                    if columns.is_empty() {
                        columns = rows.columns();
                    }
                    writer.write_rows(rows, selection)?;
                }
                Rows::Restart => writer = TableWriter::create(&args.output, &read)?,
            }
            Ok(())
        })
    })?;
    let notes = finished.notes;
    let meta = run.methods.metadata(&notes);
    let rows = writer.rows();
    writer.finish(&meta)?;
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "output": args.output,
                "rows": rows,
                "columns": columns,
                "metadata": meta,
            }))?
        );
    } else {
        for note in &notes {
            eprintln!("note: {note}");
        }
        say_methods(&resolved, &finished.report)?;
        outln!(
            "wrote {} rows × {} columns to {}",
            rows,
            columns.len(),
            args.output.display()
        );
    }
    Ok(ExitCode::Ok)
}
