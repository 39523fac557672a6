//! credit-core: ingest rollout logs into a columnar [`batch::StepBatch`], compute every published
//! group-based advantage estimator over it ([`methods`]), and analyse the result ([`analyses`]).
//!
//! Data flows one way: `ingest` → `batch` → `methods` → `analyses`, driven window by window by
//! [`run`], which the `credit` binary and the Python package both call. Nothing here prints,
//! draws or trains: the binary and the report crate decide how results are shown.

pub mod batch;
pub mod error;
pub mod ingest;
pub mod schema;

pub use batch::StepBatch;
pub use error::{Error, Result};
pub mod analyses;
pub mod graph;
pub mod methods;
pub mod plan;
pub mod profile;
pub mod project;
pub mod request;
pub mod run;
pub mod sequence_matcher;
pub mod table_writer;
pub mod wording;
mod zeroed_pages;
