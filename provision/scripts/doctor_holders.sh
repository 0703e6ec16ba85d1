# shellcheck shell=sh
sec() { printf '\n%s%s\n' '@@@provision ' "$1"; }
for pid in "$@"; do [ -r "/proc/$pid/cgroup" ] && { sec "cgroup $pid"; cat "/proc/$pid/cgroup"; }; done
exit 0
