//! credit-learn: the bridge from `credit-core`'s step batches to `credit-train`, which knows
//! nothing of polars or logs: the trajectories SPA's progress estimator and HISR's segment reward
//! model read ([`signals`]), those models filling a run's missing signals, and the policy samples
//! `credit train policy` trains on ([`samples`]).

pub mod policy;
pub mod samples;
pub mod signals;
