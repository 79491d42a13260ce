#!/usr/bin/env bash
# bench/h200_pack.sh: builds and packs everything a lease on the lent H200 needs for issue 17's
# runs (bench/h200_side_by_side.sh), here on the development machine. Needs the CUDA toolchain
# (../shared/tools/cuda-build-env.sh /tmp/cuda-build) and .models/q15.gguf.
#
# Writes, all git-ignored:
#   .gpu/   gpu-pack's stripped decide binary and land.sh, then q15 in 27 pieces of 40 MiB;
#   .kc/    probes.tar.xz (kernel_check as kc, forward_bench as fb, host_steps as hs,
#           layer_bench as lb, and decide-loadgen, stripped) and unpack.sh, which puts them in /tmp/gpu/bin.
# Then, on the GPU, back to back (the machine is given back 30 s after a call ends):
#   carry .gpu/land.sh .gpu/SHA256SUMS .gpu/bin.xz .kc: bash .gpu/land.sh; bash .kc/unpack.sh
#   27 calls, each carrying .gpu/land.sh and one .gpu/q15.partNN: bash .gpu/land.sh
# (.peer/ for vLLM: ../shared/tools/vllm-peer's README; pack it with `bash .peer/pack.sh 40`, as its
# default 56 MiB pieces no longer fit a call beside the tracked tree.)
set -euo pipefail
cd "$(dirname "$0")/.."
source /tmp/cuda-build/env.sh
rustup target add wasm32-wasip2  # the plugins build compiles the built-in plugins (guests/)
CUDA_COMPUTE_CAP=90 cargo build --release --features decide/cuda,decide-server/cuda,decide-models/cuda \
  --target-dir target-cuda -p decide -p decide-server -p decide-models -p decide-loadgen --bins --examples
pack=$(mktemp -d)
strip -o "$pack/kc" target-cuda/release/examples/kernel_check
strip -o "$pack/fb" target-cuda/release/examples/forward_bench
strip -o "$pack/hs" target-cuda/release/examples/host_steps
strip -o "$pack/lb" target-cuda/release/examples/layer_bench
strip -o "$pack/decide-loadgen" target-cuda/release/decide-loadgen
strip -o "$pack/decide" target-cuda/release/decide
rm -rf .kc && mkdir -p .kc
tar -C "$pack" -cf - kc fb hs lb decide-loadgen | xz -T0 -6 >.kc/probes.tar.xz
cat >.kc/unpack.sh <<'EOS'
#!/usr/bin/env bash
# Unpacks the probe binaries and the load generator this call carried into /tmp/gpu/bin.
set -eu
mkdir -p /tmp/gpu/bin
for f in "$(dirname "$0")"/*.tar.xz; do [ -e "$f" ] && xz -dc "$f" | tar -C /tmp/gpu/bin -xf -; done
ls -la /tmp/gpu/bin
EOS
chmod +x .kc/unpack.sh
../shared/tools/gpu-pack "$pack/decide" .models/q15.gguf
# A call carries at most 64 MiB, the tracked tree included (7.7 MB by session 26, 15.7 MB by
# session 37, when 48 MiB pieces stopped fitting beside it): the model in 40 MiB pieces (its
# land.sh assembles any number of .partNN and checks the sha256).
rm -f .gpu/q15.part[0-9][0-9]
split -b 40M -d -a 2 .models/q15.gguf .gpu/q15.part
tree_mib=$(( $(git ls-files -z | xargs -0 cat | wc -c) >> 20 ))
if [ $((tree_mib + 40)) -gt 60 ]; then
  echo "h200_pack: the tracked tree is $tree_mib MiB: with a 40 MiB piece a call nears 64 MiB; split smaller" >&2
fi
rm -rf "$pack"
du -sh .kc .gpu
git log --oneline -1
