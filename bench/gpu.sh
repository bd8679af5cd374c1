#!/usr/bin/env bash
# ATOM against transformers' generate on the device machine's GPU (docs/performance.md,
# "CUDA"). Two halves:
#   bench/gpu.sh fetch   here, once: the wheels of ATOM's dependencies the device image
#                        lacks (.whl/, for Python 3.12) and the default model's tokenizer
#                        (.gpu/tokenizer); both are git-ignored: name them in `carry`.
#   bench/gpu.sh run     there: installs the wheels, then `python3 -m bench.gpu` for the
#                        default model's shape and the 1B one; JSON and tables land in
#                        $OUT (bench/results/ without it).
# The device image has torch, transformers, numpy, safetensors, tokenizers, httpx, h11,
# werkzeug, jinja2, click, aiofiles, pyyaml and pillow (device README, KINDS.md).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(
  trio==0.35.0 outcome sniffio sortedcontainers attrs
  hypercorn==0.18.0 h2 hpack hyperframe priority wsproto
  quart quart-trio blinker itsdangerous flask
  structlog gguf llguidance==1.9.1
  pydantic pydantic-core annotated-types typing-inspection
  transformers==5.24.0
  pytest pluggy iniconfig
)

fetch() {
  local python="${PYTHON:-.venv/bin/python}"  # the project's environment (make setup)
  mkdir -p .whl .gpu
  "$python" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any -d .whl "${WHEELS[@]}"
  "$python" -c "
from atom.vocabulary.config import Settings
from atom.model.loader import load_tokenizer
load_tokenizer(None, cache_dir=Settings().cache_dir).save_pretrained('.gpu/tokenizer')"
  du -sh .whl .gpu
}

run() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
  export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1
  local out="${OUT:-bench/results}" day
  day="$(date +%F)"
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/$day-gpu-device.txt"
  # the Triton kernels compiled, bfloat16 too, against the gathering path and TorchOps,
  # and a tiny Llama's decode graphs against generate (the suite's conftest is for the
  # CPU: it asks for Triton's interpreter)
  python3 -m pytest -q --noconftest -p no:cacheprovider tests/model/test_triton_decode.py \
    tests/model/test_triton_layer.py | tee "$out/$day-gpu-kernel-tests.txt" || echo "kernel tests failed"
  for shape in 135m 1b; do
    python3 -m bench.gpu --shape "$shape" --concurrency 1 16 64 \
      --out "$out/$day-gpu-$shape.json" --markdown "$out/$day-gpu-$shape.md"
  done
  # the default shape once more with every step eager: what the decode graphs give
  python3 -m bench.gpu --shape 135m --concurrency 1 64 --atom-env ATOM_ENFORCE_EAGER=true \
    --out "$out/$day-gpu-135m-eager.json" --markdown "$out/$day-gpu-135m-eager.md"
  # and in lockstep: what the overlapped steps (--async-scheduling, on for CUDA) give
  python3 -m bench.gpu --shape 135m --concurrency 1 64 --atom-env ATOM_ASYNC_SCHEDULING=false \
    --out "$out/$day-gpu-135m-lockstep.json" --markdown "$out/$day-gpu-135m-lockstep.md"
}

"$@"
