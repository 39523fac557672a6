//! The report's explorer: a bounded selection of groups, each with its trajectories, every step's
//! observation, action, advantages and parts, and its state graph, embedded in `report.html` as
//! JSON that `explorer/explorer.js` draws (data contract: `docs/explorer.md`).
//!
//! Which groups: the ones named with `--explore`, then, in turns, the groups where the methods
//! disagree most, the most singleton-heavy and the failed groups that still made progress. They are
//! chosen while the logs stream by: [`Selector::look`] scores every group of a window (in
//! parallel) and builds the data of those that can still make a list, and [`Selection::add`] keeps
//! the best `max` per criterion (in input order), so memory grows with `--explore-max`, never
//! with the log.

use crate::Error;
use credit_core::analyses::compare::Comparison;
use credit_core::analyses::logged::TOLERANCE;
use credit_core::analyses::stats::spearman;
use credit_core::graph::GroupGraph;
use credit_core::methods::gigpo::anchor_clusters;
use credit_core::methods::{Advantages, Values};
use credit_core::schema::columns::{ACTION, OBS, PROGRESS, PROMPT, REWARD, STEP};
use credit_core::StepBatch;
use serde::{Serialize, Serializer};
use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// The explorer's stylesheet and script, inlined verbatim into `report.html`.
pub const CSS: &str = include_str!("explorer/explorer.css");
pub const JS: &str = include_str!("explorer/explorer.js");

/// A group needs this many steps for its rank correlations to say anything.
pub const MIN_STEPS_FOR_RANKS: usize = 10;

/// A group's standing under one criterion: higher `key` first, then larger groups, then earlier
/// ones (so the result does not depend on how the input was split into windows).
#[derive(Clone, Debug)]
struct Rank {
    key: f64,
    steps: usize,
    seq: u64,
}

impl Rank {
    /// `Less` when `self` ranks before `other`.
    fn order(&self, other: &Rank) -> Ordering {
        other
            .key
            .total_cmp(&self.key)
            .then(other.steps.cmp(&self.steps))
            .then(self.seq.cmp(&other.seq))
    }
}

/// Draws a group's DOT as SVG (Graphviz).
pub type DrawSvg = dyn Fn(&str) -> Result<String, Error>;

/// A group ranked under a criterion, with the reason in words.
type Ranked = (Rank, String, Arc<Group>);

/// What one window offers: groups named with `--explore`, and per criterion (disagreement,
/// singletons, failed progress) its best groups.
pub struct Candidates {
    named: Vec<Arc<Group>>,
    ranked: [Vec<Ranked>; 3],
}

/// Scores a window's groups; shared by the parallel window workers (the floors are updated by
/// [`Selection::add`] as windows arrive in input order).
pub struct Selector {
    named: HashSet<String>,
    max: usize,
    methods: Vec<String>,
    /// The method whose mean advantage colours the graphs' edges.
    graph_method: usize,
    /// Per criterion, the key a group needs to enter its full list (f64 bits; −∞ while not full).
    floors: [AtomicU64; 3],
    named_full: AtomicBool,
}

/// The groups kept so far.
#[derive(Default)]
pub struct Selection {
    named: Vec<Arc<Group>>,
    /// Groups named with `--explore` beyond `max`, and the ids that matched a group.
    named_left_out: usize,
    matched: BTreeSet<String>,
    ranked: [Vec<Ranked>; 3],
}

/// The explorer's data (`<script type="application/json" id="credit-explorer-data">`).
#[derive(Debug, Serialize)]
pub struct Explorer {
    /// Every chosen group's rollouts are one step each: the page shows a prompt and its
    /// responses side by side, not steps and a state graph.
    pub single_turn: bool,
    pub methods: Vec<String>,
    pub default_method: String,
    pub groups: Vec<Group>,
    /// Per method, the |advantage| at which a step's colour is full (`> 0`).
    pub scale: BTreeMap<String, f64>,
    /// The colour scale's stops ([`crate::palette`]): the page has none of its own.
    pub palette: [crate::palette::Stop; 5],
    /// Graphviz `dot` was not found: no group has a graph.
    #[serde(skip)]
    pub graphviz_missing: bool,
    /// Groups named with `--explore` that did not fit under `--explore-max`.
    #[serde(skip)]
    pub named_left_out: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct Group {
    pub id: String,
    pub iteration: Option<i64>,
    pub task: Option<String>,
    /// The prompt the group's rollouts answered (a verl dump's `input`), where logged.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt: Option<String>,
    pub why: String,
    /// Share of the group's trajectories that succeeded, in [0, 1].
    pub success_rate: f64,
    /// The state graph drawn by Graphviz (nodes `n0`, `n1`, … as in [`Step::node`]).
    pub svg: Option<String>,
    pub trajectories: Vec<Trajectory>,
    /// The graph as DOT, drawn into `svg` once the group is chosen.
    #[serde(skip)]
    dot: String,
    /// The input place of the group's first row: its identity in the selection.
    #[serde(skip)]
    seq: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Trajectory {
    pub id: String,
    pub success: bool,
    #[serde(rename = "return")]
    pub episode_return: f64,
    pub length: usize,
    pub steps: Vec<Step>,
}

/// One step. Numbers are finite or `null`: serde_json writes NaN and ±∞ as `null`.
#[derive(Clone, Debug, Serialize)]
pub struct Step {
    pub step: Option<i64>,
    pub obs: Option<String>,
    pub action: Option<String>,
    pub valid: bool,
    pub reward: f64,
    /// The DOT name (and SVG id) of the step's source state in the group's graph.
    pub node: String,
    /// Method → advantage, in the report's method order.
    #[serde(serialize_with = "ordered")]
    pub adv: Vec<(String, f64)>,
    /// Method → its parts (`gigpo`: `episode`, `step`, `group_size`, …), in column order.
    #[serde(serialize_with = "ordered")]
    pub parts: Vec<(String, Parts)>,
    /// The methods whose advantage departs from `logged`'s here (beyond its tolerance), when
    /// `logged` is planned: the page outlines these cells.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub departs: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(transparent)]
pub struct Parts(#[serde(serialize_with = "ordered")] Vec<(String, serde_json::Value)>);

/// Pairs as a JSON object, keeping their order.
pub(crate) fn ordered<V: Serialize, S: Serializer>(
    pairs: &[(String, V)],
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(pairs.iter().map(|(k, v)| (k, v)))
}

impl Selector {
    /// `named`: group ids from `--explore`; `max`: `--explore-max` (at least 1); `methods`: the
    /// planned methods' labels, in the order of the results [`Selector::look`] gets.
    pub fn new(named: &[String], max: usize, methods: Vec<String>) -> Selector {
        let graph_method = methods.iter().position(|m| m == "graphgpo").unwrap_or(0);
        Selector {
            named: named.iter().cloned().collect(),
            max,
            methods,
            graph_method,
            floors: std::array::from_fn(|_| AtomicU64::new(f64::NEG_INFINITY.to_bits())),
            named_full: AtomicBool::new(named.is_empty()),
        }
    }

    /// The groups of one window that are named or can still enter a criterion's list, with their
    /// data. `seq` is each batch row's place in the input.
    pub fn look(&self, batch: &StepBatch, seq: &[u64], results: &[Advantages]) -> Candidates {
        let n = batch.groups.len();
        let first = |g: usize| seq[batch.trajs[batch.groups[g].trajs[0] as usize].rows[0] as usize];
        let mut keys: [Vec<Option<(f64, String)>>; 3] = [
            disagreement(batch, results, &self.methods),
            // One step per rollout: every step is a singleton; the groups that teach anything are
            // those whose rewards differ.
            if single_turn(batch) {
                reward_spread(batch)
            } else {
                singletons(batch)
            },
            failed_progress(batch),
        ];
        // Per criterion, this window's best `max` at or above the floor: nothing else can enter.
        let mut ranked: [Vec<(Rank, String, usize)>; 3] = Default::default();
        for (c, list) in ranked.iter_mut().enumerate() {
            let floor = f64::from_bits(self.floors[c].load(Relaxed));
            *list = keys[c]
                .iter_mut()
                .enumerate()
                .filter_map(|(g, k)| {
                    let (key, why) = k.take()?;
                    (key >= floor).then(|| {
                        let rank = Rank {
                            key,
                            steps: batch.groups[g].n_rows,
                            seq: first(g),
                        };
                        (rank, why, g)
                    })
                })
                .collect();
            list.sort_by(|a, b| a.0.order(&b.0));
            list.truncate(self.max);
        }
        let named: Vec<usize> = if self.named_full.load(Relaxed) {
            Vec::new()
        } else {
            (0..n)
                .filter(|&g| self.named.contains(batch.groups[g].id.as_str()))
                .collect()
        };
        let wanted: BTreeSet<usize> = named
            .iter()
            .copied()
            .chain(ranked.iter().flatten().map(|(_, _, g)| *g))
            .collect();
        let valid = if wanted.is_empty() {
            Vec::new()
        } else {
            batch.valid()
        };
        let built: BTreeMap<usize, Arc<Group>> = wanted
            .into_iter()
            .map(|g| (g, Arc::new(self.group(batch, g, first(g), results, &valid))))
            .collect();
        Candidates {
            named: named.iter().map(|g| built[g].clone()).collect(),
            ranked: ranked.map(|list| {
                list.into_iter()
                    .map(|(rank, why, g)| (rank, why, built[&g].clone()))
                    .collect()
            }),
        }
    }

    /// Group `g`'s data, `svg` still to draw.
    fn group(
        &self,
        batch: &StepBatch,
        g: usize,
        seq: u64,
        results: &[Advantages],
        valid: &[bool],
    ) -> Group {
        let group = &batch.groups[g];
        let graph = GroupGraph::build(batch, g);
        let node_of: BTreeMap<u32, usize> = graph
            .endpoints
            .iter()
            .map(|&(row, source, _)| (row, source.index()))
            .collect();
        let (obs, actions, steps) = (batch.texts(OBS), batch.texts(ACTION), batch.opt_i64s(STEP));
        let first_row = batch.trajs[group.trajs[0] as usize].rows[0] as usize;
        let one_step = group
            .trajs
            .iter()
            .all(|&t| batch.trajs[t as usize].rows.len() == 1);
        let rewards = batch.f64s(REWARD).unwrap_or(&[]);
        let trajectories = group
            .trajs
            .iter()
            .map(|&t| {
                let traj = &batch.trajs[t as usize];
                let steps = traj
                    .rows
                    .iter()
                    .map(|&row| {
                        let r = row as usize;
                        Step {
                            step: steps.and_then(|s| s.get(r)),
                            obs: obs.and_then(|c| c.get(r)).map(str::to_string),
                            action: actions.and_then(|c| c.get(r)).map(str::to_string),
                            valid: valid[r],
                            reward: rewards.get(r).copied().unwrap_or(f64::NAN),
                            node: crate::dot::node_name(node_of[&row]),
                            adv: self
                                .methods
                                .iter()
                                .zip(results)
                                .map(|(m, a)| (m.clone(), a.advantage()[r]))
                                .collect(),
                            parts: self
                                .methods
                                .iter()
                                .zip(results)
                                .filter(|(_, a)| a.columns.len() > 1)
                                .map(|(m, a)| (m.clone(), parts(m, a, r)))
                                .collect(),
                            departs: self.departs(results, r),
                        }
                    })
                    .collect();
                Trajectory {
                    id: traj.id.to_string(),
                    success: traj.success,
                    episode_return: traj.episode_return,
                    length: traj.rows.len(),
                    steps,
                }
            })
            .collect::<Vec<_>>();
        let successes = trajectories.iter().filter(|t| t.success).count();
        Group {
            id: group.id.to_string(),
            iteration: group.iteration,
            task: batch
                .tasks()
                .and_then(|c| c.get(first_row))
                .map(str::to_string),
            prompt: batch
                .texts(PROMPT)
                .and_then(|c| c.get(first_row))
                .map(str::to_string),
            why: String::new(),
            success_rate: successes as f64 / trajectories.len().max(1) as f64,
            svg: None,
            // One step per rollout: a graph of `d=1 (no obs)` nodes says nothing.
            dot: if one_step {
                String::new()
            } else {
                crate::dot::to_dot(
                    batch,
                    g,
                    &graph,
                    results[self.graph_method].advantage(),
                    &self.methods[self.graph_method],
                )
            },
            trajectories,
            seq,
        }
    }
}

impl Selector {
    /// The methods that depart from `logged` at row `r` (none when it is not planned).
    fn departs(&self, results: &[Advantages], r: usize) -> Vec<String> {
        let Some(l) = self.methods.iter().position(|m| m == "logged") else {
            return Vec::new();
        };
        let logged = results[l].advantage()[r];
        self.methods
            .iter()
            .zip(results)
            .filter(|(_, a)| (a.advantage()[r] - logged).abs() > TOLERANCE)
            .map(|(m, _)| m.clone())
            .collect()
    }
}

/// Method `label`'s parts at row `r`: its columns after the advantage, `<label>_` dropped.
fn parts(label: &str, result: &Advantages, r: usize) -> Parts {
    let prefix = format!("{label}_");
    Parts(
        result.columns[1..]
            .iter()
            .map(|c| {
                let name = c.name.strip_prefix(&prefix).unwrap_or(&c.name).to_string();
                let value = match &c.values {
                    Values::F64(v) => serde_json::Value::from(v[r]),
                    Values::I64(v) => serde_json::Value::from(v[r]),
                };
                (name, value)
            })
            .collect(),
    )
}

/// Per group: where `logged` is planned and some method departs from it on the group, the most
/// rows one method departs on, as the key 2 + rows (above every −ρ), the trainer's rows being
/// the ones to look at; else the lowest Spearman ρ between two methods' advantages over its steps
/// (`logged` left out: it can only repeat a method), as the key −ρ (the more the methods
/// disagree, the higher), when the group has enough steps and some pair is defined (neither
/// method constant on it).
fn disagreement(
    batch: &StepBatch,
    results: &[Advantages],
    methods: &[String],
) -> Vec<Option<(f64, String)>> {
    let logged = methods.iter().position(|m| m == "logged");
    (0..batch.groups.len())
        .map(|g| {
            let rows: Vec<u32> = batch.group_rows(g).collect();
            let departs = logged.and_then(|l| departure(&rows, results, methods, l));
            departs.or_else(|| lowest_rank_agreement(&rows, results, methods, logged))
        })
        .collect()
}

/// The method that departs from `logged` (results[`l`]) on the most of `rows`, as a key and a
/// reason; `None` when none departs.
fn departure(
    rows: &[u32],
    results: &[Advantages],
    methods: &[String],
    l: usize,
) -> Option<(f64, String)> {
    let logged = results[l].advantage();
    let (count, max, m) = (0..results.len())
        .filter(|&m| m != l)
        .map(|m| {
            let values = results[m].advantage();
            let diffs = rows
                .iter()
                .map(|&r| (logged[r as usize] - values[r as usize]).abs());
            let count = diffs.clone().filter(|&d| d > TOLERANCE).count();
            (count, diffs.fold(0.0, f64::max), m)
        })
        .max_by_key(|&(count, _, _)| count)?;
    (count > 0).then(|| {
        (
            2.0 + count as f64,
            format!(
                "logged departs from {}: {count} of {} rows beyond {TOLERANCE:e} (max |Δ| {max:.1e})",
                methods[m],
                rows.len()
            ),
        )
    })
}

/// The lowest Spearman ρ between two methods (other than `logged`) over `rows`, as the key −ρ,
/// when there are enough rows and some pair is defined.
fn lowest_rank_agreement(
    rows: &[u32],
    results: &[Advantages],
    methods: &[String],
    logged: Option<usize>,
) -> Option<(f64, String)> {
    let compared: Vec<usize> = (0..results.len()).filter(|&m| Some(m) != logged).collect();
    if compared.len() < 2 || rows.len() < MIN_STEPS_FOR_RANKS {
        return None;
    }
    let columns: Vec<Vec<f64>> = compared
        .iter()
        .map(|&m| {
            rows.iter()
                .map(|&r| results[m].advantage()[r as usize])
                .collect()
        })
        .collect();
    let mut lowest: Option<(f64, usize, usize)> = None;
    for a in 0..columns.len() {
        for b in a + 1..columns.len() {
            if let Some(rho) = spearman(&columns[a], &columns[b]) {
                if lowest.is_none_or(|(l, _, _)| rho < l) {
                    lowest = Some((rho, a, b));
                }
            }
        }
    }
    lowest.map(|(rho, a, b)| {
        (
            -rho,
            format!(
                "methods disagree: Spearman ρ = {rho:.2} between {} and {}",
                methods[compared[a]], methods[compared[b]]
            ),
        )
    })
}

/// Per group: the share of its steps whose exact observation occurs once in the group (GiGPO's
/// step term is 0 there), when observations are logged and some step is such.
fn singletons(batch: &StepBatch) -> Vec<Option<(f64, String)>> {
    let mut single = vec![0usize; batch.groups.len()];
    if !batch.has(OBS) {
        return vec![None; single.len()];
    }
    for cluster in anchor_clusters(batch, None).iter() {
        if let [row] = cluster[..] {
            single[batch.group_of_row[row as usize] as usize] += 1;
        }
    }
    single
        .iter()
        .zip(&batch.groups)
        .map(|(&n, group)| {
            let share = n as f64 / group.n_rows.max(1) as f64;
            (n > 0).then(|| {
                (
                    share,
                    format!(
                        "singleton-heavy: {:.0}% of steps in singleton anchor-state groups",
                        100.0 * share
                    ),
                )
            })
        })
        .collect()
}

/// Whether every trajectory of the window is one step (single-turn logs).
fn single_turn(batch: &StepBatch) -> bool {
    batch.trajs.iter().all(|t| t.rows.len() == 1)
}

/// Per group whose rollouts' rewards differ (single-turn logs: the groups GRPO learns from): the
/// rewards' standard deviation.
fn reward_spread(batch: &StepBatch) -> Vec<Option<(f64, String)>> {
    let rewards = batch.f64s(REWARD).unwrap_or(&[]);
    (0..batch.groups.len())
        .map(|g| {
            let r: Vec<f64> = batch
                .group_rows(g)
                .filter_map(|row| rewards.get(row as usize).copied())
                .collect();
            let n = r.len().max(1) as f64;
            let mean = r.iter().sum::<f64>() / n;
            let std = (r.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
            let (lo, hi) = r
                .iter()
                .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &x| {
                    (l.min(x), h.max(x))
                });
            // Rewards read as f32 (0.10000000149…) shown as they were written.
            let short = |x: f64| (x * 1e3).round() / 1e3;
            (std > 0.0 && std.is_finite()).then(|| {
                (
                    std,
                    format!(
                        "rewards differ: {} to {} (std {std:.2})",
                        short(lo),
                        short(hi)
                    ),
                )
            })
        })
        .collect()
}

/// Per group with no successful trajectory: the most progress one of its trajectories made, when
/// positive. A trajectory's progress is its Σ ĉ_t where the `progress` column (SPA's, logged or
/// filled by `--progress-model`) covers it, else the sum of its positive step rewards (the partial
/// credit an environment pays: a box on a target, points in TextWorld). GraphGPO's distance to
/// success cannot serve: a group without a success has d ≡ 1.
fn failed_progress(batch: &StepBatch) -> Vec<Option<(f64, String)>> {
    let progress = batch.opt_f64s(PROGRESS);
    let rewards = batch.f64s(REWARD).unwrap_or(&[]);
    batch
        .groups
        .iter()
        .map(|group| {
            let trajs = || group.trajs.iter().map(|&t| &batch.trajs[t as usize]);
            if trajs().any(|t| t.success) {
                return None;
            }
            let (best, logged) = trajs()
                .map(|t| {
                    let logged: Option<Vec<f64>> =
                        progress.and_then(|p| t.rows.iter().map(|&r| p.get(r as usize)).collect());
                    match logged {
                        Some(c) => (c.iter().sum::<f64>(), true),
                        None => (
                            t.rows
                                .iter()
                                .map(|&r| rewards.get(r as usize).copied().unwrap_or(0.0).max(0.0))
                                .sum(),
                            false,
                        ),
                    }
                })
                .max_by(|a, b| a.0.total_cmp(&b.0))?;
            (best > 0.0 && best.is_finite()).then(|| {
                let what = if logged {
                    format!("best trajectory Σ ĉ_t = {best:.2}")
                } else {
                    format!("best trajectory earned {best:+.2} in step rewards")
                };
                (best, format!("failed, yet progress: {what}"))
            })
        })
        .collect()
}

impl Selection {
    /// Takes one window's candidates (windows in input order) and raises the selector's floors.
    pub fn add(&mut self, selector: &Selector, candidates: Candidates) {
        for group in candidates.named {
            self.matched.insert(group.id.clone());
            if self.named.len() < selector.max {
                self.named.push(group);
            } else {
                self.named_left_out += 1;
                selector.named_full.store(true, Relaxed);
            }
        }
        for (c, offered) in candidates.ranked.into_iter().enumerate() {
            let list = &mut self.ranked[c];
            list.extend(offered);
            list.sort_by(|a, b| a.0.order(&b.0));
            list.truncate(selector.max);
            if list.len() == selector.max {
                let floor = list.last().map_or(f64::NEG_INFINITY, |l| l.0.key);
                selector.floors[c].store(floor.to_bits(), Relaxed);
            }
        }
    }

    /// Takes the groups kept from logs read after these (`credit watch` reads a run file by
    /// file).
    pub fn extend(&mut self, selector: &Selector, later: Selection) {
        self.matched.extend(later.matched);
        self.named_left_out += later.named_left_out;
        self.add(
            selector,
            Candidates {
                named: later.named,
                ranked: later.ranked,
            },
        );
    }

    /// Forgets every group kept, for a second reading of the logs.
    pub fn restart(&mut self, selector: &Selector) {
        *self = Selection::default();
        for floor in &selector.floors {
            floor.store(f64::NEG_INFINITY.to_bits(), Relaxed);
        }
        selector
            .named_full
            .store(selector.named.is_empty(), Relaxed);
    }

    /// The ids named with `--explore` that matched no group.
    pub fn unmatched<'a>(&self, selector: &'a Selector) -> Vec<&'a str> {
        let mut ids: Vec<&str> = selector
            .named
            .iter()
            .filter(|id| !self.matched.contains(*id))
            .map(String::as_str)
            .collect();
        ids.sort();
        ids
    }

    /// The chosen groups: the named ones in input order, then one from each criterion's list in
    /// turn, best first, up to `max`; a group that several lists hold says all its reasons.
    /// `svg` draws a group's DOT (`None`: Graphviz is missing); `comparison` gives each method's
    /// colour scale.
    pub fn finish(
        &self,
        selector: &Selector,
        comparison: &Comparison,
        svg: Option<&DrawSvg>,
    ) -> Result<Explorer, Error> {
        let mut chosen: Vec<(Arc<Group>, Vec<String>)> = self
            .named
            .iter()
            .map(|g| (g.clone(), vec!["named with --explore".to_string()]))
            .collect();
        let mut lists: Vec<std::slice::Iter<Ranked>> =
            self.ranked.iter().map(|list| list.iter()).collect();
        let mut exhausted = [false; 3];
        'turns: while !exhausted.iter().all(|&e| e) {
            for (c, list) in lists.iter_mut().enumerate() {
                if chosen.len() >= selector.max {
                    break 'turns;
                }
                loop {
                    let Some((_, why, group)) = list.next() else {
                        exhausted[c] = true;
                        break;
                    };
                    match chosen.iter_mut().find(|(g, _)| g.seq == group.seq) {
                        Some((_, whys)) => whys.push(why.clone()),
                        None => {
                            chosen.push((group.clone(), vec![why.clone()]));
                            break;
                        }
                    }
                }
            }
        }
        // The reasons of chosen groups that the lists hold further down.
        for (_, why, group) in lists.into_iter().flatten() {
            if let Some((_, whys)) = chosen.iter_mut().find(|(g, _)| g.seq == group.seq) {
                whys.push(why.clone());
            }
        }
        let groups = chosen
            .into_iter()
            .map(|(group, whys)| {
                let mut group = Arc::unwrap_or_clone(group);
                group.why = whys.join("; ");
                if let Some(draw) = svg.filter(|_| !group.dot.is_empty()) {
                    let drawn = draw(&group.dot).map_err(|e| match e {
                        Error::Graphviz { message, .. } => Error::Graphviz {
                            what: format!(
                                "the state graph of group `{}`{}",
                                crate::dot::abridge(&group.id, 80),
                                group
                                    .iteration
                                    .map_or(String::new(), |i| format!(" (iteration {i})"))
                            ),
                            message,
                        },
                        other => other,
                    })?;
                    // The XML prolog and doctype are of no use inline.
                    group.svg = Some(drawn[drawn.find("<svg").unwrap_or(0)..].to_string());
                }
                Ok(group)
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let scale = selector
            .methods
            .iter()
            .map(|m| {
                (
                    m.clone(),
                    comparison.distributions.get(m).map_or(1.0, scale),
                )
            })
            .collect();
        let single_turn = !groups.is_empty()
            && groups
                .iter()
                .flat_map(|g| &g.trajectories)
                .all(|t| t.steps.len() == 1);
        Ok(Explorer {
            single_turn,
            methods: selector.methods.clone(),
            default_method: selector.methods[selector.graph_method].clone(),
            groups,
            scale,
            palette: crate::palette::STOPS,
            graphviz_missing: svg.is_none(),
            named_left_out: self.named_left_out,
        })
    }
}

impl Explorer {
    /// The data as JSON for an inline `<script>`: every `<` written `\u003c` (JSON allows it in
    /// strings, the only place a `<` can be), so no `</script>` or `<!--` can end the element.
    pub fn json(&self) -> String {
        serde_json::to_string(self)
            .expect("the explorer's data serializes")
            .replace('<', "\\u003c")
    }
}

/// A method's colour scale: the larger of |5th| and |95th| percentile of its advantages over the
/// whole log (the extremes would wash every other step out), else of its extremes, else 1.
fn scale(d: &credit_core::analyses::stats::Distribution) -> f64 {
    [d.q05.abs().max(d.q95.abs()), d.min.abs().max(d.max.abs())]
        .into_iter()
        .find(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_has_no_raw_angle_bracket_and_reads_back() {
        let text = "</script><!-- a <b> & \"c\" \u{2028}";
        let explorer = Explorer {
            single_turn: false,
            methods: vec!["grpo".into()],
            default_method: "grpo".into(),
            palette: crate::palette::STOPS,
            groups: vec![Group {
                id: "g<1>".into(),
                iteration: None,
                task: None,
                prompt: Some(text.into()),
                why: "named with --explore".into(),
                success_rate: 0.5,
                svg: Some("<svg><g id=\"n0\" class=\"node\"></g></svg>".into()),
                trajectories: vec![Trajectory {
                    id: "t".into(),
                    success: false,
                    episode_return: f64::NAN,
                    length: 1,
                    steps: vec![Step {
                        step: Some(0),
                        obs: Some(text.into()),
                        action: Some("<go>".into()),
                        valid: true,
                        reward: f64::INFINITY,
                        node: "n0".into(),
                        adv: vec![("grpo".into(), -0.5)],
                        parts: vec![("grpo".into(), Parts(vec![("group_size".into(), 2.into())]))],
                        departs: Vec::new(),
                    }],
                }],
                dot: String::new(),
                seq: 0,
            }],
            scale: [("grpo".to_string(), 1.0)].into(),
            graphviz_missing: false,
            named_left_out: 0,
        };
        let json = explorer.json();
        assert!(!json.contains('<'), "{json}");
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        let step = &back["groups"][0]["trajectories"][0]["steps"][0];
        assert_eq!(step["obs"], text);
        assert_eq!(step["action"], "<go>");
        // Non-finite numbers are null; ints stay ints; maps keep their order.
        assert!(
            step["reward"].is_null() && back["groups"][0]["trajectories"][0]["return"].is_null()
        );
        assert_eq!(step["parts"]["grpo"]["group_size"], 2);
        assert!(json.contains("\"adv\":{\"grpo\":-0.5}"));
        assert!(!CSS.contains("</style") && !JS.contains("</script") && !JS.contains("<!--"));
    }

    #[test]
    fn ranks_prefer_higher_keys_then_larger_then_earlier_groups() {
        let r = |key, steps, seq| Rank { key, steps, seq };
        let mut ranks = [r(0.5, 10, 3), r(0.9, 5, 9), r(0.5, 20, 7), r(0.5, 10, 1)];
        ranks.sort_by(|a, b| a.order(b));
        let seqs: Vec<u64> = ranks.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, [9, 7, 1, 3]);
    }
}
