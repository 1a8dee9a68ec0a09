#!/usr/bin/env bash
# Development side of the real-SGLang recipe (docs/BENCHMARKS.md §5): download the exact
# wheels in wheels-sglang.txt / wheels-servelab.txt for the lent machine (python 3.12,
# x86-64), install them with --target, trim what a Llama server never imports, and pack
# xz parts of at most 60 MiB that travel to the device one call each (a call carries 64 MiB).
#
#   bash bench/gpu/prepare.sh   # -> .gpu/part1 (SGLang, xz), .gpu/part2 (duckdb wheel + model files)
#   bash bench/gpu/prepare.sh alt 0.5.14   # -> .gpu/part3: a second release's differing wheels
#                                          #    (wheels-sglang-0.5.14.txt), for a version A/B
#
# MODEL_SRC (default SmolLM2-135M-Instruct) gives the config and tokenizer; MODEL_OVERRIDES,
# a JSON file of config.json keys (e.g. bench/gpu/model_kv_mem.json), changes the model's
# shape: bench/gpu_make_model.py builds random weights from whatever config.json travels.
#
# Everything lands under .gpu/ (git-ignored); only this script and the lists are in git.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=.gpu
model_src=${MODEL_SRC:-data/models/SmolLM2-135M-Instruct}
# Every shape's tokenizer comes from here: without it the device's runs stop at "server.tokenizer
# has no tokenizer files" after the whole staging (2026-12-07), so check before any download.
if [[ ! -f $model_src/tokenizer.json ]]; then
  echo "error: MODEL_SRC ($model_src) has no tokenizer.json; run ./servelab setup first" >&2
  exit 2
fi
max_part_bytes=$((60 * 1024 * 1024))
platforms=()
for p in manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_26 \
         manylinux_2_24 manylinux_2_17 manylinux2014 manylinux_2_5 manylinux1; do
  platforms+=(--platform "${p}_x86_64")
done
platforms+=(--platform any)
target_opts=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}")

pins() { grep -v '^#' "$1" | sed '/^$/d'; }

fetch_and_install() {  # LIST DEST
  local list=$1 dest=$2
  mapfile -t want < <(pins "$list")
  python3 -m pip download -q "${target_opts[@]}" -d "$root/wheels" "${want[@]}"
  local files=()
  for pin in "${want[@]}"; do
    local name=${pin%%==*} version=${pin#*==}
    local norm; norm=$(echo "$name" | tr '-' '_' | tr 'A-Z' 'a-z')
    files+=("$(ls "$root/wheels/${norm}-${version}-"*.whl)")
  done
  rm -rf "$dest"
  python3 -m pip install -q --no-index --no-compile "${target_opts[@]}" --target "$dest" "${files[@]}"
  rm -rf "$dest/bin"
  find "$dest" -name __pycache__ -type d -prune -exec rm -rf {} +
}

pack() {  # SRC_DIR OUT_DIR NAME
  local src=$1 out=$2 name=$3
  rm -rf "$out" && mkdir -p "$out"
  tar -C "$src" -cf - . | xz "${XZ_LEVEL:--6}" -T2 > "$out/$name.tar.xz"
  local size; size=$(stat -c %s "$out/$name.tar.xz")
  if (( size > max_part_bytes )); then  # device.sh unpack joins the pieces again
    split -b "$max_part_bytes" -d "$out/$name.tar.xz" "$out/$name.tar.xz.part"
    rm "$out/$name.tar.xz"
  fi
  echo "$out: $(du -sm "$out" | cut -f1) MiB"
}

trim_kernel() {  # SITE
  rm -rf "$1/sgl_kernel/flash_ops.abi3.so" "$1/sgl_kernel/sm100" \
         "$1/sgl_kernel/infllm_ops"* "$1/sgl_kernel/flashmla_ops.abi3.so" \
         "$1/xgrammar/lib/libxgrammar.a"
}

mkdir -p "$root/wheels"
if [[ ${1:-} == alt ]]; then
  # Only the packages whose pins differ from 0.5.17's: on the device this folder goes
  # ahead of the main site folder on PYTHONPATH (device.sh writes one python per release).
  version=${2:?usage: prepare.sh alt VERSION}
  fetch_and_install "bench/gpu/wheels-sglang-$version.txt" "$root/site-$version"
  trim_kernel "$root/site-$version"
  echo "site-$version: $(du -sm "$root/site-$version" | cut -f1) MiB unpacked"
  pack "$root/site-$version" "$root/part3" "sglang-$version"
  exit 0
fi
fetch_and_install bench/gpu/wheels-sglang.txt "$root/site"
# FlashAttention 3 (1.12 GB) is imported only by sgl_kernel/flash_attn.py, i.e. only by the
# fa3 attention backend; runs here use --attention-backend triton. Blackwell (sm100),
# infllm and FlashMLA kernels are never loaded on a Hopper GPU with a Llama model.
trim_kernel "$root/site"
echo "site: $(du -sm "$root/site" | cut -f1) MiB unpacked"
python3 -m pip download -q "${target_opts[@]}" -d "$root/wheels" $(pins bench/gpu/wheels-servelab.txt)

pack "$root/site" "$root/part1" sglang
# duckdb's wheel is already compressed (24 MB): it travels as a wheel, beside the model files.
rm -rf "$root/part2" && mkdir -p "$root/part2/model-src"
mapfile -t extra < <(pins bench/gpu/wheels-servelab.txt)
for pin in "${extra[@]}"; do
  cp "$root/wheels/$(echo "${pin%%==*}" | tr '-' '_')-${pin#*==}-"*.whl "$root/part2/"
done
for f in config.json generation_config.json tokenizer.json tokenizer_config.json \
         chat_template.jinja special_tokens_map.json; do
  if [[ -f "$model_src/$f" ]]; then cp "$model_src/$f" "$root/part2/model-src/"; fi
done
if [[ -n ${MODEL_OVERRIDES:-} ]]; then  # keys starting with "_" are comments
  python3 - "$root/part2/model-src/config.json" "$MODEL_OVERRIDES" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
config.update({k: v for k, v in json.load(open(sys.argv[2])).items() if not k.startswith("_")})
json.dump(config, open(sys.argv[1], "w"), indent=2)
PY
fi
# The code that runs on the device: a commit, not the working tree (which other work may be
# editing while the experiment runs there). device.sh start takes it as REPO_TAR.
# data/shapes: the model shapes a plan's "shape" runs with dummy weights (no weight files).
git archive --format=tar -o "$root/part2/repo.tar" HEAD core bench data/shapes pyproject.toml
du -sm "$root"/part*
