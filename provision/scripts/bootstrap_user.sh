# shellcheck shell=sh
exec </dev/null
u=$1
id -u "$u" >/dev/null 2>&1 && exit 0
shell=$(command -v bash 2>/dev/null || echo /bin/sh)
# '*': no password, but not locked ('!'), which sshd without PAM would treat as "no login at all".
useradd --create-home --shell "$shell" --comment "provision deploy user" --password '*' "$u" || exit 1
echo "@@@change created user $u"
