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
reads the whole run with no configuration. `patch_verl_agent.py` (beside this file) writes all
three call sites into a verl-agent checkout, as a diff to read first.

What each row holds, beyond the ids, reward and validity:
- `action` is what the environment executed: verl-agent's projections (ALFWorld, Sokoban,
  WebShop, ...) take the text between `<action>` and `</action>`, lower-cased, and an answer
  without the tags is invalid; `executed_action` does the same (a tag-less answer keeps its last
  30 characters, as ALFWorld's projection does). Pass `project=` (one response string → the
  action string) for an environment whose projection differs. The full model output, thinking
  included, is in `response`.
- `success` and `task` come from the environment's `infos`, which the rollout loop does not put
  in the batch: call `mark_outcomes(total_batch_list, total_infos)` in
  `agent_system/multi_turn_rollout/rollout_loop.py`, right after `success =
  envs.success_evaluator(...)`. It marks every turn with its trajectory's `won` (read at the last
  active turn, as `success_evaluator` does) and its task type (ALFWorld's, from the game file, as
  the per-task success rates verl-agent logs; `task_of=` for others). Without it, `success` is
  left out (credit then counts a trajectory as won when its reward exceeds the threshold) and the
  task is `data_source` (`text` or `visual` for a whole run).

To record what the trainer computed too (credit's method `logged`, held against the estimators by
`credit compare credit_logs/ --methods logged,gigpo --preset verl`), call `dump_advantages` once
the batch has its advantages, right after

    batch = compute_advantage(batch, adv_estimator=..., ...)

with the same arguments:

    from verl_agent_dump import dump_advantages
    dump_advantages(batch, self.global_steps, "credit_logs/")

It adds each row's `advantage` to the rows `dump_steps` wrote (with `dump_steps(...,
advantages_follow=True)`, as the patch calls it, the iteration's file is then written once, with
them; without, the file is rewritten). verl-agent's estimators give every
row one scalar, spread over its response tokens (`scores.unsqueeze(-1).tile([1, response_length])
* response_mask` in `core_gigpo.py`), so the value at the row's first response token is that
scalar. `dump_steps` marks each row of the batch with its turn (`credit_step`), which
`adjust_batch`'s copies and `_balance_batch`'s reordering carry along: rows are matched by
(`traj_uid`, turn), and a copy has its original's advantage. A row without response tokens, or
one that `adjust_batch(mode="delete")` dropped, gets no `advantage` (it was not trained on).

To log credit's figures with the trainer's own metrics (wandb, tensorboard, console through
verl's `Tracking`) instead of, or besides, dumping the rows, call `metrics_from_batch` at the same
point as `dump_steps`:

    from verl_agent_dump import metrics_from_batch
    metrics.update(metrics_from_batch(batch, self.tokenizer, self.global_steps,
                                      methods="grpo,gigpo,mgr", preset="verl"))

`metrics` is the dict `fit()` hands to `logger.log(data=metrics, step=self.global_steps)`; the keys
are `credit/singleton_step_share`, `credit/degenerate_group_share`,
`credit/invalid_positive_share/<method>`, `credit/spearman/<a>~<b>`, … (`credit.metrics`).

Standard library only (`metrics_from_batch` imports the `credit` package when called); numpy
values and tensors are converted with `.item()` / `.tolist()`.
"""

import gzip
import json
import os

__all__ = [
    "alfworld_task_type",
    "dump_advantages",
    "dump_steps",
    "executed_action",
    "mark_outcomes",
    "metrics_from_batch",
    "step_rows",
]

# The column `dump_steps` adds to the batch: each row's turn, so that `dump_advantages` finds the
# row again after the trainer has padded and reordered the batch.
_STEP = "credit_step"
# The suffix of rows waiting for their advantages (`dump_steps(advantages_follow=True)`).
_PENDING = ".pending"
# The columns `mark_outcomes` adds to the rollout loop's turns (and so to the batch).
_SUCCESS, _TASK = "credit_success", "credit_task"

# ALFWorld's six task types, in the order verl-agent's `AlfWorldEnvironmentManager` matches them
# against the game file's path (its `{task}_success_rate` metrics): the same names here.
_ALFWORLD_TASKS = (
    "pick_and_place",
    "pick_two_obj_and_place",
    "look_at_obj_in_light",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_clean_then_place_in_recep",
)


def alfworld_task_type(info):
    """ALFWorld's task type from a step's `info` (its `extra.gamefile`), or None."""
    gamefile = info.get("extra.gamefile")
    if not gamefile:
        return None
    return next((task for task in _ALFWORLD_TASKS if task in str(gamefile)), None)


def mark_outcomes(total_batch_list, total_infos, task_of=alfworld_task_type):
    """Marks every turn of every trajectory (the rollout loop's `total_batch_list[env][turn]`
    dicts) with its trajectory's `won` and task type, read from `total_infos[env][turn]` at the
    last active turn as verl-agent's `success_evaluator` reads `won`. Every dict gets both keys
    (None where unknown): the rollout loop's `collate_fn` makes one column of each key."""
    for turns, infos in zip(total_batch_list, total_infos):
        last = next(
            (infos[k] for k in reversed(range(len(turns))) if _plain(turns[k]["active_masks"])),
            None,
        )
        won = bool(_plain(last["won"])) if last is not None and "won" in last else None
        task = task_of(last) if last is not None else None
        for turn in turns:
            turn[_SUCCESS] = won
            turn[_TASK] = task


def _plain(value):
    """A numpy scalar, array or tensor as a JSON-able Python value."""
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def _like(column, values):
    """`values` in the container of `column`: a numpy array in verl's DataProto, else a list."""
    if hasattr(column, "dtype"):
        import numpy as np

        return np.array(values, dtype=object)
    return list(values)


def executed_action(response):
    """The action verl-agent's projections hand the environment: the text between the first
    `<action>` and the `</action>` after it, stripped and lower-cased; without both tags (an
    invalid action) the response's last 30 characters, as ALFWorld's projection keeps."""
    lowered = response.lower()
    start = lowered.find("<action>")
    end = lowered.find("</action>", start + 1) if start >= 0 else -1
    if start < 0 or end < 0:
        return lowered[-30:]
    return lowered[start + len("<action>") : end].strip()


def _known(extra, key, i):
    """`extra[key][i]` as a plain value, or None when the column or the value is missing."""
    return _plain(extra[key][i]) if key in extra else None


def step_rows(batch, tokenizer, global_steps, project=executed_action):
    """The rows of one iteration, in batch order: a list of dicts (see the module docstring)."""
    tensors, extra = batch.batch, batch.non_tensor_batch
    prompts = tokenizer.batch_decode(tensors["prompts"], skip_special_tokens=True)
    responses = tokenizer.batch_decode(tensors["responses"], skip_special_tokens=True)
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
            "action": project(responses[i]),
            "response": responses[i],
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
        won, task = _known(extra, _SUCCESS, i), _known(extra, _TASK, i)
        if won is not None:
            row["success"] = bool(won)
        if task is not None:
            row["task"] = str(task)
        rows.append(row)
    return rows


def metrics_from_batch(batch, tokenizer, global_steps, project=executed_action, **options):
    """credit's headline figures on this iteration's rows (the rows `dump_steps` writes, with the
    same `project`), as flat `credit/...` keys for the trainer's logger; `options` are
    `credit.metrics`' (`methods`, `preset`, `params`, ...)."""
    import credit

    return credit.metrics(step_rows(batch, tokenizer, global_steps, project), **options)


def _path(out_dir, global_steps, fmt):
    out_dir = out_dir or os.environ.get("CREDIT_LOGS_DIR", "credit_logs")
    return os.path.join(out_dir, f"{int(_plain(global_steps))}.{fmt}")


def dump_steps(
    batch,
    tokenizer,
    global_steps,
    out_dir=None,
    fmt="jsonl.gz",
    project=executed_action,
    advantages_follow=False,
):
    """Writes this iteration's step rows to `out_dir/{global_steps}.{fmt}` (atomically: a
    temporary file renamed into place; `out_dir` defaults to $CREDIT_LOGS_DIR, else
    `credit_logs`) and marks each row of `batch` with its turn (for
    `dump_advantages`); returns the path. `project` turns a model response into the action the
    environment executed (see the module docstring).

    With `advantages_follow=True` (the patch's call: `dump_advantages` follows in the same
    iteration) the rows wait in `{global_steps}.{fmt}.pending`, a name credit does not read, and
    `dump_advantages` writes the iteration's file once, with the advantages: `credit watch` reads
    each iteration once. The rows are on disk from this call on: a pending file of an earlier
    iteration (a trainer stopped before `compute_advantage`) becomes that iteration's file, without
    advantages, at the next call."""
    rows = step_rows(batch, tokenizer, global_steps, project)
    extra = batch.non_tensor_batch
    extra[_STEP] = _like(extra["traj_uid"], [row["step"] for row in rows])
    path = _path(out_dir, global_steps, fmt)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _settle_pending(path, fmt)
    _write(rows, path + _PENDING if advantages_follow else path, fmt)
    return path


def _settle_pending(path, fmt):
    """Every other iteration's pending rows in `path`'s folder become that iteration's file (its
    trainer stopped before `compute_advantage`), unless the file was written after all."""
    out_dir = os.path.dirname(path) or "."
    for name in sorted(os.listdir(out_dir)):
        pending = os.path.join(out_dir, name)
        if not name.endswith(f".{fmt}{_PENDING}") or pending == path + _PENDING:
            continue
        final = pending[: -len(_PENDING)]
        if os.path.exists(final):
            os.remove(pending)
        else:
            os.replace(pending, final)


def _first_token_advantages(batch):
    """(traj_uid, turn) → the advantage at the row's first response token, for every row with
    one; a padding copy of a row gives the same key and value, so the first is kept."""
    tensors, extra = batch.batch, batch.non_tensor_batch
    if _STEP not in extra:
        raise ValueError(
            f"the batch has no `{_STEP}`: call dump_steps on it first (it marks each row's turn)"
        )
    advantages, mask = tensors["advantages"], tensors["response_mask"]
    logged = {}
    for i, (traj, step) in enumerate(zip(extra["traj_uid"], extra[_STEP])):
        key = (str(_plain(traj)), int(_plain(step)))
        if key in logged:
            continue
        # Responses are right-padded, so the scan usually stops at the first token.
        first = next((k for k, m in enumerate(mask[i]) if _plain(m)), None)
        if first is not None:
            logged[key] = float(_plain(advantages[i][first]))
    return logged


def dump_advantages(batch, global_steps, out_dir=None, fmt="jsonl.gz"):
    """Adds the trainer's advantage of each row (see the module docstring) to the rows that
    `dump_steps` wrote for this iteration (pending, or its file), written atomically as the
    iteration's file; returns the path."""
    logged = _first_token_advantages(batch)
    path = _path(out_dir, global_steps, fmt)
    pending = path + _PENDING
    source = pending if os.path.exists(pending) else path
    rows = _read(source, fmt)
    for row in rows:
        value = logged.get((row["traj_uid"], row["step"]))
        if value is not None:
            row["advantage"] = value
    _write(rows, path, fmt)
    if source == pending:
        os.remove(pending)
    return path


def _read(path, fmt):
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    opener = gzip.open if fmt == "jsonl.gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def _write(rows, path, fmt):
    """`rows` to `path` through a temporary file renamed into place."""
    out_dir = os.path.dirname(path)
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
