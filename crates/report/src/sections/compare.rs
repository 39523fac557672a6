//! `credit compare`'s sections: how differently the methods credit the same steps, as tables one
//! row per method (`--format json` is the serialised `Comparison`).

use crate::doc::{Block, Cell, Column, Header, Section, Table, Text};
use credit_core::analyses::against::Against;
use credit_core::analyses::compare::Comparison;
use credit_core::analyses::logged::{LoggedCheck, TOLERANCE};

/// The sections, in order; those the comparison does not allow are left out: the invalid actions'
/// where no step is invalid, step positions where every step is step 0 (single-turn logs).
pub fn compare(c: &Comparison) -> Vec<Section<'static>> {
    // The method column fits the longest name, and "method".
    let w = c.methods.iter().map(|m| m.len()).max().unwrap_or(6).max(6);
    let sections = [
        (!c.logged.is_empty()).then(|| logged(&c.logged, w)),
        Some(distributions(c, w)),
        (!c.pairwise.is_empty()).then(|| agreement(c, w)),
        Some(cells(c, w)),
        has_invalid(c).then(|| invalid_credit(c, w)),
        (positions(c).len() > 1).then(|| by_position(c, w)),
        (!c.per_task.is_empty()).then(|| per_task(c)),
    ];
    sections.into_iter().flatten().collect()
}

/// A section of one titled table, two spaces in.
fn titled(id: &'static str, title: &str, table: Table) -> Section<'static> {
    let mut section = Section::untitled(id);
    section.push(Block::Paragraph(Text::plain(title)));
    section.push(Block::Indented(vec![Block::Table(table)]));
    section
}

/// The method column, then `columns`.
fn per_method(w: usize, title: &str, columns: impl IntoIterator<Item = Column>) -> Table {
    Table::of(
        std::iter::once(Column::left(title).fixed(w, 0))
            .chain(columns)
            .collect(),
    )
}

/// Each method against the logged advantages: max |Δ|, the rows beyond the tolerance, how they
/// lie and the configuration found, and the first of them by file and line.
fn logged(checks: &[LoggedCheck], w: usize) -> Section<'static> {
    let mut table = per_method(
        w,
        "method",
        [
            Column::right("max |Δ|").fixed(10, 2),
            Column::left("rows differing").fixed(0, 2),
        ],
    );
    for check in checks {
        let row = table.row(vec![
            check.method.as_str().into(),
            format!("{:.2e}", check.max_abs_diff).into(),
            format!("{} of {}", check.rows_beyond, check.rows).into(),
        ]);
        row.details = super::trainer::diagnosis(check)
            .into_iter()
            .chain(
                check
                    .first
                    .iter()
                    .map(|d| super::trainer::departure(&check.method, d)),
            )
            .collect();
    }
    titled(
        "logged",
        &format!(
            "against the logged advantages (a row differs where |logged − method| > {TOLERANCE:e})"
        ),
        table,
    )
}

/// Every method scored against `--against`'s reference: "against oracle (coverage 93.1%)", then
/// Spearman ρ, sign accuracy, leakage and the gradient cosine per method.
pub fn against(a: &Against) -> Section<'static> {
    let w = a.scores.keys().map(|m| m.len()).max().unwrap_or(6).max(6);
    let mut table = per_method(
        w,
        "method",
        [
            Column::right("spearman").fixed(8, 2),
            Column::right("sign acc").fixed(8, 2),
            Column::right("leakage").fixed(8, 2),
            Column::right("grad cos").fixed(8, 2),
        ],
    );
    let opt = |x: Option<f64>| x.map_or("n/a".into(), |v| super::num(v, 3));
    for (m, s) in &a.scores {
        table.row(vec![
            m.as_str().into(),
            super::num(s.spearman, 3).into(),
            s.sign_accuracy.map_or("n/a".into(), super::pct).into(),
            super::pct(s.leakage).into(),
            opt(s.gradient_cosine).into(),
        ]);
    }
    titled(
        "against",
        &format!("against {} (coverage {})", a.method, super::pct(a.coverage)),
        table,
    )
}

fn distributions(c: &Comparison, w: usize) -> Section<'static> {
    let mut table = per_method(
        w,
        "method",
        [
            Column::right("mean").fixed(8, 2),
            Column::right("std").fixed(8, 1),
            Column::right("q05").fixed(8, 1),
            Column::right("median").fixed(8, 1),
            Column::right("q95").fixed(8, 1),
            Column::right("zero").fixed(6, 2),
            Column::right("pos").fixed(6, 1),
        ],
    );
    for m in &c.methods {
        let d = &c.distributions[m];
        let figures = [d.mean, d.std, d.q05, d.median, d.q95].map(|x| super::num(x, 3));
        let shares = [d.share_zero, d.share_positive].map(|x| format!("{:.1}%", 100.0 * x));
        let cells = std::iter::once(m.clone()).chain(figures).chain(shares);
        table.row(cells.map(Cell::from).collect());
    }
    titled("distributions", "distribution of per-step credit", table)
}

fn agreement(c: &Comparison, w: usize) -> Section<'static> {
    let mut table = Table::of(vec![
        Column::left("pair").fixed(2 * w + 4, 0),
        Column::right("spearman").fixed(6, 2),
        Column::right("kendall").fixed(6, 3),
        Column::right("same sign").fixed(7, 3),
    ]);
    let opt = |x: Option<f64>| x.map_or("n/a".into(), |v| super::num(v, 3));
    for p in &c.pairwise {
        table.row(vec![
            format!("{} vs {}", p.a, p.b).into(),
            opt(p.spearman).into(),
            opt(p.kendall_tau_b).into(),
            format!("{:.1}%", 100.0 * p.sign_agreement).into(),
        ]);
    }
    titled("agreement", "agreement over steps", table)
}

/// Whether any step is invalid (a `valid` column said so).
pub fn has_invalid(c: &Comparison) -> bool {
    c.invalid_credit.values().any(|i| i.invalid_steps > 0)
}

/// The step positions of the comparison.
pub fn positions(c: &Comparison) -> Vec<u32> {
    c.by_position
        .values()
        .next()
        .map(|v| v.iter().map(|p| p.position).collect())
        .unwrap_or_default()
}

/// Mean credit per (outcome × validity) cell; by outcome alone where no step is invalid.
fn cells(c: &Comparison, w: usize) -> Section<'static> {
    let invalid = has_invalid(c);
    let outcomes = [
        "success/valid",
        "success/inval",
        "fail/valid",
        "fail/invalid",
    ];
    let shown: Vec<usize> = (0..4).filter(|k| invalid || k % 2 == 0).collect();
    let columns = shown.iter().enumerate().map(|(i, &k)| {
        let title = if invalid {
            outcomes[k]
        } else {
            ["success", "", "failure", ""][k]
        };
        Column::right(title).fixed(14, if i == 0 { 2 } else { 1 })
    });
    let mut table = per_method(w, "method", columns);
    for m in &c.methods {
        let cells = shown.iter().map(|&k| &c.cells[m][k]).map(|x| {
            if x.steps == 0 {
                "-".to_string()
            } else {
                format!("{} (n={})", super::num(x.mean, 3), x.steps)
            }
        });
        let cells = std::iter::once(m.clone()).chain(cells);
        table.row(cells.map(Cell::from).collect());
    }
    let title = if invalid {
        "mean credit by (trajectory outcome × action validity)"
    } else {
        "mean credit by trajectory outcome"
    };
    titled("cells", title, table)
}

fn invalid_credit(c: &Comparison, w: usize) -> Section<'static> {
    let mut table = per_method(
        w,
        "method",
        [
            Column::right("overall").fixed(10, 2),
            Column::right("in successful traj").fixed(18, 1),
            Column::right("sign = validity").fixed(16, 1),
            Column::left("").fixed(0, 3),
        ],
    );
    for m in &c.methods {
        let i = &c.invalid_credit[m];
        let shares = [
            i.invalid_positive_share,
            i.invalid_positive_share_in_success,
            i.sign_agreement_with_validity,
        ]
        .map(|x| format!("{:.1}%", 100.0 * x));
        let steps = format!(
            "({} invalid steps, {} in successes)",
            i.invalid_steps, i.invalid_steps_in_success
        );
        let cells = std::iter::once(m.clone()).chain(shares).chain([steps]);
        table.row(cells.map(Cell::from).collect());
    }
    titled(
        "invalid",
        "invalid actions that receive positive credit",
        table,
    )
}

/// Positions 0–4, then every fifth.
fn by_position(c: &Comparison, w: usize) -> Section<'static> {
    let shown: Vec<u32> = positions(c)
        .into_iter()
        .filter(|&p| p < 5 || p % 5 == 0)
        .collect();
    let columns = shown
        .iter()
        .map(|p| Column::right(&p.to_string()).fixed(13, 1));
    let mut table = per_method(w, "t", columns);
    let f = |v: Option<f64>| v.map_or("-".into(), |v| super::num(v, 2));
    for m in &c.methods {
        let cells = shown.iter().map(|p| {
            let pos = c.by_position[m].iter().find(|x| x.position == *p);
            pos.map_or("-".into(), |x| {
                format!("{}/{}", f(x.mean_success), f(x.mean_failure))
            })
        });
        let cells = std::iter::once(m.clone()).chain(cells);
        table.row(cells.map(Cell::from).collect());
    }
    titled(
        "positions",
        "mean credit by step position (success / failure)",
        table,
    )
}

/// Per task: each method's mean credit and share of invalid actions credited positively. A
/// method whose every task mean is 0 (its credit sums to 0 in every group, as GRPO's does under
/// `--preset verl`) is said so once instead of a column of zeros.
fn per_task(c: &Comparison) -> Section<'static> {
    let zero = |m: &String| c.per_task.iter().all(|t| t.mean[m].abs() < 1e-9);
    let (centred, shown): (Vec<&String>, Vec<&String>) = c.methods.iter().partition(|m| zero(m));
    let invalid = has_invalid(c);
    let mut table = Table::of(vec![
        Column::left("task").fixed(28, 0),
        Column::right("steps").fixed(6, 1),
        Column::left("methods").fixed(0, 1),
    ])
    .header(Header::Hidden);
    for t in &c.per_task {
        let methods: Vec<String> = shown
            .iter()
            .map(|&m| {
                let share = format!(" ({:.0}%)", 100.0 * t.invalid_positive_share[m]);
                format!(
                    "{m} {}{}",
                    super::num(t.mean[m], 3),
                    if invalid { share.as_str() } else { "" }
                )
            })
            .collect();
        table.row(vec![
            t.task.as_str().into(),
            t.steps.to_string().into(),
            format!("steps  {}", methods.join("  ")).into(),
        ]);
    }
    let title = if invalid {
        "per task: mean credit (share of invalid actions credited positively)"
    } else {
        "per task: mean credit"
    };
    let mut section = titled("per-task", title, table);
    if !centred.is_empty() {
        let names: Vec<&str> = centred.iter().map(|m| m.as_str()).collect();
        section.push(Block::Indented(vec![Block::Paragraph(Text::plain(
            format!(
                "{}: 0 in every task by construction (each group's credit sums to 0)",
                names.join(", ")
            ),
        ))]));
    }
    section
}

#[cfg(test)]
mod tests {
    use super::*;
    use credit_core::analyses::against::Scores;

    #[test]
    fn against_titles_the_reference_and_its_coverage() {
        let a = Against {
            method: "oracle".into(),
            coverage: 0.5,
            scores: [(
                "graphgpo".to_string(),
                Scores {
                    spearman: 0.25,
                    sign_accuracy: None,
                    leakage: 0.125,
                    gradient_cosine: Some(-0.5),
                },
            )]
            .into_iter()
            .collect(),
        };
        let text = crate::render::text::section(&against(&a));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "against oracle (coverage 50.0%)");
        assert_eq!(
            lines[1].split_whitespace().collect::<Vec<_>>(),
            ["method", "spearman", "sign", "acc", "leakage", "grad", "cos"]
        );
        assert_eq!(
            lines[2].split_whitespace().collect::<Vec<_>>(),
            ["graphgpo", "0.250", "n/a", "12.5%", "-0.500"]
        );
    }
}
