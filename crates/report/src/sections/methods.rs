//! `credit methods`: each method (what it is, how it runs) and its settings as a table: the
//! `--set` name, the default under each preset, the type or the values it takes, and under it
//! what it means.

use crate::doc::{Block, Column, Section, Table, Text};
use credit_core::methods::listing::{MethodInfo, SettingInfo};
use serde_json::Value;

/// A section per method.
pub fn methods(list: &[MethodInfo]) -> Vec<Section<'static>> {
    list.iter().map(method).collect()
}

fn method(m: &MethodInfo) -> Section<'static> {
    let mut title = m.name.to_string();
    if !m.aliases.is_empty() {
        title.push_str(&format!(" (or {})", m.aliases.join(", ")));
    }
    let mut section = Section::new("method", title);
    section.push(Block::Paragraph(Text::plain(&m.meaning)));
    let runs = match m.runs {
        "all" => Text::plain("runs with ")
            .and_code("--methods all")
            .and(" or when named"),
        "named" => Text::plain("runs when named (not in ")
            .and_code("--methods all")
            .and(")"),
        _ => Text::plain("verl's registry: runs with ")
            .and_code("--methods verl")
            .and(" or when named"),
    };
    section.push(Block::Paragraph(runs));
    if let Some(why) = m.without_params {
        section.push(Block::Paragraph(Text::plain(format!("no settings: {why}"))));
        return section;
    }
    let mut table = Table::of(vec![
        Column::left("setting"),
        Column::left("paper"),
        Column::left("verl"),
        Column::left("takes"),
    ]);
    for s in &m.settings {
        let row = table.row(vec![
            Text::plain(&s.key).into(),
            default(&s.paper).into(),
            default(&s.verl).into(),
            takes(s).into(),
        ]);
        if !s.meaning.is_empty() {
            row.details.push(Text::plain(&s.meaning));
        }
    }
    section.push(Block::Table(table));
    section
}

/// A default as `--set` would write it; an unset optional as `unset`.
fn default(value: &Value) -> String {
    match value {
        Value::Null => "unset".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// What a setting takes: its type, its range or its values.
fn takes(s: &SettingInfo) -> String {
    match (s.kind, s.range) {
        ("choice", _) => s.values.join(" | "),
        (kind, Some(range)) => format!("{kind} in {range}"),
        (kind, None) => kind.to_string(),
    }
}
