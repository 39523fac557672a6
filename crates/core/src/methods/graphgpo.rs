//! GraphGPO: graph-based credit over each group's aggregated state graph (Cheng et al. 2026,
//! arXiv 2605.26684, Eq. 2–8; `spec-graphgpo.md` §3).
//!
//! A(o) = β_G·A^G(o) + β_E·A^E(o)                                                       (Eq. 8)
//! - d(s): distance to the SUCCESS sink ([`crate::graph::GroupGraph`], Eq. 3).
//! - R^G (Eq. 4): `paper` r·ω^(d(s′)+c); `verl` r·ω^(d(s′)+c−1) (= 10·ω^d(s′) at unit cost), minus
//!   the invalid penalty on that occurrence; r = 10.
//! - A^G (Eq. 5–6): R^G normalised within the step group of its source state: `paper` over the
//!   distinct edges (s, a, s′) leaving s, each occurrence taking its edge's value; `verl` over every
//!   occurrence whose source is s (verl-agent's `build_step_group` + `step_norm_reward`). A group of
//!   one, or of identical rewards, gives exactly 0.
//! - A^E (Eq. 2): the GRPO episode advantage, over trajectories (`paper`) or step rows with row
//!   score R(τ) − 0.1·invalid (`verl`).
//!
//! Profiles (reference: verl-agent `recipe/GraphGPO` `core_graph.compute_graph_path_returns` and
//! `compute_graphgpo_outcome_advantage`): as above; ω = 0.1 (ALFWorld) in both, `mean_std_norm`.

use super::group_stats::{
    cluster_advantages, episode_advantages, episode_scores, episode_stats, Clusters, Norm,
};
use super::{Advantages, Values};
use crate::batch::StepBatch;
use crate::error::Result;
use crate::graph::{GraphColumns, GraphScratch, GroupGraph};
use crate::profile::{Conventions, Profile};
use crate::schema::columns::COST;
use polars::prelude::PlHashMap;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Params {
    #[serde(flatten)]
    pub conv: Conventions,
    /// ω, the per-step decay of the graph reward (ALFWorld 0.1, WebShop 0.2, Sokoban 0.8).
    pub omega: f64,
    /// r, the success reward.
    pub success_reward: f64,
    /// Group A^G over distinct edges (`paper`) or every occurrence (`verl`).
    pub unique_edges: bool,
    /// Exponent offset: d(s′) + c + `exponent_offset` (0 in `paper`, −1 in `verl`).
    pub exponent_offset: f64,
    pub mode: Norm,
    pub beta_graph: f64,
    pub beta_episode: f64,
}

impl Params {
    pub fn paper() -> Self {
        Params {
            conv: Conventions::of(Profile::Paper),
            omega: 0.1,
            success_reward: 10.0,
            unique_edges: true,
            exponent_offset: 0.0,
            mode: Norm::MeanStd,
            beta_graph: 1.0,
            beta_episode: 1.0,
        }
    }

    pub fn verl() -> Self {
        Params {
            conv: Conventions::of(Profile::Verl),
            unique_edges: false,
            exponent_offset: -1.0,
            ..Self::paper()
        }
    }

    pub fn preset(profile: Profile) -> Self {
        match profile {
            Profile::Paper => Self::paper(),
            Profile::Verl => Self::verl(),
        }
    }
}

/// Columns `adv_graphgpo`, `graphgpo_graph` (A^G), `graphgpo_episode` (A^E), `graphgpo_reward`
/// (R^G), `graphgpo_distance` (d(s)), `graphgpo_next_distance` (d(s′)), `graphgpo_group_size`.
pub fn advantages(batch: &StepBatch, params: &Params) -> Result<Advantages> {
    let n = batch.len();
    let conv = &params.conv;
    let valid = batch.valid();
    let costs = batch.opt_f64s(COST);
    let columns = GraphColumns::of(batch);
    let mut reward = vec![0.0; n];
    let mut distance = vec![0.0; n];
    let mut next_distance = vec![0.0; n];
    let mut graph_adv = vec![0.0; n];
    let mut group_size = vec![0i64; n];
    // Step groups by source state, numbered across the batch (a group's nodes after the nodes
    // of the groups before it): occurrences (row, source) or distinct (s, a, s′) edges
    // (edge, source), clustered by one counting sort once every group is read.
    let mut by_source: Vec<(u32, u32)> = Vec::with_capacity(n);
    let mut edge_of: PlHashMap<(u32, &str, u32), u32> = PlHashMap::default();
    let mut edge_of_row = vec![0u32; if params.unique_edges { n } else { 0 }];
    let mut edge_reward = Vec::new();
    let mut nodes_before = 0u32;
    // One graph and its scratch, rebuilt group by group (a batch may hold a group per row).
    let (mut graph, mut scratch) = (GroupGraph::default(), GraphScratch::default());
    for g in 0..batch.groups.len() {
        graph.rebuild(&columns, batch, g, &mut scratch);
        edge_of.clear();
        for &(row, source, target) in &graph.endpoints {
            let r = row as usize;
            let cost = costs.and_then(|c| c.get(r)).unwrap_or(1.0);
            let exponent = graph.distance[target.index()] + cost + params.exponent_offset;
            reward[r] = params.success_reward * params.omega.powf(exponent)
                - if valid[r] { 0.0 } else { conv.invalid_penalty };
            distance[r] = graph.distance[source.index()];
            next_distance[r] = graph.distance[target.index()];
            let in_batch = nodes_before + source.index() as u32;
            if params.unique_edges {
                let edge = columns.edge((row, source, target));
                edge_of_row[r] = *edge_of.entry(edge).or_insert_with(|| {
                    edge_reward.push(reward[r]);
                    by_source.push((in_batch, (edge_reward.len() - 1) as u32));
                    (edge_reward.len() - 1) as u32
                });
            } else {
                by_source.push((in_batch, row));
            }
        }
        nodes_before += graph.graph.node_count() as u32;
    }
    let clusters = Clusters::by_key(&by_source, nodes_before as usize);
    if params.unique_edges {
        let mut edge_adv = vec![0.0; edge_reward.len()];
        cluster_advantages(
            &edge_reward,
            clusters.iter(),
            params.mode,
            conv.std_ddof,
            conv.eps,
            &mut edge_adv,
        );
        let mut edge_group_size = vec![0i64; edge_reward.len()];
        for cluster in clusters.iter() {
            for &e in cluster {
                edge_group_size[e as usize] = cluster.len() as i64;
            }
        }
        for (r, &e) in edge_of_row.iter().enumerate() {
            graph_adv[r] = edge_adv[e as usize];
            group_size[r] = edge_group_size[e as usize];
        }
    } else {
        cluster_advantages(
            &reward,
            clusters.iter(),
            params.mode,
            conv.std_ddof,
            conv.eps,
            &mut graph_adv,
        );
        for cluster in clusters.iter() {
            for &row in cluster {
                group_size[row as usize] = cluster.len() as i64;
            }
        }
    }
    let scores = episode_scores(batch, conv);
    let stats = episode_stats(batch, &scores, conv.stats_over, conv.std_ddof);
    let episode = episode_advantages(batch, &scores, &stats, params.mode, conv.eps);
    let advantage = graph_adv
        .iter()
        .zip(&episode)
        .map(|(g, e)| params.beta_graph * g + params.beta_episode * e)
        .collect();
    Ok(Advantages::new("graphgpo", advantage)
        .part("graphgpo", "graph", Values::F64(graph_adv))
        .part("graphgpo", "episode", Values::F64(episode))
        .part("graphgpo", "reward", Values::F64(reward))
        .part("graphgpo", "distance", Values::F64(distance))
        .part("graphgpo", "next_distance", Values::F64(next_distance))
        .part("graphgpo", "group_size", Values::I64(group_size)))
}

#[cfg(test)]
// The spec prints its vectors to 6 decimals (0.707107 is 1/√2 as printed, not a stand-in for it).
#[allow(clippy::approx_constant)]
mod tests {
    use super::*;
    use crate::batch::testing::assert_close;
    use crate::methods::part;
    use crate::schema::columns::*;
    use polars::prelude::*;

    /// (traj, s, a, s′ (used on the last step of a failed trajectory), valid, cost), success
    /// trajectories get reward 10 on their last step.
    type Step<'a> = (&'a str, &'a str, &'a str, &'a str, bool, f64);
    /// (traj, step, s, a, s′, valid, cost, reward)
    type Row<'a> = (&'a str, i64, &'a str, &'a str, &'a str, bool, f64, f64);

    fn batch(steps: &[Step], successes: &[&str]) -> StepBatch {
        let mut step_no = std::collections::HashMap::new();
        let mut rows: Vec<Row> = Vec::new();
        for (i, s) in steps.iter().enumerate() {
            let k = step_no.entry(s.0).or_insert(0i64);
            let last = steps.get(i + 1).is_none_or(|n| n.0 != s.0);
            let r = if last && successes.contains(&s.0) {
                10.0
            } else {
                0.0
            };
            rows.push((s.0, *k, s.1, s.2, s.3, s.4, s.5, r));
            *k += 1;
        }
        let text = |f: for<'r> fn(&'r Row<'r>) -> &'r str| rows.iter().map(f).collect::<Vec<_>>();
        let frame = DataFrame::new(
            rows.len(),
            vec![
                Column::new(GROUP_ID.into(), vec!["g"; rows.len()]),
                Column::new(TRAJ_ID.into(), text(|r| r.0)),
                Column::new(STEP.into(), rows.iter().map(|r| r.1).collect::<Vec<_>>()),
                Column::new(OBS.into(), text(|r| r.2)),
                Column::new(ACTION.into(), text(|r| r.3)),
                Column::new(NEXT_OBS.into(), text(|r| r.4)),
                Column::new(VALID.into(), rows.iter().map(|r| r.5).collect::<Vec<_>>()),
                Column::new(COST.into(), rows.iter().map(|r| r.6).collect::<Vec<_>>()),
                Column::new(REWARD.into(), rows.iter().map(|r| r.7).collect::<Vec<_>>()),
            ],
        )
        .unwrap();
        StepBatch::new(frame, 0.5, 0.95).unwrap()
    }

    // spec-graphgpo.md §8.1 EX1 (ω = 0.5): cycle, dead end, duplicate edges.
    fn ex1() -> StepBatch {
        batch(
            &[
                ("T1", "A", "a1", "B", true, 1.0),
                ("T1", "B", "b1", "C", true, 1.0),
                ("T1", "C", "c1", "B", true, 1.0),
                ("T1", "B", "b2", "D", true, 1.0),
                ("T1", "D", "d1", "-", true, 1.0),
                ("T2", "A", "a2", "D", true, 1.0),
                ("T2", "D", "d2", "E", true, 1.0),
                ("T2", "E", "e1", "E", true, 1.0),
                ("T3", "A", "a1", "B", true, 1.0),
                ("T3", "B", "b1", "C", true, 1.0),
                ("T3", "C", "c2", "E", true, 1.0),
            ],
            &["T1"],
        )
    }

    #[test]
    fn vector_8_1_ex1_paper() {
        let p = Params {
            omega: 0.5,
            ..Params::paper()
        };
        let a = advantages(&ex1(), &p).unwrap();
        assert_close(
            part(&a, "graphgpo_reward"),
            &[
                1.25, 0.625, 1.25, 2.5, 5.0, 2.5, 0.3125, 0.3125, 1.25, 0.625, 0.3125,
            ],
            1e-5,
        );
        assert_close(
            part(&a, "graphgpo_distance"),
            &[2.0, 2.0, 3.0, 2.0, 1.0, 2.0, 1.0, 4.0, 2.0, 2.0, 3.0],
            0.0,
        );
        assert_close(
            part(&a, "graphgpo_graph"),
            &[
                -0.707106, -0.707106, 0.707106, 0.707106, 0.707107, 0.707106, -0.707107, 0.0,
                -0.707106, -0.707106, -0.707106,
            ],
            1e-5,
        );
        assert_close(
            a.advantage(),
            &[
                0.447594, 0.447594, 1.861806, 1.861807, 1.861807, 0.129756, -1.284457, -0.577350,
                -1.284456, -1.284456, -1.284456,
            ],
            1e-5,
        );
    }

    #[test]
    fn vector_8_1_ex1_verl() {
        let p = Params {
            omega: 0.5,
            ..Params::verl()
        };
        let a = advantages(&ex1(), &p).unwrap();
        assert_close(
            part(&a, "graphgpo_reward"),
            &[
                2.5, 1.25, 2.5, 5.0, 10.0, 5.0, 0.625, 0.625, 2.5, 1.25, 0.625,
            ],
            1e-5,
        );
        assert_close(
            a.advantage(),
            &[
                0.467116, 0.467116, 1.751572, 2.199166, 1.751572, 0.284312, -1.577495, -0.870388,
                -1.447738, -1.447738, -1.577494,
            ],
            1e-5,
        );
    }

    // §8.2 EX2 (ω = 0.1): no success, an invalid self-loop.
    fn ex2() -> StepBatch {
        batch(
            &[
                ("U1", "S", "x", "P", true, 1.0),
                ("U1", "P", "y", "Q", true, 1.0),
                ("U2", "S", "u", "S", false, 1.0),
                ("U2", "S", "x", "P", true, 1.0),
                ("U2", "P", "y", "Q", true, 1.0),
            ],
            &[],
        )
    }

    #[test]
    fn vector_8_2_ex2_paper_and_verl() {
        let a = advantages(&ex2(), &Params::paper()).unwrap();
        assert_close(part(&a, "graphgpo_reward"), &[0.1; 5], 1e-9);
        assert_close(a.advantage(), &[0.0; 5], 1e-9);
        let a = advantages(&ex2(), &Params::verl()).unwrap();
        assert_close(
            part(&a, "graphgpo_reward"),
            &[1.0, 1.0, 0.9, 1.0, 1.0],
            1e-9,
        );
        assert_close(
            part(&a, "graphgpo_graph"),
            &[0.577340, 0.0, -1.154681, 0.577340, 0.0],
            1e-5,
        );
        assert_close(
            a.advantage(),
            &[1.024544, 0.447204, -2.943495, 1.024544, 0.447204],
            1e-5,
        );
    }

    // §8.3 EX3 (ω = 0.5): costs make Dijkstra differ from hop-count BFS.
    #[test]
    fn vector_8_3_ex3_costs() {
        let b = batch(
            &[
                ("V1", "A", "p", "B", true, 5.0),
                ("V1", "B", "q", "-", true, 1.0),
                ("V2", "A", "r", "C", true, 1.0),
                ("V2", "C", "s", "D", true, 1.0),
                ("V2", "D", "t", "-", true, 1.0),
            ],
            &["V1", "V2"],
        );
        let a = advantages(
            &b,
            &Params {
                omega: 0.5,
                ..Params::paper()
            },
        )
        .unwrap();
        assert_close(
            part(&a, "graphgpo_distance"),
            &[3.0, 1.0, 3.0, 2.0, 1.0],
            0.0,
        );
        let r = part(&a, "graphgpo_reward");
        assert!(
            (r[0] - 0.15625).abs() < 1e-9 && (r[2] - 1.25).abs() < 1e-9,
            "{r:?}"
        );
        assert_close(a.advantage(), &[-0.707106, 0.0, 0.707106, 0.0, 0.0], 1e-5);
        let v = advantages(
            &b,
            &Params {
                omega: 0.5,
                ..Params::verl()
            },
        )
        .unwrap();
        assert!(
            (part(&v, "graphgpo_reward")[0] - 0.3125).abs() < 1e-9
                && (part(&v, "graphgpo_reward")[2] - 2.5).abs() < 1e-9
        );
        assert_close(v.advantage(), &[-0.707106, 0.0, 0.707106, 0.0, 0.0], 1e-5);
    }
}
