# shellcheck shell=sh
exec </dev/null
f=$1 content=$2
command -v visudo >/dev/null 2>&1 || { echo "visudo not found: is sudo installed?" >&2; exit 1; }
if [ -f "$f" ] && printf '%s\n' "$content" | cmp -s - "$f"; then exit 0; fi
tmp=$(mktemp /etc/sudoers.d/.provision.XXXXXX) || exit 1    # names with a dot are not read by sudo
printf '%s\n' "$content" > "$tmp"
if ! visudo -cf "$tmp" >/dev/null 2>&1; then visudo -cf "$tmp" >&2; rm -f "$tmp"; exit 1; fi
chmod 0440 "$tmp"; chown root:root "$tmp"
[ -f "$f" ] && cp -p "$f" "$tmp.old"
mv -f "$tmp" "$f"
if ! visudo -c >/dev/null 2>&1; then
  visudo -c >&2
  if [ -f "$tmp.old" ]; then mv -f "$tmp.old" "$f"; else rm -f "$f"; fi
  exit 1
fi
rm -f "$tmp.old"
grep -Eqs '^[#@]includedir[[:space:]]+/etc/sudoers.d' /etc/sudoers ||
  echo "warning: /etc/sudoers does not include /etc/sudoers.d" >&2
echo "@@@change passwordless sudo for the deploy user ($f)"
