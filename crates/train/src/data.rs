//! Training samples: one per logged step, as token ids, and the hand-off JSONL file that carries
//! them (with the training configuration) from `credit train policy --handoff` to the
//! `credit-train` binary on another machine.
//!
//! Hand-off format: line 1 is `{"credit_train_handoff": 1, "config": {…TrainConfig…}}`; every
//! further line is one [`Sample`] as JSON.

use crate::config::TrainConfig;
use crate::error::{Context, Error, Result};
use crate::model::Batch;
use candle_core::{Device, Tensor};
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::Path;

/// One logged step: the prompt the policy saw followed by its action, as token ids.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Prompt tokens then action tokens.
    pub input_ids: Vec<u32>,
    /// Index in `input_ids` of the first action token; the action is `input_ids[action_start..]`.
    /// At least 1: the first action token is predicted from the prompt.
    pub action_start: usize,
    /// The step's advantage, shared by all its action tokens.
    pub advantage: f32,
    /// The behaviour policy's log-likelihood of the whole action (sum over its tokens), as logged
    /// in the `logprob` column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_logprob: Option<f32>,
    /// The behaviour policy's log-prob of each action token, when the producer logged them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub old_token_logprobs: Option<Vec<f32>>,
}

impl Sample {
    pub fn action_len(&self) -> usize {
        self.input_ids.len().saturating_sub(self.action_start)
    }

    /// Checks the sample against a vocabulary; `index` is named in the error.
    pub fn check(&self, index: usize, vocab_size: usize) -> Result<()> {
        let bad = |message: String| Error::Sample { index, message };
        if self.action_start == 0 {
            return Err(bad("empty prompt (action_start = 0): the first action token needs a prompt token to be predicted from".into()));
        }
        if self.action_start >= self.input_ids.len() {
            return Err(bad(format!(
                "empty action (action_start = {} with {} input ids)",
                self.action_start,
                self.input_ids.len()
            )));
        }
        if let Some(&id) = self.input_ids.iter().find(|&&id| id as usize >= vocab_size) {
            return Err(bad(format!("token id {id} is outside the model's vocabulary of {vocab_size} (tokenized for another model?)")));
        }
        if !self.advantage.is_finite() {
            return Err(bad(format!("advantage {} is not finite", self.advantage)));
        }
        if let Some(lp) = self.old_logprob.filter(|lp| !lp.is_finite() || *lp > 0.0) {
            return Err(bad(format!(
                "old_logprob {lp} is not a log-probability (finite, ≤ 0)"
            )));
        }
        if let Some(lps) = &self.old_token_logprobs {
            if lps.len() != self.action_len() {
                return Err(bad(format!(
                    "{} old_token_logprobs for {} action tokens",
                    lps.len(),
                    self.action_len()
                )));
            }
            if let Some(lp) = lps.iter().find(|lp| !lp.is_finite() || **lp > 0.0) {
                return Err(bad(format!(
                    "old_token_logprobs holds {lp}, not a log-probability (finite, ≤ 0)"
                )));
            }
        }
        Ok(())
    }
}

/// The tensors of a micro-batch, plus which sample each action token belongs to.
pub struct Prepared {
    pub batch: Batch,
    /// Per action token, the index of its sample within the micro-batch.
    pub segment: Vec<u32>,
    pub n_tokens: usize,
}

/// Right-pads the samples into one `[B, T]` batch.
pub fn prepare(samples: &[&Sample], device: &Device) -> Result<Prepared> {
    let t = samples.iter().map(|s| s.input_ids.len()).max().unwrap_or(0);
    let mut ids = Vec::with_capacity(samples.len() * t);
    let (mut positions, mut targets, mut segment) = (Vec::new(), Vec::new(), Vec::new());
    for (b, s) in samples.iter().enumerate() {
        ids.extend_from_slice(&s.input_ids);
        ids.resize((b + 1) * t, 0);
        for (p, &id) in s.input_ids.iter().enumerate().skip(s.action_start) {
            positions.push((b * t + p - 1) as u32);
            targets.push(id);
            segment.push(b as u32);
        }
    }
    let n_tokens = targets.len();
    let batch = Batch {
        ids: Tensor::from_vec(ids, (samples.len(), t), device).ctx("building the batch")?,
        positions: Tensor::from_vec(positions, n_tokens, device).ctx("building the batch")?,
        targets: Tensor::from_vec(targets, n_tokens, device).ctx("building the batch")?,
    };
    Ok(Prepared {
        batch,
        segment,
        n_tokens,
    })
}

#[derive(Serialize, Deserialize)]
struct Header {
    credit_train_handoff: u32,
    config: TrainConfig,
}

const HANDOFF_VERSION: u32 = 1;

/// Writes the hand-off file whole or not at all.
pub fn write_handoff(path: &Path, config: &TrainConfig, samples: &[Sample]) -> Result<()> {
    let header = Header {
        credit_train_handoff: HANDOFF_VERSION,
        config: config.clone(),
    };
    let json = |v: serde_json::Result<String>| {
        v.map_err(|e| Error::Json {
            path: path.to_path_buf(),
            line: 0,
            message: e.to_string(),
        })
    };
    let mut file = credit_output::AtomicFile::create(path)?;
    writeln!(file, "{}", json(serde_json::to_string(&header))?).map_err(|e| file.failed(e))?;
    for s in samples {
        writeln!(file, "{}", json(serde_json::to_string(s))?).map_err(|e| file.failed(e))?;
    }
    Ok(file.commit()?)
}

/// Reads a hand-off file: the training configuration and the samples, errors naming the line.
pub fn read_handoff(path: &Path) -> Result<(TrainConfig, Vec<Sample>)> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let mut lines = std::io::BufReader::new(file).lines().enumerate();
    let bad = |line: usize, message: String| Error::Json {
        path: path.to_path_buf(),
        line,
        message,
    };
    let header = match lines.next() {
        Some((_, line)) => line.map_err(|e| Error::io(path, e))?,
        None => {
            return Err(bad(
                1,
                "empty file: expected a `credit_train_handoff` header line".into(),
            ))
        }
    };
    let header: Header = serde_json::from_str(&header)
        .map_err(|e| bad(1, format!("not a hand-off header ({e}); write one with `credit train policy … --handoff FILE`")))?;
    if header.credit_train_handoff != HANDOFF_VERSION {
        return Err(bad(
            1,
            format!(
                "hand-off version {} (this build reads {HANDOFF_VERSION})",
                header.credit_train_handoff
            ),
        ));
    }
    let mut samples = Vec::new();
    for (i, line) in lines {
        let line = line.map_err(|e| Error::io(path, e))?;
        if line.trim().is_empty() {
            continue;
        }
        samples.push(
            serde_json::from_str(&line).map_err(|e| bad(i + 1, format!("not a sample: {e}")))?,
        );
    }
    Ok((header.config, samples))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Sample {
        Sample {
            input_ids: vec![5, 6, 7, 8],
            action_start: 2,
            advantage: 0.5,
            old_logprob: Some(-1.5),
            old_token_logprobs: None,
        }
    }

    #[test]
    fn handoff_round_trips_and_names_bad_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.jsonl");
        let config = TrainConfig::default();
        write_handoff(&path, &config, &[sample(), sample()]).unwrap();
        let (c, s) = read_handoff(&path).unwrap();
        assert_eq!((c, s), (config, vec![sample(), sample()]));

        let text = std::fs::read_to_string(&path).unwrap() + "{\"input_ids\": \"x\"}\n";
        std::fs::write(&path, text).unwrap();
        let e = read_handoff(&path).unwrap_err().to_string();
        assert!(e.contains("h.jsonl:4") && e.contains("not a sample"), "{e}");
    }

    #[test]
    fn check_rejects_each_bad_field() {
        assert!(sample().check(0, 9).is_ok());
        type Edit = fn(&mut Sample);
        let cases: [(Edit, &str); 5] = [
            (|s| s.action_start = 0, "empty prompt"),
            (|s| s.action_start = 4, "empty action"),
            (|s| s.advantage = f32::NAN, "not finite"),
            (
                |s| s.old_token_logprobs = Some(vec![-1.0]),
                "1 old_token_logprobs for 2",
            ),
            (|s| s.input_ids[0] = 9, "outside the model's vocabulary"),
        ];
        for (edit, message) in cases {
            let mut s = sample();
            edit(&mut s);
            let e = s.check(3, 9).unwrap_err().to_string();
            assert!(e.starts_with("sample 3:") && e.contains(message), "{e}");
        }
    }

    #[test]
    fn prepare_points_at_the_positions_predicting_actions() {
        let a = Sample {
            input_ids: vec![1, 2, 3],
            action_start: 2,
            advantage: 1.0,
            old_logprob: None,
            old_token_logprobs: None,
        };
        let b = Sample {
            input_ids: vec![4, 5, 6, 7, 8],
            action_start: 3,
            advantage: -1.0,
            old_logprob: None,
            old_token_logprobs: None,
        };
        let p = prepare(&[&a, &b], &Device::Cpu).unwrap();
        // T = 5; a's token 3 (position 2) is predicted at flat 1; b's 7, 8 at 5 + 2, 5 + 3.
        assert_eq!(
            p.batch.ids.to_vec2::<u32>().unwrap(),
            vec![vec![1, 2, 3, 0, 0], vec![4, 5, 6, 7, 8]]
        );
        assert_eq!(p.batch.positions.to_vec1::<u32>().unwrap(), vec![1, 7, 8]);
        assert_eq!(p.batch.targets.to_vec1::<u32>().unwrap(), vec![3, 7, 8]);
        assert_eq!(p.segment, vec![0, 1, 1]);
    }
}
