#!/usr/bin/env bash
# The GPU paths of issue 14 in one run, for a machine with one CUDA GPU (sized for an H200),
# under 8 minutes once vLLM is installed. Each step is bounded by `timeout`, records
# ok/failed and its seconds, and a failed step does not stop the later ones:
#
#   setup     a venv ($VENV, default .venv-gpu) with vLLM (pip install vllm, from PyPI, only
#             when missing) and this project; the tiny model from $TINY (carry it over from a
#             CPU machine: `odyssey model init-tiny bench/.gpu_smoke/tiny`), built offline here
#             when absent. Nothing is downloaded at run time.
#   serve     `vllm serve` on the tiny model (bf16, loopback, dev mode, Odyssey's worker
#             extension) until /health answers.
#   sync      one weight sync into that server: the trainer (HFPolicy on CUDA) perturbs its
#             weights, pushes them (safetensors folder -> POST /collective_rpc reload ->
#             /reset_prefix_cache); the server's checksum must equal the trainer's, and the
#             mean |behaviour - trainer log-prob| of the server's answers must fall (it samples
#             with the new weights).
#   rollout   rollout throughput of the vLLM backend (the Collector on odland envs through
#             RolloutPolicy against the server) and `vllm bench serve` on the same server with
#             the same mean prompt/answer lengths (random text prompts, --ignore-eos): the ratio
#             of output tokens/s.
#   colocate  the in-process engine (rollout.backend: vllm): generate, sleep, push new weights
#             in buckets through collective_rpc, checksum, generate again.
#   zero2     one DeepSpeed ZeRO-2 RL step on CUDA: the tiny Odysseus preset with model.device
#             cuda and configs/deepspeed/zero2.json, under torchrun (one process).
#
# Results: $OUT/gpu_smoke.json (steps and numbers) and $OUT/gpu_smoke.log (all output);
# without $OUT, bench/.gpu_smoke/. Usage: bash bench/gpu_smoke.sh
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
RES=${OUT:-$REPO/bench/.gpu_smoke}
VENV=${VENV:-$REPO/.venv-gpu}
TINY=${TINY:-$REPO/bench/.gpu_smoke/tiny}
PORT=${PORT:-18431}
WORK=$(mktemp -d)
mkdir -p "$RES"
LOG=$RES/gpu_smoke.log
STEPS=$RES/steps.jsonl
: >"$LOG"
: >"$STEPS"
PY=$VENV/bin/python
export REPO RES VENV TINY PORT WORK PY

stop_server() { # the vLLM server runs in its own session: stop its process group by id
  local pid
  pid=$(cat "$WORK/server.pid" 2>/dev/null) || return 0
  kill -TERM -- "-$pid" 2>/dev/null || return 0
  for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || return 0; sleep 1; done
  kill -KILL -- "-$pid" 2>/dev/null
}
trap 'stop_server; rm -rf "$WORK"' EXIT

step() { # step NAME SECONDS FUNCTION: run it bounded, record its status and duration
  local name=$1 limit=$2 fn=$3 t0=$SECONDS status
  echo "=== $name" | tee -a "$LOG"
  if timeout "$limit" bash -c "$fn" >>"$LOG" 2>&1; then status=ok; else status="failed (exit $?)"; fi
  printf '{"step": "%s", "status": "%s", "seconds": %d}\n' "$name" "$status" $((SECONDS - t0)) >>"$STEPS"
  echo "    $status in $((SECONDS - t0)) s" | tee -a "$LOG"
  [[ $status == ok ]]
}

setup() {
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || return 1
  [[ -x $PY ]] || python3 -m venv "$VENV" || return 1
  if ! "$PY" -c "import vllm" 2>/dev/null; then
    "$PY" -m pip install --quiet vllm || return 1 # brings its own CUDA torch
  fi
  "$PY" -m pip show --quiet odyssey-core 2>/dev/null ||
    "$PY" -m pip install --quiet -e "${REPO}[deepspeed]" || return 1
  [[ -f $TINY/config.json ]] || "$VENV/bin/odyssey" model init-tiny "$TINY" || return 1
  "$PY" -c "import torch, vllm, transformers, deepspeed; assert torch.cuda.is_available()
print('torch', torch.__version__, 'vllm', vllm.__version__, 'transformers',
      transformers.__version__, 'deepspeed', deepspeed.__version__)"
}

serve() {
  VLLM_SERVER_DEV_MODE=1 PYTHONPATH=$REPO setsid "$VENV/bin/vllm" serve "$TINY" \
    --served-model-name tiny --host 127.0.0.1 --port "$PORT" --dtype bfloat16 \
    --max-model-len 4096 --gpu-memory-utilization 0.25 --enforce-eager \
    --limit-mm-per-prompt '{"image": 1}' \
    --worker-extension-cls odyssey_core.policy.weight_sync.VLLMWorkerExtension \
    >"$RES/vllm_serve.log" 2>&1 &
  echo $! >"$WORK/server.pid"
  "$PY" - "$PORT" "$!" <<'EOF'
import os, sys, time, httpx
port, pid = sys.argv[1], int(sys.argv[2])
deadline = time.monotonic() + 170
while time.monotonic() < deadline:
    try:
        with open(f"/proc/{pid}/stat") as f:
            if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                raise FileNotFoundError
    except FileNotFoundError:
        sys.exit("vllm serve exited; see vllm_serve.log")
    try:
        if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
            sys.exit(0)
    except httpx.HTTPError:
        pass
    time.sleep(2)
sys.exit("vllm serve did not become healthy in time")
EOF
}

# The shared Python of the checks: the trainer policy, observations, the log-prob gap.
cat >"$WORK/common.py" <<'EOF'
import json, sys, numpy as np, torch
from odyssey_core.envs.base import Observation
from odyssey_core.policy import GenerationParams
from odyssey_core.policy.hf import HFPolicy
from odyssey_core.policy.weight_sync import RolloutBackendSettings, build_rollout_engine, export_weights, weights_checksum

def trainer(tiny):
    return HFPolicy(tiny, game="odland", dtype="bfloat16", device="cuda")

def perturb(model, seed, scale=0.02):
    g = torch.Generator(device="cuda").manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g, device=p.device).to(p.dtype))

def observations(n=16):
    rng = np.random.default_rng(0)
    return [Observation(image=rng.integers(0, 256, (144, 160, 3), dtype=np.uint8),
                        text=f"Level 1-{i % 3 + 1}. Go right.") for i in range(n)]

def gap(rollout, policy, obs, params):
    """Mean |engine log-prob - trainer log-prob| over the engine's sampled tokens."""
    gens = rollout.generate(obs, params)
    with torch.no_grad():
        scores = policy.score([g.prompt_ids for g in gens], [g.response_ids for g in gens],
                              [o.image for o in obs])
    return float(torch.cat([(s.float().cpu() - torch.tensor(g.logprobs)).abs()
                            for s, g in zip(scores, gens)]).mean())

def record(path, **values):
    print(json.dumps(values, indent=1))
    with open(path, "w") as f:
        json.dump(values, f, indent=1)
EOF

sync_check() {
  PYTHONPATH=$WORK:$REPO "$PY" - "$TINY" "$PORT" "$RES" <<'EOF'
import sys
from common import *
tiny, port, res = sys.argv[1:4]
policy = trainer(tiny)
settings = RolloutBackendSettings(kind="openai", base_url=f"http://127.0.0.1:{port}/v1",
                                  server="vllm", weights_dtype="bfloat16",
                                  sync_dir=f"{res}/sync", concurrency=16)
rollout, target = build_rollout_engine(settings, policy, res)
obs, params = observations(), GenerationParams(temperature=1.0, max_new_tokens=32, seed=0)
before = gap(rollout, policy, obs, params)  # served weights = checkpoint; trainer's differ
perturb(policy.model, seed=1)
perturbed = gap(rollout, policy, obs, params)
report = target.push(policy.model, verify=True)
expected = weights_checksum(export_weights(policy.model), dtype="bfloat16")
after = gap(rollout, policy, obs, params)
ok = report.served == expected and after < 0.5 * perturbed
record(f"{res}/sync.json", checksum_match=report.served == expected,
       served=report.served.as_dict(), trainer=expected.as_dict(), push_seconds=report.seconds,
       gap_same_weights=before, gap_stale_weights=perturbed, gap_after_sync=after, ok=ok)
sys.exit(0 if ok else 1)
EOF
}

rollout_bench() {
  PYTHONPATH=$WORK:$REPO "$PY" - "$TINY" "$PORT" "$RES" "$VENV/bin/vllm" <<'EOF'
import json, subprocess, sys, time
from common import *
from odyssey_core.config import GameBoyEnvConfig
from odyssey_core.envs.vector import SyncVectorEnv
from odyssey_core.protocol.formats import RESPONSE_FORMATS
from odyssey_core.rollout.collector import Collector, TurnBudget
tiny, port, res, vllm = sys.argv[1:5]
envs, turns = 64, 1024
policy = trainer(tiny)
settings = RolloutBackendSettings(kind="openai", base_url=f"http://127.0.0.1:{port}/v1",
                                  server="vllm", concurrency=envs, sync=False)
rollout, _ = build_rollout_engine(settings, policy, res)
collector = Collector(SyncVectorEnv([f"odland-1-{i % 3 + 1}" for i in range(envs)],
                                    env_kwargs={"config": GameBoyEnvConfig(max_turns=64)}),
                      rollout, GenerationParams(temperature=1.0, max_new_tokens=64),
                      max_turns=64, response_format=RESPONSE_FORMATS.get("odysseus"),
                      tokenizer=policy.tokenizer)
collector.collect(TurnBudget(envs), seed=99)  # warm-up
start = time.perf_counter()
batch, metrics = collector.collect(TurnBudget(turns), seed=0)
elapsed = time.perf_counter() - start
out_tokens = sum(int(r.numel()) for r in batch.response_ids)
prompt_len = round(sum(int(p.numel()) for p in batch.prompt_ids) / len(batch))
answer_len = max(1, round(out_tokens / len(batch)))
bench_file = "vllm_bench.json"
subprocess.run([vllm, "bench", "serve",
                "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
                "--base-url", f"http://127.0.0.1:{port}", "--model", "tiny", "--tokenizer", tiny,
                "--dataset-name", "random", "--random-input-len", str(prompt_len),
                "--random-output-len", str(answer_len), "--ignore-eos",
                "--num-prompts", str(turns), "--max-concurrency", str(envs),
                "--save-result", "--result-dir", res, "--result-filename", bench_file],
               check=True, timeout=180)
bench = json.load(open(f"{res}/{bench_file}"))
ours = out_tokens / elapsed
record(f"{res}/rollout.json", envs=envs, turns=len(batch), seconds=elapsed,
       turns_per_s=len(batch) / elapsed, output_tokens_per_s=ours,
       generate_seconds=metrics.as_dict().get("time/generate_s"),
       mean_prompt_tokens=prompt_len, mean_answer_tokens=answer_len,
       vllm_bench_output_tokens_per_s=bench.get("output_throughput"),
       ratio_vs_vllm_bench=ours / bench["output_throughput"] if bench.get("output_throughput") else None)
EOF
}

colocate_check() {
  PYTHONPATH=$WORK:$REPO "$PY" - "$TINY" "$RES" <<'EOF'
import sys
from common import *
tiny, res = sys.argv[1:3]
policy = trainer(tiny)
settings = RolloutBackendSettings(kind="vllm", weights_dtype="bfloat16", sleep_level=1,
                                  bucket_mb=1, sync_dir=f"{res}/colocate",
                                  engine_kwargs={"dtype": "bfloat16", "enforce_eager": True,
                                                 "gpu_memory_utilization": 0.2,
                                                 "max_model_len": 4096})
rollout, target = build_rollout_engine(settings, policy, res)
obs, params = observations(), GenerationParams(temperature=1.0, max_new_tokens=32, seed=0)
start_gap = gap(rollout, policy, obs, params)
target.sleep()
perturb(policy.model, seed=2)
report = target.push(policy.model, verify=True)
after = gap(rollout, policy, obs, params)
ok = report.served == report.sent and after < 0.05 + 2 * start_gap
record(f"{res}/colocate.json", checksum_match=report.served == report.sent,
       push_seconds=report.seconds, tensors=report.served.tensors, gap_start=start_gap,
       gap_after_push=after, ok=ok)
sys.exit(0 if ok else 1)
EOF
}

zero2_step() {
  cat >"$WORK/zero2.yaml" <<EOF
inherit: $REPO/configs/odysseus/tiny.yaml
steps: 1
checkpoint_every: 1
model: {path: $TINY, device: cuda}
deepspeed: $REPO/configs/deepspeed/zero2.json
EOF
  "$PY" -m torch.distributed.run --standalone --nproc_per_node 1 "$VENV/bin/odyssey" train \
    --preset "$WORK/zero2.yaml" --out "$WORK/zero2-run" --steps 1 &&
    cp "$WORK/zero2-run/metrics.jsonl" "$RES/zero2_metrics.jsonl"
}

export -f setup serve sync_check rollout_bench colocate_check zero2_step
if step setup 420 setup; then
  if step serve 180 serve; then
    step sync 120 sync_check
    step rollout 200 rollout_bench
  fi
  stop_server # frees the GPU for the in-process engine and the training step
  step colocate 180 colocate_check
  step zero2 180 zero2_step
fi

python3 - "$RES" <<'EOF'
import json, pathlib, sys
res = pathlib.Path(sys.argv[1])
steps = [json.loads(line) for line in (res / "steps.jsonl").read_text().splitlines() if line]
numbers = {p.stem: json.loads(p.read_text()) for p in map(res.joinpath, ("sync.json", "rollout.json", "colocate.json")) if p.is_file()}
summary = {"steps": steps, **numbers, "all_ok": bool(steps) and all(s["status"] == "ok" for s in steps)}
(res / "gpu_smoke.json").write_text(json.dumps(summary, indent=1) + "\n")
print(json.dumps(summary, indent=1))
EOF
