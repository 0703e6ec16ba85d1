import base64, os, sys
path, data = sys.argv[1], base64.b64decode(sys.argv[2])
folder = os.path.dirname(path)
if not os.path.isdir(folder):
    os.makedirs(folder, 0o700)
tmp = path + ".tmp"
fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
with os.fdopen(fd, "wb") as f:
    f.write(data)
os.rename(tmp, path)
