//! `credit compare`'s result over what a run gathered: the comparison, every method scored
//! against `--against`'s, and what the run computed with; as the figures' inputs, JSON and the
//! text sections `credit compare` prints.

use crate::doc::Section;
use crate::{sections, Inputs, RunInfo};
use credit_core::analyses::against::Against;
use credit_core::analyses::compare::Comparison;
use credit_core::run::{Gathered, RunPlan};

pub struct Compared {
    pub gathered: Gathered,
    pub comparison: Comparison,
    pub against: Option<Against>,
    /// The run's notes, with the scoring's.
    pub notes: Vec<String>,
    pub run: RunInfo,
}

impl Compared {
    /// Compares what `run` gathered (`notes`: the run's).
    pub fn new(
        run: &RunPlan,
        gathered: Gathered,
        mut notes: Vec<String>,
    ) -> Result<Compared, credit_core::Error> {
        let comparison = gathered.compare();
        let against = run.against(&gathered)?.map(|(scores, note)| {
            notes.extend(note);
            scores
        });
        Ok(Compared {
            run: RunInfo::of(&run.methods, &notes),
            gathered,
            comparison,
            against,
            notes,
        })
    }

    /// The figures' inputs, when the run gathered a summary (`--plots`).
    pub fn inputs<'a>(&'a self, plan: &RunPlan) -> Option<Inputs<'a>> {
        Some(Inputs {
            summary: self.gathered.summary.as_ref()?,
            comparison: Some(&self.comparison),
            advantages: &self.gathered.advantages,
            proxmo: plan.methods.proxmo(),
            run: self.run.clone(),
            trends: None,
            against: self.against.as_ref(),
        })
    }

    /// `compare --format json`: the comparison, its `metadata` and `against`.
    pub fn json(&self) -> Result<serde_json::Value, serde_json::Error> {
        let mut value = serde_json::to_value(&self.comparison)?;
        value["metadata"] = serde_json::to_value(&self.run)?;
        if let Some(against) = &self.against {
            value["against"] = serde_json::to_value(against)?;
        }
        Ok(value)
    }

    /// The sections `credit compare` prints.
    pub fn sections(&self) -> Vec<Section<'static>> {
        let mut shown = sections::compare(&self.comparison);
        shown.extend(self.against.as_ref().map(sections::compare::against));
        shown
    }
}
