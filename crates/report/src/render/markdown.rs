//! `report.md`: the report for a CI job summary or a pull-request comment (GitHub-flavoured
//! Markdown), PNGs in `figures/` beside it; the explorer stays in `report.html`.

use crate::check::Verdict;
use crate::doc::{Align, Block, Cell, Doc, Header, Line, Span, Table, Text};
use crate::plots::Figure;
use std::fmt::Write;

pub fn render(doc: &Doc) -> String {
    let mut o = format!("# {}\n\n", doc.title);
    for section in &doc.sections {
        if let Some(title) = &section.title {
            let _ = writeln!(o, "## {title}\n");
        }
        for block in &section.blocks {
            self::block(&mut o, block);
        }
    }
    o
}

/// Each block ends with a blank line.
fn block(o: &mut String, block: &Block) {
    let _ = match block {
        Block::Paragraph(text) => writeln!(o, "{}\n", inline(text)),
        Block::Note(text) => writeln!(o, "> {}\n", inline(text)),
        Block::List { title, items, .. } => {
            if let Some(title) = title {
                let _ = writeln!(o, "### {title}\n");
            }
            for item in items {
                let _ = writeln!(o, "- {}", inline(item));
            }
            writeln!(o)
        }
        Block::Table(table) => {
            self::table(o, table);
            writeln!(o)
        }
        Block::Figures(figures) => {
            figures.iter().for_each(|f| figure(o, f));
            Ok(())
        }
        Block::Contents(entries) => {
            for (_, title) in entries {
                let _ = writeln!(o, "- [{title}](#{})", slug(title));
            }
            writeln!(o)
        }
        Block::Explorer(e) => writeln!(
            o,
            "> The explorer of these {} groups is in `report.html`.\n",
            e.groups.len()
        ),
        Block::Indented(blocks) => {
            blocks.iter().for_each(|b| self::block(o, b));
            Ok(())
        }
    };
}

/// The anchor GitHub gives a heading: lower case, spaces as hyphens, other punctuation dropped.
fn slug(title: &str) -> String {
    title
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn inline(text: &Text) -> String {
    text.0
        .iter()
        .map(|span| match span {
            Span::Plain(s) => s.clone(),
            Span::Code(s) => format!("`{s}`"),
            Span::Link { to, text } => format!("[{text}](report.html#{to})"),
            Span::Verdict(v, s) => verdict(*v, s),
        })
        .collect()
}

/// A verdict stands out: failures in bold.
fn verdict(v: Verdict, s: &str) -> String {
    match v {
        Verdict::Fail => format!("**{s}**"),
        Verdict::Pass | Verdict::NotApplicable => s.to_string(),
    }
}

fn table(o: &mut String, table: &Table) {
    let columns = table.shown_columns();
    // A `|` in a title would end its column (`max |Δ|`).
    let titles: Vec<String> = columns
        .iter()
        .enumerate()
        .map(|(k, c)| match &table.header {
            Header::Titled(title) if k == 0 => title.as_str(),
            _ => c.title.as_str(),
        })
        .map(|t| t.replace('|', "\\|"))
        .collect();
    let _ = writeln!(o, "| {} |", titles.join(" | "));
    let rules: Vec<&str> = columns
        .iter()
        .map(|c| match c.align {
            Align::Left => "---",
            Align::Right => "---:",
        })
        .collect();
    let _ = writeln!(o, "|{}|", rules.join("|"));
    for line in table.body() {
        let cells: Vec<String> = match line {
            Line::Cells(cells) => cells.iter().map(cell).collect(),
            // Markdown tables have no spanning cells: the text goes in the first.
            Line::Across(text, _) => std::iter::once(inline(&text))
                .chain(std::iter::repeat_n(String::new(), columns.len() - 1))
                .collect(),
        };
        // A bar inside a cell would end it.
        let cells: Vec<String> = cells.iter().map(|c| c.replace('|', "\\|")).collect();
        let _ = writeln!(o, "| {} |", cells.join(" | "));
    }
}

fn cell(cell: &Cell) -> String {
    match cell {
        Cell::Text(text) => inline(text),
        Cell::Verdict(v) => verdict(*v, v.word()),
    }
}

fn figure(o: &mut String, f: &Figure) {
    let _ = writeln!(
        o,
        "### {}\n\n![{}](figures/{}.png)\n\n{}\n",
        f.title, f.title, f.id, f.caption
    );
}
