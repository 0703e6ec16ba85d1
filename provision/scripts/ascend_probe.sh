# shellcheck shell=sh
sec() { printf '\n%s%s\n' '@@@provision ' "$1"; }
sec pci
if command -v lspci >/dev/null 2>&1; then
  lspci -n -d 19e5: 2>&1
else
  for d in /sys/bus/pci/devices/*; do
    [ -r "$d/vendor" ] || continue
    [ "$(cat "$d/vendor")" = 0x19e5 ] || continue
    slot=${d##*/}; cls=$(cut -c3-6 "$d/class"); dev=$(cat "$d/device")
    rev=$(cat "$d/revision" 2>/dev/null || echo 0x00)
    printf '%s %s: 19e5:%s (rev %s)\n' "${slot#0000:}" "$cls" "${dev#0x}" "${rev#0x}"
  done
fi
smi=$(command -v npu-smi 2>/dev/null)
for p in /usr/local/bin/npu-smi /usr/local/sbin/npu-smi; do [ -z "$smi" ] && [ -x "$p" ] && smi=$p; done
if [ -n "$smi" ]; then
  sec "npu-smi $smi"; "$smi" info 2>&1; rc=$?; sec "npu-smi-rc"; echo "$rc"
fi
A=/usr/local/Ascend
for f in $A/driver/version.info $A/firmware/version.info /etc/ascend_install.info; do
  [ -r "$f" ] && { sec "file $f"; cat "$f"; }
done
sec df
for p in "$@"; do
  q=$p; while [ ! -e "$q" ]; do q=$(dirname "$q"); done
  printf '%s ' "$p"; df -Pk "$q" | tail -n 1
done
exit 0
