//! `credit methods [METHOD]`: every method and its settings (credit-core's listing, rendered
//! as the other terminal views are), or `--format json`.

use super::Format;
use crate::exit::ExitCode;
use anyhow::Result;
use credit_report::{render::text, sections};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// One method (`gigpo`, an alias such as `dr_grpo`, or one of verl's registry); all when none.
    pub method: Option<String>,
    /// Output format of what is printed.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

pub fn run(args: Args) -> Result<ExitCode> {
    let list = credit_core::methods::listing::listing(args.method.as_deref())?;
    match args.format {
        Format::Json => outln!("{}", serde_json::to_string_pretty(&list)?),
        Format::Text => out!("{}", text::sections(&sections::methods(&list))),
    }
    Ok(ExitCode::Ok)
}
