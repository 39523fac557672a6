//! A report from the logs, as `credit report` and the Python package's `credit.report` make it:
//! [`gather`] reads the logs once (every planned method, the summary, the per-iteration trends and
//! the explorer's candidate groups), then [`write`] evaluates the rules and writes the folder.

use crate::check::{self, Outcome, Rule};
use crate::explorer::{Candidates, DrawSvg, Selection, Selector};
use crate::folder::{write_report, Report};
use crate::trends::Trends;
use crate::{dot, summary_json, Error, Headline, Inputs, RunInfo};
use credit_core::analyses::against::Against;
use credit_core::analyses::stats::spearman;
use credit_core::analyses::summary::{summary_part, Summary, SummaryBuilder, SummaryPart};
use credit_core::ingest::{IngestReport, UnitKind};
use credit_core::plan::Notes;
use credit_core::run::{Fill, Finished, Gathered, OnProgress, RunPlan};
use credit_output::{Commit, OutputDir, Stale};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// What a report shows besides the logs: threshold rules, an earlier run's `summary.json`, and
/// the explorer's groups (named ones, and at most `explore_max` in all; 0 leaves it out).
pub struct Options {
    pub rules: Option<Vec<Rule>>,
    pub baseline: Option<serde_json::Value>,
    pub explore: Vec<String>,
    pub explore_max: usize,
}

/// The logs read for a report, open to more: `credit watch` adds a run's files as they land
/// ([`Read::more`], [`Read::add`]), each read once. What adds up is kept as it adds up: every
/// method's advantages and the comparison's few bytes per row, the summary's parts (per group),
/// the per-iteration trends, the explorer's candidates; the summary and the comparison are
/// finished from them when the report is written.
pub struct Read {
    gathered: Gathered,
    summary: SummaryBuilder,
    report: IngestReport,
    notes: Notes,
    trends: Trends,
    selection: Option<(Selector, Selection)>,
    /// The units read: logs read later that hold one again split it across reads.
    units: HashSet<Unit>,
    /// Past every row's place in the input read so far: rows read later come after them.
    next_seq: u64,
}

/// A unit (what a window holds whole) by its iteration and, for groups, its id.
type Unit = (Option<i64>, Option<String>);

/// What one read of more logs gave, to [`Read::add`].
pub struct More {
    gathered: Gathered,
    parts: Vec<SummaryPart>,
    trends: Trends,
    selection: Selection,
    units: HashSet<Unit>,
    end_seq: u64,
}

impl More {
    /// The iterations these logs hold, in order.
    pub fn iterations(&self) -> Vec<i64> {
        self.trends.iterations().collect()
    }

    /// Every method scored against `run`'s `--against` method on these rows (`None` without it).
    pub fn against(&self, run: &RunPlan) -> Result<Option<Against>, credit_core::Error> {
        Ok(run.against(&self.gathered)?.map(|(scores, _)| scores))
    }

    /// Every planned method held to the logged advantages on these rows (empty unless `logged`
    /// is planned).
    pub fn logged(&self) -> Vec<credit_core::analyses::logged::LoggedCheck> {
        credit_core::analyses::logged::check(&self.gathered.advantages, &Default::default())
    }

    /// The rank agreement (Spearman) of each pair of methods on these rows: (a, b, ρ).
    pub fn agreement(&self) -> Vec<(&str, &str, Option<f64>)> {
        let columns = &self.gathered.advantages;
        let mut pairs = Vec::new();
        for (i, (a, x)) in columns.iter().enumerate() {
            for (b, y) in &columns[i + 1..] {
                pairs.push((a.as_str(), b.as_str(), spearman(x, y)));
            }
        }
        pairs
    }
}

/// Logs read after others hold a unit those held: it was split across reads.
#[derive(Debug)]
pub struct Split(pub String);

impl Read {
    /// Nothing read yet.
    pub fn new(run: &RunPlan, options: &Options) -> Result<Read, credit_core::Error> {
        if options.explore_max == 0 && !options.explore.is_empty() {
            return Err(credit_core::Error::Config(
                "--explore needs room: --explore-max is 0".into(),
            ));
        }
        let labels = run.methods.labels();
        let selection = (options.explore_max > 0).then(|| {
            (
                Selector::new(&options.explore, options.explore_max, labels.clone()),
                Selection::default(),
            )
        });
        Ok(Read {
            gathered: Gathered {
                rows: Default::default(),
                advantages: labels.into_iter().map(|l| (l, Vec::new())).collect(),
                summary: None,
                departures: Default::default(),
                traj_lengths: Vec::new(),
            },
            summary: SummaryBuilder::default(),
            report: IngestReport::default(),
            notes: Notes::default(),
            trends: Trends::default(),
            selection,
            units: HashSet::new(),
            next_seq: 0,
        })
    }

    /// Reads `run`'s logs, as logs that come after those read so far; nothing is added until
    /// [`Read::add`].
    pub fn more<E: From<credit_core::Error> + Send>(
        &self,
        run: &RunPlan,
        fill: &dyn Fill,
        progress: OnProgress,
    ) -> Result<Finished<More>, E> {
        let selector = self.selection.as_ref().map(|(s, _)| s);
        let by_group = run.methods.unit() == UnitKind::Group;
        let base = self.next_seq;
        let mut parts = Vec::new();
        let mut trends = Trends::default();
        let mut selection = Selection::default();
        let mut units = HashSet::new();
        let mut end_seq = base;
        let finished = run.gather(
            fill,
            false,
            progress,
            |window, batch, results| {
                let seq: Vec<u64> = window.seq.iter().map(|s| s + base).collect();
                let candidates = selector.map(|s| s.look(batch, &seq, results));
                let columns: Vec<&[f64]> = results.iter().map(|r| r.advantage()).collect();
                let units: Vec<Unit> = batch
                    .groups
                    .iter()
                    .map(|g| (g.iteration, by_group.then(|| g.id.to_string())))
                    .collect();
                Ok(Looked {
                    candidates,
                    part: summary_part(batch, &run.hisr),
                    trends: Trends::of(batch, &columns),
                    units,
                    end_seq: seq.iter().max().map_or(base, |s| s + 1),
                })
            },
            |kept| {
                match kept {
                    Some(looked) => {
                        if let (Some(s), Some(c)) = (selector, looked.candidates) {
                            selection.add(s, c);
                        }
                        parts.push(looked.part);
                        trends.add(looked.trends);
                        units.extend(looked.units);
                        end_seq = end_seq.max(looked.end_seq);
                    }
                    None => {
                        if let Some(s) = selector {
                            selection.restart(s);
                        }
                        parts.clear();
                        trends = Trends::default();
                        units.clear();
                        end_seq = base;
                    }
                }
                Ok(())
            },
        )?;
        Ok(Finished {
            value: More {
                gathered: finished.value,
                parts,
                trends,
                selection,
                units,
                end_seq,
            },
            notes: finished.notes,
            report: finished.report,
        })
    }

    /// Adds what [`Read::more`] read (with its notes and ingest report); refused, with nothing
    /// added, when it holds a unit read before (a group, or an iteration when a method takes
    /// statistics over the training batch): the caller reads everything again in one run.
    pub fn add(&mut self, more: Finished<More>) -> Result<(), Split> {
        let Finished {
            value: more,
            notes,
            report,
        } = more;
        if let Some((iteration, group)) = more.units.iter().find(|u| self.units.contains(*u)) {
            let what = match (iteration, group) {
                (Some(it), Some(g)) => format!("group `{g}` of iteration {it}"),
                (None, Some(g)) => format!("group `{g}`"),
                (Some(it), None) => format!("iteration {it}"),
                (None, None) => "the rows without an iteration".to_string(),
            };
            return Err(Split(what));
        }
        self.units.extend(more.units);
        self.gathered.extend(more.gathered);
        for part in more.parts {
            self.summary.add(part);
        }
        self.report.merge(report);
        self.notes.extend(notes);
        self.trends.add(more.trends);
        if let Some((selector, selection)) = &mut self.selection {
            selection.extend(selector, more.selection);
        }
        self.next_seq = more.end_seq;
        Ok(())
    }

    /// What ingest saw of every log read.
    pub fn report(&self) -> &IngestReport {
        &self.report
    }

    /// The notes of every read: the windows' then ingest's, each once.
    pub fn notes(&self) -> Vec<String> {
        self.notes.clone().into_vec()
    }

    /// The summary of everything read.
    pub fn summary(&self) -> Summary {
        self.summary.clone().finish(&self.report)
    }

    /// The headline of `summary.json` (figures the logs do not have left out) and each pair of
    /// methods' Spearman ρ, as flat keys for a trainer's logger: `credit/singleton_step_share`,
    /// `credit/invalid_positive_share/mgr`, `credit/spearman/grpo~gigpo`.
    pub fn metrics(&self) -> BTreeMap<String, f64> {
        let summary = self.summary();
        let comparison = self.gathered.compare();
        let headline = Headline::of(&summary, Some(&comparison));
        let mut metrics = BTreeMap::new();
        let figures = serde_json::to_value(&headline).unwrap_or_default();
        for (key, value) in figures.as_object().into_iter().flatten() {
            if headline
                .not_applicable
                .contains_key(&format!("headline.{key}"))
            {
                continue;
            }
            match value {
                serde_json::Value::Object(per_method) => {
                    for (method, value) in per_method {
                        if let Some(x) = value.as_f64() {
                            metrics.insert(format!("credit/{key}/{method}"), x);
                        }
                    }
                }
                value => {
                    if let Some(x) = value.as_f64() {
                        metrics.insert(format!("credit/{key}"), x);
                    }
                }
            }
        }
        for pair in &comparison.pairwise {
            if let Some(rho) = pair.spearman {
                metrics.insert(format!("credit/spearman/{}~{}", pair.a, pair.b), rho);
            }
        }
        metrics
    }

    /// The per-iteration trends of everything read.
    pub fn trends(&self) -> &Trends {
        &self.trends
    }
}

/// What one window gives a report besides its rows.
struct Looked {
    candidates: Option<Candidates>,
    part: SummaryPart,
    trends: Trends,
    units: Vec<Unit>,
    end_seq: u64,
}

/// The report written: its figures and the rules' outcome (`None` without rules).
pub struct Written {
    pub figures: usize,
    pub outcome: Option<Outcome>,
    /// Whether the explorer has state graphs (Graphviz `dot` was found), when it has groups.
    pub graphs: Option<bool>,
}

impl Written {
    /// `credit report --format json`'s object for the report in `out`.
    pub fn json(&self, out: &Path) -> serde_json::Value {
        serde_json::json!({
            "out": out,
            "files": ["report.html", "report.md", "summary.json", "figures/"],
            "figures": self.figures,
            "checks": self.outcome,
        })
    }

    /// What `credit report` prints of the report in `out`: the files written, then the checks
    /// (with the baseline's column when `baseline`).
    pub fn text(&self, out: &Path, baseline: bool) -> String {
        let mut text = format!(
            "wrote {}, {}, {} and {} figures\n",
            out.join("report.html").display(),
            out.join("report.md").display(),
            out.join("summary.json").display(),
            self.figures
        );
        if let Some(o) = &self.outcome {
            let checks = crate::sections::report::checks(o, baseline);
            text.push_str(&crate::render::text::section(&checks));
        }
        text
    }

    /// The note of a report whose explorer has no state graphs for want of Graphviz.
    pub fn note(&self) -> Option<&'static str> {
        (self.graphs == Some(false)).then_some("Graphviz `dot` is not installed: the explorer shows no state graphs (install graphviz)")
    }
}

/// Reads the logs once for a report of `run`'s methods.
pub fn gather<E: From<credit_core::Error> + Send>(
    run: &RunPlan,
    fill: &dyn Fill,
    options: &Options,
    progress: OnProgress,
) -> Result<Finished<Read>, E> {
    let mut read = Read::new(run, options)?;
    let more = read.more::<E>(run, fill, progress)?;
    let (notes, report) = (more.notes.clone(), more.report.clone());
    read.add(more).map_err(|Split(what)| {
        credit_core::Error::Config(format!("internal: {what} read twice in one run"))
    })?;
    Ok(Finished {
        value: read,
        notes,
        report,
    })
}

/// Evaluates the rules (a bad key fails before anything is written), then writes the report of
/// what was `read` (with the run's `notes`) into the folder `out` under the output rule (`inputs`:
/// what the run read), each file whole; the explorer's groups are drawn when `with_explorer`
/// (`credit watch` leaves them to its last report: Graphviz takes ~0.1 s a group).
pub fn write(
    out: &Path,
    inputs_read: &credit_output::Inputs,
    run: &RunPlan,
    read: &Read,
    notes: &[String],
    options: &Options,
    with_explorer: bool,
) -> Result<Written, Error> {
    let (gathered, trends, selection) = (&read.gathered, &read.trends, &read.selection);
    if let Some((selector, selection)) = selection {
        let unmatched = selection.unmatched(selector);
        if !unmatched.is_empty() {
            return Err(Error::Check(format!(
                "--explore: no group `{}` in the logs",
                unmatched.join("`, `")
            )));
        }
    }
    let plan = &run.methods;
    let summary = &read.summary();
    let comparison = gathered.compare();
    let mut notes = notes.to_vec();
    let against = run
        .against(gathered)
        .map_err(|e| Error::Check(e.to_string()))?
        .map(|(scores, note)| {
            notes.extend(note);
            scores
        });
    let inputs = Inputs {
        summary,
        comparison: Some(&comparison),
        advantages: &gathered.advantages,
        proxmo: plan.proxmo(),
        run: RunInfo::of(plan, &notes),
        trends: Some(trends),
        against: against.as_ref(),
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
    let selection = selection.as_ref().filter(|_| with_explorer);
    let graphs = selection.map(|_| dot::available());
    let explorer = match selection {
        Some((selector, selection)) => {
            let draw: &DrawSvg = &dot::svg;
            Some(selection.finish(
                selector,
                &comparison,
                graphs.unwrap_or(false).then_some(draw),
            )?)
        }
        None => None,
    };
    let out = OutputDir::open(out, "report", inputs_read, Commit::Whole)?;
    let figures = write_report(
        out.path(),
        &Report {
            inputs: &inputs,
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
    let text = credit_core::ingest::read_settings(path)
        .map_err(|e| Error::Check(format!("reading {e}")))?;
    check::parse(&text, &path.display().to_string())
}
