//! ProxMO: Polarized Signal Controller + Proximity-based Soft Aggregation (Fang et al. 2026,
//! arXiv 2602.19225, Eq. 5–12; `spec-proxmo-gigpo.md` §3).
//!
//! A(a_t^(i)) = Ã^E(τ_i) + ω·A^S(a_t^(i))                                          (Eq. 12)
//! - PSC (Eq. 6–7): Ã^E = w(R, p_g)·A^E, w = 1 + β·f, with d = 1 − p and the power form of the
//!   reference code: f(success) = σ(d^α) − ½, f(failure) = σ(−p^α) − ½ (`linear`: σ(α·d) − ½,
//!   σ(−α·p) − ½). p_g is the group's success rate.
//! - PSA (Eq. 8–11): TF-IDF vectors of `obs` (see [`super::tfidf`]), fitted once per batch (per
//!   iteration, or the whole input without an `iteration` column); w_ij = softmax_j(sim(i,j)/τ) over
//!   the rows j of i's group (scope `group`) or of i's group at the same step position (`same_t`);
//!   B_i = Σ_j w_ij R_j and A^S_i = R_i − B_i, with R the discounted returns (γ).
//!   Computed per group over distinct texts (O(Σ U_g²) sparse dot products), never as a dense
//!   batch × batch matrix. If the vocabulary is empty, A^S = 0 for every row of that fit.
//!
//! Profiles (reference: ProxMO-RL `core_proxmo.py::compute_proxmo_outcome_advantage`, mode
//! `soft_grouping`):
//! - `paper`: A^E is the z-score over trajectories, α = 4, β = 0.1, p = share of successful
//!   trajectories, the weight chosen by the trajectory's success, no penalty.
//! - `verl`: A^E = score − μ over step rows (`soft_grouping` forces `remove_std`), α = 4,
//!   β = 0.05/(σ(1) − ½) = 0.216395, p = clamp(row mean of scores, 0, 1) (0 for a one-row group),
//!   success = row score > 0.5, invalid penalty 0.1 after discounting, τ = 0.1.

use super::group_stats::{episode_advantages, episode_scores, episode_stats, step_returns, Norm};
use super::tfidf::{fit, Corpus, UNIT_NORM};
use super::{Advantages, Values};
use crate::batch::StepBatch;
use crate::error::{Error, Result};
use crate::profile::{Conventions, Profile};
use crate::schema::columns::{ITERATION, OBS};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

/// σ(1) − ½, the largest |f|.
pub const F_MAX: f64 = 0.2310585786300049;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PscForm {
    Power,
    Linear,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SuccessRate {
    /// Share of the group's trajectories that succeeded (paper).
    Trajectories,
    /// clamp(row-level mean of the episode scores, 0, 1), success = row score > 0.5 (reference code).
    ClampedRowMean,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PsaScope {
    /// Every row of the group (reference code, App. A.2).
    Group,
    /// Only rows of the group at the same step position (the literal Eq. 10).
    #[serde(alias = "same-t")]
    SameT,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Params {
    #[serde(flatten)]
    pub conv: Conventions,
    /// Episode normalisation: `mean_std` (paper Eq. 5) or `mean` (reference `soft_grouping`).
    pub episode_norm: Norm,
    /// Whether PSC modulates the episode term.
    pub psc: bool,
    pub psc_form: PscForm,
    /// α, the exponent (power form) or slope (linear form).
    pub psc_alpha: f64,
    /// β; ignored when `psc_target_range` is set.
    pub psc_beta: f64,
    /// The code's parametrisation: β = target / (σ(1) − ½).
    pub psc_target_range: Option<f64>,
    pub success_rate: SuccessRate,
    /// τ, the softmax temperature of PSA.
    pub tau: f64,
    pub psa_scope: PsaScope,
    pub max_features: u64,
    /// ω, the weight of the step term.
    pub omega: f64,
}

impl Params {
    pub fn paper() -> Self {
        Params {
            conv: Conventions::of(Profile::Paper),
            episode_norm: Norm::MeanStd,
            psc: true,
            psc_form: PscForm::Power,
            psc_alpha: 4.0,
            psc_beta: 0.1,
            psc_target_range: None,
            success_rate: SuccessRate::Trajectories,
            tau: 0.1,
            psa_scope: PsaScope::Group,
            max_features: 1024,
            omega: 1.0,
        }
    }

    pub fn verl() -> Self {
        Params {
            conv: Conventions::of(Profile::Verl),
            episode_norm: Norm::Mean,
            psc_beta: 0.05 / F_MAX,
            success_rate: SuccessRate::ClampedRowMean,
            ..Self::paper()
        }
    }

    pub fn preset(profile: Profile) -> Self {
        match profile {
            Profile::Paper => Self::paper(),
            Profile::Verl => Self::verl(),
        }
    }

    pub fn beta(&self) -> f64 {
        self.psc_target_range.map_or(self.psc_beta, |t| t / F_MAX)
    }

    pub fn check(&self) -> Result<()> {
        if self.max_features == 0 {
            return Err(Error::Param(
                "proxmo.max_features must be at least 1".into(),
            ));
        }
        Ok(())
    }

    /// w(success, p) of the PSC (Eq. 7).
    pub fn weight(&self, success: bool, p: f64) -> f64 {
        let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
        let (a, d) = (self.psc_alpha, 1.0 - p);
        let f = match (self.psc_form, success) {
            (PscForm::Power, true) => sigmoid(d.powf(a)) - 0.5,
            (PscForm::Power, false) => sigmoid(-p.powf(a)) - 0.5,
            (PscForm::Linear, true) => sigmoid(a * d) - 0.5,
            (PscForm::Linear, false) => sigmoid(-a * p) - 0.5,
        };
        1.0 + self.beta() * f
    }
}

/// Columns `adv_proxmo`, `proxmo_episode` (Ã^E), `proxmo_weight` (w), `proxmo_success_rate` (p),
/// `proxmo_step` (A^S), `proxmo_baseline` (B), `proxmo_step_return` (R_t).
pub fn advantages(batch: &StepBatch, params: &Params) -> Result<Advantages> {
    let conv = &params.conv;
    let scores = episode_scores(batch, conv);
    let stats = episode_stats(batch, &scores, conv.stats_over, conv.std_ddof);
    let plain = episode_advantages(batch, &scores, &stats, params.episode_norm, conv.eps);

    // PSC: p per group, success per row, weight per row.
    let p_group: Vec<f64> = match params.success_rate {
        SuccessRate::Trajectories => batch
            .groups
            .iter()
            .map(|g| {
                g.trajs
                    .iter()
                    .filter(|&&t| batch.trajs[t as usize].success)
                    .count() as f64
                    / g.trajs.len() as f64
            })
            .collect(),
        SuccessRate::ClampedRowMean => stats.mean.iter().map(|m| m.clamp(0.0, 1.0)).collect(),
    };
    let mut weight = vec![1.0; batch.len()];
    let mut p_row = vec![0.0; batch.len()];
    for r in 0..batch.len() {
        let p = p_group[batch.group_of_row[r] as usize];
        p_row[r] = p;
        if params.psc {
            let success = match params.success_rate {
                SuccessRate::Trajectories => batch.trajs[batch.traj_of_row[r] as usize].success,
                SuccessRate::ClampedRowMean => scores[r] > 0.5,
            };
            weight[r] = params.weight(success, p);
        }
    }
    let episode: Vec<f64> = plain.iter().zip(&weight).map(|(a, w)| a * w).collect();

    let returns = step_returns(batch, conv)?;
    let (baseline, empty_fits) = soft_baselines(batch, &returns, params)?;
    let step: Vec<f64> = returns
        .iter()
        .zip(&baseline)
        .map(|(r, b)| b.map_or(0.0, |b| r - b))
        .collect();
    let baseline: Vec<f64> = baseline
        .iter()
        .zip(&returns)
        .map(|(b, r)| b.unwrap_or(*r))
        .collect();
    let advantage = episode
        .iter()
        .zip(&step)
        .map(|(e, s)| e + params.omega * s)
        .collect();
    let mut out = Advantages::new("proxmo", advantage)
        .part("proxmo", "episode", Values::F64(episode))
        .part("proxmo", "weight", Values::F64(weight))
        .part("proxmo", "success_rate", Values::F64(p_row))
        .part("proxmo", "step", Values::F64(step))
        .part("proxmo", "baseline", Values::F64(baseline))
        .part("proxmo", "step_return", Values::F64(returns));
    if !batch.has(OBS) {
        out.notes.push("proxmo: no `obs` column, so no TF-IDF vocabulary: A^S = 0 and ProxMO reduces to its episode term".into());
    } else if empty_fits > 0 {
        out.notes.push(format!(
            "proxmo: {} had an empty vocabulary (observations with only one-character tokens); A^S = 0 for their rows, as the reference code does",
            crate::wording::plural(empty_fits, "TF-IDF fit")
        ));
    }
    Ok(out)
}

/// B_i for every row (None where the fit's vocabulary is empty) and the number of empty fits.
fn soft_baselines(
    batch: &StepBatch,
    returns: &[f64],
    params: &Params,
) -> Result<(Vec<Option<f64>>, usize)> {
    // Fit scopes: one per iteration, or the whole batch.
    let mut scopes: Vec<Vec<usize>> = Vec::new();
    if batch.has(ITERATION) {
        let mut by_iteration: std::collections::BTreeMap<Option<i64>, Vec<usize>> =
            Default::default();
        for (g, group) in batch.groups.iter().enumerate() {
            by_iteration.entry(group.iteration).or_default().push(g);
        }
        scopes.extend(by_iteration.into_values());
    } else {
        scopes.push((0..batch.groups.len()).collect());
    }
    // Scopes and groups are independent: rayon spreads them over the cores (nested in whatever
    // parallel work called the method).
    let results: Vec<Option<Vec<(u32, f64)>>> = scopes
        .par_iter()
        .map(|groups| scope_baselines(batch, groups, returns, params))
        .collect();
    let mut baseline = vec![None; batch.len()];
    let mut empty_fits = 0;
    for result in results {
        match result {
            Some(values) => {
                for (row, value) in values {
                    baseline[row as usize] = Some(value);
                }
            }
            None => empty_fits += 1,
        }
    }
    Ok((baseline, empty_fits))
}

/// One fit scope: the TF-IDF fit over its rows, then B for every row of its groups; `None` when
/// the vocabulary is empty.
///
/// The fit's documents are each group's distinct observations, read from the batch's interned
/// states ([`StepBatch::states`], which GiGPO, GraphGPO and `analyze` share) rather than hashed
/// again: a row's source node stands for its text within its group. A row without an observation
/// (a node of its own) and a row with an empty one are the group's one empty document, as the fit
/// reads a missing text as empty. A text in two groups is two documents with the same counts,
/// which leaves the fit's totals, document frequencies and term numbers as over the scope's
/// distinct texts, and every vector the same to the bit.
///
/// The cosines and the softmax are the equations' in another order than the ProxMO code (which
/// computes in float32): the lines every text of a group has are summed once, and one shift
/// serves a whole group's softmax; B agrees with the row-by-row composition to rounding (1e-13
/// in the tests).
fn scope_baselines(
    batch: &StepBatch,
    groups: &[usize],
    returns: &[f64],
    params: &Params,
) -> Option<Vec<(u32, f64)>> {
    let obs = batch.texts(OBS);
    let states = batch.states();
    // Each group's rows are consecutive in `rows`; a row's document is numbered within its group
    // (its distinct texts in first-seen order), and group k's are the fit's from `spans[k].1`.
    let mut rows: Vec<u32> = Vec::with_capacity(batch.len());
    let mut doc_of_row: Vec<u32> = Vec::with_capacity(batch.len());
    let mut documents: Vec<(&str, u64)> = Vec::new();
    let mut spans = Vec::with_capacity(groups.len());
    let mut doc_of_node = Vec::new();
    for &g in groups {
        let (start, first) = (rows.len(), documents.len());
        doc_of_node.clear();
        doc_of_node.resize(states.nodes(g).len(), u32::MAX);
        let mut empty = u32::MAX;
        for &(row, source, _) in states.steps(g) {
            let text = obs.and_then(|o| o.get(row as usize)).unwrap_or("");
            let doc = if text.is_empty() {
                &mut empty
            } else {
                &mut doc_of_node[source as usize]
            };
            if *doc == u32::MAX {
                *doc = (documents.len() - first) as u32;
                documents.push((text, 0));
            }
            documents[first + *doc as usize].1 += 1;
            rows.push(row);
            doc_of_row.push(*doc);
        }
        spans.push((start..rows.len(), first, documents.len() - first));
    }
    let corpus = fit(documents.into_iter(), params.max_features as usize);
    if corpus.vocabulary_size == 0 {
        return None;
    }
    // Each worker reuses its buffers from one group to the next.
    let parts: Vec<Vec<(u32, f64)>> = spans
        .par_iter()
        .fold(
            || (Scratch::default(), Vec::new()),
            |(mut scratch, mut out), (span, first, u)| {
                let group = Group {
                    corpus: &corpus,
                    first: *first as u32,
                    u: *u,
                };
                let (rows, docs) = (&rows[span.clone()], &doc_of_row[span.clone()]);
                group.baselines(batch, rows, docs, returns, params, &mut scratch, &mut out);
                (scratch, out)
            },
        )
        .map(|(_, out)| out)
        .collect();
    Some(parts.into_iter().flatten().collect())
}

/// One group's documents: the fit's `first..first + u`.
struct Group<'a> {
    corpus: &'a Corpus,
    first: u32,
    u: usize,
}

/// Buffers a worker reuses from one group (and same-t subset) to the next.
#[derive(Default)]
struct Scratch {
    /// The group's (step position, row, document), ordered by position (`same_t`).
    by_t: Vec<(u32, u32, u32)>,
    subset_rows: Vec<u32>,
    subset_docs: Vec<u32>,
    /// Each document's distinct-text index in the subset (`u32::MAX` where absent), each
    /// distinct text's document, count and return sum, and each row's distinct text.
    slot: Vec<u32>,
    distinct: Vec<u32>,
    count: Vec<f64>,
    sum: Vec<f64>,
    slot_of_row: Vec<u32>,
    /// The subset's terms outside its common lines numbered in ascending order (each term's
    /// number, each number's term), its term-major weights, the common lines' terms and counts,
    /// each text's σ·x and inverse norm, and the matrix [`similarities`] and [`soft_values`] work
    /// in.
    column: Vec<u32>,
    term_of: Vec<u32>,
    common: Vec<u32>,
    common_count: Vec<u32>,
    shared: Vec<f64>,
    lines: LineBuckets,
    by_term: Vec<f64>,
    norm: Vec<f64>,
    active: Vec<u32>,
    sims: Vec<f64>,
    num: Vec<f64>,
    den: Vec<f64>,
    value: Vec<f64>,
}

/// A subset's distinct lines, each with the texts that have it, in ascending order: bucketed by
/// the line's first count (unique to it) instead of sorted.
#[derive(Default)]
struct LineBuckets {
    /// Each line's bucket, by its first count (all unset between subsets).
    slot: Vec<u32>,
    lines: Vec<(u32, u32)>,
    /// Bucket k's texts are `texts[start[k]..start[k + 1]]`.
    start: Vec<u32>,
    texts: Vec<u32>,
    cursor: Vec<u32>,
}

impl LineBuckets {
    /// Buckets the lines of texts 0..u (`lines_of`); a line without kept terms adds nothing to
    /// a vector and is left out.
    fn fill<'c>(
        &mut self,
        corpus: &Corpus,
        u: usize,
        lines_of: impl Fn(usize) -> &'c [(u32, u32)],
    ) {
        let with_terms = |b: usize| lines_of(b).iter().filter(|line| line.0 != line.1);
        self.lines.clear();
        self.start.clear();
        if self.slot.len() < corpus.counts_end() {
            self.slot.resize(corpus.counts_end(), u32::MAX);
        }
        for b in 0..u {
            for &line in with_terms(b) {
                let slot = &mut self.slot[line.0 as usize];
                if *slot == u32::MAX {
                    *slot = self.lines.len() as u32;
                    self.lines.push(line);
                    self.start.push(0);
                }
                self.start[*slot as usize] += 1;
            }
        }
        let mut end = 0;
        for start in self.start.iter_mut() {
            (*start, end) = (end, end + *start);
        }
        self.start.push(end);
        self.texts.clear();
        self.texts.resize(end as usize, 0);
        self.cursor.clear();
        self.cursor
            .extend_from_slice(&self.start[..self.lines.len()]);
        for b in 0..u {
            for &line in with_terms(b) {
                let at = &mut self.cursor[self.slot[line.0 as usize] as usize];
                self.texts[*at as usize] = b as u32;
                *at += 1;
            }
        }
        for &line in &self.lines {
            self.slot[line.0 as usize] = u32::MAX;
        }
    }

    /// (line, the texts that have it, ascending, a text as often as it has the line).
    fn runs(&self) -> impl Iterator<Item = ((u32, u32), &[u32])> + Clone + '_ {
        self.lines
            .iter()
            .zip(self.start.windows(2))
            .map(|(&line, run)| (line, &self.texts[run[0] as usize..run[1] as usize]))
    }
}

impl Group<'_> {
    /// Pushes (row, B) for every row of the group; `docs[i]` is the document of `rows[i]`,
    /// numbered within the group.
    #[allow(clippy::too_many_arguments)]
    fn baselines(
        &self,
        batch: &StepBatch,
        rows: &[u32],
        docs: &[u32],
        returns: &[f64],
        params: &Params,
        scratch: &mut Scratch,
        out: &mut Vec<(u32, f64)>,
    ) {
        match params.psa_scope {
            PsaScope::Group => self.aggregate(rows, docs, returns, params.tau, scratch, out),
            PsaScope::SameT => {
                // Subsets by ascending position, each with its rows in the group's order.
                let mut by_t = std::mem::take(&mut scratch.by_t);
                let mut subset_rows = std::mem::take(&mut scratch.subset_rows);
                let mut subset_docs = std::mem::take(&mut scratch.subset_docs);
                by_t.clear();
                by_t.extend(
                    rows.iter()
                        .zip(docs)
                        .map(|(&r, &d)| (batch.position[r as usize], r, d)),
                );
                by_t.sort_by_key(|&(t, _, _)| t);
                for part in by_t.chunk_by(|a, b| a.0 == b.0) {
                    subset_rows.clear();
                    subset_rows.extend(part.iter().map(|p| p.1));
                    subset_docs.clear();
                    subset_docs.extend(part.iter().map(|p| p.2));
                    self.aggregate(
                        &subset_rows,
                        &subset_docs,
                        returns,
                        params.tau,
                        scratch,
                        out,
                    );
                }
                (scratch.by_t, scratch.subset_rows, scratch.subset_docs) =
                    (by_t, subset_rows, subset_docs);
            }
        }
    }

    /// B_i = Σ_j softmax_j(sim(i,j)/τ)·R_j over `rows`, computed over their distinct texts: rows
    /// with the same text share similarities, so each distinct text carries its count and its
    /// return sum. Pushes (row, B) for every row; `docs[i]` is the document of `rows[i]`.
    fn aggregate(
        &self,
        rows: &[u32],
        docs: &[u32],
        returns: &[f64],
        tau: f64,
        s: &mut Scratch,
        out: &mut Vec<(u32, f64)>,
    ) {
        s.slot.clear();
        s.slot.resize(self.u, u32::MAX);
        s.distinct.clear();
        s.count.clear();
        s.sum.clear();
        s.slot_of_row.clear();
        for (&r, &d) in rows.iter().zip(docs) {
            let k = &mut s.slot[d as usize];
            if *k == u32::MAX {
                *k = s.distinct.len() as u32;
                s.distinct.push(d);
                s.count.push(0.0);
                s.sum.push(0.0);
            }
            s.count[*k as usize] += 1.0;
            s.sum[*k as usize] += returns[r as usize];
            s.slot_of_row.push(*k);
        }
        let u = s.distinct.len();
        // Each distinct line of the subset with the texts that have it (most texts of a group
        // share most of their lines: a room, an inventory, the task).
        let first = self.first;
        s.lines
            .fill(self.corpus, u, |b| self.corpus.lines(first + s.distinct[b]));
        let runs = s.lines.runs();
        // A line every text has once (a room, a task) adds the same counts to every text's
        // vector: those lines' counts are summed once (`common`) and the matrix holds only the
        // other lines' terms, numbered in ascending order (`column` and `common_count` are all
        // unset between subsets: only the terms set here are reset at the end). A run lists its
        // texts in ascending order, so u entries are every text once.
        let is_common = |texts: &[u32]| texts.len() == u && texts.windows(2).all(|w| w[0] != w[1]);
        s.term_of.clear();
        s.common.clear();
        for (line, texts) in runs.clone() {
            let common = is_common(texts);
            for &(t, c) in self.corpus.counts(line) {
                let t = t as usize;
                if t >= s.column.len() {
                    s.column.resize(t + 1, u32::MAX);
                    s.common_count.resize(t + 1, 0);
                }
                if common {
                    if s.common_count[t] == 0 {
                        s.common.push(t as u32);
                    }
                    s.common_count[t] += c;
                } else if s.column[t] == u32::MAX {
                    s.column[t] = 0;
                    s.term_of.push(t as u32);
                }
            }
        }
        s.term_of.sort_unstable();
        for (k, &t) in s.term_of.iter().enumerate() {
            s.column[t as usize] = k as u32;
        }
        // `by_term[k * stride + b]`: distinct text b's count of the subset's k-th term outside
        // the common lines (0 where absent, and in the padding up to `stride`, which the tiles
        // read), added up line by line, a term's row at a time; then weighted by idf.
        let stride = u.next_multiple_of(TILE_COLUMNS);
        s.by_term.clear();
        s.by_term.resize(s.term_of.len() * stride, 0.0);
        for (line, texts) in runs {
            if is_common(texts) {
                continue;
            }
            for &(t, c) in self.corpus.counts(line) {
                let k = s.column[t as usize];
                let row = &mut s.by_term[k as usize * stride..][..stride];
                for &b in texts {
                    row[b as usize] += c as f64;
                }
            }
        }
        let common = Common::weigh(
            &mut s.by_term,
            stride,
            &s.term_of,
            &s.common,
            &s.common_count,
            self.corpus,
            &mut s.shared,
        );
        for &t in &s.term_of {
            s.column[t as usize] = u32::MAX;
        }
        for &t in &s.common {
            s.common_count[t as usize] = 0;
        }
        similarities(&s.by_term, stride, u, &mut s.active, &mut s.sims);
        common.cosines(&mut s.sims, stride, u, &s.shared, &mut s.norm);
        soft_values(
            &mut s.sims,
            stride,
            &s.count,
            &s.sum,
            tau,
            &mut s.num,
            &mut s.den,
            &mut s.value,
        );
        out.extend(
            rows.iter()
                .zip(&s.slot_of_row)
                .map(|(&r, &k)| (r, s.value[k as usize])),
        );
    }
}

/// The common lines' part of every dot product: with a text's weights w_a = c_a·idf split into
/// the common lines' σ and the rest x_a, w_a·w_b = σ·σ + σ·x_a + σ·x_b + x_a·x_b.
struct Common {
    /// σ·σ.
    squared: f64,
}

impl Common {
    /// Weights the term-major counts by idf (x), writes each text's σ·x_a into `shared`
    /// (`stride` long) and sums σ·σ over the common lines' terms.
    fn weigh(
        by_term: &mut [f64],
        stride: usize,
        term_of: &[u32],
        common: &[u32],
        common_count: &[u32],
        corpus: &Corpus,
        shared: &mut Vec<f64>,
    ) -> Common {
        shared.clear();
        shared.resize(stride, 0.0);
        for (row, &t) in by_term.chunks_exact_mut(stride).zip(term_of) {
            let idf = corpus.idf(t);
            let sigma = common_count[t as usize] as f64 * idf;
            for w in row.iter_mut() {
                *w *= idf;
            }
            if sigma != 0.0 {
                for (x, s) in row.iter().zip(shared.iter_mut()) {
                    *s += sigma * x;
                }
            }
        }
        let squared = common
            .iter()
            .map(|&t| {
                let sigma = common_count[t as usize] as f64 * corpus.idf(t);
                sigma * sigma
            })
            .sum();
        Common { squared }
    }

    /// Turns the dot products x_a·x_b on and above the diagonal (from [`similarities`]) into the
    /// cosines of the whole vectors there, divided once more by (1 + 1e-8) per vector as the
    /// ProxMO code does; a text without terms has cosine 0 with every text. (`norm`: a buffer.)
    fn cosines(
        &self,
        sims: &mut [f64],
        stride: usize,
        u: usize,
        shared: &[f64],
        norm: &mut Vec<f64>,
    ) {
        norm.clear();
        norm.extend((0..u).map(|a| {
            let n = (self.squared + 2.0 * shared[a] + sims[a * stride + a]).sqrt();
            if n > 0.0 {
                1.0 / (n * UNIT_NORM)
            } else {
                0.0
            }
        }));
        #[inline(always)]
        fn scale(
            squared: f64,
            sims: &mut [f64],
            stride: usize,
            u: usize,
            shared: &[f64],
            norm: &[f64],
        ) {
            for a in 0..u {
                let (common, inverse) = (squared + shared[a], norm[a]);
                let row = &mut sims[a * stride + a..a * stride + u];
                for ((dot, shared), norm) in row.iter_mut().zip(&shared[a..u]).zip(&norm[a..u]) {
                    *dot = (common + shared + *dot) * inverse * norm;
                }
            }
        }
        // The same element-wise operations, eight lanes wide where the CPU has AVX-512.
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx512f") {
            #[target_feature(enable = "avx512f")]
            unsafe fn wide(
                squared: f64,
                sims: &mut [f64],
                stride: usize,
                u: usize,
                shared: &[f64],
                norm: &[f64],
            ) {
                scale(squared, sims, stride, u, shared, norm)
            }
            // SAFETY: the CPU supports AVX-512F (checked just above).
            return unsafe { wide(self.squared, sims, stride, u, shared, norm) };
        }
        scale(self.squared, sims, stride, u, shared, norm)
    }
}

/// The largest shift/τ one shift serves a group at: similarities are ≥ 0, so every
/// e^((s − shift)/τ) then stays above e^−300, far from underflow, whatever a row's own largest
/// similarity is.
const SHIFT_LIMIT: f64 = 300.0;

/// For each distinct text a: Σ_b e^((sim(a,b) − m)/τ)·sum_b over the same with count_b, from the
/// similarities on and above the diagonal (`num` and `den`: buffers).
///
/// The softmax is the same for any shift m, so one serves the whole matrix: the largest
/// self-similarity (cosines of non-negative vectors lie in [0, it], up to rounding), when
/// m/τ ≤ [`SHIFT_LIMIT`]. Then e^((sim(a,b) − m)/τ) = e^((sim(b,a) − m)/τ) is computed once per
/// pair, for row a and for row b: half the exponentials of a row-by-row softmax, and the lower
/// triangle is never needed. Otherwise (τ below 1/300 of the largest similarity) each row is
/// shifted by its own largest value, as the ProxMO code's softmax does, over the mirrored matrix.
/// Sums are taken in another order than a row-by-row softmax: the values agree to rounding
/// (the tests hold them to 1e-13).
#[allow(clippy::too_many_arguments)]
fn soft_values(
    sims: &mut [f64],
    stride: usize,
    count: &[f64],
    sum: &[f64],
    tau: f64,
    num: &mut Vec<f64>,
    den: &mut Vec<f64>,
    value: &mut Vec<f64>,
) {
    let u = count.len();
    let shift = (0..u).map(|a| sims[a * stride + a]).fold(0.0, f64::max);
    value.clear();
    if !(tau > 0.0 && shift / tau <= SHIFT_LIMIT) {
        for a in 1..u {
            for b in 0..a {
                sims[a * stride + b] = sims[b * stride + a];
            }
        }
        value
            .extend((0..u).map(|a| soft_value(&sims[a * stride..a * stride + u], count, sum, tau)));
        return;
    }
    num.clear();
    num.resize(u, 0.0);
    den.clear();
    den.resize(u, 0.0);
    #[cfg(target_arch = "x86_64")]
    if super::exp::agrees() {
        // SAFETY: `agrees` found AVX-512F; every access is within the rows' first u columns.
        unsafe { shared_shift_avx512(sims, stride, count, sum, tau, shift, num, den) };
    } else {
        shared_shift(sims, stride, count, sum, tau, shift, num, den);
    }
    #[cfg(not(target_arch = "x86_64"))]
    shared_shift(sims, stride, count, sum, tau, shift, num, den);
    value.extend(num.iter().zip(den.iter()).map(|(n, d)| n / d));
}

/// [`soft_values`]' sums with a shared shift: row a's terms b ≥ a, each also row b's term a.
#[allow(clippy::too_many_arguments)]
fn shared_shift(
    sims: &[f64],
    stride: usize,
    count: &[f64],
    sum: &[f64],
    tau: f64,
    shift: f64,
    num: &mut [f64],
    den: &mut [f64],
) {
    let u = count.len();
    for a in 0..u {
        let row = &sims[a * stride..a * stride + u];
        let e = ((row[a] - shift) / tau).exp();
        let (mut row_num, mut row_den) = (e * sum[a], e * count[a]);
        for b in a + 1..u {
            let e = ((row[b] - shift) / tau).exp();
            row_num += e * sum[b];
            row_den += e * count[b];
            num[b] += e * sum[a];
            den[b] += e * count[a];
        }
        num[a] += row_num;
        den[a] += row_den;
    }
}

/// [`shared_shift`], eight columns b at a time (masked past u; [`super::exp::exp8`] agrees with
/// libm's exp).
///
/// # Safety
/// The CPU must support AVX-512F; `sims` has u rows of `stride` ≥ u, the others u values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn shared_shift_avx512(
    sims: &[f64],
    stride: usize,
    count: &[f64],
    sum: &[f64],
    tau: f64,
    shift: f64,
    num: &mut [f64],
    den: &mut [f64],
) {
    use std::arch::x86_64::*;
    let u = count.len();
    let (tau, shift) = (_mm512_set1_pd(tau), _mm512_set1_pd(shift));
    let (count, sum) = (count.as_ptr(), sum.as_ptr());
    let (num, den) = (num.as_mut_ptr(), den.as_mut_ptr());
    for a in 0..u {
        let row = sims[a * stride..a * stride + u].as_ptr();
        let (sum_a, count_a) = (_mm512_set1_pd(*sum.add(a)), _mm512_set1_pd(*count.add(a)));
        let (mut row_num, mut row_den) = (_mm512_setzero_pd(), _mm512_setzero_pd());
        for b in (a..u).step_by(8) {
            let lanes: __mmask8 = if u - b >= 8 { 0xff } else { (1 << (u - b)) - 1 };
            let s = _mm512_maskz_loadu_pd(lanes, row.add(b));
            let e = _mm512_maskz_mov_pd(
                lanes,
                super::exp::exp8(_mm512_div_pd(_mm512_sub_pd(s, shift), tau)),
            );
            row_num = _mm512_add_pd(
                row_num,
                _mm512_mul_pd(e, _mm512_maskz_loadu_pd(lanes, sum.add(b))),
            );
            row_den = _mm512_add_pd(
                row_den,
                _mm512_mul_pd(e, _mm512_maskz_loadu_pd(lanes, count.add(b))),
            );
            // Row b's term a, for b > a (the diagonal is row a's alone).
            let columns = if b == a { lanes & !1 } else { lanes };
            let n = _mm512_maskz_loadu_pd(columns, num.add(b));
            _mm512_mask_storeu_pd(
                num.add(b),
                columns,
                _mm512_add_pd(n, _mm512_mul_pd(e, sum_a)),
            );
            let d = _mm512_maskz_loadu_pd(columns, den.add(b));
            _mm512_mask_storeu_pd(
                den.add(b),
                columns,
                _mm512_add_pd(d, _mm512_mul_pd(e, count_a)),
            );
        }
        *num.add(a) += _mm512_reduce_add_pd(row_num);
        *den.add(a) += _mm512_reduce_add_pd(row_den);
    }
}

/// One text's softmax-weighted value from its whole row of similarities, shifted by the row's
/// largest (the fallback of [`soft_values`] and the tests' definition).
fn soft_value(row: &[f64], count: &[f64], sum: &[f64], tau: f64) -> f64 {
    let max = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let (mut num, mut den) = (0.0, 0.0);
    for (b, &s) in row.iter().enumerate() {
        let e = ((s - max) / tau).exp();
        num += e * sum[b];
        den += e * count[b];
    }
    num / den
}

/// Columns of a tile of the similarity matrix (and the padding of `by_term`'s rows).
const TILE_COLUMNS: usize = 16;

/// The dot products x_a·x_b = Σ_k x_a(k)·x_b(k) over the terms k of the term-major weights
/// `by_term` (`u` texts padded to `stride`), for b ≥ a, into the `u × stride` matrix `sims`
/// (`active`: a buffer); below the diagonal is left to [`Common::cosines`].
///
/// Each is the sparse dot product to the last bit: its products are added one by one in
/// ascending term order, each a multiply then an add (never fused). The terms either text lacks
/// add +0, which leaves a sum of non-negative weights' products unchanged (it starts at +0 and is
/// never −0), so a tile of rows and columns runs over every term some row of it has, with its sums
/// in registers (GEMM-like: each weight loaded once per tile, not once per pair); only the tiles
/// on and above the diagonal are computed.
fn similarities(
    by_term: &[f64],
    stride: usize,
    u: usize,
    active: &mut Vec<u32>,
    sims: &mut Vec<f64>,
) {
    let terms = by_term.len() / stride.max(1);
    // Every entry on and above the diagonal is written by a tile: what the buffer held before
    // (from another group) is never read, so it is not cleared.
    if sims.len() < u * stride {
        sims.resize(u * stride, 0.0);
    }
    // The terms some row of a block has: the others add +0 to every sum of its tiles.
    let mut block = |rows: usize, find_active: &mut Active, tile: &mut Tile| {
        for a0 in (0..u).step_by(rows) {
            find_active(a0, active);
            for b0 in (a0 / TILE_COLUMNS * TILE_COLUMNS..u).step_by(TILE_COLUMNS) {
                tile(active, a0, b0, sims);
            }
        }
    };
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU supports AVX-512F (checked just above); the blocks and tiles stay
        // inside `by_term` and `sims` (see `active_avx512` and `tile_avx512`).
        block(
            8,
            &mut |a0, active| unsafe { active_avx512(by_term, stride, a0, active) },
            &mut |active, a0, b0, sims| unsafe {
                tile_avx512(by_term, stride, u, active, a0, b0, sims)
            },
        );
        return;
    }
    block(
        4,
        &mut |a0, active| {
            active.clear();
            active.extend((0..terms as u32).filter(|&k| {
                let at = k as usize * stride + a0;
                by_term[at..at + 4].iter().any(|&w| w != 0.0)
            }));
        },
        &mut |active, a0, b0, sims| tile_plain(by_term, stride, u, active, a0, b0, sims),
    );
}

/// The terms a block of rows has: (a0, the list to fill).
type Active<'a> = dyn FnMut(usize, &mut Vec<u32>) + 'a;

/// The terms (rows of `by_term`) some of the texts a0..a0+8 have, one comparison per term.
///
/// # Safety
/// The CPU must support AVX-512F; a0 + 8 ≤ `stride` (a0 a multiple of 8 below a multiple of 16).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn active_avx512(by_term: &[f64], stride: usize, a0: usize, active: &mut Vec<u32>) {
    use std::arch::x86_64::*;
    active.clear();
    for (k, row) in by_term.chunks_exact(stride).enumerate() {
        let w = _mm512_loadu_pd(row[a0..a0 + 8].as_ptr());
        if _mm512_cmp_pd_mask::<_CMP_NEQ_UQ>(w, _mm512_setzero_pd()) != 0 {
            active.push(k as u32);
        }
    }
}

/// One tile's sums: (the terms its rows have, a0, b0, the matrix).
type Tile<'a> = dyn FnMut(&[u32], usize, usize, &mut [f64]) + 'a;

/// Rows a0..a0+4 × columns b0..b0+16 (the rows that exist) over the `active` terms, with AVX2
/// where the CPU has it (LLVM vectorises the columns; the rows stay separate sums).
fn tile_plain(
    by_term: &[f64],
    stride: usize,
    u: usize,
    active: &[u32],
    a0: usize,
    b0: usize,
    sims: &mut [f64],
) {
    #[inline(always)]
    fn tile(
        by_term: &[f64],
        stride: usize,
        u: usize,
        active: &[u32],
        a0: usize,
        b0: usize,
        sims: &mut [f64],
    ) {
        for half in [b0, b0 + 8] {
            let mut acc = [[0.0f64; 8]; 4];
            for &k in active {
                let col = &by_term[k as usize * stride..][..stride];
                let x: &[f64; 8] = col[half..half + 8].try_into().unwrap();
                let w: &[f64; 4] = col[a0..a0 + 4].try_into().unwrap();
                for i in 0..4 {
                    for j in 0..8 {
                        acc[i][j] += w[i] * x[j];
                    }
                }
            }
            for (i, acc) in acc.iter().enumerate().take(u - a0) {
                sims[(a0 + i) * stride + half..][..8].copy_from_slice(acc);
            }
        }
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        #[target_feature(enable = "avx2")]
        unsafe fn avx2(
            by_term: &[f64],
            stride: usize,
            u: usize,
            active: &[u32],
            a0: usize,
            b0: usize,
            sims: &mut [f64],
        ) {
            tile(by_term, stride, u, active, a0, b0, sims)
        }
        // SAFETY: the CPU supports AVX2 (checked just above).
        return unsafe { avx2(by_term, stride, u, active, a0, b0, sims) };
    }
    tile(by_term, stride, u, active, a0, b0, sims)
}

/// Rows a0..a0+8 × columns b0..b0+16 over the `active` terms: 16 sums in AVX-512 registers, each
/// weight of a row broadcast once per term and each text's weights loaded once per term.
///
/// # Safety
/// The CPU must support AVX-512F. Bounds: `stride` is a multiple of 16 and `by_term` has
/// `active`'s terms × `stride` weights, so a0 + 8 and b0 + 16 stay within a row of it; writes
/// stay within the rows below `u`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn tile_avx512(
    by_term: &[f64],
    stride: usize,
    u: usize,
    active: &[u32],
    a0: usize,
    b0: usize,
    sims: &mut [f64],
) {
    use std::arch::x86_64::*;
    let mut acc = [[_mm512_setzero_pd(); 2]; 8];
    for &k in active {
        let col = &by_term[k as usize * stride..][..stride];
        let x0 = _mm512_loadu_pd(col[b0..b0 + 8].as_ptr());
        let x1 = _mm512_loadu_pd(col[b0 + 8..b0 + 16].as_ptr());
        let w = &col[a0..a0 + 8];
        for (acc, &w) in acc.iter_mut().zip(w) {
            let w = _mm512_set1_pd(w);
            acc[0] = _mm512_add_pd(acc[0], _mm512_mul_pd(w, x0));
            acc[1] = _mm512_add_pd(acc[1], _mm512_mul_pd(w, x1));
        }
    }
    for (i, acc) in acc.iter().enumerate().take(u - a0) {
        let out = &mut sims[(a0 + i) * stride + b0..][..16];
        _mm512_storeu_pd(out[..8].as_mut_ptr(), acc[0]);
        _mm512_storeu_pd(out[8..].as_mut_ptr(), acc[1]);
    }
}

#[cfg(test)]
// The spec prints its vectors to 6 decimals (0.707107 is 1/√2 as printed, not a stand-in for it).
#[allow(clippy::approx_constant)]
mod tests {
    use super::*;
    use crate::batch::testing::{assert_close, batch, spec_4_1};
    use crate::methods::part;

    #[test]
    fn vector_4_7_psc_weights() {
        // spec-proxmo-gigpo.md §4.7: (p, power β=0.1 s/f, power β=0.216395 s/f, linear β=0.1 s/f).
        let table = [
            (0.0, 1.0231, 1.0000, 1.0500, 1.0000, 1.0482, 1.0000),
            (0.125, 1.0142, 1.0000, 1.0308, 1.0000, 1.0471, 0.9878),
            (0.25, 1.0078, 0.9999, 1.0170, 0.9998, 1.0453, 0.9769),
            (0.5, 1.0016, 0.9984, 1.0034, 0.9966, 1.0381, 0.9619),
            (0.75, 1.0001, 0.9922, 1.0002, 0.9830, 1.0231, 0.9547),
            (0.875, 1.0000, 0.9858, 1.0000, 0.9692, 1.0122, 0.9529),
            (1.0, 1.0000, 0.9769, 1.0000, 0.9500, 1.0000, 0.9518),
        ];
        let paper = Params::paper();
        let code = Params {
            psc_target_range: Some(0.05),
            ..Params::paper()
        };
        let linear = Params {
            psc_form: PscForm::Linear,
            ..Params::paper()
        };
        for (p, ps, pf, cs, cf, ls, lf) in table {
            for (params, s, f) in [(&paper, ps, pf), (&code, cs, cf), (&linear, ls, lf)] {
                assert!((params.weight(true, p) - s).abs() < 1e-4, "success p={p}");
                assert!((params.weight(false, p) - f).abs() < 1e-4, "failure p={p}");
            }
        }
        assert!((Params::verl().beta() - 0.216395).abs() < 1e-6);
    }

    #[test]
    fn vector_4_5_proxmo_paper() {
        let a = advantages(&spec_4_1(1.0, None), &Params::paper()).unwrap();
        assert_close(
            part(&a, "proxmo_baseline"),
            &[
                0.2257, 0.2270, 0.9967, 0.2257, 0.2270, 0.0376, 0.2257, 0.0376, 0.2257, 0.2270,
                0.2270, 0.9342, 1.0, 0.9342, 0.9342, 1.0,
            ],
            1e-4,
        );
        assert_close(
            part(&a, "proxmo_step"),
            &[
                0.6768, 0.7230, 0.0033, -0.2257, -0.2270, -0.0376, -0.2257, -0.0376, -0.2257,
                -0.2270, -0.2270, 0.0158, 0.0, -0.0317, 0.0158, 0.0,
            ],
            1e-4,
        );
        let w: Vec<f64> = [1.007845; 3]
            .into_iter()
            .chain([0.999902; 8])
            .chain([1.0; 5])
            .collect();
        assert_close(part(&a, "proxmo_weight"), &w, 1e-6);
        assert_close(
            a.advantage(),
            &[
                2.1886, 2.2347, 1.5151, -0.7256, -0.7270, -0.5375, -0.7256, -0.5375, -0.7256,
                -0.7270, -0.7270, 0.0158, 0.0, -0.0317, 0.0158, 0.0,
            ],
            1e-4,
        );
        // The last column of §4.5: the code's β = 0.216395.
        let code = Params {
            psc_beta: 0.216395,
            ..Params::paper()
        };
        let a = advantages(&spec_4_1(1.0, None), &code).unwrap();
        assert_close(
            a.advantage(),
            &[
                2.2023, 2.2484, 1.5288, -0.7256, -0.7269, -0.5375, -0.7256, -0.5375, -0.7256,
                -0.7269, -0.7269, 0.0158, 0.0, -0.0317, 0.0158, 0.0,
            ],
            1e-4,
        );
    }

    #[test]
    fn vector_4_5_psa_same_t() {
        let p = Params {
            psa_scope: PsaScope::SameT,
            ..Params::paper()
        };
        let a = advantages(&spec_4_1(1.0, None), &p).unwrap();
        assert_close(
            part(&a, "proxmo_step"),
            &[
                0.6769, 0.6429, 0.0010, -0.2256, -0.3071, -0.0003, -0.2256, -0.0694, -0.2256,
                -0.3071, -0.0006, 0.0237, 0.0, -0.0238, 0.0, 0.0,
            ],
            1e-4,
        );
    }

    #[test]
    fn vector_4_6_proxmo_verl() {
        let a = advantages(&spec_4_1(10.0, Some(9)), &Params::verl()).unwrap();
        assert_close(
            part(&a, "proxmo_episode"),
            &[
                7.2818, 7.2818, 7.2818, -2.5823, -2.5823, -2.5823, -2.5823, -2.5823, -2.5823,
                -2.6773, -2.5823, 0.0, 0.0, 0.0, 0.0, 0.0,
            ],
            1e-4,
        );
        assert_close(
            part(&a, "proxmo_step"),
            &[
                6.7684, 7.2537, 0.0334, -2.2566, -2.2463, -0.3718, -2.2566, -0.3718, -2.2566,
                -2.3463, -2.2463, 0.1582, 0.0003, -0.3168, 0.1582, 0.0003,
            ],
            1e-4,
        );
        assert_close(
            a.advantage(),
            &[
                14.0502, 14.5355, 7.3152, -4.8388, -4.8286, -2.9541, -4.8388, -2.9541, -4.8388,
                -5.0236, -4.8286, 0.1582, 0.0003, -0.3168, 0.1582, 0.0003,
            ],
            1e-4,
        );
    }

    #[test]
    fn vector_4_7_psa_empty_observation() {
        // Texts ["", "go north", "go north"], returns [1, 0, 0.5] (one trajectory per row, γ irrelevant).
        let b = batch(&[
            ("g", "a", 0, "", 1.0, true),
            ("g", "b", 0, "go north", 0.0, true),
            ("g", "c", 0, "go north", 0.5, true),
        ]);
        let a = advantages(&b, &Params::paper()).unwrap();
        assert_close(
            part(&a, "proxmo_baseline"),
            &[0.5, 0.250017, 0.250017],
            1e-6,
        );
        assert_close(part(&a, "proxmo_step"), &[0.5, -0.250017, 0.249983], 1e-6);
    }

    #[test]
    fn vector_4_7_empty_vocabulary_gives_zero_step_term() {
        let b = batch(&[
            ("g", "a", 0, "", 1.0, true),
            ("g", "b", 0, "a", 0.0, true),
            ("g", "c", 0, "1 2", 0.5, true),
        ]);
        let a = advantages(&b, &Params::verl()).unwrap();
        assert_close(part(&a, "proxmo_step"), &[0.0, 0.0, 0.0], 0.0);
        assert_eq!(a.notes.len(), 1);
    }

    #[test]
    fn tiled_dot_products_are_the_sparse_dot_products_to_the_bit() {
        // Random sparse non-negative weights, group sizes around the tiles' edges: every x_a·x_b
        // on and above the diagonal must be the sum of x_a(k)·x_b(k) over the terms both have,
        // in ascending term order.
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        for (u, terms, density) in [
            (1_usize, 3, 1.0),
            (5, 9, 0.5),
            (8, 40, 0.7),
            (17, 64, 0.3),
            (63, 120, 0.7),
            (130, 90, 0.9),
            (131, 200, 0.05),
        ] {
            let stride = u.next_multiple_of(TILE_COLUMNS);
            let mut by_term = vec![0.0; terms * stride];
            for w in by_term.chunks_mut(stride).flat_map(|row| &mut row[..u]) {
                if next() < density {
                    *w = next() / (1.0 + next() * 1e3);
                }
            }
            let mut sims = Vec::new();
            similarities(&by_term, stride, u, &mut Vec::new(), &mut sims);
            for a in 0..u {
                for b in a..u {
                    let mut dot = 0.0;
                    for k in 0..terms {
                        let (x, y) = (by_term[k * stride + a], by_term[k * stride + b]);
                        if x != 0.0 && y != 0.0 {
                            dot += x * y;
                        }
                    }
                    assert_eq!(
                        sims[a * stride + b].to_bits(),
                        dot.to_bits(),
                        "u={u} sim({a},{b})"
                    );
                }
            }
        }
    }

    #[test]
    fn soft_values_from_the_upper_triangle_are_each_rows_softmax() {
        // Random weights' similarity matrices (sizes around the lanes' edges), returns and counts
        // of both signs, τ of the presets, of user settings and below the shared shift's limit:
        // every text's value, from the lanes and from the scalar loop, must be the softmax over
        // its whole row shifted by the row's largest value, to rounding.
        let mut seed = 0x1234_5678_9abc_def1_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        for (u, tau) in [
            (1_usize, 0.1),
            (7, 0.1),
            (9, 0.01),
            (40, 1.0),
            (131, 0.1),
            (64, 0.004),
            (64, 0.001),
        ] {
            let (stride, terms) = (u.next_multiple_of(TILE_COLUMNS), 30);
            let mut by_term = vec![0.0; terms * stride];
            for w in by_term.chunks_mut(stride).flat_map(|row| &mut row[..u]) {
                if next() < 0.6 {
                    *w = next() * 0.4;
                }
            }
            let mut sims = Vec::new();
            similarities(&by_term, stride, u, &mut Vec::new(), &mut sims);
            let mut whole = sims.clone();
            for a in 0..u {
                for b in 0..a {
                    whole[a * stride + b] = whole[b * stride + a];
                }
            }
            let count: Vec<f64> = (0..u).map(|_| (1.0 + 4.0 * next()).floor()).collect();
            let sum: Vec<f64> = count.iter().map(|c| c * (20.0 * next() - 10.0)).collect();
            let want: Vec<f64> = (0..u)
                .map(|a| soft_value(&whole[a * stride..a * stride + u], &count, &sum, tau))
                .collect();
            let (mut num, mut den, mut got) = (Vec::new(), Vec::new(), Vec::new());
            soft_values(
                &mut sims, stride, &count, &sum, tau, &mut num, &mut den, &mut got,
            );
            let shift = (0..u).map(|a| whole[a * stride + a]).fold(0.0, f64::max);
            let (mut scalar_num, mut scalar_den) = (vec![0.0; u], vec![0.0; u]);
            shared_shift(
                &whole,
                stride,
                &count,
                &sum,
                tau,
                shift,
                &mut scalar_num,
                &mut scalar_den,
            );
            // The scalar loop on its own where the shared shift is allowed (soft_values' choice).
            let paths = if shift / tau <= SHIFT_LIMIT { 2 } else { 1 };
            for a in 0..u {
                let scalar = scalar_num[a] / scalar_den[a];
                for (path, got) in [("soft_values", got[a]), ("scalar", scalar)]
                    .into_iter()
                    .take(paths)
                {
                    assert!(
                        (got - want[a]).abs() <= 1e-13 * want[a].abs().max(1.0),
                        "u={u} τ={tau} a={a} {path}: {got} against {}",
                        want[a]
                    );
                }
            }
        }
    }

    #[test]
    fn baselines_from_interned_states_are_the_scope_fits() {
        // Two iterations (two fits); texts shared between groups and between iterations, missing
        // and empty observations, multi-line texts, a logged next state that a later row has as
        // its observation (a node named from `next_obs` first), a line every text of a group has
        // (g4: summed once) and one a text has twice (g5: not), a term in both: every B must be
        // the one from the fit over each scope's distinct texts (a missing text read as empty),
        // each group's distinct texts in first-seen order, the sparse dot products of their
        // vectors and the scalar softmax, to 1e-13 (the common lines' part is added in another
        // order; the reference computes in float32).
        use crate::schema::columns::{GROUP_ID, NEXT_OBS, REWARD, STEP, TRAJ_ID, VALID};
        use polars::prelude::{Column, DataFrame};
        let room = "You are in the kitchen.\nYou see a fridge 1, a mug 2 and a knife 1.";
        let texts = [
            Some(room),
            Some("You open the fridge 1.\nYou see a mug 2 and an egg 1."),
            None,
            Some(""),
            Some("Nothing happens.\nYou see a fridge 1, a mug 2 and a knife 1."),
            Some("You take the mug 2.\nYou are carrying: a mug 2."),
            Some("You are in the hallway.\nA door 1."),
            Some("You take the mug 2.\nYou see a fridge 1, a mug 2 and a knife 1."),
            Some("You see a fridge 1, a mug 2 and a knife 1.\nYou see a fridge 1, a mug 2 and a knife 1."),
        ];
        /// (iteration, group, trajectory, step, text, next text, reward)
        type Row = (
            i64,
            &'static str,
            &'static str,
            i64,
            usize,
            Option<usize>,
            f64,
        );
        #[rustfmt::skip]
        let rows: [Row; 25] = [
            (1, "g1", "a", 0, 0, None, 0.0), (1, "g1", "a", 1, 1, None, 0.0),
            (1, "g1", "a", 2, 2, Some(5), 0.0),
            (1, "g1", "b", 0, 0, None, 0.0), (1, "g1", "b", 1, 3, None, 0.0),
            (1, "g1", "b", 2, 5, None, 0.0),
            (1, "g1", "c", 0, 2, None, 0.0), (1, "g1", "c", 1, 4, None, 1.0),
            (1, "g2", "d", 0, 4, None, 0.0), (1, "g2", "d", 1, 0, None, 1.0),
            (1, "g2", "e", 0, 6, None, 0.0), (1, "g2", "e", 1, 3, None, 0.0),
            (2, "g3", "f", 0, 0, None, 0.0), (2, "g3", "f", 1, 6, None, 1.0),
            (2, "g3", "g", 0, 1, None, 0.0), (2, "g3", "g", 1, 6, None, 0.0),
            (2, "g3", "h", 0, 2, None, 0.0), (2, "g3", "h", 1, 2, None, 1.0),
            (2, "g4", "i", 0, 0, None, 0.0), (2, "g4", "i", 1, 4, None, 1.0),
            (2, "g4", "j", 0, 7, None, 0.0), (2, "g4", "j", 1, 0, None, 0.0),
            (2, "g4", "j", 2, 4, None, 0.0),
            (2, "g5", "k", 0, 0, None, 0.0), (2, "g5", "k", 1, 8, None, 1.0),
        ];
        let column = |name: &str, values: Vec<Option<&str>>| Column::new(name.into(), values);
        let frame = DataFrame::new(
            rows.len(),
            vec![
                Column::new(ITERATION.into(), rows.map(|r| r.0).to_vec()),
                Column::new(GROUP_ID.into(), rows.map(|r| r.1).to_vec()),
                Column::new(TRAJ_ID.into(), rows.map(|r| r.2).to_vec()),
                Column::new(STEP.into(), rows.map(|r| r.3).to_vec()),
                column(OBS, rows.map(|r| texts[r.4]).to_vec()),
                column(NEXT_OBS, rows.map(|r| r.5.and_then(|t| texts[t])).to_vec()),
                Column::new(REWARD.into(), rows.map(|r| r.6).to_vec()),
                Column::new(VALID.into(), vec![true; rows.len()]),
            ],
        )
        .unwrap();
        let b = StepBatch::new(frame, 0.5, 0.95).unwrap();
        let obs = b.texts(OBS).unwrap();
        // Six terms kept: lines without a kept term (left out of the PSA's lines).
        for (psa_scope, tau, max_features) in [
            (PsaScope::Group, 0.1, 1024),
            (PsaScope::SameT, 0.05, 1024),
            (PsaScope::Group, 0.1, 6),
        ] {
            let params = Params {
                psa_scope,
                tau,
                max_features,
                ..Params::paper()
            };
            let returns = step_returns(&b, &params.conv).unwrap();
            let mut expected = vec![None; b.len()];
            for iteration in [1, 2] {
                let groups: Vec<usize> = (0..b.groups.len())
                    .filter(|&g| b.groups[g].iteration == Some(iteration))
                    .collect();
                let scope: Vec<u32> = groups.iter().flat_map(|&g| b.group_rows(g)).collect();
                let text = |r: u32| obs.get(r as usize).unwrap_or("");
                let mut distinct: Vec<(&str, u64)> = Vec::new();
                for &r in &scope {
                    match distinct.iter().position(|d| d.0 == text(r)) {
                        Some(d) => distinct[d].1 += 1,
                        None => distinct.push((text(r), 1)),
                    }
                }
                let corpus = fit(distinct.iter().copied(), max_features as usize);
                let vector = |r: u32| {
                    let d = distinct.iter().position(|d| d.0 == text(r)).unwrap();
                    corpus.vector(d as u32)
                };
                for &g in &groups {
                    let rows: Vec<u32> = b.group_rows(g).collect();
                    let subsets: Vec<Vec<u32>> = match psa_scope {
                        PsaScope::Group => vec![rows],
                        PsaScope::SameT => {
                            let mut by_t = std::collections::BTreeMap::<u32, Vec<u32>>::new();
                            for r in rows {
                                by_t.entry(b.position[r as usize]).or_default().push(r);
                            }
                            by_t.into_values().collect()
                        }
                    };
                    for subset in subsets {
                        let mut firsts: Vec<u32> = Vec::new();
                        let (mut count, mut sum) = (Vec::new(), Vec::new());
                        for &r in &subset {
                            let k = match firsts.iter().position(|&f| text(f) == text(r)) {
                                Some(k) => k,
                                None => {
                                    firsts.push(r);
                                    count.push(0.0);
                                    sum.push(0.0);
                                    firsts.len() - 1
                                }
                            };
                            count[k] += 1.0;
                            sum[k] += returns[r as usize];
                        }
                        for &r in &subset {
                            let row: Vec<f64> = firsts
                                .iter()
                                .map(|&f| crate::methods::tfidf::tests::dot(&vector(r), &vector(f)))
                                .collect();
                            expected[r as usize] = Some(soft_value(&row, &count, &sum, tau));
                        }
                    }
                }
            }
            let (got, empty_fits) = soft_baselines(&b, &returns, &params).unwrap();
            assert_eq!(empty_fits, 0);
            for (row, (got, expected)) in got.iter().zip(&expected).enumerate() {
                let (got, expected) = (got.unwrap(), expected.unwrap());
                assert!(
                    (got - expected).abs() <= 1e-13,
                    "{psa_scope:?} {max_features} row {row}: {got} against {expected}"
                );
            }
        }
    }

    #[test]
    fn exact_duplicates_only_equal_gigpo_mean_norm_step() {
        // Property (issue 3): a group whose observations are exact duplicates or mutually
        // dissimilar behaves like GiGPO mean_norm's step part up to e^{-1/τ} leakage; with τ small
        // and orthogonal texts the two agree to 1e-9.
        let rows = [
            ("g", "a", 0, "alpha beta", 0.0, true),
            ("g", "a", 1, "gamma delta", 1.0, true),
            ("g", "b", 0, "alpha beta", 0.0, true),
            ("g", "b", 1, "gamma delta", 0.0, true),
            ("g", "c", 0, "alpha beta", 0.0, true),
            ("g", "c", 1, "epsilon zeta", 0.0, true),
        ];
        let b = batch(&rows);
        let p = Params {
            tau: 0.01,
            ..Params::paper()
        };
        let prox = advantages(&b, &p).unwrap();
        let gig = super::super::gigpo::advantages(
            &b,
            &super::super::gigpo::Params {
                mode: Norm::Mean,
                ..super::super::gigpo::Params::paper()
            },
        )
        .unwrap();
        assert_close(
            part(&prox, "proxmo_step"),
            match gig.column("gigpo_step") {
                Some(Values::F64(v)) => v,
                _ => panic!(),
            },
            1e-9,
        );
    }
}
