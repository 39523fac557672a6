//! `credit advantages [PATHS] --methods … -o FILE`: per-step advantages of any methods.

use super::{load_filled, metadata, Format, Globals, MethodArgs};
use crate::config::ProjectFile;
use crate::exit::ExitCode;
use anyhow::{Context, Result};
use credit_core::output::{advantages_frame, table_format, write_table};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub globals: Globals,
    #[command(flatten)]
    pub methods: MethodArgs,
    /// Output file: .parquet, .jsonl or .csv (written atomically; JSONL and CSV get a .meta.json).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: PathBuf,
    #[command(flatten)]
    pub models: super::progress::SignalModels,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let project = ProjectFile::load(args.globals.config.as_deref())?;
    let plan = args.methods.plan(&project, "all")?;
    table_format(&args.output)?;
    let hisr = args.methods.hisr_params(&project)?;
    let (ingested, mut notes) = load_filled(&args.globals, &project, &args.models, &hisr)?;
    let batch = &ingested.batch;
    let json = args.globals.format == Format::Json;
    let mut results = Vec::new();
    for method in &plan.methods {
        let bar = crate::progress::spinner(&format!("computing {}", method.label()), json);
        results.push(
            method
                .advantages(batch)
                .with_context(|| format!("computing {}", method.label()))?,
        );
        bar.finish_and_clear();
    }
    notes.extend(results.iter().flat_map(|r| r.notes.iter().cloned()));
    let meta = metadata(&plan, &notes);
    let mut frame = advantages_frame(batch, &results)?;
    write_table(&args.output, &mut frame, &meta)
        .with_context(|| format!("writing {}", args.output.display()))?;
    let columns: Vec<String> = frame
        .get_column_names()
        .iter()
        .map(|c| c.to_string())
        .collect();
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "output": args.output,
                "rows": frame.height(),
                "columns": columns,
                "metadata": meta,
            }))?
        );
    } else {
        for note in &notes {
            eprintln!("note: {note}");
        }
        println!(
            "wrote {} rows × {} columns to {}",
            frame.height(),
            columns.len(),
            args.output.display()
        );
        println!(
            "methods: {} (preset {})",
            plan.methods
                .iter()
                .map(|m| m.label())
                .collect::<Vec<_>>()
                .join(", "),
            meta["preset"].as_str().unwrap_or("")
        );
    }
    Ok(ExitCode::Ok)
}
