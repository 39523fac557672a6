#!/usr/bin/env python3
"""Writes fixtures/logged/5.jsonl, the README's `logged` example: fixtures/real/textworld.jsonl
with verl-agent's own GiGPO output (`gigpo_mean_std_norm` of
fixtures/reference/textworld.ref-pen01.jsonl: penalty 0.1, float32) as the `advantages` column, as
`integrations/verl_agent_dump.py` logs it, then one row changed (line 11: +0.5) and two swapped
(lines 1 and 13). Named as `dump_advantages` names a dump: `{global_step}.jsonl`. Deterministic:
`python3 scripts/fixture-logged.py`."""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")


def main():
    with open(os.path.join(FIXTURES, "real", "textworld.jsonl"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    with open(os.path.join(FIXTURES, "reference", "textworld.ref-pen01.jsonl"), encoding="utf-8") as f:
        refs = [json.loads(line) for line in f]
    assert len(lines) == len(refs)
    out = []
    for line, ref in zip(lines, refs):
        row = json.loads(line)
        assert (row["uid"], row["traj_uid"], row["step"]) == (ref["uid"], ref["traj_uid"], ref["step"])
        row["advantages"] = ref["gigpo_mean_std_norm"]
        out.append(row)
    out[10]["advantages"] += 0.5
    out[0]["advantages"], out[12]["advantages"] = out[12]["advantages"], out[0]["advantages"]
    os.makedirs(os.path.join(FIXTURES, "logged"), exist_ok=True)
    with open(os.path.join(FIXTURES, "logged", "5.jsonl"), "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in out)


if __name__ == "__main__":
    main()
