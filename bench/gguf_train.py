#!/usr/bin/env python3
"""`credit train policy` on a real GGUF model (SmolLM2-135M-Instruct) on this machine: one LoRA
step side by side with PyTorch + PEFT, and a short policy run with held-out log-probs.

Usage:
    python3 -m venv /work/venv-torch
    /work/venv-torch/bin/pip install --no-cache-dir torch transformers peft gguf
    python3 bench/gguf_train.py step  --model SmolLM2-135M-Instruct.Q4_1.gguf [--credit target/release/credit]
    python3 bench/gguf_train.py train --model SmolLM2-135M-Instruct.Q4_1.gguf [--steps 12]
    [--torch-python /work/venv-torch/bin/python] [--work DIR] [--threads 2] [--device cuda]

`step`: the samples come from credit itself (`--handoff`: token ids of prompt + action, the
action's start, the advantage), so both sides see the same B sequences of the same lengths.
credit runs `train policy --lora-rank 8 --steps K` (with and without `--checkpoint-layers`) and
its tokens/s is read from metrics.jsonl; PyTorch loads the same GGUF with transformers
(`from_pretrained(dir, gguf_file=...)`, dequantised to f32), wraps it in PEFT LoRA (rank 8,
α 16, dropout 0.05, q/k/v/o/gate/up/down), right-pads the batch with an attention mask and
runs forward (LM head on the action positions only, as credit) + backward + clipped AdamW,
with `torch.set_num_threads(threads)`, with and without gradient checkpointing. Tokens/s counts
the real (unpadded) tokens over the step's wall time; the first step of each side is reported
apart (it includes allocator warm-up). Peak RSS is the child's `ru_maxrss` (wait4), model load
and credit's reference scoring included.

`--device cuda` (a `cuda` build of credit, and a PyTorch that sees the GPU): credit trains with
`--device cuda` (bf16 frozen base and activations, f32 adapters and optimizer state), PyTorch
loads the base in bf16 (PEFT keeps its adapters in f32) and synchronises before each clock
reading; each child's peak GPU memory is the most `nvidia-smi` reports in use during its run,
less what was in use before it (sampled every 50 ms; the CUDA context included), and PyTorch's
own `max_memory_allocated` is printed beside it. Held-out scoring stays f32.

`train`: TextWorld held out by task: the logs of two of the three tasks are the training input
(GRPO advantages within those groups), the third task's rows are scored before (the GGUF base,
via transformers) and after (credit's `--merge` folder) training: mean log-prob per action token
of the actions of successful trajectories, of unsuccessful ones and of invalid actions (the
first --eval-max rows of each kind, in file order).
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def gpu_used_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


class GpuPeak:
    """The most GPU memory in use while it runs, less what was in use when it started (MiB)."""

    def __init__(self):
        import threading
        self.base = self.peak = gpu_used_mib()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def sample(self):
        while not self.stop.wait(0.05):
            self.peak = max(self.peak, gpu_used_mib())

    def finish(self):
        self.stop.set()
        self.thread.join()
        return self.peak - self.base


GPU = {"on": False}


def run_measured(cmd, log):
    """Runs cmd, returns (returncode, wall_s, peak_rss_mib) of that child alone; with
    --device cuda, the child's peak GPU memory is kept in GPU["last_mib"]."""
    t0 = time.time()
    gpu = GpuPeak() if GPU["on"] else None
    with open(log, "w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        _, status, ru = os.wait4(p.pid, 0)
    if gpu:
        GPU["last_mib"] = gpu.finish()
    return os.waitstatus_to_exitcode(status), time.time() - t0, ru.ru_maxrss / 1024


def gpu_note():
    return f", peak GPU memory {GPU['last_mib']} MiB" if GPU["on"] else ""


def handoff(a, fixture, out, max_samples=None, extra=()):
    cmd = [a.credit, "train", "policy", fixture, "--model", a.model, "--method", "grpo",
           "--lora-rank", "8", "--max-prompt-tokens", str(a.max_prompt_tokens), "--handoff", out,
           *extra]
    if max_samples:
        cmd += ["--max-samples", str(max_samples)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        lines = [json.loads(l) for l in f]
    return lines[1:]


def read_metrics(d):
    with open(os.path.join(d, "metrics.jsonl")) as f:
        return [json.loads(l) for l in f]


# ---------------------------------------------------------------- PyTorch side (child process)

def load_hf(model, dtype=None):
    import torch
    from transformers import AutoModelForCausalLM
    dtype = dtype or torch.float32
    if os.path.isdir(model):
        return AutoModelForCausalLM.from_pretrained(model, torch_dtype=dtype)
    return AutoModelForCausalLM.from_pretrained(
        os.path.dirname(os.path.abspath(model)), gguf_file=os.path.basename(model),
        torch_dtype=dtype)


def batch_tensors(samples, device="cpu"):
    import torch
    T = max(len(s["input_ids"]) for s in samples)
    ids = torch.zeros(len(samples), T, dtype=torch.long)
    mask = torch.zeros(len(samples), T, dtype=torch.long)
    for i, s in enumerate(samples):
        ids[i, : len(s["input_ids"])] = torch.tensor(s["input_ids"])
        mask[i, : len(s["input_ids"])] = 1
    return ids.to(device), mask.to(device)


def action_logprobs(backbone, lm_head, samples, ids, mask):
    """Per sample: the log-probs of its action tokens (LM head on those positions only)."""
    import torch
    h = backbone(input_ids=ids, attention_mask=mask).last_hidden_state
    rows, pos, tgt = [], [], []
    for i, s in enumerate(samples):
        n = len(s["input_ids"])
        for t in range(s["action_start"], n):
            rows.append(i)
            pos.append(t - 1)
            tgt.append(s["input_ids"][t])
    on = lambda x: torch.tensor(x, device=ids.device)
    logits = lm_head(h[on(rows), on(pos)]).float()
    lp = torch.log_softmax(logits, dim=-1).gather(1, on(tgt)[:, None])[:, 0]
    return lp, on(rows)


def torch_step(args):
    import torch
    from peft import LoraConfig, get_peft_model
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with open(args.samples) as f:
        samples = [json.loads(l) for l in f][1:]
    cuda = args.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t0 = time.time()
    model = load_hf(args.model, torch.bfloat16 if cuda else torch.float32).to(args.device)
    load_s = time.time() - t0
    load_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    cfg = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.05, task_type="CAUSAL_LM",
                     target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                     "up_proj", "down_proj"])
    model = get_peft_model(model, cfg)
    if args.checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-6, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    inner = model.base_model.model  # LlamaForCausalLM
    ids, mask = batch_tensors(samples, args.device)
    adv = torch.tensor([s["advantage"] for s in samples], device=args.device)
    tokens = int(mask.sum())
    steps = []
    for _ in range(args.steps):
        sync()
        t = time.time()
        lp, rows = action_logprobs(inner.model, inner.lm_head, samples, ids, mask)
        # on-policy PPO surrogate (r = 1) with the token mean, as credit's first update
        ratio = torch.exp(lp - lp.detach())
        loss = -(adv[rows] * ratio).sum() / lp.numel()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sync()
        dt = time.time() - t
        steps.append({"loss": float(loss.detach()), "step_s": dt, "tokens_per_s": tokens / dt})
    print(json.dumps({"load_s": load_s, "load_rss_mib": load_rss, "tokens": tokens, "padded_tokens": int(ids.numel()),
                      "trainable": sum(p.numel() for p in params),
                      "attn": inner.config._attn_implementation, "torch": torch.__version__,
                      "gpu_allocated_mib": torch.cuda.max_memory_allocated() / 2**20 if cuda else None,
                      "steps": steps}))


def torch_eval(args):
    import torch
    torch.set_num_threads(args.threads)
    with open(args.samples) as f:
        samples = [json.loads(l) for l in f]
    out = {}
    for name, path in (("before", args.model), ("after", args.merged)):
        model = load_hf(path).to(args.device).eval()
        per = []
        with torch.no_grad():
            for i in range(0, len(samples), 8):
                chunk = samples[i: i + 8]
                ids, mask = batch_tensors(chunk, args.device)
                lp, rows = action_logprobs(model.model, model.lm_head, chunk, ids, mask)
                for j in range(len(chunk)):
                    per.append(float(lp[rows == j].mean()))
        out[name] = per
        del model
    print(json.dumps(out))


# ---------------------------------------------------------------- the two measurements

def cmd_step(a):
    fixture = os.path.join(ROOT, "fixtures/real/textworld.jsonl")
    work = a.work
    samples = handoff(a, fixture, os.path.join(work, "step.jsonl"), a.batch)
    lens = [len(s["input_ids"]) for s in samples]
    print(f"batch: {len(samples)} sequences of {lens} tokens ({sum(lens)} in all), "
          f"{sum(len(s['input_ids']) - s['action_start'] for s in samples)} action tokens")
    res = {"lens": lens, "credit": {}, "torch": {}}
    for ckpt in (False, True):
        out = os.path.join(work, f"credit-ckpt{int(ckpt)}")
        shutil.rmtree(out, ignore_errors=True)
        cmd = [a.credit, "train", "policy", fixture, "--model", a.model, "--method", "grpo",
               "--lora-rank", "8", "--max-prompt-tokens", str(a.max_prompt_tokens),
               "--max-samples", str(a.batch), "--batch-size", str(a.batch),
               "--steps", str(a.steps), "--out", out, *a.device_flag]
        if ckpt:
            cmd.append("--checkpoint-layers")
        print("$", " ".join(cmd), flush=True)
        rc, wall, rss = run_measured(cmd, out + ".log")
        if rc != 0:
            print(f"  credit failed (rc {rc}), see {out}.log")
            res["credit"][ckpt] = {"rc": rc, "rss_mib": rss}
            continue
        m = read_metrics(out)
        res["credit"][ckpt] = {"wall_s": wall, "rss_mib": rss, "steps": m, "gpu_mib": GPU.get("last_mib")}
        print(f"  wall {wall:.0f} s, peak RSS {rss:.0f} MiB{gpu_note()}; per step: " + ", ".join(
            f"{x['tokens']} tokens {x['tokens_per_s']:.1f} tok/s" for x in m), flush=True)
    if not shutil.which(a.torch_python):
        print(f"no PyTorch ({a.torch_python} missing): credit alone")
        return res
    for ckpt in (False, True):
        cmd = [a.torch_python, __file__, "_torch_step", "--model", a.model, "--samples",
               os.path.join(work, "step.jsonl"), "--steps", str(a.steps + 1),
               "--threads", str(a.threads), "--device", a.device] + (["--checkpoint"] if ckpt else [])
        print("$", " ".join(cmd), flush=True)
        log = os.path.join(work, f"torch-ckpt{int(ckpt)}.log")
        rc, wall, rss = run_measured(cmd, log)
        with open(log) as f:
            text = f.read()
        if rc != 0:
            print(f"  torch failed (rc {rc}):\n{text[-2000:]}")
            continue
        r = json.loads(text.strip().splitlines()[-1])
        r.update(wall_s=wall, rss_mib=rss, gpu_mib=GPU.get("last_mib"))
        res["torch"][ckpt] = r
        allocated = f" (allocated {r['gpu_allocated_mib']:.0f} MiB)" if r["gpu_allocated_mib"] else ""
        print(f"  wall {wall:.0f} s, peak RSS {rss:.0f} MiB ({r['load_rss_mib']:.0f} MiB after loading){gpu_note()}{allocated}, {r['tokens']} tokens "
              f"({r['padded_tokens']} padded), attn {r['attn']}, torch {r['torch']}; per step: "
              + ", ".join(f"{x['tokens_per_s']:.1f} tok/s" for x in r["steps"]), flush=True)
    return res


def cmd_train(a):
    src = os.path.join(ROOT, "fixtures/real/textworld.jsonl")
    with open(src) as f:
        rows = [json.loads(l) for l in f]
    tasks = list(dict.fromkeys(r["uid"] for r in rows))
    held = tasks[a.held_out_task]
    work = a.work
    train_file = os.path.join(work, "train.jsonl")
    with open(train_file, "w") as f:
        for r in rows:
            if r["uid"] != held:
                f.write(json.dumps(r) + "\n")
    # Held-out samples: credit's own prompts and token ids for every row, one sample per row.
    allsamp = handoff(a, src, os.path.join(work, "all.jsonl"))
    assert len(allsamp) == len(rows), (len(allsamp), len(rows))
    won = {r["traj_uid"] for r in rows if r.get("won") or r.get("success")}
    ev, kinds = [], []
    for r, s in zip(rows, allsamp):
        if r["uid"] != held:
            continue
        k = ("invalid" if not r.get("is_action_valid", True)
             else "success" if r["traj_uid"] in won else "fail")
        if kinds.count(k) < a.eval_max:
            ev.append(s)
            kinds.append(k)
    out = os.path.join(work, "policy")
    shutil.rmtree(out, ignore_errors=True)
    cmd = [a.credit, "train", "policy", train_file, "--model", a.model, "--method", "grpo",
           "--lora-rank", "8", "--max-prompt-tokens", str(a.max_prompt_tokens),
           "--batch-size", str(a.batch), "--steps", str(a.steps), "--lr", str(a.lr),
           "--merge", "--out", out, *a.device_flag]
    if a.checkpoint_layers:
        cmd.append("--checkpoint-layers")
    if a.max_samples:
        cmd += ["--max-samples", str(a.max_samples)]
    print("$", " ".join(cmd), flush=True)
    rc, wall, rss = run_measured(cmd, out + ".log")
    if rc != 0:
        sys.exit(f"credit failed (rc {rc}), see {out}.log")
    m = read_metrics(out)
    print(f"wall {wall:.0f} s, peak RSS {rss:.0f} MiB{gpu_note()}")
    print("step  loss        pg_loss     kl          grad_norm  tokens  tok/s")
    for x in m:
        print(f"{x['step']:>4}  {x['loss']:+.3e}  {x['pg_loss']:+.3e}  {x.get('kl', float('nan')):.3e}"
              f"  {x['grad_norm']:.3e}  {x['tokens']:>6}  {x['tokens_per_s']:.1f}")
    evfile = os.path.join(work, "eval.jsonl")
    with open(evfile, "w") as f:
        for s in ev:
            f.write(json.dumps(s) + "\n")
    cmd = [a.torch_python, __file__, "_torch_eval", "--model", a.model, "--merged",
           os.path.join(out, "merged"), "--samples", evfile, "--threads", str(a.threads),
           "--device", a.device]
    print("$", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(p.stderr[-3000:])
    lp = json.loads(p.stdout.strip().splitlines()[-1])
    print(f"held-out task {held}: {len(ev)} rows; mean log-prob per action token")
    print("kind      n    before     after      change")
    for k in ("success", "fail", "invalid"):
        idx = [i for i, x in enumerate(kinds) if x == k]
        if not idx:
            continue
        b = sum(lp["before"][i] for i in idx) / len(idx)
        af = sum(lp["after"][i] for i in idx) / len(idx)
        print(f"{k:<8} {len(idx):>3}  {b:+.4f}   {af:+.4f}   {af - b:+.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["step", "train", "_torch_step", "_torch_eval"])
    ap.add_argument("--model", required=True)
    ap.add_argument("--credit", default=os.path.join(ROOT, "target/release/credit"))
    ap.add_argument("--torch-python", default="/work/venv-torch/bin/python")
    ap.add_argument("--work", default=None, help="scratch folder (default: a new one in /tmp, removed)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--batch", type=int, default=None, help="step: 4; train: 8")
    ap.add_argument("--steps", type=int, default=None, help="step: 2; train: 12")
    ap.add_argument("--max-prompt-tokens", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--max-samples", type=int, default=None)
    ap.add_argument("--held-out-task", type=int, default=2, help="train: which TextWorld task (0-2)")
    ap.add_argument("--eval-max", type=int, default=16, help="train: held-out rows scored per kind")
    ap.add_argument("--checkpoint-layers", action="store_true", help="train: credit's --checkpoint-layers")
    ap.add_argument("--samples")
    ap.add_argument("--merged")
    ap.add_argument("--checkpoint", action="store_true")
    a = ap.parse_args()
    if a.what == "_torch_step":
        return torch_step(a)
    if a.what == "_torch_eval":
        return torch_eval(a)
    GPU["on"] = a.device == "cuda"
    a.device_flag = ["--device", a.device] if a.device == "cuda" else []
    a.credit = os.path.abspath(a.credit)
    a.model = os.path.abspath(a.model)
    a.batch = a.batch or (4 if a.what == "step" else 8)
    a.steps = a.steps or (2 if a.what == "step" else 12)
    import tempfile
    keep = a.work is not None
    a.work = a.work or tempfile.mkdtemp(prefix="gguf_train.")
    os.makedirs(a.work, exist_ok=True)
    try:
        (cmd_step if a.what == "step" else cmd_train)(a)
    finally:
        if not keep:
            shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    main()
