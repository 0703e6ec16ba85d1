import grp, hashlib, json, os, pwd, stat, subprocess, sys
spec = json.loads(sys.argv[1])
record = None
try:
    with open(spec["record"]) as f:
        record = json.load(f)
except (IOError, OSError, ValueError):
    record = None
keys = spec.get("keys")
if keys is None:
    keys = (record or {}).get("keys") or {}
elif spec.get("union") and isinstance(record, dict):
    for kind, values in (record.get("keys") or {}).items():
        keys[kind] = sorted(set(keys.get(kind, [])) | set(values))
big = spec["big"]
def name_of(getter, ident):
    try:
        return getter(ident)[0]
    except KeyError:
        return str(ident)
def path_state(path):
    try:
        st = os.lstat(path)
    except OSError:
        return {"type": "absent"}
    out = {"mode": "%04o" % stat.S_IMODE(st.st_mode), "owner": name_of(pwd.getpwuid, st.st_uid),
           "group": name_of(grp.getgrgid, st.st_gid)}
    if stat.S_ISLNK(st.st_mode):
        out = {"type": "link", "target": os.readlink(path)}
    elif stat.S_ISDIR(st.st_mode):
        out["type"] = "directory"
    elif stat.S_ISREG(st.st_mode):
        out["type"] = "file"
        if st.st_size > big:
            out["size"], out["mtime"] = st.st_size, int(st.st_mtime)
        else:
            digest = hashlib.sha1()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
            out["sha1"] = digest.hexdigest()
    else:
        out["type"] = "other"
    return out
def run(argv):
    try:
        done = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        out, _ = done.communicate()
        return out.decode("utf-8", "replace")
    except OSError:
        return ""
def units(names):
    props = ["-p" + p for p in spec["unit_properties"]]
    return dict((name, run(["systemctl", "show"] + props + ["--", name])) for name in names)
def packages(names):
    found = dict((n, None) for n in names)
    if not names:
        return found
    if os.path.exists("/var/lib/dpkg/status"):
        text = run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n"] + list(names))
    else:
        text = run(["rpm", "-q", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\tii\n"] + list(names))
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and fields[0] in found and fields[2].strip()[1:2] == "i":
            found[fields[0]] = fields[1] + " " + fields[2].strip()
    return found
def accounts(names, getter, index):
    out = {}
    for name in names:
        try:
            out[name] = getter(name)[index]
        except KeyError:
            out[name] = None
    return out
try:
    with open("/etc/os-release", "rb") as f:
        os_release = hashlib.sha1(f.read()).hexdigest()
except (IOError, OSError):
    os_release = None
local = {}
facts_dir = spec["facts"]
for name in sorted(os.listdir(facts_dir)) if os.path.isdir(facts_dir) else []:
    if name.endswith(".fact") and os.path.isfile(os.path.join(facts_dir, name)):
        try:
            with open(os.path.join(facts_dir, name)) as f:
                local[name[:-5]] = json.load(f)
        except (IOError, OSError, ValueError):
            local[name[:-5]] = "error loading fact - please check content"
observed = {
    "paths": dict((p, path_state(p)) for p in keys.get("paths", [])),
    "units": units(keys.get("units", [])),
    "packages": packages(keys.get("packages", [])),
    "users": accounts(keys.get("users", []), pwd.getpwnam, 2),
    "groups": accounts(keys.get("groups", []), grp.getgrnam, 2),
    "system": {"kernel": os.uname()[2], "os_release": os_release},
}
result = {"record": record, "keys": keys, "observed": observed, "local": local}
sys.stdout.write("\n@@@provision-record\n" + json.dumps(result))
