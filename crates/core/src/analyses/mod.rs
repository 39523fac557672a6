//! Analyses over a batch and the methods' columns: what is in the logs ([`summary`], with the
//! logged SPA/HISR signals of [`progress`]) and how differently the estimators credit the same
//! steps ([`compare`]), and how far they are from the advantages the trainer logged ([`logged`]). Results are plain serialisable
//! structs; the binary renders them as text or JSON.

pub mod against;
pub mod compare;
pub mod graphs;
pub mod logged;
pub mod patterns;
pub mod progress;
pub mod search;
pub mod stats;
pub mod summary;
