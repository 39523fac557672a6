//! `credit report [PATHS] --methods … --out DIR [--check thresholds.toml] [--baseline OLD/summary.json]
//! [--explore GROUP] [--explore-max N]`: `report.html` (self-contained, with the explorer of chosen
//! groups), `report.md` (PNGs in `figures/`), `summary.json`; exit 1 when a threshold rule fails.

use super::{gather_with, proxmo_params, Format, Globals, MethodArgs};
use crate::config::ProjectFile;
use crate::exit::ExitCode;
use anyhow::{bail, Context, Result};
use credit_core::analyses::compare::compare;
use credit_core::output::write_atomic;
use credit_report::explorer::{DrawSvg, Selection, Selector};
use credit_report::trends::{self, Trends};
use credit_report::{check, dot, figures, html, markdown, summary_json, Inputs, Scope};
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub globals: Globals,
    #[command(flatten)]
    pub methods: MethodArgs,
    /// Output folder: report.html, report.md, summary.json, figures/.
    #[arg(short = 'o', long, value_name = "DIR")]
    pub out: PathBuf,
    /// Threshold rules over summary.json keys; the exit code is 1 when any fails.
    #[arg(long, value_name = "thresholds.toml")]
    pub check: Option<PathBuf>,
    /// An earlier run's summary.json: adds a before/after column.
    #[arg(long, value_name = "OLD/summary.json")]
    pub baseline: Option<PathBuf>,
    /// A group for the explorer, by its `group_id` (repeatable); in logs with iterations, every
    /// iteration's group of that id, earliest first.
    #[arg(long = "explore", value_name = "GROUP")]
    pub explore: Vec<String>,
    /// The most groups the explorer embeds (each adds its steps and state graph, about 0.2–0.7 MB);
    /// 0 leaves it out.
    #[arg(long, value_name = "N", default_value_t = 12)]
    pub explore_max: usize,
    #[command(flatten)]
    pub models: super::progress::SignalModels,
}

fn write_text(path: &Path, text: &str) -> Result<()> {
    write_atomic(path, |f| {
        std::io::Write::write_all(f, text.as_bytes()).map_err(|source| credit_core::Error::Io {
            path: path.to_path_buf(),
            cause: source,
        })
    })
    .with_context(|| format!("writing {}", path.display()))
}

pub fn run(args: Args) -> Result<ExitCode> {
    let project = ProjectFile::load(args.globals.config.as_deref())?;
    let plan = args
        .methods
        .plan(&project, "grpo,gigpo,proxmo,graphgpo,mgr")?;
    // Rules and baseline are read before any work, so a typo fails fast.
    let rules = match &args.check {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Some(check::parse(&text, &path.display().to_string())?)
        }
        None => None,
    };
    let baseline: Option<serde_json::Value> = match &args.baseline {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Some(
                serde_json::from_str(&text)
                    .with_context(|| format!("{}: not a summary.json", path.display()))?,
            )
        }
        None => None,
    };
    if args.explore_max == 0 && !args.explore.is_empty() {
        bail!("--explore needs room: --explore-max is 0");
    }
    let json = args.globals.format == Format::Json;
    let hisr = args.methods.hisr_params(&project)?;
    let fillers = args.models.load(&hisr)?;
    let labels: Vec<String> = plan.methods.iter().map(|m| m.label().to_string()).collect();
    let selector = (args.explore_max > 0)
        .then(|| Selector::new(&args.explore, args.explore_max, labels.clone()));
    let mut selection = Selection::default();
    let mut trends = Trends::default();
    let gathered = gather_with(
        &args.globals,
        &project,
        &plan,
        &fillers,
        &hisr,
        true,
        |window, batch, results| {
            let candidates = selector
                .as_ref()
                .map(|s| s.look(batch, &window.seq, results));
            let columns: Vec<&[f64]> = results.iter().map(|r| r.advantage()).collect();
            Ok((candidates, Trends::of(batch, &columns)))
        },
        |kept| {
            match kept {
                Some((candidates, part)) => {
                    if let (Some(s), Some(c)) = (&selector, candidates) {
                        selection.add(s, c);
                    }
                    trends.add(part);
                }
                None => {
                    if let Some(s) = &selector {
                        selection.restart(s);
                    }
                    trends = Trends::default();
                }
            }
            Ok(())
        },
    )?;
    if let Some(s) = &selector {
        let unmatched = selection.unmatched(s);
        if !unmatched.is_empty() {
            bail!(
                "--explore: no group `{}` in the logs",
                unmatched.join("`, `")
            );
        }
    }
    let summary = gathered.summary.as_ref().expect("asked for the summary");
    let comparison = compare(&gathered.rows, &gathered.advantages);
    let inputs = Inputs {
        summary,
        comparison: Some(&comparison),
        advantages: &gathered.advantages,
        proxmo: proxmo_params(&plan),
        metadata: plan.metadata(&gathered.notes),
    };

    // The checks first (a bad key fails before anything is written); then the whole report is
    // built in a folder beside `--out` and swapped in at once, so a report never mixes two runs.
    let outcome = rules
        .as_ref()
        .map(|r| check::evaluate(r, &summary_json(&inputs, &[], None), baseline.as_ref()))
        .transpose()?;
    let dot_available = selector.is_some() && dot::available();
    let staging = credit_core::output::temporary(&args.out);
    let built = (|| -> Result<Vec<credit_report::plots::Figure>> {
        let figure_dir = staging.join("figures");
        std::fs::create_dir_all(&figure_dir)
            .with_context(|| format!("creating {}", figure_dir.display()))?;
        let bar = crate::progress::spinner("drawing figures", json);
        let mut figures = figures(&inputs, Scope::All, Some(&figure_dir))?;
        figures.extend(trends::figure(
            &trends,
            summary,
            &labels,
            Some(&figure_dir),
        )?);
        let explorer = match &selector {
            Some(s) => {
                let draw: &DrawSvg = &dot::svg;
                let draw = dot_available.then_some(draw);
                Some(selection.finish(s, &comparison, draw)?)
            }
            None => None,
        };
        bar.finish_and_clear();
        for figure in &figures {
            write_text(&figure_dir.join(format!("{}.svg", figure.id)), &figure.svg)?;
        }
        let document = summary_json(&inputs, &figures, outcome.as_ref());
        write_text(
            &staging.join("summary.json"),
            &serde_json::to_string_pretty(&document)?,
        )?;
        write_text(
            &staging.join("report.html"),
            &html::write(
                &inputs,
                &figures,
                outcome.as_ref(),
                baseline.as_ref(),
                explorer.as_ref(),
            ),
        )?;
        write_text(
            &staging.join("report.md"),
            &markdown::write(
                &inputs,
                &figures,
                outcome.as_ref(),
                baseline.as_ref(),
                explorer.as_ref().map_or(0, |e| e.groups.len()),
            ),
        )?;
        swap_in(&staging, &args.out)?;
        Ok(figures)
    })();
    if built.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    credit_core::output::remove_temporaries_under(&staging);
    let figures = built?;

    let passed = outcome.as_ref().is_none_or(|o| o.passed);
    if json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "out": args.out,
                "files": ["report.html", "report.md", "summary.json", "figures/"],
                "figures": figures.len(),
                "checks": outcome,
            }))?
        );
    } else {
        outln!(
            "wrote {0}/report.html, {0}/report.md, {0}/summary.json and {1} figures",
            args.out.display(),
            figures.len()
        );
        if selector.is_some() && !dot_available {
            eprintln!("note: Graphviz `dot` is not installed: the explorer shows no state graphs (install graphviz)");
        }
        if let Some(o) = &outcome {
            for r in &o.rules {
                outln!(
                    "  {} {}: {:.4}",
                    if r.passed { "pass" } else { "FAIL" },
                    r.name,
                    r.value
                );
            }
        }
    }
    Ok(if passed {
        ExitCode::Ok
    } else {
        ExitCode::GateFailed
    })
}

/// Moves the finished folder `staging` to `out`, replacing what was there (moved aside first, then
/// removed), so `out` holds either the old report or the new one, never a mix.
fn swap_in(staging: &Path, out: &Path) -> Result<()> {
    if out.exists() {
        let name = out.file_name().and_then(|n| n.to_str()).unwrap_or("report");
        let old = out.with_file_name(format!(".{name}.{}.old", std::process::id()));
        credit_core::output::register_temporary(&old);
        std::fs::rename(out, &old)
            .with_context(|| format!("moving the old {} aside", out.display()))?;
        let moved = std::fs::rename(staging, out);
        if moved.is_err() {
            let _ = std::fs::rename(&old, out);
        }
        moved.with_context(|| format!("moving the report into {}", out.display()))?;
        std::fs::remove_dir_all(&old)
            .with_context(|| format!("removing the old {}", old.display()))?;
        credit_core::output::remove_temporaries_under(&old);
    } else {
        std::fs::rename(staging, out)
            .with_context(|| format!("moving the report into {}", out.display()))?;
    }
    Ok(())
}
