#!/usr/bin/env bash
# Build llama.cpp's `llama-server` once per machine and cache it.
#
# Source: the llama.cpp tree vendored in the pinned llama-cpp-python sdist (PyPI is the only
# network this project may use). Output, under
#   ${XDG_CACHE_HOME:-$HOME/.cache}/kvbudget/llama.cpp/<version>/
#     bin/llama-server (+ its shared libraries), gguf-py/ (the vendored writer, same version),
#     models/ggml-vocab-llama-bpe.gguf (vocab-only tokenizer file), VERSION (`--version` output),
#     build-seconds (how long the build took on this machine).
# Idempotent: when the binary is there and runs, it prints its path and exits at once.
# The last line printed on stdout is always the absolute path of the binary.
#
# Environment:
#   KVBUDGET_LLAMACPP_PY_VERSION  llama-cpp-python sdist version (default 0.3.36)
#   KVBUDGET_LLAMACPP_JOBS        parallel build jobs (default 2)
#   PYTHON                        python with pip (default: .venv/bin/python, else python3)
set -euo pipefail

VERSION="${KVBUDGET_LLAMACPP_PY_VERSION:-0.3.36}"
JOBS="${KVBUDGET_LLAMACPP_JOBS:-2}"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/kvbudget/llama.cpp"
DEST="$CACHE_ROOT/$VERSION"
BIN="$DEST/bin/llama-server"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$here/.venv/bin/python" ]; then PYTHON="$here/.venv/bin/python"; else PYTHON=python3; fi
fi

log() { echo "llama-server.sh: $*" >&2; }
# stopped (make test stops a background build when a check fails): exit, so the EXIT trap
# removes the half-built staging directory
trap 'exit 143' TERM INT

check_binary() {
  [ -x "$BIN" ] && [ -f "$DEST/models/ggml-vocab-llama-bpe.gguf" ] && [ -d "$DEST/gguf-py/gguf" ] \
    && LD_LIBRARY_PATH="$DEST/bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$BIN" --version >/dev/null 2>&1
}

# GGML_NATIVE=OFF (below) builds for x86-64-v3: ggml/CMakeLists.txt turns SSE4.2, AVX, AVX2,
# BMI2, FMA and F16C on (INS_ENB) and AVX-512 off, so the binary runs on any x86-64 CPU with AVX2;
# on one without, say so instead of building a binary that dies of SIGILL
if [ "$(uname -m)" = x86_64 ] && [ -r /proc/cpuinfo ]; then
  for flag in avx2 fma f16c bmi2; do
    grep -qw "$flag" /proc/cpuinfo || { log "error: this CPU lacks $flag (/proc/cpuinfo flags); the portable build needs AVX2, FMA, F16C and BMI2 (x86-64-v3)"; exit 2; }
  done
fi

if check_binary; then
  log "cached build found ($(cat "$DEST/VERSION" 2>/dev/null | head -1))"
  echo "$BIN"
  exit 0
fi

for tool in cmake c++ make; do
  command -v "$tool" >/dev/null 2>&1 || { log "error: '$tool' not found; install it (Debian: apt-get install cmake g++ make) and rerun"; exit 2; }
done

mkdir -p "$CACHE_ROOT"
# One build at a time per machine (a second caller waits for the first).
exec 9>"$CACHE_ROOT/.build-$VERSION.lock"
if command -v flock >/dev/null 2>&1; then
  log "waiting for the build lock $CACHE_ROOT/.build-$VERSION.lock"
  flock 9
  if check_binary; then echo "$BIN"; exit 0; fi
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/kvbudget-llamacpp.XXXXXX")"
trap 'rm -rf "$work"' EXIT
start_s=$(date +%s)

log "downloading llama-cpp-python==$VERSION sdist with pip"
"$PYTHON" -m pip download --disable-pip-version-check -q --no-deps --no-binary :all: \
  --no-build-isolation -d "$work/dl" "llama-cpp-python==$VERSION" >&2 2>/dev/null \
  || "$PYTHON" -m pip download --disable-pip-version-check -q --no-deps --no-binary :all: \
       -d "$work/dl" "llama-cpp-python==$VERSION" >&2
shopt -s nullglob
sdists=("$work"/dl/llama_cpp_python-*.tar.gz "$work"/dl/llama-cpp-python-*.tar.gz)
sdist="${sdists[0]:-}"
[ -n "$sdist" ] || { log "error: no sdist downloaded into $work/dl"; exit 2; }
tar -xzf "$sdist" -C "$work"
srcs=("$work"/llama_cpp_python-*/vendor/llama.cpp "$work"/llama-cpp-python-*/vendor/llama.cpp)
src="${srcs[0]:-}"
[ -n "$src" ] && [ -f "$src/CMakeLists.txt" ] || { log "error: vendor/llama.cpp not found in $sdist"; exit 2; }

log "configuring $src (Release, CPU, no curl/tests/examples)"
nice -n 10 cmake -S "$src" -B "$work/build" -G "Unix Makefiles" \
  -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF \
  -DGGML_NATIVE=OFF \
  -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF \
  -DLLAMA_BUILD_TESTS=OFF \
  -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_TOOLS=ON \
  -DLLAMA_BUILD_SERVER=ON \
  -DLLAMA_BUILD_UI=OFF \
  -DLLAMA_USE_PREBUILT_UI=OFF \
  -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON \
  -DCMAKE_BUILD_RPATH='$ORIGIN' >&2

log "building target llama-server with -j$JOBS (takes 10-20 minutes on 2 cores)"
nice -n 10 cmake --build "$work/build" --target llama-server -j "$JOBS" >&2

built="$work/build/bin/llama-server"
[ -x "$built" ] || { log "error: build finished but $built is missing"; exit 2; }

stage="$CACHE_ROOT/.stage-$VERSION-$$"
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/models"
cp "$built" "$stage/bin/"
# Shared libraries (libllama, libggml*, libmtmd ...) wherever CMake put them.
find "$work/build" -name '*.so*' \( -type f -o -type l \) -exec cp -P {} "$stage/bin/" \;
cp -r "$src/gguf-py" "$stage/gguf-py"
cp "$src/models/ggml-vocab-llama-bpe.gguf" "$stage/models/"
for f in "$src"/models/ggml-vocab-*.gguf; do cp "$f" "$stage/models/"; done
LD_LIBRARY_PATH="$stage/bin" "$stage/bin/llama-server" --version >"$stage/VERSION" 2>&1 || {
  log "error: the built binary does not run:"; cat "$stage/VERSION" >&2; exit 2; }
echo "llama-cpp-python $VERSION" >>"$stage/VERSION"
end_s=$(date +%s)
echo $((end_s - start_s)) >"$stage/build-seconds"
rm -rf "$DEST"
mv "$stage" "$DEST"
log "built in $((end_s - start_s)) s: $(head -1 "$DEST/VERSION")"
echo "$BIN"
