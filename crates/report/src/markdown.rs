//! `report.md`: the findings for a CI job summary or a pull-request comment, PNGs beside it.

use crate::check::Outcome;
use crate::plots::{Figure, Section};
use crate::Inputs;
use std::fmt::Write;

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

pub fn write(
    inputs: &Inputs,
    figures: &[Figure],
    checks: Option<&Outcome>,
    baseline: Option<&serde_json::Value>,
    explored: usize,
) -> String {
    let s = inputs.summary;
    let mut o = String::new();
    let preset = inputs.metadata["preset"].as_str().unwrap_or("paper");
    let _ = writeln!(o, "# credit report\n");
    let _ = writeln!(
        o,
        "{} rows, {} groups, {} trajectories; preset `{preset}`; methods: {}.\n",
        s.rows,
        s.groups,
        s.trajectories,
        inputs
            .advantages
            .iter()
            .map(|(m, _)| format!("`{m}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = writeln!(
        o,
        "Columns: {}.\n",
        s.columns
            .iter()
            .map(|u| u.short())
            .collect::<Vec<_>>()
            .join(", ")
    );
    if explored > 0 {
        let _ = writeln!(
            o,
            "`report.html` explores {explored} chosen groups step by step: what the agent saw and did, every method's credit, the state graph.\n"
        );
    }
    for u in s.columns.iter().filter(|u| !u.also.is_empty()) {
        let _ = writeln!(o, "- {}", u.describe());
    }
    if s.columns.iter().any(|u| !u.also.is_empty()) {
        let _ = writeln!(o);
    }
    if let Some(c) = checks {
        let _ = writeln!(
            o,
            "## Checks: {}\n",
            if c.passed {
                format!("all passed ✅{}", c.not_applicable_note())
            } else {
                "FAILED ❌".to_string()
            }
        );
        let _ = writeln!(
            o,
            "| rule | value | bound | {}result |",
            if baseline.is_some() {
                "baseline | "
            } else {
                ""
            }
        );
        let _ = writeln!(
            o,
            "|---|---|---|{}---|",
            if baseline.is_some() { "---|" } else { "" }
        );
        for r in &c.rules {
            let bound = r.bound();
            let base = if baseline.is_some() {
                format!(
                    "{} | ",
                    r.baseline.map_or("—".into(), |b| format!("{b:.4}"))
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                o,
                "| {} (`{}`) | {:.4} | {bound} | {base}{} |",
                r.name,
                r.key,
                r.value,
                match (r.passed, &r.not_applicable) {
                    (Some(true), _) => "pass".to_string(),
                    (Some(false), _) => "**FAIL**".to_string(),
                    (None, why) => format!("not applicable: {}", why.as_deref().unwrap_or("")),
                }
            );
        }
        let _ = writeln!(o);
    }
    let _ = writeln!(o, "## Headline\n");
    let headline = crate::Headline::of(s, inputs.comparison);
    let _ = writeln!(
        o,
        "| figure | value |{}",
        if baseline.is_some() {
            " baseline |"
        } else {
            ""
        }
    );
    let _ = writeln!(
        o,
        "|---|---|{}",
        if baseline.is_some() { "---|" } else { "" }
    );
    for (label, key, v) in headline.shares() {
        let base = baseline
            .and_then(|b| b["headline"][key].as_f64())
            .map_or(String::new(), |b| format!(" {} |", pct(b)));
        let _ = writeln!(o, "| {label} | {} |{base}", pct(v));
    }
    if let Some(c) = inputs.comparison {
        let _ = writeln!(o, "\n## Invalid actions that receive positive credit\n");
        let _ = writeln!(o, "| method | overall | in successful trajectories |");
        let _ = writeln!(o, "|---|---|---|");
        for m in &c.methods {
            let i = &c.invalid_credit[m];
            let _ = writeln!(
                o,
                "| `{m}` | {} | {} |",
                pct(i.invalid_positive_share),
                pct(i.invalid_positive_share_in_success)
            );
        }
    }
    if !s.diagnostics.is_empty() {
        let _ = writeln!(o, "\n## Worth a look\n");
        for d in &s.diagnostics {
            let _ = writeln!(o, "- {d}");
        }
    }
    let in_section = |section: Section| figures.iter().filter(move |f| f.section == section);
    let figure = |o: &mut String, f: &Figure| {
        let _ = writeln!(
            o,
            "### {}\n\n![{}](figures/{}.png)\n\n{}\n",
            f.title, f.title, f.id, f.caption
        );
    };
    let trends: Vec<&Figure> = in_section(Section::Trends).collect();
    if !trends.is_empty() {
        let _ = writeln!(o, "\n## Per-iteration trends\n");
        for f in trends {
            figure(&mut o, f);
        }
    }
    let _ = writeln!(o, "\n## Figures\n");
    for f in in_section(Section::Figures) {
        figure(&mut o, f);
    }
    let numbers = crate::progress_numbers(s);
    if !numbers.is_empty() {
        let _ = writeln!(o, "## Progress and segments\n");
        let _ = writeln!(o, "| figure | value |\n|---|---|");
        for (label, value) in &numbers {
            let _ = writeln!(o, "| {label} | {value} |");
        }
        let _ = writeln!(o);
        for f in in_section(Section::ProgressSegments) {
            figure(&mut o, f);
        }
    }
    o
}
