# shellcheck shell=sh
sec() { printf '\n%s%s\n' '@@@provision ' "$1"; }
sec devnodes; for d in /dev/davinci[0-9]*; do [ -e "$d" ] && echo "${d#/dev/davinci}"; done
for u in /etc/systemd/system/vllm-*.service; do
  [ -e "$u" ] || continue; n=${u##*/}; sec "invocation $n"; systemctl show -P InvocationID "$n" 2>/dev/null
done
if command -v docker >/dev/null 2>&1 && systemctl is-active --quiet docker.service 2>/dev/null; then
  sec containers; ids=$(timeout 10 docker ps -q --no-trunc 2>/dev/null)
  # shellcheck disable=SC2086 # $ids: container ids, one argument each
  if [ -n "$ids" ]; then timeout 20 docker inspect $ids 2>/dev/null || echo '[]'; else echo '[]'; fi
fi
sec weights
python3 - "$@" <<'PY'
import json, os, sys
out = {}
for folder in sys.argv[1:]:
    entry = {"exists": os.path.isdir(folder)}
    if entry["exists"]:
        total = 0
        for root, _dirs, files in os.walk(folder, followlinks=True):
            for name in files:
                try:
                    total += os.stat(os.path.join(root, name)).st_size
                except OSError:
                    pass
        entry["bytes"] = total
        files = (("index", "model.safetensors.index.json"), ("quant", "quant_model_description.json"))
        for key, name in files:
            path = os.path.join(folder, name)
            if not os.path.isfile(path):
                continue
            try:
                with open(path, encoding="utf-8") as handle:
                    data = json.load(handle)
                if key == "index":
                    entry[key] = {"total_size": (data.get("metadata") or {}).get("total_size")}
                else:
                    entry[key] = {"model_quant_type": data.get("model_quant_type")}
            except (OSError, ValueError, AttributeError) as exc:
                entry[key] = {"error": str(exc)}
    out[folder] = entry
print(json.dumps(out))
PY
exit 0
