//! The sections of every document, one function each, from the results to blocks
//! ([`crate::doc`]): the report's ([`report`]), and the terminal views of `credit analyze`
//! ([`analyze`]) and `credit compare` ([`compare`]). A renderer ([`crate::render`]) writes them.

pub mod analyze;
pub mod compare;
pub mod report;

pub use analyze::analyze;
pub use compare::compare;
pub use report::report;

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}
