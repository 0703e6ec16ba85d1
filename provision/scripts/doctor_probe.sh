# shellcheck shell=sh
# shellcheck disable=SC2086 # $units: a list of unit names, split into words on purpose
sec() { printf '\n%s%s\n' '@@@provision ' "$1"; }
n=${1:-@JOURNAL_LINES@}
since=${2:-0}
T=${3:-}
[ $# -ge 3 ] && shift 3
# since: the window in seconds (0: none); journalctl takes it as a relative time, find as minutes
if [ "$since" -gt 0 ] 2>/dev/null; then
  sec window; echo "$since"
  jsince="--since=-${since}s"; mmin=$(( (since + 59) / 60 ))
else
  since=0; jsince=; mmin=
fi
sec os; cat /etc/os-release 2>/dev/null
sec uname; uname -srm
sec devnodes; for d in /dev/davinci* /dev/devmm_svm /dev/hisi_hdc; do [ -e "$d" ] && echo "$d"; done
for f in /usr/local/Ascend/cann-*/*-linux/ascend_toolkit_install.info \
         /usr/local/Ascend/ascend-toolkit/*/*-linux/ascend_toolkit_install.info; do
  case $f in */latest/*) continue ;; esac
  [ -r "$f" ] && { sec "toolkit $f"; cat "$f"; }
done
for f in @FACT_DIR@/*.fact; do [ -r "$f" ] && { b=${f##*/}; sec "fact ${b%.fact}"; cat "$f"; }; done
[ -r @RECORD_PATH@ ] && { sec record; cat @RECORD_PATH@; }
# What the HCCN gate last measured of the NPU links (on a group's head), with its age in seconds on the
# node's own clock (the --since window counts back from it).
[ -r @LINKS_PATH@ ] && { sec "links $(( $(date +%s) - $(stat -c %Y @LINKS_PATH@) ))"; head -n 5000 @LINKS_PATH@ | cut -c1-@LINE_CHARS@; }
[ -r /etc/docker/daemon.json ] && { sec daemon.json; cat /etc/docker/daemon.json; }
# shellcheck disable=SC2012 # unit file names, vllm-<pool>.service: no odd characters
units=$( { ls /etc/systemd/system/vllm-*.service 2>/dev/null | sed 's|.*/||'
          systemctl list-units --all --plain --no-legend --no-pager 'vllm-*.service' 2>/dev/null \
            | awk '{print $1}'; } | sort -u)
sec units; echo $units
if command -v systemctl >/dev/null 2>&1; then
  sec show; systemctl show @UNIT_PROPERTIES@ docker.service $units 2>&1
fi
# A unit's journal: the first error block of its last @JOURNAL_SCAN@ lines with its context (the decisive
# line of a failure sits above the long tracebacks the other processes print after it), the last
# @ERROR_KEEP@ error lines between that block and the tail (the first error may be an older run's), then the
# last $n lines; every line cut at @LINE_CHARS@ characters, so the output stays bounded.
window() {
  cut -c1-@LINE_CHARS@ | awk -v n="$n" -v b=@ERROR_BEFORE@ -v a=@ERROR_AFTER@ '
    { line[NR] = $0 }
    !f && /@ERROR_AWK@/ { f = NR }
    END {
      last = 0
      if (f) { s = f - b; if (s < 1) s = 1; last = f + a; if (last > NR) last = NR
               for (i = s; i <= last; i++) print line[i] }
      t = NR - n + 1; if (t <= last) t = last + 1; if (t < 1) t = 1
      if (f && t > last + 1) print "@WINDOW_GAP@"
      k = 0
      for (i = t - 1; i > last && k < @ERROR_KEEP@; i--) if (line[i] ~ /@ERROR_AWK@/) e[++k] = i
      for (j = k; j >= 1; j--) print line[e[j]]
      for (i = t; i <= NR; i++) print line[i]
    }'
}
for u in docker.service $units; do
  sec "journal $u"
  # shellcheck disable=SC2086 # $jsince: empty or one word
  SYSTEMD_COLORS=0 journalctl -u "$u" $jsince -n @JOURNAL_SCAN@ --no-pager -o cat 2>&1 | window
done
# The NPU driver's kernel lines: the first ones of this boot (the driver loading) and those of the last
# @KERNEL_HOURS@ hours, or of the window (journalctl -k; dmesg where there is no journal), filtered to the
# driver's names.
kernel() { grep -aiE '@KERNEL_FILTER@' | cut -c1-@LINE_CHARS@; }
if command -v journalctl >/dev/null 2>&1 && journalctl -k -b -n 1 --no-pager -q >/dev/null 2>&1; then
  sec "kernel boot"; journalctl -k -b --no-pager -o short-iso 2>/dev/null | kernel | head -n @KERNEL_LINES@
  sec "kernel recent"
  journalctl -k "${jsince:---since=-@KERNEL_HOURS@h}" --no-pager -o short-iso 2>/dev/null | kernel | tail -n @KERNEL_LINES@
elif command -v dmesg >/dev/null 2>&1; then
  sec "kernel dmesg"
  dmesg 2>/dev/null | kernel | awk -v k=@KERNEL_LINES@ '{ l[NR] = $0 } END { for (i = 1; i <= NR; i++) if (i <= k || i > NR - k) print l[i] }'
fi
if command -v docker >/dev/null 2>&1 && systemctl is-active --quiet docker.service 2>/dev/null; then
  sec containers
  timeout 10 docker ps -a --no-trunc --format '{{.ID}} {{.Names}} {{.Status}}' 2>&1
fi
command -v dkms >/dev/null 2>&1 && { sec dkms; dkms status 2>&1; }
if [ -d @DKMS_TREE@ ]; then
  sec dkms-tree; find @DKMS_TREE@ -mindepth 2 -maxdepth 2 -type d 2>/dev/null | sort
  [ -r @DKMS_TREE@/1.0/build/make.log ] && { sec dkms-make.log; tail -n 20 @DKMS_TREE@/1.0/build/make.log; }
fi
# A plog not written in the window is left out.
inwin() { [ -z "$mmin" ] || [ -n "$(find "$1" -mmin "-$mmin" 2>/dev/null)" ]; }
# shellcheck disable=SC2012 # the newest plog by time (ls -t); the CANN runtime names them
p=$(ls -t @PLOG_DIR@/*.log 2>/dev/null | head -n 1)
[ -n "$p" ] && inwin "$p" && { sec "plog $p"; tail -n "$n" "$p" | cut -c1-@LINE_CHARS@; }
# The error lines of the newest plogs, first ones first: HCCL's and the runtime's own account of a failure.
# shellcheck disable=SC2012,SC2045 # plog file names are the CANN runtime's: no spaces
for p in $(ls -t @PLOG_DIR@/*.log 2>/dev/null | head -n @PLOG_FILES@); do
  inwin "$p" || continue
  sec "plog-errors $p"; grep -a -m @PLOG_ERROR_LINES@ -E '@PLOG_ERROR@' "$p" | cut -c1-@LINE_CHARS@
done
# Every NPU port's up/down records since the driver loaded: a port that went down and came back (a flap)
# is UP now, only these records show it.
if [ -n "$T" ] && [ ! -x "$T" ]; then T=$(command -v hccn_tool 2>/dev/null); fi
# Asked of every NPU at once (as the HCCN probe asks its ports), each answer in its own scratch file.
if [ -n "$T" ] && [ $# -gt 0 ] && ls_tmp=$(mktemp -d); then
  for d in "$@"; do "$T" -i "$d" -link_stat -g > "$ls_tmp/$d" 2>&1 & done
  wait
  for d in "$@"; do sec "link_stat $d"; head -n 100 "$ls_tmp/$d" | cut -c1-@LINE_CHARS@; done
  rm -rf "$ls_tmp"
fi
exit 0
