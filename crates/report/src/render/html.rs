//! `report.html`: one self-contained file (inline CSS, SVG and script, no fonts, external files or
//! network), one element per line.

use crate::check::Verdict;
use crate::doc::{Align, Block, Cell, Doc, Header, Line, Span, Table, Text};
use crate::explorer::{Explorer, CSS, JS};
use crate::plots::Figure;
use std::fmt::Write;

const STYLE: &str = "body{font-family:'DejaVu Sans',Verdana,sans-serif;margin:2rem auto;max-width:1100px;color:#222;line-height:1.45;padding:0 1rem}\
h1{font-size:1.7rem}h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2.2rem}\
.table{max-width:100%;overflow-x:auto;margin:.6rem 0 1rem}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25rem .6rem;text-align:right}\
th{background:#f3f3f3}td:first-child,th:first-child,.l{text-align:left}td code{overflow-wrap:anywhere}\
.pass{color:#1a7f37;font-weight:bold}.fail{color:#c62828;font-weight:bold}.not-applicable{color:#666}\
figure{margin:1.2rem 0 2rem}figure svg{max-width:100%;height:auto;border:1px solid #eee}\
figcaption{color:#444;font-size:.95rem;margin-top:.4rem}pre{background:#f7f7f7;padding:.8rem;overflow-x:auto;font-size:.8rem}\
.note{color:#555}nav.contents ol{columns:2;margin:.4rem 0 1rem}\
@media (max-width:700px){body{margin:1rem auto;padding:0 .6rem}td,th{padding:.2rem .35rem}nav.contents ol{columns:1}}";

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The CSS class of a verdict: its word (`not-applicable`).
fn class(verdict: Verdict) -> String {
    verdict.word().replace(' ', "-")
}

pub fn render(doc: &Doc) -> String {
    let mut o = String::new();
    let title = esc(&doc.title);
    let _ = writeln!(o, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{title}</title><style>{STYLE}</style></head><body>");
    let _ = writeln!(o, "<h1>{title}</h1>");
    for section in &doc.sections {
        if let Some(title) = &section.title {
            let _ = writeln!(o, "<h2 id=\"{}\">{}</h2>", section.id, esc(title));
        }
        for block in &section.blocks {
            self::block(&mut o, block);
        }
    }
    o.push_str("</body></html>\n");
    o
}

fn block(o: &mut String, block: &Block) {
    let _ = match block {
        Block::Paragraph(text) => writeln!(o, "<p>{}</p>", inline(text)),
        Block::Note(text) => writeln!(o, "<p class=\"note\">{}</p>", inline(text)),
        Block::List { title, items, .. } => {
            if let Some(title) = title {
                let _ = writeln!(o, "<h3>{}</h3>", esc(title));
            }
            let _ = writeln!(o, "<ul>");
            for item in items {
                let _ = writeln!(o, "<li>{}</li>", inline(item));
            }
            writeln!(o, "</ul>")
        }
        Block::Table(table) => {
            self::table(o, table);
            Ok(())
        }
        Block::Figures(figures) => {
            figures.iter().for_each(|f| figure(o, f));
            Ok(())
        }
        Block::Contents(entries) => {
            let _ = writeln!(o, "<nav class=\"contents\" aria-label=\"Contents\"><ol>");
            for (id, title) in entries {
                let _ = writeln!(o, "<li><a href=\"#{id}\">{}</a></li>", esc(title));
            }
            writeln!(o, "</ol></nav>")
        }
        Block::Explorer(e) => {
            explorer(o, e);
            Ok(())
        }
        Block::Indented(blocks) => {
            blocks.iter().for_each(|b| self::block(o, b));
            Ok(())
        }
    };
}

fn inline(text: &Text) -> String {
    text.0
        .iter()
        .map(|span| match span {
            Span::Plain(s) => esc(s),
            Span::Code(s) => format!("<code>{}</code>", esc(s)),
            Span::Link { to, text } => format!("<a href=\"#{to}\">{}</a>", esc(text)),
            Span::Verdict(v, s) => format!("<span class=\"{}\">{}</span>", class(*v), esc(s)),
        })
        .collect()
}

fn table(o: &mut String, table: &Table) {
    let columns = table.shown_columns();
    // A wide table scrolls in its own box rather than widening the page.
    o.push_str("<div class=\"table\"><table><tr>");
    for (k, column) in columns.iter().enumerate() {
        let title = match &table.header {
            Header::Titled(title) if k == 0 => title,
            _ => &column.title,
        };
        let class = if column.align == Align::Left {
            " class=\"l\""
        } else {
            ""
        };
        let _ = write!(o, "<th{class}>{}</th>", esc(title));
    }
    o.push_str("</tr>\n");
    for line in table.body() {
        o.push_str("<tr>");
        let _ = match line {
            Line::Cells(cells) => cells
                .iter()
                .zip(&columns)
                .try_for_each(|(cell, column)| cell_html(o, cell, column.align)),
            Line::Across(text, _) => write!(
                o,
                "<td colspan=\"{}\">{}</td>",
                columns.len(),
                inline(&text)
            ),
        };
        o.push_str("</tr>\n");
    }
    o.push_str("</table></div>\n");
}

/// A cell; text in a column aligned left past the first (which always is) says so.
fn cell_html(o: &mut String, cell: &Cell, align: Align) -> std::fmt::Result {
    match cell {
        Cell::Text(text) if align == Align::Left => {
            write!(o, "<td class=\"l\">{}</td>", inline(text))
        }
        Cell::Text(text) => write!(o, "<td>{}</td>", inline(text)),
        Cell::Verdict(v) => write!(o, "<td class=\"{}\">{}</td>", class(*v), v.word()),
    }
}

fn figure(o: &mut String, fig: &Figure) {
    let _ = writeln!(
        o,
        "<figure id=\"fig-{}\"><h3>{}</h3>\n{}\n<figcaption>{}</figcaption></figure>",
        fig.id,
        esc(&fig.title),
        fig.svg,
        esc(&fig.caption)
    );
}

/// The stylesheet, the data, the container and the script, in the order `explorer.js` expects.
fn explorer(o: &mut String, e: &Explorer) {
    let _ = writeln!(
        o,
        "<style>{CSS}</style>\n<script type=\"application/json\" id=\"credit-explorer-data\">{}</script>\n<div id=\"explorer\"></div>\n<script>{JS}</script>",
        e.json(),
    );
}
