#!/usr/bin/env bash
# Entrypoint of the vllm-ascend image: source the Ascend environment, then exec the engine.
#
#   docker run IMAGE --model /models/m --served-model-name m --tensor-parallel-size 8 ...
#       -> $VLLM_PYTHON -m vllm.entrypoints.openai.api_server --model /models/m ...
#   docker run IMAGE vllm serve /models/m ...   |   docker run -it IMAGE bash
#       -> that command, in the same environment
#
# The serving role runs the first form with the profile's arguments, so a plain `docker run` with the same
# arguments behaves the same. The engine replaces this script (exec): it is the container's main process,
# gets the signals, and its PID is written to $PROVISION_RUN_DIR/engine.pid for the HEALTHCHECK.
set -euo pipefail

# shellcheck source=container/ascend-env.sh
. "$(dirname "$0")/ascend-env.sh"

if [ "$#" -eq 0 ]; then
    cat >&2 <<'USAGE'
usage: docker run [docker options] IMAGE --model PATH [vLLM server options...]
       docker run [docker options] IMAGE COMMAND [ARGS...]
The first form starts the OpenAI-compatible vLLM server with those options (see docs/image.md).
USAGE
    exit 64
fi

if [ "${1#-}" != "$1" ]; then
    set -- "${VLLM_PYTHON:-python3}" -m vllm.entrypoints.openai.api_server "$@"
fi

run_dir="${PROVISION_RUN_DIR:-/tmp/provision}"
if mkdir -p "$run_dir" 2>/dev/null; then
    echo "$$" >"$run_dir/engine.pid" || true
fi

exec "$@"
