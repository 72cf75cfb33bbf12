#!/usr/bin/env bash
# On a GPU machine: every test (pytest + nbval, in parallel: `make test-here`), the kernel benchmarks and the
# standalone CUDA C++ tests, in one go.
#   bash benchmarks/run_gpu_suite.sh [LOG_DIR]          TESTS_ONLY=1: the tests alone
# Results land under benchmarks/results/<benchmark>/ (CSV + PNG stamped with device, versions, date).
set -uo pipefail
cd "$(dirname "$0")/.."
log_dir=${1:-artifacts/gpu_logs}
mkdir -p "$log_dir"
py=${PYTHON:-python3}
status=0
run() {  # run NAME CMD...: tee the output to LOG_DIR/NAME.log, remember failures, keep going
  local name=$1; shift
  echo "=== $name: $*"
  "$@" 2>&1 | tee "$log_dir/$name.log"
  local rc=${PIPESTATUS[0]}
  echo "=== $name: exit $rc"
  [ "$rc" -eq 0 ] || status=1
}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
$py -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
export TORCH_EXTENSIONS_DIR=$PWD/build/torch_extensions
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}  # the benchmarks import lecture_code and kernels from here
run all_tests make -s test-here PYTHON="$py"
[ -n "${TESTS_ONLY:-}" ] && exit $status
run bench_pointwise $py -m benchmarks.bench_pointwise
run bench_fused_mlp $py -m benchmarks.bench_fused_mlp
prefix=$($py -c 'import torch; print(torch.utils.cmake_prefix_path)')
run cuda_cmake bash -c "cmake -S kernels/cuda -B build/cuda -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH='$prefix' && cmake --build build/cuda && ctest --test-dir build/cuda --output-on-failure \
  && build/cuda/bench_pointwise"
exit $status
