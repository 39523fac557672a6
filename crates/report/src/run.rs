//! A report from the logs, as `credit report` and the Python package's `credit.report` make it:
//! [`gather`] reads the logs once (every planned method, the summary, the per-iteration trends and
//! the explorer's candidate groups), then [`write`] evaluates the rules and writes the folder.

use crate::check::{self, Outcome, Rule};
use crate::explorer::{DrawSvg, Selection, Selector};
use crate::folder::{write_report, Report};
use crate::trends::Trends;
use crate::{dot, summary_json, Error, Inputs};
use credit_core::run::{Fill, Finished, Gathered, OnProgress, RunPlan};
use credit_output::{OutputDir, Stale};
use std::path::Path;

/// What a report shows besides the logs: threshold rules, an earlier run's `summary.json`, and
/// the explorer's groups (named ones, and at most `explore_max` in all; 0 leaves it out).
pub struct Options {
    pub rules: Option<Vec<Rule>>,
    pub baseline: Option<serde_json::Value>,
    pub explore: Vec<String>,
    pub explore_max: usize,
}

/// The logs read for a report.
pub struct Read {
    gathered: Gathered,
    trends: Trends,
    selection: Option<(Selector, Selection)>,
}

/// The report written: its figures and the rules' outcome (`None` without rules).
pub struct Written {
    pub figures: usize,
    pub outcome: Option<Outcome>,
    /// Whether the explorer has state graphs (Graphviz `dot` was found), when it has groups.
    pub graphs: Option<bool>,
}

/// Reads the logs once for a report of `run`'s methods.
pub fn gather<E: From<credit_core::Error> + Send>(
    run: &RunPlan,
    fill: &dyn Fill,
    options: &Options,
    progress: OnProgress,
) -> Result<Finished<Read>, E> {
    if options.explore_max == 0 && !options.explore.is_empty() {
        return Err(
            credit_core::Error::Config("--explore needs room: --explore-max is 0".into()).into(),
        );
    }
    let labels = run.methods.labels();
    let selector = (options.explore_max > 0)
        .then(|| Selector::new(&options.explore, options.explore_max, labels));
    let mut selection = Selection::default();
    let mut trends = Trends::default();
    let finished = run.gather(
        fill,
        true,
        progress,
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
    Ok(Finished {
        value: Read {
            gathered: finished.value,
            trends,
            selection: selector.map(|s| (s, selection)),
        },
        notes: finished.notes,
        report: finished.report,
    })
}

/// Evaluates the rules (a bad key fails before anything is written), then writes the report of
/// what was `read` (with the run's `notes`) into the folder `out` under the output rule (`inputs`:
/// what the run read), each file whole.
pub fn write(
    out: &Path,
    inputs_read: &credit_output::Inputs,
    run: &RunPlan,
    read: Read,
    notes: &[String],
    options: &Options,
) -> Result<Written, Error> {
    let Read {
        gathered,
        trends,
        selection,
    } = read;
    if let Some((selector, selection)) = &selection {
        let unmatched = selection.unmatched(selector);
        if !unmatched.is_empty() {
            return Err(Error::Check(format!(
                "--explore: no group `{}` in the logs",
                unmatched.join("`, `")
            )));
        }
    }
    let plan = &run.methods;
    let summary = gathered
        .summary
        .as_ref()
        .expect("gathered with the summary");
    let comparison = gathered.compare();
    let inputs = Inputs {
        summary,
        comparison: Some(&comparison),
        advantages: &gathered.advantages,
        proxmo: plan.proxmo(),
        metadata: plan.metadata(notes),
    };
    let outcome = options
        .rules
        .as_ref()
        .map(|r| {
            check::evaluate(
                r,
                &summary_json(&inputs, &[], None),
                options.baseline.as_ref(),
            )
        })
        .transpose()?;
    let graphs = selection.as_ref().map(|_| dot::available());
    let explorer = match selection {
        Some((selector, selection)) => {
            let draw: &DrawSvg = &dot::svg;
            Some(selection.finish(
                &selector,
                &comparison,
                graphs.unwrap_or(false).then_some(draw),
            )?)
        }
        None => None,
    };
    let labels = plan.labels();
    let out = OutputDir::open(out, "report", inputs_read)?;
    let figures = write_report(
        out.path(),
        &Report {
            inputs: &inputs,
            trends: &trends,
            labels: &labels,
            outcome: outcome.as_ref(),
            baseline: options.baseline.as_ref(),
            explorer: explorer.as_ref(),
        },
    )?;
    out.finish(Stale::Remove)?;
    Ok(Written {
        figures: figures.len(),
        outcome,
        graphs,
    })
}

/// Reads a thresholds file's rules, naming it in messages.
pub fn read_rules(path: &Path) -> Result<Vec<Rule>, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Check(format!("reading {}: {e}", path.display())))?;
    check::parse(&text, &path.display().to_string())
}
