#!/usr/bin/env bash
# Whether a drafter's logits depend on how a sequence's tokens were split into decodes, on this CPU and on the other
# llama.cpp CPU variants it can run (scripts/with-cpu-variant.sh): for each pair of chunk sizes, how many of SEEDS token
# streams (a prompt of 40–265 tokens, then 12 more decoded in chunks of a and of b) end with logits that are not bit for
# bit the same, and the largest difference. Builds bench/native/decode_splits.cpp against the llama.cpp headers and
# node-llama-cpp's CPU binaries (as scripts/build-native.mjs does) into build/decode-splits.
#
#   bash bench/decodeSplits.sh [MODEL.gguf] [SEEDS] [VARIANTS]     # defaults: the default drafter, 25, "auto haswell sandybridge x64"
#   DECODE_SPLITS_TENSORS=1 bash bench/decodeSplits.sh …              # also the first differing tensor of each differing stream
set -uo pipefail
cd "$(dirname "$0")/.."
model=${1:-models/specdraft-default.gguf}
seeds=${2:-25}
variants=${3:-auto haswell sandybridge x64}
bins=$PWD/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
[ -f build/llama-headers/include/llama.h ] || node scripts/build-native.mjs > /dev/null
mkdir -p build/decode-splits
g++ -std=c++17 -O2 -I build/llama-headers/include -I build/llama-headers/ggml/include bench/native/decode_splits.cpp \
  -o build/decode-splits/decode_splits -L "$bins" -l:libllama.v0.4.0.so -l:libggml.v0.4.0.so -l:libggml-base.so \
  -Wl,-rpath,"$bins" || exit 1
for variant in $variants; do
  run=(); [ "$variant" = auto ] || run=(scripts/with-cpu-variant.sh "$variant")
  for pair in "1 12" "1 2" "2 12" "2 3" "3 5" "5 12"; do
    differing=0; max=0; inside=0; first=""
    for seed in $(seq 1 "$seeds"); do
      line=$("${run[@]}" build/decode-splits/decode_splits "$model" "$bins" $((40 + seed * 9)) 12 "$seed" $pair ${DECODE_SPLITS_TENSORS:+--tensors} 2>/dev/null)
      d=$(echo "$line" | sed -E 's/.*"max_logit_difference": ([^,}]*).*/\1/')
      [ "$d" != 0 ] && { differing=$((differing + 1)); max=$(python3 -c "print(max($max, $d))"); }
      tensor=$(echo "$line" | sed -nE 's/.*"first_differing_tensor": "([^"]+)".*/\1/p')
      [ -n "$tensor" ] && { inside=$((inside + 1)); [[ " $first " == *" $tensor "* ]] || first="$first $tensor"; }
    done
    # differing: streams whose final logits differ; with tensors, streams where some tensor's last row differs (and which)
    echo "{\"variant\": \"$variant\", \"model\": \"$model\", \"chunks\": [${pair/ /, }], \"streams\": $seeds, \"differing\": $differing, \"max_logit_difference\": $max${DECODE_SPLITS_TENSORS:+, \"any_tensor_differing\": $inside, \"first_differing_tensors\": \"${first# }\"}}"
  done
done
