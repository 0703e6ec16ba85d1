# shellcheck shell=sh
T=$1; shift
sec() { printf '\n%s%s\n' '@@@provision ' "$1"; }
run() { label=$1; shift; out=$("$@" 2>&1); rc=$?; sec "$label $rc"; printf '%s\n' "$out"; }
if [ ! -x "$T" ]; then
  found=$(command -v hccn_tool 2>/dev/null) && [ -n "$found" ] && T=$found
fi
pkt=3; devs=; confs=; pings=; ports=0; addr=0; names=; spod=0
for a in "$@"; do
  case $a in
    pkt=*) pkt=${a#pkt=} ;;
    dev=*) devs="$devs ${a#dev=}" ;;
    conf=*) confs="$confs ${a#conf=}" ;;
    ping=*) pings="$pings ${a#ping=}" ;;
    ports) ports=1 ;;
    addr) addr=1 ;;
    spod) spod=1 ;;
    resolve=*) names="$names ${a#resolve=}" ;;
  esac
done
if [ -n "$devs$confs$pings" ]; then
  if [ -x "$T" ]; then
    sec "tool $T"
    # The configuration is read one command at a time: hccn_tool does not support concurrent use.
    for d in $confs; do
      for c in ip gateway netdetect; do run "hccn $d $c" "$T" -i "$d" -$c -g; done
    done
    tmp=$(mktemp -d) || exit 1
    for d in $devs; do
      ( for c in link net_health ip tls; do run "hccn $d $c" "$T" -i "$d" -$c -g; done
      ) > "$tmp/dev.$d" 2>&1 &
    done
    for d in $(for p in $pings; do echo "${p%%,*}"; done | sort -un); do
      ( for p in $pings; do
          [ "${p%%,*}" = "$d" ] || continue
          run "ping $d ${p#*,}" "$T" -i "$d" -ping -g address "${p#*,}" pkt "$pkt"
        done ) > "$tmp/ping.$d" 2>&1 &
    done
    wait
    for f in "$tmp"/dev.* "$tmp"/ping.*; do [ -f "$f" ] && cat "$f"; done
    rm -rf "$tmp"
  else
    sec "tool-missing $T"
  fi
fi
# An A3's chips: their super pod ids (the rank table's super_device_id and super_pod_id). npu-smi -m maps
# each chip's physical id (its 4th column, on an A3 only) to the NPU id and chip id spod-info takes.
if [ "$spod" = 1 ] && [ -n "$devs" ]; then
  smi=$(command -v npu-smi 2>/dev/null)
  for p in /usr/local/bin/npu-smi /usr/local/sbin/npu-smi; do [ -z "$smi" ] && [ -x "$p" ] && smi=$p; done
  if [ -n "$smi" ]; then
    map=$("$smi" info -m 2>&1)
    printf '%s\n' "$map" | awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && $4 ~ /^[0-9]+$/ {print $1, $2, $4}' |
      while read -r npu chip phy; do
        case " $devs " in *" $phy "*) run "spod $phy" "$smi" info -t spod-info -i "$npu" -c "$chip" ;; esac
      done
  fi
fi
if [ "$ports" = 1 ]; then
  if command -v ss >/dev/null 2>&1; then
    out=$(ss -Htlnp 2>&1); rc=$?
    sec "ss $rc"; printf '%s\n' "$out"
    for pid in $(printf '%s\n' "$out" | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -un); do
      [ -r "/proc/$pid/cgroup" ] && { sec "cgroup $pid"; cat "/proc/$pid/cgroup"; }
    done
  else
    sec "ss-missing"
  fi
fi
if [ "$addr" = 1 ]; then sec "addr"; ip -o -4 addr show 2>&1; fi
for n in $names; do sec "resolve $n"; getent ahostsv4 "$n" 2>&1 | head -n 1; done
exit 0
