//! `credit advantages [PATHS] --methods … -o FILE`: per-step advantages of any methods.

use super::{load, metadata, Format, Globals, MethodArgs};
use crate::config::ProjectFile;
use crate::exit::ExitCode;
use anyhow::{Context, Result};
use credit_core::output::{advantages_frame, table_format, write_table};
use credit_core::schema::columns::{PROGRESS, SEGMENT_REWARD};
use credit_train::progress::Readout;

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
    /// A `credit train progress` model: fills the `progress` column (ĉ_t, for `spa`) of logs
    /// that lack it.
    #[arg(long, value_name = "DIR")]
    pub progress_model: Option<PathBuf>,
    /// A `credit train sprm` model: fills the `segment_reward` column (r̂_i at each segment's
    /// last step, for `hisr`) of logs that lack it.
    #[arg(long, value_name = "DIR")]
    pub sprm_model: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let project = ProjectFile::load(args.globals.config.as_deref())?;
    let plan = args.methods.plan(&project, "all")?;
    table_format(&args.output)?;
    let mut ingested = load(&args.globals, &project)?;
    let hisr = args.methods.hisr_params(&project)?;
    let mut notes = Vec::new();
    for (dir, readout, column) in [
        (&args.progress_model, Readout::Step, PROGRESS),
        (&args.sprm_model, Readout::SegmentEnd, SEGMENT_REWARD),
    ] {
        if let Some(dir) = dir {
            notes.push(if super::progress::fill(&mut ingested.batch, dir, readout, &hisr)? {
                format!("`{column}` filled from the model in {}", dir.display())
            } else {
                format!(
                    "the logs carry `{column}`; the model in {} was not used",
                    dir.display()
                )
            });
        }
    }
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
