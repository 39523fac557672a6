//! `credit advantages [PATHS] --methods … -o FILE`: per-step advantages of any methods.

use super::{read_windows, Format, Globals, MethodArgs, Notes};
use crate::config::ProjectFile;
use crate::exit::ExitCode;
use anyhow::Result;
use credit_core::ingest::Event;
use credit_core::output::{advantages_rows, table_format, InOrder, OutputRows, TableWriter};
use std::path::PathBuf;

#[derive(Debug, clap::Args)]
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
    pub models: super::progress::SignalModels,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let project = ProjectFile::load(args.globals.config.as_deref())?;
    let plan = args.methods.plan(&project, "all")?;
    table_format(&args.output)?;
    let hisr = args.methods.hisr_params(&project)?;
    let fillers = args.models.load(&hisr)?;
    let json = args.globals.format == Format::Json;
    let read = super::inputs(&args.globals, &project, &args.models.paths())?;
    let mut writer = TableWriter::create(&args.output, &read)?;
    let mut in_order: InOrder<OutputRows> = InOrder::default();
    let mut notes = Notes::default();
    let mut columns: Vec<String> = Vec::new();
    let report = read_windows(
        &args.globals,
        &project,
        plan.unit(),
        |window| {
            let (batch, mut window_notes) = fillers.fill(&window.batch)?;
            let results = plan.run(&batch)?;
            window_notes.extend(results.iter().flat_map(|r| r.notes.iter().cloned()));
            Ok((advantages_rows(&batch, &results)?, window_notes))
        },
        |event| {
            match event {
                Event::Window(window, (frame, window_notes)) => {
                    notes.extend(window_notes);
                    if columns.is_empty() {
                        columns = frame.columns();
                    }
                    in_order.push(window.seq, frame);
                    in_order.flush(window.watermark, |frame, rows| {
                        writer.write_rows(frame, rows)
                    })?;
                }
                Event::Restart => {
                    writer = TableWriter::create(&args.output, &read)?;
                    in_order.clear();
                    notes.clear();
                }
            }
            Ok(())
        },
    )?;
    in_order.flush(u64::MAX, |frame, rows| writer.write_rows(frame, rows))?;
    let mut notes = notes.into_vec();
    notes.extend(report.notes.iter().cloned());
    let meta = plan.metadata(&notes);
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
        outln!(
            "wrote {} rows × {} columns to {}",
            rows,
            columns.len(),
            args.output.display()
        );
        outln!(
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
