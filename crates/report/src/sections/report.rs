//! The report's sections: the lead-in, checks, what is in the logs, the comparison, the scores
//! against a reference (`--against`), trends, figures, progress and segments, the explorer, the parameters. [`report`] puts them in order;
//! `report.html`, `report.md` and the terminal show the same ones.

use super::pct;
use crate::check::{Outcome, Verdict};
use crate::doc::{Block, Cell, Column, Doc, Section, Span, Table, Text};
use crate::explorer::{Explorer, MIN_STEPS_FOR_RANKS};
use crate::folder::Report;
use crate::plots::{self, Figure};
use crate::{progress_numbers, Headline, Inputs};
use credit_core::analyses::against::Against;
use credit_core::analyses::compare::Comparison;
use credit_core::wording::plural;

/// The whole report, its figures already drawn.
pub fn report<'a>(report: &Report<'a>, figures: &'a [Figure]) -> Doc<'a> {
    let inputs = report.inputs;
    let in_section = |section: plots::Section| -> Vec<&'a Figure> {
        figures.iter().filter(|f| f.section == section).collect()
    };
    let sections = [
        Some(lead(inputs, report.explorer)),
        Some(parameters(inputs, report.baseline)),
        report.outcome.map(|o| checks(o, report.baseline.is_some())),
        Some(logs(inputs, report.baseline)),
        comparison(inputs),
        inputs
            .comparison
            .filter(|c| !c.logged.is_empty())
            .map(|c| super::trainer::section(&c.logged)),
        inputs
            .against
            .map(|a| against(a, in_section(plots::Section::Against))),
        trends(in_section(plots::Section::Trends)),
        Some(self::figures(in_section(plots::Section::Figures))),
        progress(inputs, in_section(plots::Section::ProgressSegments)),
        report.explorer.map(|e| explorer(e, inputs.summary.groups)),
        Some(colophon()),
    ];
    let mut sections: Vec<Section<'a>> = sections.into_iter().flatten().collect();
    let contents = sections
        .iter()
        .filter_map(|s| Some((s.id, s.title.clone()?)))
        .collect();
    sections[0].push(Block::Contents(contents));
    Doc {
        title: "credit report".into(),
        sections,
    }
}

/// `a` less `b`, signed, with `digits` decimals and `unit` (`+1.5 pp`), never `-0.0`.
fn delta(a: f64, b: f64, digits: usize, unit: &str) -> String {
    let d = super::num(a - b, digits);
    let sign = if d.starts_with('-') || d.trim_start_matches(['0', '.']).is_empty() {
        ""
    } else {
        "+"
    };
    format!("{sign}{d}{unit}")
}

/// What was read and computed, in a sentence; the columns read and how.
fn lead<'a>(inputs: &Inputs, explorer: Option<&Explorer>) -> Section<'a> {
    let s = inputs.summary;
    let methods: Vec<&str> = inputs.advantages.iter().map(|(m, _)| m.as_str()).collect();
    let mut section = Section::untitled("top");
    section.push(Block::Paragraph(
        Text::plain(format!(
            "{}, {}, {}, {}. Preset ",
            plural(s.files, "file"),
            plural(s.rows, "row"),
            plural(s.groups, "group"),
            plural(s.trajectories, "trajectory")
        ))
        .and_code(inputs.run.preset.to_string())
        .and(format!("; methods: {}.", methods.join(", "))),
    ));
    if let Some(e) = explorer.filter(|e| !e.groups.is_empty()) {
        let what = if e.single_turn {
            ": each prompt's responses side by side, with their scores and every method's advantage."
        } else {
            " step by step: what the agent saw and did, every method's credit, the state graph."
        };
        section.push(Block::Paragraph(
            Text::default()
                .and_span(Span::Link {
                    to: "explore",
                    text: format!("Explore {}", plural(e.groups.len(), "group")),
                })
                .and(what),
        ));
    }
    let columns: Vec<String> = s.columns.iter().map(|u| u.short()).collect();
    section.push(Block::Paragraph(Text::plain(format!(
        "Columns: {}.",
        columns.join(", ")
    ))));
    section
        .blocks
        .extend(super::column_collisions(&s.columns, true));
    section
}

/// The threshold rules' verdict and each rule's value, bound and outcome (and its value in the
/// baseline, when one is given): what `credit report` prints too.
pub fn checks<'a>(outcome: &Outcome, with_baseline: bool) -> Section<'a> {
    let (verdict, words) = outcome.verdict();
    let mut section = Section::new("checks", "Checks");
    let mut sentence = Text::default().and_span(Span::Verdict(verdict, words.into()));
    if verdict == Verdict::Pass {
        sentence = sentence.and(outcome.not_applicable_note());
    }
    section.push(Block::Paragraph(sentence));
    // The result first: on a phone's width it is what must show without scrolling.
    let columns = vec![
        Column::left("result"),
        Column::left("rule"),
        Column::left("bound"),
        Column::right("value"),
        Column::left("key"),
    ];
    let mut table = Table::of(columns).baseline(4, with_baseline);
    for r in &outcome.rules {
        let row = table.row(vec![
            Cell::Verdict(r.verdict()),
            Cell::from(r.name.as_str()),
            Cell::from(r.bound()),
            Cell::from(if r.value.is_finite() {
                super::num(r.value, 4)
            } else {
                "—".into()
            }),
            Cell::Text(Text::code(r.key.as_str())),
        ]);
        row.details
            .extend(r.not_applicable.iter().map(|why| Text::plain(why.as_str())));
        row.baseline = r.baseline.map(|b| super::num(b, 4));
        row.delta = r
            .baseline
            .filter(|_| r.value.is_finite())
            .map(|b| delta(r.value, b, 4, ""));
    }
    section.push(Block::Table(table));
    section
}

/// The headline shares (beside the baseline's), group sizes and lengths, the diagnostics.
fn logs<'a>(inputs: &Inputs, baseline: Option<&serde_json::Value>) -> Section<'a> {
    let s = inputs.summary;
    let mut section = Section::new("logs", "What is in the logs");
    let mut table = Table::new(&["figure", "value"]).baseline(2, baseline.is_some());
    for (label, key, value) in Headline::of(s, inputs.comparison).shares() {
        let before = baseline.and_then(|b| b["headline"][key].as_f64());
        let row = table.row(vec![label.into(), pct(value).into()]);
        row.baseline = before.map(pct);
        row.delta = before.map(|b| delta(100.0 * value, 100.0 * b, 1, " pp"));
    }
    section.push(Block::Table(table));
    let r = &s.rollouts_per_group;
    let lengths = match &s.single_turn {
        None => format!(
            "Trajectory length: {:.1} steps for successes, {:.1} for failures.",
            s.length.success.mean, s.length.failure.mean
        ),
        Some(_) => "Single-turn logs (one step per rollout): step groups, state graphs and step positions do not apply.".into(),
    };
    section.push(Block::Paragraph(Text::plain(format!(
        "Rollouts per group: {} to {} (mean {:.1}); {} with a single rollout. {lengths} {} dropped.",
        r.min,
        r.max,
        r.mean,
        plural(r.single_rollout_groups, "group"),
        plural(s.padding_duplicates as usize, "padding duplicate row")
    ))));
    section.blocks.extend(super::diagnostics(s, "Worth a look"));
    section
}

/// Each method's credit and how it treats invalid actions (where some action is invalid); the
/// pairs' agreement as a matrix.
fn comparison<'a>(inputs: &Inputs) -> Option<Section<'a>> {
    let c = inputs.comparison?;
    let invalid = super::compare::has_invalid(c);
    let mut section = Section::new("compare", "How the methods credit the same steps");
    let mut titles = vec!["method", "mean", "std", "median", "zero", "positive"];
    if invalid {
        titles.extend(["invalid credited +", "… in successes"]);
    }
    let mut table = Table::new(&titles);
    for m in &c.methods {
        let (d, i) = (&c.distributions[m], &c.invalid_credit[m]);
        let mut cells: Vec<Cell> = vec![
            m.as_str().into(),
            super::num(d.mean, 3).into(),
            super::num(d.std, 3).into(),
            super::num(d.median, 3).into(),
            pct(d.share_zero).into(),
            pct(d.share_positive).into(),
        ];
        if invalid {
            cells.push(pct(i.invalid_positive_share).into());
            cells.push(pct(i.invalid_positive_share_in_success).into());
        }
        table.row(cells);
    }
    section.push(Block::Table(table));
    if !c.pairwise.is_empty() {
        section.push(Block::Paragraph(Text::plain(
            "Agreement of each pair over every step: Spearman ρ above the diagonal, the share of steps where both give the same sign below it (Kendall τ-b in ",
        ).and_code("summary.json").and(").")));
        section.push(Block::Table(agreement(c)));
    }
    Some(section)
}

/// Methods × methods: Spearman ρ above the diagonal, same sign below.
fn agreement(c: &Comparison) -> Table {
    let titles: Vec<&str> = std::iter::once("")
        .chain(c.methods.iter().map(String::as_str))
        .collect();
    let mut table = Table::new(&titles);
    for (i, a) in c.methods.iter().enumerate() {
        let cells = c.methods.iter().enumerate().map(|(j, b)| {
            let pair = c
                .pairwise
                .iter()
                .find(|p| (&p.a, &p.b) == (a, b) || (&p.a, &p.b) == (b, a));
            match (pair, i.cmp(&j)) {
                (Some(p), std::cmp::Ordering::Less) => {
                    p.spearman.map_or("—".into(), |r| super::num(r, 3))
                }
                (Some(p), std::cmp::Ordering::Greater) => pct(p.sign_agreement),
                _ => "·".to_string(),
            }
        });
        table.row(
            std::iter::once(Cell::from(a.as_str()))
                .chain(cells.map(Cell::from))
                .collect(),
        );
    }
    table
}

/// Every method scored against `--against`'s reference: what the scores mean, the coverage, a
/// table (methods × the four scores) and its heat table.
pub fn against<'a>(a: &Against, figures: Vec<&'a Figure>) -> Section<'a> {
    let mut section = Section::new("against", format!("Scores against {}", a.method));
    section.push(Block::Paragraph(
        Text::plain("Each method's advantage against ")
            .and_code(a.method.as_str())
            .and(format!(
                "'s, over every row. Coverage {}: the rows whose step and state (in their iteration) hold ≥ 2 rows with ≥ 2 distinct actions, the only rows where an empirical reference can be other than 0.",
                pct(a.coverage)
            )),
    ));
    section.push(Block::List {
        title: None,
        items: vec![
            Text::plain("Spearman ρ: rank agreement over all rows (|A| < 1e-8 ranked as 0)."),
            Text::plain("Sign accuracy: over the rows the reference signs, the share where the method gives the same sign (a 0 is wrong)."),
            Text::plain("Leakage: the share of the method's Σ|A| spent on rows where the reference gives 0."),
            Text::plain("Gradient cosine: the cosine of the policy gradients the two would give a tabular softmax policy at the logged action frequencies (only what separates a state's actions counts)."),
        ],
        bullets: true,
    });
    let mut table = Table::new(&[
        "method",
        "Spearman ρ",
        "sign accuracy",
        "leakage",
        "gradient cosine",
    ]);
    let f = |x: Option<f64>| x.map_or("—".into(), |v| super::num(v, 3));
    for (m, s) in &a.scores {
        table.row(vec![
            m.as_str().into(),
            super::num(s.spearman, 3).into(),
            s.sign_accuracy.map_or("—".into(), pct).into(),
            pct(s.leakage).into(),
            f(s.gradient_cosine).into(),
        ]);
    }
    section.push(Block::Table(table));
    if !figures.is_empty() {
        section.push(Block::Figures(figures));
    }
    section
}

fn trends(figures: Vec<&Figure>) -> Option<Section<'_>> {
    if figures.is_empty() {
        return None;
    }
    let mut section = Section::new("trends", "Per-iteration trends");
    section.push(Block::Figures(figures));
    Some(section)
}

fn figures(figures: Vec<&Figure>) -> Section<'_> {
    let mut section = Section::new("figures", "Figures");
    section.push(Block::Figures(figures));
    section
}

/// SPA's progress and HISR's segments, when the logs carry them.
fn progress<'a>(inputs: &Inputs, figures: Vec<&'a Figure>) -> Option<Section<'a>> {
    let numbers = progress_numbers(inputs.summary);
    if numbers.is_empty() {
        return None;
    }
    let mut section = Section::new("progress", "Progress and segments");
    section.push(Block::Paragraph(
        Text::plain("SPA's per-step progress ĉ_t and HISR's segments (logged, or filled by ")
            .and_code("--progress-model")
            .and(" / ")
            .and_code("--sprm-model")
            .and(")."),
    ));
    let mut table = Table::new(&["figure", "value"]);
    for (label, value) in numbers {
        table.row(vec![label.into(), value.into()]);
    }
    section.push(Block::Table(table));
    section.push(Block::Figures(figures));
    Some(section)
}

/// The explorer of chosen groups, and why there is none when no group was worth a look.
fn explorer(e: &Explorer, groups_in_logs: usize) -> Section<'_> {
    let title = if e.single_turn {
        "Explore prompts and their responses"
    } else {
        "Explore groups, trajectories and steps"
    };
    let mut section = Section::new("explore", title);
    if e.groups.is_empty() {
        section.push(Block::Note(
            Text::plain(format!("None of the logs' {groups_in_logs} groups is one the explorer picks on its own (a group where the methods' ranks can disagree needs {MIN_STEPS_FOR_RANKS} steps; none has singleton states or failed yet made progress): name groups with "))
                .and_code("--explore GROUP")
                .and("."),
        ));
        return section;
    }
    if e.single_turn {
        section.push(Block::Paragraph(
            Text::plain(format!("{} of the logs' {groups_in_logs} groups (prompts): those named with ", e.groups.len()))
                .and_code("--explore")
                .and(", then those whose rewards differ most (a group whose responses all scored the same teaches GRPO nothing; ")
                .and_code("--explore-max")
                .and(" bounds how many). Pick a group: its prompt, then its responses side by side, each with its score and every method's advantage, coloured on that method's scale (full colour at its 95th-percentile |A| over the logs). ←/→ move between responses; the address reopens the same one."),
        ));
        section.push(Block::Explorer(e));
        return section;
    }
    section.push(Block::Paragraph(
        Text::plain(format!("{} of the logs' {groups_in_logs} groups: those named with ", e.groups.len()))
            .and_code("--explore")
            .and(", then in turns the groups where the methods disagree most (the lowest Spearman ρ between two methods' advantages over the group's steps), the most singleton-heavy (steps whose exact observation occurs once in the group: GiGPO's step term is 0) and failed groups that still made progress (")
            .and_code("--explore-max")
            .and(" bounds how many). Pick a group, then a step (click, or ←/→ and ↑/↓): the panel shows what the agent saw and did, every method's advantage and its parts, and the step's state in the group's graph (nodes by distance to success, edges by mean ")
            .and_code(format!("adv_{}", e.default_method))
            .and("). Steps are coloured by the chosen method's advantage (keys 1–9), full colour at its 95th-percentile |A| over the logs; the address reopens the same step."),
    ));
    if e.graphviz_missing {
        section.push(Block::Note(
            Text::plain("Graphviz ")
                .and_code("dot")
                .and(" was not found when this report was built: the groups' state graphs are left out (install graphviz and build the report again)."),
        ));
    }
    if e.named_left_out > 0 {
        section.push(Block::Note(
            Text::plain(format!("{} more groups matched ", e.named_left_out))
                .and_code("--explore")
                .and(" than ")
                .and_code("--explore-max")
                .and(" allows: the earliest in the input are here."),
        ));
    }
    section.push(Block::Explorer(e));
    section
}

/// The preset, the methods and every parameter (`summary.json`'s `metadata`), beside the
/// baseline's when one is given, with a word where the baseline ran otherwise.
fn parameters<'a>(inputs: &Inputs, baseline: Option<&serde_json::Value>) -> Section<'a> {
    let mut section = Section::new("parameters", "Run with");
    let run = &inputs.run;
    let before = baseline.map(|b| &b["metadata"]);
    let preset_of = |m: &serde_json::Value| m["preset"].as_str().unwrap_or("?").to_string();
    let methods_of = |m: &serde_json::Value| -> Vec<String> {
        m["params"]
            .as_object()
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    };
    let mut lead = Text::plain("Preset ").and_code(run.preset.to_string());
    let before = before.filter(|b| b.is_object());
    if let Some(b) = before {
        let ours: Vec<String> = run.params.keys().cloned().collect();
        let (preset, methods) = (preset_of(b), methods_of(b));
        let mut differs = Vec::new();
        if preset != run.preset.to_string() {
            differs.push(format!("preset {preset} (this run {})", run.preset));
        }
        if methods != ours {
            differs.push(format!(
                "methods {} (this run {})",
                methods.join(", "),
                ours.join(", ")
            ));
        }
        if !differs.is_empty() {
            section.push(Block::Note(Text::plain(format!(
                "The baseline ran with {}: its figures are set beside this run's as they are.",
                differs.join(" and ")
            ))));
        }
        lead = lead.and("; the baseline's, preset ").and_code(preset);
    }
    let theirs = if before.is_some() {
        "; the baseline's where they differ"
    } else {
        ""
    };
    section.push(Block::Paragraph(lead.and(format!(
        ". The parameters every method shares, then each method's own{theirs}:"
    ))));
    section.push(Block::Table(parameter_table(
        &run.params,
        before.map(|b| &b["params"]),
    )));
    if !run.notes.is_empty() {
        section.push(Block::List {
            title: None,
            items: run.notes.iter().map(|n| Text::plain(n.as_str())).collect(),
            bullets: true,
        });
    }
    section
}

/// A method's parameters as (key, value) pairs.
type Params = Vec<(String, serde_json::Value)>;

fn params_of(value: &serde_json::Value) -> Params {
    value
        .as_object()
        .map(|o| o.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

fn said(pairs: &[&(String, serde_json::Value)]) -> String {
    let said: Vec<String> = pairs.iter().map(|(k, v)| format!("{k} = {v}")).collect();
    said.join(", ")
}

/// Rows: what every method of this run shares, then each method's own settings; beside them, when
/// a baseline is given, its settings that differ ("same" where none does, "—" where it did not
/// run the method).
fn parameter_table(
    run: &std::collections::BTreeMap<String, serde_json::Value>,
    baseline: Option<&serde_json::Value>,
) -> Table {
    let ours: Vec<(&String, Params)> = run.iter().map(|(m, p)| (m, params_of(p))).collect();
    let shared: Params = ours.first().map_or_else(Vec::new, |(_, first)| {
        first
            .iter()
            .filter(|pair| ours.iter().all(|(_, p)| p.contains(pair)))
            .cloned()
            .collect()
    });
    let differing = |mine: &Params, theirs: &serde_json::Value| -> String {
        if theirs.is_null() {
            return "—".into();
        }
        let theirs = params_of(theirs);
        let changed: Vec<&(String, serde_json::Value)> =
            theirs.iter().filter(|pair| !mine.contains(pair)).collect();
        if changed.is_empty() {
            "same".into()
        } else {
            said(&changed)
        }
    };
    let mut titles = vec!["methods", "this run"];
    titles.extend(baseline.map(|_| "baseline"));
    let mut table = Table::of(titles.iter().map(|t| Column::left(t)).collect());
    let mut push = |label: &str, mine: String, theirs: Option<String>| {
        let mut cells = vec![Cell::from(label), Cell::from(mine)];
        cells.extend(theirs.map(Cell::from));
        table.row(cells);
    };
    if ours.len() > 1 && !shared.is_empty() {
        let theirs = baseline.map(|b| {
            let common: Vec<&(String, serde_json::Value)> = shared.iter().collect();
            let all_same = b.as_object().is_some_and(|o| {
                o.values()
                    .all(|p| common.iter().all(|pair| params_of(p).contains(pair)))
            });
            if all_same {
                "same".into()
            } else {
                "see each method".into()
            }
        });
        push(
            "every method",
            said(&shared.iter().collect::<Vec<_>>()),
            theirs,
        );
    }
    for (m, p) in &ours {
        let own: Vec<&(String, serde_json::Value)> = p
            .iter()
            .filter(|pair| ours.len() == 1 || !shared.contains(pair))
            .collect();
        let own = if own.is_empty() {
            "the shared ones".into()
        } else {
            said(&own)
        };
        push(
            m.as_str(),
            own,
            baseline.map(|b| differing(p, &b[m.as_str()])),
        );
    }
    if let Some(b) = baseline.and_then(|b| b.as_object()) {
        for (m, p) in b.iter().filter(|(m, _)| !run.contains_key(*m)) {
            let theirs = params_of(p);
            push(
                m.as_str(),
                "not run".into(),
                Some(said(&theirs.iter().collect::<Vec<_>>())),
            );
        }
    }
    table
}

fn colophon<'a>() -> Section<'a> {
    let mut section = Section::untitled("colophon");
    section.push(Block::Note(Text::plain(format!(
        "Generated by credit {}.",
        env!("CARGO_PKG_VERSION")
    ))));
    section
}

#[cfg(test)]
mod tests {
    use super::*;
    use credit_core::analyses::against::Scores;

    #[test]
    fn against_is_a_paragraph_a_list_and_a_table_of_every_method() {
        let scores = |spearman, sign_accuracy, leakage, gradient_cosine| Scores {
            spearman,
            sign_accuracy,
            leakage,
            gradient_cosine,
        };
        let a = Against {
            method: "oracle".into(),
            coverage: 0.931,
            scores: [
                (
                    "gigpo".to_string(),
                    scores(0.5, Some(0.75), 0.25, Some(1.0)),
                ),
                ("grpo".to_string(), scores(-0.125, None, 0.0, None)),
            ]
            .into_iter()
            .collect(),
        };
        let doc = Doc {
            title: "t".into(),
            sections: vec![against(&a, Vec::new())],
        };
        let section = &doc.sections[0];
        assert_eq!(section.id, "against");
        assert_eq!(section.title.as_deref(), Some("Scores against oracle"));
        let Block::Paragraph(lead) = &section.blocks[0] else {
            panic!("the section opens with a paragraph")
        };
        let lead = format!("{lead:?}");
        assert!(lead.contains("Coverage 93.1%"), "{lead}");
        assert!(matches!(&section.blocks[1], Block::List { items, .. } if items.len() == 4));
        assert!(matches!(&section.blocks[2], Block::Table(_)));
        let md = crate::render::markdown::render(&doc);
        assert!(md.contains("## Scores against oracle"), "{md}");
        assert!(
            md.contains("| gigpo | 0.500 | 75.0% | 25.0% | 1.000 |"),
            "{md}"
        );
        assert!(md.contains("| grpo | -0.125 | — | 0.0% | — |"), "{md}");
        // No figure block without a figure.
        assert_eq!(section.blocks.len(), 3);
    }
}
