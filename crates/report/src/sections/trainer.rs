//! The trainer held to the reference, in words: how a method's differing rows are laid out, the
//! configuration that reproduces the logged column (or the closest tried), and the rows
//! themselves. `credit compare` shows them under its `logged` table ([`super::compare`]), the
//! report in its section "Trainer vs reference" ([`section`]).

use crate::doc::{Block, Section, Table, Text};
use credit_core::analyses::logged::{Departure, LoggedCheck, TOLERANCE};
use credit_core::analyses::patterns::{Instance, Kind, Pattern};
use credit_core::analyses::search::Configuration;

/// Each method against `logged`: the table, then per departing method the patterns, the first
/// rows and the configuration found.
pub fn section(checks: &[LoggedCheck]) -> Section<'static> {
    let mut section = Section::new("trainer", "Trainer vs reference");
    section.push(Block::Paragraph(
        Text::plain("Each method against the advantages the trainer logged (")
            .and_code("logged")
            .and(format!(
                "); a row differs where |logged − method| > {TOLERANCE:e}. The configuration is the one of the candidates tried (the planned methods, their settings changed one at a time, grpo, drgrpo, rloo and gigpo under both presets) that comes closest to the logged column."
            )),
    ));
    let mut table = Table::new(&["method", "max |Δ|", "rows differing", "configuration"]);
    for check in checks {
        table.row(vec![
            check.method.as_str().into(),
            format!("{:.2e}", check.max_abs_diff).into(),
            format!("{} of {}", check.rows_beyond, check.rows).into(),
            check
                .configuration
                .as_ref()
                .map_or(Text::plain("—"), configuration)
                .into(),
        ]);
    }
    section.push(Block::Table(table));
    for check in checks.iter().filter(|c| c.rows_beyond > 0) {
        section.push(Block::List {
            title: Some(format!(
                "{}: {} rows differ",
                check.method, check.rows_beyond
            )),
            items: diagnosis(check)
                .into_iter()
                .chain(check.first.iter().map(|d| departure(&check.method, d)))
                .collect(),
            bullets: true,
        });
    }
    section
}

/// The lines that say what a method's departures are: one per pattern, then the configuration.
pub fn diagnosis(check: &LoggedCheck) -> Vec<Text> {
    let configuration = check.configuration.as_ref().map(|c| {
        let (lead, scope) = searched(c);
        Text::plain(lead)
            .and_text(self::configuration(c))
            .and(scope)
    });
    check
        .patterns
        .iter()
        .map(pattern)
        .chain(configuration)
        .collect()
}

/// `logged = gigpo, preset verl, std_ddof=0 (max |Δ| 7.9e-7)`: the method, its preset and every
/// setting apart from it, as `--set` takes them.
pub fn configuration(c: &Configuration) -> Text {
    let mut text = Text::plain(format!("{}, preset {}", c.method, c.preset));
    for (key, value) in &c.settings {
        let value = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_string);
        text = text
            .and(", ")
            .and_code(format!("{}.{key}={value}", c.method));
    }
    text.and(format!(" (max |Δ| {:.1e})", c.max_abs_diff))
}

/// What leads the configuration's line and what follows it: whether it reproduces the column,
/// and on what it was searched.
fn searched(c: &Configuration) -> (String, String) {
    let lead = if c.reproduces {
        "configuration: logged = ".to_string()
    } else {
        format!(
            "no configuration tried reproduces logged; closest ({} rows differ): ",
            c.rows_differing
        )
    };
    let s = &c.searched;
    let scope = if s.windows == 0 {
        String::new()
    } else {
        format!(
            "; {} candidates tried on the {} rows no planned method reproduces",
            s.candidates, s.rows
        )
    };
    (lead, scope)
}

/// `111 rows, whole groups at a constant ratio (…): group `g` ×0.9354 (111 rows) at a.jsonl:3`;
/// `3 isolated rows: at a.jsonl:1; …`.
fn pattern(p: &Pattern) -> Text {
    let lead = match p.kind {
        Kind::Isolated => format!("{} isolated rows: ", p.rows),
        kind => format!("{} rows, {}: ", p.rows, kind.words()),
    };
    let mut text = Text::plain(lead);
    for (i, instance) in p.first.iter().enumerate() {
        if i > 0 {
            text = text.and("; ");
        }
        text = text.and_text(self::instance(p.kind, instance));
    }
    let more = p.instances - p.first.len();
    if more > 0 {
        text = text.and(format!("; and {more} more"));
    }
    text
}

/// One group, trajectory or row of a pattern, with its constant and where it starts: a group by
/// its id, a trajectory by its own (unique across groups), a row by its place alone.
fn instance(kind: Kind, i: &Instance) -> Text {
    let mut text = match (kind, &i.trajectory) {
        (Kind::Isolated, _) => Text::default(),
        (Kind::TrajectoryFlip | Kind::TrajectoryShift, Some(t)) => {
            Text::plain("trajectory ").and_code(t.as_str())
        }
        _ => Text::plain("group ").and_code(i.group.as_str()),
    };
    if let Some(k) = i.ratio {
        text = text.and(format!(" ×{k:.4}"));
    }
    if let Some(c) = i.offset {
        text = text.and(format!(" {c:+.4}"));
    }
    if kind == Kind::Isolated {
        return text.and(format!("at {}", i.location));
    }
    text.and(format!(" ({} rows) at {}", i.rows, i.location))
}

/// `logs/5.jsonl:1  trajectory `…` step 0: logged 2.125872, gigpo 2.527570`.
pub fn departure(method: &str, d: &Departure) -> Text {
    let step = d.step.map_or_else(String::new, |s| format!(" step {s}"));
    Text::plain(format!("{}  trajectory ", d.location))
        .and_code(d.traj_id.as_str())
        .and(format!(
            "{step}: logged {:.6}, {method} {:.6}",
            d.logged, d.value
        ))
}
