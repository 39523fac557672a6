"""Per-step rollout logs for credit, written from inside verl-agent's trainer.

verl-agent keeps the rows credit needs (one per agent turn: `uid`, `traj_uid`, `anchor_obs`,
`rewards`, `is_action_valid`, `episode_rewards`, ...) in the batch that its rollout loop returns,
but dumps only `input, output, score, step` (no ids, after padding and reordering). Call
`dump_steps` at the one point where the batch holds each trajectory's turns in order: in
verl-agent's `verl/trainer/ppo/ray_trainer.py`, `RayPPOTrainer.fit()`, right after

    gen_batch_output = self.traj_collector.multi_turn_loop(...)
    ...
    batch = gen_batch_output

and before `batch = adjust_batch(self.config, batch)` (which pads by duplicating random rows) and
`self._balance_batch(batch, metrics=metrics)` (which reorders them):

    from verl_agent_dump import dump_steps          # this file, on PYTHONPATH
    dump_steps(batch, self.tokenizer, self.global_steps, "credit_logs/")

Each call writes `credit_logs/{global_steps}.jsonl.gz` (or `.parquet` with `fmt="parquet"`, needs
pyarrow): one JSON object per turn with credit's own column names, so `credit analyze credit_logs/`
reads the whole run with no configuration. Standard library only; numpy values and tensors are
converted with `.item()` / `.tolist()`.
"""

import gzip
import json
import os

__all__ = ["dump_steps", "step_rows"]


def _plain(value):
    """A numpy scalar, array or tensor as a JSON-able Python value."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def step_rows(batch, tokenizer, global_steps):
    """The rows of one iteration, in batch order: a list of dicts (see the module docstring)."""
    tensors, extra = batch.batch, batch.non_tensor_batch
    prompts = tokenizer.batch_decode(tensors["prompts"], skip_special_tokens=True)
    actions = tokenizer.batch_decode(tensors["responses"], skip_special_tokens=True)
    traj_uid = [str(_plain(t)) for t in extra["traj_uid"]]
    rows, turn = [], {}
    for i, traj in enumerate(traj_uid):
        # The turn is the row's position within its trajectory: verl-agent stores no turn index,
        # and its rollout loop gathers each trajectory's turns contiguously and in order.
        step = turn.get(traj, 0)
        turn[traj] = step + 1
        row = {
            "iteration": int(_plain(global_steps)),
            "uid": str(_plain(extra["uid"][i])),
            "traj_uid": traj,
            "step": step,
            "prompt": prompts[i],
            "action": actions[i],
            "reward": float(_plain(extra["rewards"][i])),
        }
        anchor = _plain(extra["anchor_obs"][i]) if "anchor_obs" in extra else None
        if isinstance(anchor, str):  # image environments keep arrays: no text state to key on
            row["anchor_obs"] = anchor
        if "is_action_valid" in extra:
            row["is_action_valid"] = bool(_plain(extra["is_action_valid"][i]))
        for key in ("episode_rewards", "episode_lengths", "tool_callings"):
            if key in extra:
                row[key] = float(_plain(extra[key][i]))
        if "data_source" in extra:
            row["data_source"] = str(_plain(extra["data_source"][i]))
        rows.append(row)
    return rows


def dump_steps(batch, tokenizer, global_steps, out_dir, fmt="jsonl.gz"):
    """Writes this iteration's step rows to `out_dir/{global_steps}.{fmt}` (atomically: a
    temporary file renamed into place); returns the path."""
    rows = step_rows(batch, tokenizer, global_steps)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{int(_plain(global_steps))}.{fmt}")
    tmp = os.path.join(out_dir, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    if fmt == "jsonl.gz":
        with gzip.open(tmp, "wt", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    elif fmt == "jsonl":
        with open(tmp, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), tmp)
    else:
        raise ValueError(f"fmt must be 'jsonl.gz', 'jsonl' or 'parquet', not {fmt!r}")
    os.replace(tmp, path)
    return path
