# shellcheck shell=sh
exec </dev/null
sec() { printf '\n%s%s\n' '@@@provision ' "$1"; }
sec uname
uname -m; uname -r; uname -n
sec os-release
cat /etc/os-release 2>/dev/null || cat /usr/lib/os-release 2>/dev/null
sec lscpu
LC_ALL=C lscpu 2>/dev/null
sec cpuinfo
grep -c '^processor' /proc/cpuinfo 2>/dev/null
grep -m 6 -E '^(model name|vendor_id|CPU implementer|CPU part)[[:space:]]*:' /proc/cpuinfo 2>/dev/null
sec meminfo
grep -E '^(MemTotal|HugePages_Total|Hugepagesize):' /proc/meminfo
sec lsblk
lsblk -b -d -n -P -o NAME,SIZE,TYPE,ROTA,MODEL 2>/dev/null
sec nics
for d in /sys/class/net/*; do
  n=${d##*/}; [ "$n" = lo ] && continue
  drv=$(readlink "$d/device/driver" 2>/dev/null); drv=${drv##*/}
  printf '%s|%s|%s|%s|%s|%s\n' "$n" "$(cat "$d/address" 2>/dev/null)" "$(cat "$d/operstate" 2>/dev/null)" \
    "$(cat "$d/mtu" 2>/dev/null)" "$(cat "$d/speed" 2>/dev/null)" "$drv"
done
sec addresses
ip -o addr show 2>/dev/null
sec python
p=/usr/bin/python3; [ -x "$p" ] || p=$(command -v python3 2>/dev/null)
[ -n "$p" ] && { echo "$p"; "$p" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])'; }
