#!/usr/bin/env bash
# GPU side of the real-SGLang recipe (docs/BENCHMARKS.md §5), run from the repository root
# on the lent machine. Each step is one short verb so that consecutive device calls (the
# machine stays warm 30 s) can chain them:
#
#   bash bench/gpu/device.sh unpack .gpu/part1         # call 1: SGLang's site folder
#   bash bench/gpu/device.sh unpack .gpu/part2 check   # call 2: duckdb + model files (+ repo.tar)
#   REPO_TAR=.gpu/part2/repo.tar bash bench/gpu/device.sh start bench/gpu/plan_2x2.json
#   bash bench/gpu/device.sh wait 540                  # progress + data so far in $OUT
#
# A plan whose server names a model shape ("shape": data/shapes/<name>, e.g.
# bench/gpu/plan_shape_*.json) needs no weight files at all: `start` materialises the shape's
# model folder (its config.json + the tokenizer from part2's model-src, copied by `unpack` into
# $G/models/tokenizer) and SGLang fills the weights with random values (--load-format dummy).
# `bash bench/gpu/device.sh shape NAME` materialises one on its own (a check before `start`).
# KV_POOL_TOKENS=N sizes a kv_fill plan from N tokens instead of its kv_pool.tokens (one GPU's
# measured pool; docs/BENCHMARKS.md 5.6 gives the H100's for the 2x2).
#
# vLLM (prepare_vllm.sh): one piece a call, then join and unpack once all are there:
#   bash bench/gpu/device.sh stash .gpu/vllm-part1     # call k: piece k into /tmp/gpu/pieces
#   bash bench/gpu/device.sh stash .gpu/vllm-part3 unpack-vllm check-vllm   # the last piece
#   REPO_TAR=.gpu/part2/repo.tar bash bench/gpu/device.sh start bench/gpu/plan_vllm_graphs.json
#
# plan_vllm_graphs.json and plan_engines.json name the Llama-3.1-8B shape, like the shape
# plans: `start` fills their tokenizer and materialises the shape for both engines.
# DUMMY_WEIGHTS=1 makes a MODEL_NAME folder from config + tokenizer only (a plan that names a
# model folder and passes --load-format dummy itself).
#
# MODEL_NAME names the folder the random-weight model is built in (default
# smollm2-135m-random); runs store that path as server.model, so a model of another shape
# (prepare.sh MODEL_OVERRIDES, docs/BENCHMARKS.md 5.3) should get its own name.
#
# Everything it makes lives under /tmp/gpu (kept while the machine is warm). The experiment
# runs from a copy of the repository, in its own session, so it outlives one call and a
# later call's fresh copy of the working tree cannot change code under a running process.
set -uo pipefail
G=/tmp/gpu
export PYTHONPATH=$G/site:$G/extra HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
# Only vLLM staged: ServeLab's own pydantic and friends come from vLLM's site folder (after
# the extras); with SGLang's there, never (SGLang would find `vllm` importable).
[[ -d $G/site ]] || export PYTHONPATH=$G/extra:$G/vllm-site
export SERVELAB_DATA_DIR=$G/data SERVELAB_SGLANG_PYTHON=python3 SERVELAB_MODEL_ROOTS=$G/models
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1  # no network there
# Several-GPU kinds: NVLink multicast stays off in NCCL, PyTorch and NVSHMEM (KINDS.md).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
model=$G/models/${MODEL_NAME:-smollm2-135m-random}
tokenizer=$G/models/tokenizer  # a shape's tokenizer: model-src's files, no weights
mkdir -p $G/data $G/py

# One named engine installation per SGLang release unpacked here (README "Engines"): the main
# site folder is "sglang-<its version>"; a second release (prepare.sh alt VERSION) unpacks to
# site-VERSION and goes ahead of the main one on PYTHONPATH, sharing everything else.
installs() {
  local spec="" v dir
  if [[ -d $G/vllm-site ]]; then  # vLLM: its own site folder, ahead of the shared extras
    v=$(basename "$(ls -d $G/vllm-site/vllm-*.dist-info 2>/dev/null | head -1)" .dist-info)
    printf '#!/bin/sh\nPYTHONPATH=%s exec python3 "$@"\n' "$G/vllm-site:$G/extra" > "$G/py/$v"
    chmod +x "$G/py/$v"
    export SERVELAB_VLLM_PYTHON=$G/py/$v
    spec+="$v=$G/py/$v"
  fi
  for dir in $G/site $G/site-*; do
    [[ -d $dir ]] || continue
    v=$(basename "$(ls -d "$dir"/sglang-*.dist-info 2>/dev/null | head -1)" .dist-info)
    v=${v#sglang-}
    [[ -n $v ]] || continue
    local path=$G/site:$G/extra
    [[ $dir == "$G/site" ]] || path=$dir:$path
    printf '#!/bin/sh\nPYTHONPATH=%s exec python3 "$@"\n' "$path" > "$G/py/sglang-$v"
    chmod +x "$G/py/sglang-$v"
    spec+="${spec:+;}sglang-$v=$G/py/sglang-$v"
  done
  export SERVELAB_ENGINE_INSTALLS=$spec
}
installs

unpack() {  # PART_DIR: every *.tar.xz (or its .partNN pieces) into $G/site or $G/extra
  local t=$SECONDS
  for f in "$1"/*.tar.xz "$1"/*.tar.xz.part00; do
    [[ -e $f ]] || continue
    local base; base=$(basename "${f%.part00}" .tar.xz)
    local dest=$G/extra
    [[ $base == sglang ]] && dest=$G/site
    [[ $base == sglang-* ]] && dest=$G/site-${base#sglang-}
    mkdir -p "$dest"
    if [[ $f == *.part00 ]]; then cat "${f%00}"*; else cat "$f"; fi | xz -dc -T0 | tar -C "$dest" -xf -
  done
  # Wheels that are already compressed travel as they are (duckdb: 24 MB).
  if compgen -G "$1/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
      --target $G/extra "$1"/*.whl
  fi
  if [[ -d $1/model-src && ! -d $tokenizer ]]; then
    mkdir -p "$tokenizer"
    for f in tokenizer.json tokenizer_config.json special_tokens_map.json chat_template.jinja; do
      [[ -f $1/model-src/$f ]] && cp "$1/model-src/$f" "$tokenizer/"
    done
  fi
  if [[ -d $1/model-src && ! -d $model && ${SHAPES_ONLY:-0} != 1 ]]; then
    if [[ ${DUMMY_WEIGHTS:-0} == 1 ]]; then  # --load-format dummy: config + tokenizer only
      mkdir -p "$model" && cp "$1"/model-src/* "$model"/
    else
      python3 bench/gpu_make_model.py "$1/model-src" "$model"
    fi
  fi
  installs
  echo "unpacked $1 in $((SECONDS - t)) s; engine installs: $SERVELAB_ENGINE_INSTALLS"
}

stash() {  # PART_DIR: its pieces kept until unpack-vllm joins them (one call each)
  mkdir -p $G/pieces && cp "$1"/*.part* $G/pieces/
  ls -l $G/pieces
}

unpack_vllm() {  # every piece stashed so far, joined, into $G/vllm-site
  local t=$SECONDS
  rm -rf $G/vllm-site && mkdir -p $G/vllm-site
  cat $G/pieces/vllm.tar.xz.part* | xz -dc -T0 | tar -C $G/vllm-site -xf - || return 1
  rm -rf $G/pieces
  installs
  echo "unpacked vLLM in $((SECONDS - t)) s; SERVELAB_VLLM_PYTHON=$SERVELAB_VLLM_PYTHON"
}

check_vllm() {  # the serve path's imports, and the option list ServeLab reads
  "$SERVELAB_VLLM_PYTHON" - <<'PY'
import importlib, importlib.metadata as m, traceback
print("vllm", m.version("vllm"), "torch", m.version("torch"), "transformers", m.version("transformers"))
for mod in ("vllm.entrypoints.openai.api_server", "vllm.v1.engine.core", "vllm.v1.worker.gpu_worker",
            "vllm.model_executor.models.llama", "vllm.vllm_flash_attn.flash_attn_interface"):
    try:
        importlib.import_module(mod)
        print("ok", mod)
    except Exception:
        print("FAILED", mod); traceback.print_exc(limit=3)
from vllm.vllm_flash_attn import flash_attn_interface as f
print("FA2", f.FA2_AVAILABLE, "FA3", f.FA3_AVAILABLE)
PY
  "$SERVELAB_VLLM_PYTHON" -m vllm.entrypoints.cli.main serve --help=all | grep -c -- '--' || true
}

check() {
  nvidia-smi --query-gpu=index,name,memory.total,memory.used,driver_version --format=csv
  python3 - <<'PY'
import importlib.metadata as m
for name in ("sglang", "sglang-kernel", "flashinfer-python", "transformers", "tokenizers",
             "torch", "duckdb", "pydantic", "fastapi"):
    try:
        print(name, m.version(name))
    except m.PackageNotFoundError:
        print(name, "MISSING")
PY
  local w
  for w in $G/py/*; do  # each installation's own sglang, kernel and transformers
    [[ -x $w ]] && "$w" -c "import importlib.metadata as m, sglang.launch_server; print('$(basename "$w")', \
      *(n + ' ' + m.version(n) for n in ('sglang', 'sglang-kernel', 'flashinfer-python', 'transformers')))"
    # whether this release reads the MoE routing variable a shape run sets (else it is not set)
    [[ -x $w ]] && "$w" -c "import importlib.util as u, pathlib as p; s = u.find_spec('sglang'); \
      f = p.Path(list(s.submodule_search_locations)[0], 'srt', 'environ.py'); \
      print('$(basename "$w") reads SGLANG_SIMULATE_UNIFORM_EXPERTS:', \
            f.is_file() and 'SGLANG_SIMULATE_UNIFORM_EXPERTS' in f.read_text(errors='replace'))"
  done
}

start() {  # PLAN_JSON[,PLAN_JSON...]: the experiments, one after another (then, with PAIR=1,
           # the seed's one-restart pair on the last plan's base)
  rm -rf $G/repo && mkdir -p $G/repo
  # REPO_TAR (a `git archive` of a commit, see prepare.sh) pins the code that runs; without it,
  # the working tree as this call received it.
  if [[ -n ${REPO_TAR:-} ]]; then
    tar -C $G/repo -xf "$REPO_TAR"
  else
    tar --exclude=./.gpu --exclude=./data/models --exclude=./.venv -cf - . | tar -C $G/repo -xf -
  fi
  echo "cd $G/repo" > $G/all.sh
  local plans i=0 plan shape
  IFS=, read -ra plans <<< "$1"
  for plan in "${plans[@]}"; do
    i=$((i + 1))
    python3 - "$plan" "$model" $G "$tokenizer" $i <<'PY' || return 1
import json, os, sys
plan = json.load(open(sys.argv[1]))
server = plan["base"]["server"]
if server.get("shape"):  # a model shape: dummy weights, its folder built from data/shapes
    server["tokenizer"] = sys.argv[4]
else:
    server["model"] = sys.argv[2]
# KV_POOL_TOKENS: the pool a kv_fill plan is sized from on this GPU (a plan's kv_pool.tokens
# is one GPU's measured pool: plan_shape_2x2.json's is the H200's, 5x an H100's)
if os.environ.get("KV_POOL_TOKENS") and plan["base"]["plan"].get("kv_pool"):
    plan["base"]["plan"]["kv_pool"] = {"tokens": int(os.environ["KV_POOL_TOKENS"])}
    print("kv_pool.tokens:", os.environ["KV_POOL_TOKENS"], "(KV_POOL_TOKENS)")
json.dump(plan, open(f"{sys.argv[3]}/plan-{sys.argv[5]}.json", "w"))
# The seed team's change, made as they made it: two plain runs (no declared knob) that
# differ in both CUDA graphs and mem-fraction-static; the Compare page must flag it.
base = {k: v for k, v in plan["base"].items() if k in ("server", "plan")}
base["tags"] = ["gpu", "h200", "sglang", "seed-pair"]
json.dump(base, open(sys.argv[3] + "/pair.json", "w"))
PY
    shape=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['base']['server'].get('shape') or '')" "$plan")
    if [[ -n $shape ]]; then (cd $G/repo && materialise "$shape") || return 1; fi
    echo "python3 -m core experiment $G/plan-$i.json" >> $G/all.sh
  done
  # The seed pair is already in data/demo; PAIR=1 measures it again after the experiments.
  if [[ ${PAIR:-0} == 1 ]]; then
    cat >> $G/all.sh <<SH
python3 -m core run --plan $G/pair.json --no-cuda-graphs --mem-fraction-static 0.85 --tag seed:before --quiet
python3 -m core run --plan $G/pair.json --cuda-graphs --mem-fraction-static 0.92 --tag seed:after --quiet
SH
  fi
  echo 'echo "ALL DONE"' >> $G/all.sh
  (exec setsid nohup bash $G/all.sh > $G/experiment.log 2>&1) &
  sleep 5; echo "experiment started: $(head -c 300 $G/experiment.log)"
}

materialise() {  # SHAPE: its model folder where the runs build it (config.json + tokenizer)
  python3 -m core shapes --materialise "$1" "$SERVELAB_DATA_DIR/models/shapes/$1" \
    --tokenizer "$tokenizer" && ls -la "$SERVELAB_DATA_DIR/models/shapes/$1"
}

collect() {  # the data folder so far (no models) into $OUT, plus the experiment's console;
             # in 15 MiB pieces (a call returns files of at most 16 MiB): cat them to rejoin
  cp $G/experiment.log "$OUT/" 2>/dev/null
  tar -C $G --exclude=data/models -czf - data | split -b 15M -d - "$OUT/gpu-data.tar.gz.part"
  ls -la "$OUT"
}

wait_for() {  # SECONDS: until the experiment's console says it is done, or time is up
  local end=$((SECONDS + $1))
  while (( SECONDS < end )); do
    if grep -q "^ALL DONE" $G/experiment.log 2>/dev/null; then break; fi
    pgrep -f "bash $G/all.sh" > /dev/null || { echo "experiment script gone"; break; }
    # A run that failed before any succeeded: return at once, so the log can be read.
    if grep -lqs '"state": "failed"' $G/data/runs/*/status.json \
       && ! grep -lqs '"state": "succeeded"' $G/data/runs/*/status.json; then
      echo "a run failed and none succeeded yet"; break
    fi
    sleep 10
  done
  tr '\r' '\n' < $G/experiment.log | tail -3
  ls $G/data/runs 2>/dev/null | while read -r r; do
    printf '%s %s\n' "$r" "$(grep -o '"state": *"[a-z]*"' $G/data/runs/$r/status.json)"
  done
  for r in $(ls -t $G/data/runs 2>/dev/null | head -1); do
    echo "--- newest run $r: server log tail"; tail -5 $G/data/runs/$r/server.log 2>/dev/null
  done
  # The data travels back once the experiments are done (or with COLLECT=1): a progress call
  # spends no transfer on it.
  if [[ ${COLLECT:-0} == 1 ]] || grep -q "^ALL DONE" $G/experiment.log 2>/dev/null; then collect; fi
}

while (( $# )); do
  case $1 in
    unpack) unpack "$2"; shift 2 ;;
    stash) stash "$2"; shift 2 ;;
    unpack-vllm) unpack_vllm; shift ;;
    check-vllm) check_vllm; shift ;;
    check) check; shift ;;
    start) start "$2"; shift 2 ;;
    shape) materialise "$2"; shift 2 ;;
    wait) wait_for "$2"; shift 2 ;;
    collect) collect; shift ;;
    *) echo "unknown step $1"; exit 2 ;;
  esac
done
