# shellcheck shell=sh
exec </dev/null
missing=""
for cmd in "$@"; do command -v "$cmd" >/dev/null 2>&1 || missing="$missing $cmd"; done
[ -n "$missing" ] || exit 0
# shellcheck disable=SC2086 # $missing: the missing commands' names, one word each
if command -v dnf >/dev/null 2>&1; then pm=dnf; dnf -y install $missing >&2 || exit 10
elif command -v yum >/dev/null 2>&1; then pm=yum; yum -y install $missing >&2 || exit 10
elif command -v apt-get >/dev/null 2>&1; then
  pm=apt-get; export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >&2 || echo "apt-get update failed; trying with the package lists the node has" >&2
  apt-get install -y -q --no-install-recommends $missing >&2 || exit 10
else echo "no package manager (dnf, yum, apt-get) to install:$missing" >&2; exit 11
fi
for cmd in $missing; do
  command -v "$cmd" >/dev/null 2>&1 || { echo "$cmd is still missing after '$pm install'" >&2; exit 12; }
done
echo "@@@change installed$missing ($pm)"
