//! The sections of every document, one function each, from the results to blocks
//! ([`crate::doc`]): the report's ([`report`]), and the terminal views of `credit analyze`
//! ([`analyze`]) and `credit compare` ([`compare`]). A renderer ([`crate::render`]) writes them.

pub mod analyze;
pub mod compare;
pub mod methods;
pub mod report;
pub mod trainer;

pub use analyze::analyze;
pub use compare::compare;
pub use methods::methods;
pub use report::report;

pub use credit_core::wording::num;

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// The columns that more than one log column could fill, each with what was used (a list, with
/// bullets or as indented lines); `None` when there are none.
fn column_collisions<'a>(
    columns: &[credit_core::schema::ColumnUse],
    bullets: bool,
) -> Option<crate::doc::Block<'a>> {
    let items: Vec<crate::doc::Text> = columns
        .iter()
        .filter(|u| !u.also.is_empty())
        .map(|u| crate::doc::Text::plain(u.describe()))
        .collect();
    (!items.is_empty()).then_some(crate::doc::Block::List {
        title: None,
        items,
        bullets,
    })
}

/// The summary's "worth a look" diagnostics as a bulleted list under `title`; `None` when there
/// are none.
fn diagnostics<'a>(
    s: &credit_core::analyses::summary::Summary,
    title: &str,
) -> Option<crate::doc::Block<'a>> {
    (!s.diagnostics.is_empty()).then(|| crate::doc::Block::List {
        title: Some(title.into()),
        items: s
            .diagnostics
            .iter()
            .map(|d| crate::doc::Text::plain(d.as_str()))
            .collect(),
        bullets: true,
    })
}
