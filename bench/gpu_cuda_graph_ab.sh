#!/usr/bin/env bash
# The CUDA-graph A/B on a lent GPU machine, through ServeLab's own CLI (docs/BENCHMARKS.md).
# Expects the wheels transformers serve needs in .whl/ and SmolLM2's config + tokenizer in
# .gpu/model-src/ (see docs/BENCHMARKS.md); leaves data/ as a tarball in $OUT.
set -euo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 SERVELAB_DATA_DIR="$PWD/data"
model="$PWD/data/models/smollm2-135m-random"
python3 bench/gpu_make_model.py .gpu/model-src "$model"
python3 - "$model" <<'PY'
import json, sys
plan = json.load(open("bench/plans/cuda_graphs_ab_gpu.json"))
plan["base"]["server"]["model"] = sys.argv[1]
json.dump(plan, open("/tmp/plan.json", "w"))
PY
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -m core engines
timeout "${AB_TIMEOUT_S:-480}" python3 -m core experiment /tmp/plan.json || echo "experiment ended: $?"
python3 -m core runs --limit 20 || true
tar czf "$OUT/gpu-ab.tar.gz" --exclude='data/models' data
