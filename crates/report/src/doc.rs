//! The report as a document: sections of blocks (paragraphs, tables, figures, lists, notes), built
//! once from the results ([`crate::sections`]) and written by the renderers
//! ([`crate::render`]: HTML, Markdown, terminal text), the only places that write markup. A
//! section is laid out once and appears in every format, as hyperfine's exporters share one
//! markup layer.

use crate::check::Verdict;
use crate::explorer::Explorer;
use crate::plots::Figure;

/// A whole document: its title and its sections, in order.
pub struct Doc<'a> {
    pub title: String,
    pub sections: Vec<Section<'a>>,
}

/// A part of the document under one heading.
pub struct Section<'a> {
    /// The anchor (`#logs`): links, tests and readers' bookmarks rely on it.
    pub id: &'static str,
    /// `None` for the lead-in under the document's title, the closing note, and the terminal
    /// views' sections, whose first line says what they are.
    pub title: Option<String>,
    pub blocks: Vec<Block<'a>>,
}

impl<'a> Section<'a> {
    pub fn new(id: &'static str, title: impl Into<String>) -> Self {
        Section {
            id,
            title: Some(title.into()),
            blocks: Vec::new(),
        }
    }

    /// A section without a heading.
    pub fn untitled(id: &'static str) -> Self {
        Section {
            id,
            title: None,
            blocks: Vec::new(),
        }
    }

    pub fn push(&mut self, block: Block<'a>) {
        self.blocks.push(block);
    }
}

pub enum Block<'a> {
    Paragraph(Text),
    /// A remark beside the findings (what was left out, where something came from).
    Note(Text),
    /// Items under an optional subheading; in text, `bullets` marks each with `- `, else they
    /// are lines under the one before.
    List {
        title: Option<String>,
        items: Vec<Text>,
        bullets: bool,
    },
    Table(Table),
    Figures(Vec<&'a Figure>),
    /// The document's sections as links, by (id, title): HTML's and Markdown's table of contents.
    Contents(Vec<(&'static str, String)>),
    /// The interactive explorer: only HTML can show it; the other formats point to it.
    Explorer(&'a Explorer),
    /// Blocks that detail the one before: in text, two spaces further in.
    Indented(Vec<Block<'a>>),
}

/// A run of inline pieces.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Text(pub Vec<Span>);

#[derive(Clone, Debug, PartialEq)]
pub enum Span {
    Plain(String),
    /// A key, flag, file or value to be read literally.
    Code(String),
    /// A link to another section of the document, by its id.
    Link {
        to: &'static str,
        text: String,
    },
    /// A rule's outcome, marked as passed or failed where the format can.
    Verdict(Verdict, String),
}

impl Text {
    pub fn plain(s: impl Into<String>) -> Self {
        Text(vec![Span::Plain(s.into())])
    }

    pub fn code(s: impl Into<String>) -> Self {
        Text(vec![Span::Code(s.into())])
    }

    /// Appends plain text.
    pub fn and(mut self, s: impl Into<String>) -> Self {
        self.0.push(Span::Plain(s.into()));
        self
    }

    /// Appends a code span.
    pub fn and_code(mut self, s: impl Into<String>) -> Self {
        self.0.push(Span::Code(s.into()));
        self
    }

    /// Appends every span of `other`.
    pub fn and_text(mut self, other: Text) -> Self {
        self.0.extend(other.0);
        self
    }

    pub fn and_span(mut self, span: Span) -> Self {
        self.0.push(span);
        self
    }
}

impl From<&str> for Text {
    fn from(s: &str) -> Self {
        Text::plain(s)
    }
}

impl From<String> for Text {
    fn from(s: String) -> Self {
        Text::plain(s)
    }
}

/// Rows under column headings, with an optional column of an earlier run's figures
/// (`--baseline`) beside this run's.
pub struct Table {
    pub columns: Vec<Column>,
    pub rows: Vec<Row>,
    /// Where the baseline column goes (before the column of that index), when it is shown; a
    /// column of this run's figure less the baseline's follows it.
    pub baseline_at: Option<usize>,
    pub header: Header,
    /// Rows left out after the row of that index, said in one line there (a long run's middle
    /// iterations).
    pub omitted: Option<(usize, Text)>,
}

/// How text shows a table's headings.
#[derive(Clone, Debug, PartialEq)]
pub enum Header {
    /// Above the rows, aligned with them.
    Shown,
    /// Not at all: the line before says what the rows are.
    Hidden,
    /// A title in place of the first heading, starting where the block does, the rows two spaces
    /// further in below it.
    Titled(String),
}

#[derive(Clone, Debug)]
pub struct Column {
    pub title: String,
    pub align: Align,
    /// In text, the column's width (a wider cell pushes the rest of its row along); `None` fits
    /// the widest cell.
    pub width: Option<usize>,
    /// In text, the spaces before the column (none before the first).
    pub gap: usize,
}

impl Column {
    pub fn left(title: &str) -> Self {
        Column {
            title: title.into(),
            align: Align::Left,
            width: None,
            gap: 2,
        }
    }

    pub fn right(title: &str) -> Self {
        Column {
            align: Align::Right,
            ..Column::left(title)
        }
    }

    /// Text layout: `width` characters, `gap` spaces before.
    pub fn fixed(self, width: usize, gap: usize) -> Self {
        Column {
            width: Some(width),
            gap,
            ..self
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

pub struct Row {
    pub cells: Vec<Cell>,
    /// The earlier run's figure; `None` where it lacked it.
    pub baseline: Option<String>,
    /// This run's figure less the earlier run's, where both have it.
    pub delta: Option<String>,
    /// Lines under the row that detail it (the first rows where a method departs from the
    /// logged advantages).
    pub details: Vec<Text>,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    Text(Text),
    /// A rule's outcome (why it does not apply, where it does not, is the row's detail).
    Verdict(Verdict),
}

impl<T: Into<Text>> From<T> for Cell {
    fn from(text: T) -> Self {
        Cell::Text(text.into())
    }
}

/// What the baseline column shows where the earlier run lacks the figure.
const NO_BASELINE: &str = "—";

impl Table {
    /// Columns titled `titles`, the first aligned left (labels) and the rest right (figures).
    pub fn new(titles: &[&str]) -> Self {
        let columns = titles
            .iter()
            .enumerate()
            .map(|(i, t)| {
                if i == 0 {
                    Column::left(t)
                } else {
                    Column::right(t)
                }
            })
            .collect();
        Table::of(columns)
    }

    pub fn of(columns: Vec<Column>) -> Self {
        Table {
            columns,
            rows: Vec::new(),
            baseline_at: None,
            header: Header::Shown,
            omitted: None,
        }
    }

    pub fn header(mut self, header: Header) -> Self {
        self.header = header;
        self
    }

    /// Shows the baseline column before column `at`, when `shown`.
    pub fn baseline(mut self, at: usize, shown: bool) -> Self {
        self.baseline_at = shown.then_some(at);
        self
    }

    pub fn row(&mut self, cells: Vec<Cell>) -> &mut Row {
        self.rows.push(Row {
            cells,
            baseline: None,
            delta: None,
            details: Vec::new(),
        });
        self.rows.last_mut().expect("a row was pushed")
    }

    /// The columns as shown, the baseline column among them.
    pub fn shown_columns(&self) -> Vec<Column> {
        let mut columns = self.columns.clone();
        if let Some(at) = self.baseline_at {
            columns.insert(at, Column::right("baseline"));
            columns.insert(at + 1, Column::right("Δ"));
        }
        columns
    }

    /// The rows as shown, in order: each row's cells (the baseline column's among them) and
    /// its details, and the line saying what was left out where it was.
    pub fn body(&self) -> Vec<Line> {
        let mut lines = Vec::new();
        for (i, row) in self.rows.iter().enumerate() {
            let mut cells = row.cells.clone();
            if let Some(at) = self.baseline_at {
                let value = row.baseline.as_deref().unwrap_or(NO_BASELINE);
                cells.insert(at, Cell::from(value));
                cells.insert(
                    at + 1,
                    Cell::from(row.delta.as_deref().unwrap_or(NO_BASELINE)),
                );
            }
            lines.push(Line::Cells(cells));
            lines.extend(row.details.iter().map(|d| Line::Across(d.clone(), 1)));
            if let Some((_, text)) = self.omitted.as_ref().filter(|(at, _)| *at == i) {
                lines.push(Line::Across(text.clone(), 0));
            }
        }
        lines
    }
}

/// A line of a table's body.
pub enum Line {
    Cells(Vec<Cell>),
    /// Text across the table, this many levels in from the rows (details 1, an omission 0).
    Across(Text, usize),
}
