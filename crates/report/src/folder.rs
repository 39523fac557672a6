//! A report as files: `report.html`, `report.md`, `summary.json` and `figures/` (PNG and SVG) in
//! a folder output, or the figures alone (`--plots`). Every file is written whole or not at all
//! (`credit_output`); the caller opens the folder (`credit_output::OutputDir`) and finishes it.

use crate::check::Outcome;
use crate::explorer::Explorer;
use crate::plots::Figure;
use crate::render::{html, markdown};
use crate::{figures, sections, summary_json, Error, Inputs, Scope};
use credit_output::{Commit, OutputDir, Stale};
use std::io::Write as _;
use std::path::Path;

/// Everything the report's files are made of.
pub struct Report<'a> {
    pub inputs: &'a Inputs<'a>,
    /// The threshold checks, already evaluated.
    pub outcome: Option<&'a Outcome>,
    /// An earlier run's summary.json, for the before/after column.
    pub baseline: Option<&'a serde_json::Value>,
    pub explorer: Option<&'a Explorer>,
}

/// Writes the report's files into `dir`; returns its figures.
pub fn write_report(dir: &Path, report: &Report) -> Result<Vec<Figure>, Error> {
    let figure_dir = dir.join("figures");
    std::fs::create_dir_all(&figure_dir).map_err(|cause| credit_output::Error::Write {
        path: figure_dir.clone(),
        cause,
    })?;
    let figures = figures(report.inputs, Scope::All, Some(&figure_dir))?;
    write_svgs(&figure_dir, &figures)?;
    let document = summary_json(report.inputs, &figures, report.outcome);
    let document = serde_json::to_string_pretty(&document)
        .map_err(|e| Error::Check(format!("summary.json: {e}")))?;
    write_text(&dir.join("summary.json"), &document)?;
    let doc = sections::report(report, &figures);
    write_text(&dir.join("report.md"), &markdown::render(&doc))?;
    write_text(&dir.join("report.html"), &html::render(&doc))?;
    Ok(figures)
}

/// The figures of `scope` as PNG and SVG files in the folder output `dir` of `command`
/// (`analyze --plots`, `compare --plots`; `read`: what the run reads, for the output rule).
pub fn write_figures(
    dir: &Path,
    command: &str,
    read: &credit_output::Inputs,
    inputs: &Inputs,
    scope: Scope,
) -> Result<Vec<Figure>, Error> {
    let out = OutputDir::open(dir, command, read, Commit::Whole)?;
    let figures = figures(inputs, scope, Some(dir))?;
    write_svgs(dir, &figures)?;
    out.finish(Stale::Remove)?;
    Ok(figures)
}

/// Each figure's SVG beside its PNG.
fn write_svgs(dir: &Path, figures: &[Figure]) -> Result<(), Error> {
    for figure in figures {
        write_text(&dir.join(format!("{}.svg", figure.id)), &figure.svg)?;
    }
    Ok(())
}

fn write_text(path: &Path, text: &str) -> Result<(), Error> {
    Ok(credit_output::write_file(path, |f| {
        f.write_all(text.as_bytes())
    })?)
}
