# shellcheck shell=bash
# The Ascend runtime environment of the vllm-ascend image, sourced by the entrypoint (and by hand:
# `. /opt/provision/ascend-env.sh` in `docker exec -it C bash`). Every piece is optional, so the same image
# starts on a host without NPUs (the engine then says so itself).

# CANN toolkit: /usr/local/Ascend/cann (CANN >= 8.5) or /usr/local/Ascend/ascend-toolkit (older).
# NNAL (libatb.so): /usr/local/Ascend/nnal/atb. Their set_env.sh scripts read unset variables: no `set -u` here.
_provision_nounset=0
case $- in *u*) _provision_nounset=1; set +u ;; esac
for _provision_f in /usr/local/Ascend/cann/set_env.sh /usr/local/Ascend/ascend-toolkit/set_env.sh; do
    if [ -f "$_provision_f" ]; then
        # shellcheck disable=SC1090
        . "$_provision_f"
        break
    fi
done
if [ -f /usr/local/Ascend/nnal/atb/set_env.sh ]; then
    # shellcheck disable=SC1091
    . /usr/local/Ascend/nnal/atb/set_env.sh
fi
[ "$_provision_nounset" = 1 ] && set -u

# Driver libraries mounted from the host (-v /usr/local/Ascend/driver/lib64/...) and /usr/local/lib.
for _provision_d in /usr/local/Ascend/driver/lib64/driver /usr/local/Ascend/driver/lib64/common /usr/local/lib; do
    case ":${LD_LIBRARY_PATH:-}:" in
        *":$_provision_d:"*) ;;
        *) LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$_provision_d" ;;
    esac
done
export LD_LIBRARY_PATH

# jemalloc for the engine's allocations (vllm-ascend's image preloads it too), when installed.
for _provision_f in "/usr/lib/$(uname -m)-linux-gnu/libjemalloc.so.2" /usr/lib64/libjemalloc.so.2 \
    /usr/lib/libjemalloc.so.2; do
    if [ -f "$_provision_f" ]; then
        case ":${LD_PRELOAD:-}:" in
            *":$_provision_f:"*) ;;
            *) LD_PRELOAD="$_provision_f${LD_PRELOAD:+:$LD_PRELOAD}" ;;
        esac
        export LD_PRELOAD
        break
    fi
done
unset _provision_f _provision_d _provision_nounset
