#!/usr/bin/env bash
# The first thing to run on a machine with a GPU: the `cuda` tests, then the GPU half of
# benchmarks/bench_runtime.py (the training path's step time and max_memory_allocated beside the
# simulator's prediction, against save_on_cpu and torch.utils.checkpoint), then the compiled rows
# (benchmarks/bench_compile_gpu.py: a plan inside torch.compile with inductor). Under 10 minutes
# on one GPU. Paste its output into benchmarks/README.md ("Runtime").
#
#   benchmarks/gpu_check.sh            # on the GPU machine, from the repository root
#   benchmarks/gpu_check.sh --dry-run  # its CPU half (what CI runs, under a minute):
#                                      # bench_runtime.py --quick on the CPU
#
# PYTHON: the interpreter (default .venv/bin/python); PYTHONPATH gets this checkout's src.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-.venv/bin/python}"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"

case "${1:-}" in
--dry-run)
    # Every case of the benchmark's CPU half at the tests' tiny sizes (its figures mean
    # nothing; that each case runs does). The `cuda` tests only skip here: the fast suite
    # already runs the rest of the runtime tests.
    timeout 300 "$PYTHON" benchmarks/bench_runtime.py --quick --cpu-only --repeat 1
    # The compiled rows' CPU half: aot_eager, a one-layer GPT, the checks only.
    timeout 300 "$PYTHON" benchmarks/bench_compile_gpu.py --dry-run --repeat 1
    ;;
"")
    if ! "$PYTHON" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
        echo "gpu_check: no CUDA device here (torch.cuda.is_available() is false); use --dry-run" >&2
        exit 2
    fi
    "$PYTHON" -c "import torch; print('GPU:', torch.cuda.get_device_name(), '| torch', torch.__version__)"
    # pytest exits 5 when no test is marked cuda: not a failure here either.
    rc=0
    timeout 180 "$PYTHON" -m pytest -q -p no:cacheprovider -m cuda tests || rc=$?
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
        exit "$rc"
    fi
    timeout 120 "$PYTHON" benchmarks/bench_runtime.py --gpu-only --repeat 20
    # Plans inside torch.compile (inductor): peak max_memory_allocated and step time of torch's
    # default partitioner and of SlackSwap's plan, offloading synchronously and on a side stream.
    timeout 300 "$PYTHON" benchmarks/bench_compile_gpu.py --repeat 10
    ;;
*)
    echo "gpu_check: unknown option '$1' (expected --dry-run or nothing)" >&2
    exit 2
    ;;
esac
