//! Terminal text (`credit analyze`, `credit compare`, `credit report`'s checks): sections apart
//! by a blank line, details two spaces further in, tables in columns of the widths and gaps they
//! ask for; code spans keep their backticks.

use crate::doc::{Align, Block, Cell, Header, Line, Section, Span, Table, Text};

/// Sections, a blank line between each and the next.
pub fn sections(sections: &[Section]) -> String {
    let parts: Vec<String> = sections.iter().map(section).collect();
    parts.join("\n")
}

/// A titled section's blocks stand two spaces in under its title.
pub fn section(section: &Section) -> String {
    let mut o = String::new();
    let margin = match &section.title {
        Some(title) => {
            line(&mut o, 0, title);
            2
        }
        None => 0,
    };
    for block in &section.blocks {
        self::block(&mut o, block, margin);
    }
    o
}

/// One line `margin` spaces in.
fn line(o: &mut String, margin: usize, text: &str) {
    o.extend(std::iter::repeat_n(' ', margin));
    o.push_str(text);
    o.push('\n');
}

fn block(o: &mut String, block: &Block, margin: usize) {
    match block {
        Block::Paragraph(text) | Block::Note(text) => line(o, margin, &inline(text)),
        Block::List {
            title,
            items,
            bullets,
        } => {
            if let Some(title) = title {
                line(o, margin, &format!("{title}:"));
            }
            let marker = if *bullets { "- " } else { "" };
            for item in items {
                line(o, margin + 2, &format!("{marker}{}", inline(item)));
            }
        }
        Block::Table(t) => table(o, t, margin),
        Block::Figures(figures) => {
            for f in figures {
                line(o, margin, &format!("{}: figures/{}.png", f.title, f.id));
            }
        }
        // A terminal scrolls: no contents.
        Block::Contents(_) => {}
        Block::Explorer(e) => line(
            o,
            margin,
            &format!(
                "the explorer of {} is in report.html",
                credit_core::wording::plural(e.groups.len(), "group")
            ),
        ),
        Block::Indented(blocks) => blocks.iter().for_each(|b| self::block(o, b, margin + 2)),
    }
}

fn inline(text: &Text) -> String {
    text.0
        .iter()
        .map(|span| match span {
            Span::Plain(s) | Span::Link { text: s, .. } | Span::Verdict(_, s) => s.clone(),
            Span::Code(s) => format!("`{s}`"),
        })
        .collect()
}

/// A cell as plain text: a verdict with why it does not apply, where it does not.
fn cell(cell: &Cell) -> String {
    match cell {
        Cell::Text(text) => inline(text),
        Cell::Verdict(v) => v.word().to_string(),
    }
}

/// A line of a table's body as text.
enum Written {
    Cells(Vec<String>),
    Across(String, usize),
}

/// The header (as the table asks), then the rows: each column padded to its width and `gap`
/// spaces after the one before; under a titled header the rows are two spaces further in.
fn table(o: &mut String, table: &Table, margin: usize) {
    let columns = table.shown_columns();
    let titles: Vec<String> = columns.iter().map(|c| c.title.clone()).collect();
    let body: Vec<Written> = table
        .body()
        .into_iter()
        .map(|l| match l {
            Line::Cells(cells) => Written::Cells(cells.iter().map(cell).collect()),
            Line::Across(text, depth) => Written::Across(inline(&text), depth),
        })
        .collect();
    let counted = |k: usize| {
        let heading = (table.header == Header::Shown).then(|| titles[k].chars().count());
        body.iter()
            .filter_map(|l| match l {
                Written::Cells(cells) => cells.get(k).map(|c| c.chars().count()),
                Written::Across(..) => None,
            })
            .chain(heading)
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..columns.len())
        .map(|k| columns[k].width.unwrap_or_else(|| counted(k)))
        .collect();
    // Padding stops at the last cell: no line ends in spaces.
    let row = |cells: &[String], first_width: usize| {
        let mut out = String::new();
        for (k, text) in cells.iter().enumerate() {
            if k > 0 {
                out.extend(std::iter::repeat_n(' ', columns[k].gap));
            }
            let width = if k == 0 { first_width } else { widths[k] };
            let pad = std::iter::repeat_n(' ', width.saturating_sub(text.chars().count()));
            match columns[k].align {
                Align::Left => out.extend(text.chars().chain(pad)),
                Align::Right => out.extend(pad.chain(text.chars())),
            }
        }
        out.trim_end().to_string()
    };
    let rows_margin = match &table.header {
        Header::Shown => {
            line(o, margin, &row(&titles, widths[0]));
            margin
        }
        Header::Hidden => margin,
        Header::Titled(title) => {
            let mut titled = titles.clone();
            titled[0] = title.clone();
            line(o, margin, &row(&titled, widths[0] + 2));
            margin + 2
        }
    };
    for l in &body {
        match l {
            Written::Cells(cells) => line(o, rows_margin, &row(cells, widths[0])),
            Written::Across(text, depth) => line(o, rows_margin + 2 * depth, text),
        }
    }
}
