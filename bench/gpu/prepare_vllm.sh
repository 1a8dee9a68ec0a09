#!/usr/bin/env bash
# Development side of the vLLM recipe (docs/BENCHMARKS.md §5.7): download the exact wheels in
# wheels-vllm.txt for the lent machine (python 3.12, x86-64, torch 2.11.0 already there),
# install them with --target, prune what a dense Llama on Hopper never loads, and pack one
# `tar | xz` split into pieces of at most 60 MiB, each in its own folder: a device call
# carries at most 64 MiB, so each piece is one call (device.sh stash, then unpack-vllm).
#
#   bash bench/gpu/prepare_vllm.sh   # -> .gpu/vllm-part1 ... .gpu/vllm-partN, .gpu/vllm-sizes.txt
#
# Pruned (see the list's header): FA2 (`vllm_flash_attn/_vllm_fa2_C.abi3.so`, 291 MiB unpacked),
# the MoE kernels, the vllm-rs front end, deep_gemm, the sm100 attention kernels, FlashMLA.
# FA3 (`_vllm_fa3_C.abi3.so`) stays: vllm_flash_attn raises on import without FA2 or FA3.
# Everything lands under .gpu/ (git-ignored); only this script and the list are in git.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=.gpu
site=$root/vllm-site
max_part_bytes=$((60 * 1024 * 1024))
platforms=()
for p in manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_17 \
         manylinux2014; do
  platforms+=(--platform "${p}_x86_64")
done
platforms+=(--platform any)
target_opts=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${platforms[@]}")

mapfile -t want < <(grep -v '^#' bench/gpu/wheels-vllm.txt | sed '/^$/d')
mkdir -p "$root/wheels"
python3 -m pip download -q "${target_opts[@]}" -d "$root/wheels" "${want[@]}"
files=()
for pin in "${want[@]}"; do
  name=${pin%%==*} version=${pin#*==}
  norm=$(echo "$name" | tr '-' '_' | tr 'A-Z' 'a-z')
  f=$(ls "$root/wheels/${norm}-${version}-"*.whl "$root/wheels/${name}-${version}-"*.whl \
       2>/dev/null | head -1 || true)
  [[ -n $f ]] || { echo "no wheel for $pin in $root/wheels" >&2; exit 1; }
  files+=("$f")
done
rm -rf "$site"
python3 -m pip install -q --no-index --no-compile "${target_opts[@]}" --target "$site" "${files[@]}"
rm -rf "$site/bin"
# a requirement met at the wrong version stops here, not on the device (check_site.py says why)
python3 -m bench.gpu.check_site "$site" --root vllm | grep -v '^absent' || exit 1
find "$site" -name __pycache__ -type d -prune -exec rm -rf {} +
echo "site before pruning: $(du -sm "$site" | cut -f1) MiB"

v=$site/vllm
rm -rf "$v/vllm_flash_attn/_vllm_fa2_C.abi3.so" "$v/_moe_C_stable_libtorch.abi3.so" \
       "$v/vllm-rs" "$v/third_party/deep_gemm" "$v/third_party/fmha_sm100" \
       "$v/third_party/flashmla" "$v/_flashmla_C.abi3.so" \
       "$v/entrypoints/serve/instrumentator/static"
test -f "$v/vllm_flash_attn/_vllm_fa3_C.abi3.so"  # FA3 must stay
echo "site after pruning: $(du -sm "$site" | cut -f1) MiB"

rm -rf "$root"/vllm-part* "$root/vllm.tar.xz"*
tar -C "$site" -cf - . | xz "${XZ_LEVEL:--9}" -T2 > "$root/vllm.tar.xz"
split -b "$max_part_bytes" -d "$root/vllm.tar.xz" "$root/vllm.tar.xz.part"
rm "$root/vllm.tar.xz"
n=0
for piece in "$root"/vllm.tar.xz.part*; do
  n=$((n + 1))
  mkdir -p "$root/vllm-part$n"
  mv "$piece" "$root/vllm-part$n/"
done
{
  echo "vllm 0.26.0 site, pruned, xz ${XZ_LEVEL:--9}: $n piece(s), one device call each"
  for d in "$root"/vllm-part*; do
    f=$(ls "$d"/*)
    echo "$d $(basename "$f") $(stat -c %s "$f") bytes ($(du -m "$f" | cut -f1) MiB)"
  done
} | tee "$root/vllm-sizes.txt"
