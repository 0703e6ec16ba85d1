# shellcheck shell=sh
# shellcheck disable=SC2086 # $units: a list of unit names, split into words on purpose
sec() { printf '\n%s%s\n' '@@@provision ' "$1"; }
n=${1:-@JOURNAL_LINES@}
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
[ -r /etc/docker/daemon.json ] && { sec daemon.json; cat /etc/docker/daemon.json; }
# shellcheck disable=SC2012 # unit file names, vllm-<pool>.service: no odd characters
units=$( { ls /etc/systemd/system/vllm-*.service 2>/dev/null | sed 's|.*/||'
          systemctl list-units --all --plain --no-legend --no-pager 'vllm-*.service' 2>/dev/null \
            | awk '{print $1}'; } | sort -u)
sec units; echo $units
if command -v systemctl >/dev/null 2>&1; then
  sec show; systemctl show @UNIT_PROPERTIES@ docker.service $units 2>&1
fi
for u in docker.service $units; do
  sec "journal $u"; SYSTEMD_COLORS=0 journalctl -u "$u" -n "$n" --no-pager -o cat 2>&1
done
if command -v docker >/dev/null 2>&1 && systemctl is-active --quiet docker.service 2>/dev/null; then
  sec containers
  timeout 10 docker ps -a --no-trunc --format '{{.ID}} {{.Names}} {{.Status}}' 2>&1
fi
command -v dkms >/dev/null 2>&1 && { sec dkms; dkms status 2>&1; }
if [ -d @DKMS_TREE@ ]; then
  sec dkms-tree; find @DKMS_TREE@ -mindepth 2 -maxdepth 2 -type d 2>/dev/null | sort
  [ -r @DKMS_TREE@/1.0/build/make.log ] && { sec dkms-make.log; tail -n 20 @DKMS_TREE@/1.0/build/make.log; }
fi
# shellcheck disable=SC2012 # the newest plog by time (ls -t); the CANN runtime names them
p=$(ls -t @PLOG_DIR@/*.log 2>/dev/null | head -n 1)
[ -n "$p" ] && { sec "plog $p"; tail -n "$n" "$p"; }
exit 0
