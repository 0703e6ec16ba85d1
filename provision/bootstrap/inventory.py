"""Write bootstrapped hosts into the user's INI inventory without losing a comment, an order or a host.

Ansible's own inventory loader reads INI into host and group objects: comments, blank lines, the order of
lines and how variables were spelled are gone, so it cannot write a file back. Instead :class:`IniText` edits
the text line by line and touches only the lines of the hosts it is told about:

- a host's *home line* (its first line in a host section; a new one goes to ``[npu_nodes]``) gets the
  connection variables: values of existing ``key=value`` tokens are replaced in place, missing ones are
  appended before any trailing comment, other tokens stay as they were;
- group membership (``[npu_nodes]``, ``[npu_910b]`` ...) is a bare ``host`` line added after the section's
  last host line; a section that does not exist is appended at the end of the file;
- a host that changed NPU model leaves the other ``[npu_<model>]`` groups (only bare lines are removed).

Discovered facts go to ``host_vars/<host>.yml`` (or ``host_vars/<host>/bootstrap.yml`` when the host has a
host_vars folder) between ``# BEGIN provision bootstrap`` / ``# END provision bootstrap`` markers; the rest of
the file is the user's. After writing, the inventory is loaded back with :mod:`provision.inventory.load`
(what Ansible sees) and checked with :mod:`provision.inventory.validate`.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from provision.ascend.pci import ASCEND_MODELS
from provision.errors import InputError
from provision.inventory.schema import HOST_GROUP

NO_NPU_GROUP = "nodes_without_npu"
"""Bootstrapped hosts that show no Ascend NPU: kept out of ``npu_nodes`` (preflight would fail them)."""
BEGIN = "# BEGIN provision bootstrap"
END = "# END provision bootstrap"
BLOCK_NOTE = "# (rewritten by every `provision bootstrap`; variables outside this block are yours)"
NEW_FILE_HEADER = (
    "# Ansible inventory. Hosts were added by `provision bootstrap`; your comments, order and other hosts\n"
    "# are kept when it runs again. Discovered facts: host_vars/<host>.yml.\n"
)

_HEADER = re.compile(r"^\s*\[(?P<name>[^\]\s]+)\]\s*(?:[#;].*)?$")


def model_group(model: str) -> str:
    """``910B`` -> ``npu_910b``."""
    return "npu_" + re.sub(r"[^a-z0-9_]", "_", model.lower())


MODEL_GROUPS = frozenset(model_group(m) for m in ASCEND_MODELS.values())


# --- tokens of one INI host line ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Token:
    start: int
    end: int
    text: str

    @property
    def key(self) -> str | None:
        name, sep, _ = self.text.partition("=")
        return name if sep and name and not name.startswith(("'", '"')) else None


def _tokens(line: str) -> tuple[list[_Token], int]:
    """Whitespace-separated tokens (quotes group), and where a ``#`` comment starts (or len(line))."""
    tokens: list[_Token] = []
    i, n = 0, len(line)
    while i < n:
        while i < n and line[i].isspace():
            i += 1
        if i >= n:
            break
        if line[i] in "#;" and (i == 0 or line[i - 1].isspace()):
            return tokens, i
        start, quote = i, None
        while i < n:
            char = line[i]
            if quote:
                if char == "\\" and quote == '"' and i + 1 < n:
                    i += 2
                    continue
                if char == quote:
                    quote = None
            elif char in "'\"":
                quote = char
            elif char.isspace():
                break
            i += 1
        tokens.append(_Token(start, i, line[start:i]))
    return tokens, n


def quote_value(value: str) -> str:
    """An INI value as Ansible's INI parser (shlex) reads it back unchanged."""
    if value and not re.search(r"[\s'\"#;\\]", value):
        return value
    if "'" not in value:
        return f"'{value}'"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def unquote_value(text: str) -> str:
    import shlex

    try:
        parts = shlex.split(text)
    except ValueError:
        return text
    return parts[0] if len(parts) == 1 else text


# --- the file -------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Section:
    name: str | None
    """None: lines before the first header (ungrouped hosts)."""
    kind: str
    """``hosts``, ``vars`` or ``children``."""
    header: int
    """Index of the header line (-1 for the top)."""
    end: int
    """Index after the section's last line."""


@dataclass
class IniText:
    """An INI inventory as lines; edits keep every line they are not about."""

    lines: list[str] = field(default_factory=list)

    @classmethod
    def parse(cls, text: str) -> IniText:
        return cls(text.splitlines())

    def text(self) -> str:
        return "\n".join(self.lines) + "\n" if self.lines else ""

    # -- reading -----------------------------------------------------------------------------------------

    def sections(self) -> list[_Section]:
        sections = [_Section(None, "hosts", -1, 0)]
        for index, line in enumerate(self.lines):
            match = _HEADER.match(line)
            if match:
                sections[-1].end = index
                name, _, kind = match.group("name").partition(":")
                sections.append(_Section(name, kind or "hosts", index, len(self.lines)))
        sections[-1].end = len(self.lines)
        return sections

    def _section(self, name: str) -> _Section | None:
        return next((s for s in self.sections() if s.name == name and s.kind == "hosts"), None)

    def host_lines(self, section: _Section) -> Iterator[tuple[int, list[_Token], int]]:
        for index in range(section.header + 1, section.end):
            tokens, comment = _tokens(self.lines[index])
            if tokens:
                yield index, tokens, comment

    def find_host(self, host: str, section_name: str | None = None) -> int | None:
        """Index of ``host``'s line in ``section_name`` (any host section when None)."""
        for section in self.sections():
            if section.kind != "hosts" or (section_name is not None and section.name != section_name):
                continue
            for index, tokens, _ in self.host_lines(section):
                if unquote_value(tokens[0].text) == host:
                    return index
        return None

    def host_vars(self, index: int) -> dict[str, str]:
        tokens, _ = _tokens(self.lines[index])
        out: dict[str, str] = {}
        for token in tokens[1:]:
            if token.key:
                out[token.key] = unquote_value(token.text[len(token.key) + 1 :])
        return out

    def groups_of(self, host: str) -> list[str]:
        return [
            s.name
            for s in self.sections()
            if s.name and s.kind == "hosts" and self.find_host(host, s.name) is not None
        ]

    # -- editing -----------------------------------------------------------------------------------------

    def set_vars(self, index: int, variables: Mapping[str, str | None]) -> list[str]:
        """Set (None: remove) variables on the host line at ``index``; return the names changed."""
        line = self.lines[index]
        tokens, comment = _tokens(line)
        changed: list[str] = []
        pieces: list[tuple[int, int, str]] = []
        present = {t.key: t for t in tokens[1:] if t.key}
        for name, value in variables.items():
            token = present.get(name)
            if token is None:
                continue
            if value is None:
                pieces.append((token.start, token.end, ""))
                changed.append(name)
            elif unquote_value(token.text[len(name) + 1 :]) != value:
                pieces.append((token.start, token.end, f"{name}={quote_value(value)}"))
                changed.append(name)
        for start, end, replacement in sorted(pieces, reverse=True):
            if not replacement:  # removing: take the whitespace before the token too
                while start > 0 and line[start - 1] in " \t":
                    start -= 1
            line = line[:start] + replacement + line[end:]
        added = [
            f"{name}={quote_value(value)}"
            for name, value in variables.items()
            if value is not None and name not in present
        ]
        if added:
            changed += [a.split("=", 1)[0] for a in added]
            _, comment = _tokens(line)
            head, tail = line[:comment].rstrip(), line[comment:]
            line = " ".join([head, *added]) + (f"  {tail}" if tail else "")
        self.lines[index] = line
        return changed

    def add_host(self, section_name: str, host: str, variables: Mapping[str, str] | None = None) -> int:
        """Add ``host`` (with variables) to a section, creating the section at the end if needed."""
        words = [quote_value(host), *(f"{k}={quote_value(v)}" for k, v in (variables or {}).items())]
        new_line = " ".join(words)
        section = self._section(section_name)
        if section is None:
            while self.lines and not self.lines[-1].strip():
                self.lines.pop()
            if self.lines:
                self.lines.append("")
            self.lines += [f"[{section_name}]", new_line]
            return len(self.lines) - 1
        last = section.header
        for index, _, _ in self.host_lines(section):
            last = index
        if last == section.header:  # no host yet: after the comment lines right under the header
            while last + 1 < section.end and self.lines[last + 1].lstrip().startswith(("#", ";")):
                last += 1
        self.lines.insert(last + 1, new_line)
        return last + 1

    def remove_bare_host(self, section_name: str, host: str) -> bool:
        """Remove ``host``'s line from a section when it is only the name (no variables, no comment)."""
        index = self.find_host(host, section_name)
        if index is None or self.lines[index].strip() != host:
            return False
        del self.lines[index]
        return True


# --- connection variables ---------------------------------------------------------------------------------


def with_known_hosts(common_args: str | None, known_hosts: Path) -> str:
    """``ansible_ssh_common_args`` with ``-o UserKnownHostsFile=<file>`` set (other options kept)."""
    option = f"-o UserKnownHostsFile={known_hosts}"
    if not common_args:
        return option
    pattern = re.compile(r"-o\s*UserKnownHostsFile[= ]\S+", re.IGNORECASE)
    if pattern.search(common_args):
        return pattern.sub(option, common_args, count=1)
    return f"{common_args} {option}"


# --- host_vars ---------------------------------------------------------------------------------------------


def host_vars_file(inventory: Path, host: str) -> Path:
    """Where a host's bootstrap block lives: its host_vars file, or a file in its host_vars folder."""
    folder = inventory.parent / "host_vars"
    if (folder / host).is_dir():
        return folder / host / "bootstrap.yml"
    for name in (f"{host}.yml", f"{host}.yaml", host):
        if (folder / name).is_file():
            return folder / name
    if (folder / f"{host}.json").is_file():
        raise InputError(
            f"{folder / (host + '.json')}: bootstrap cannot add its block to a JSON file; make it YAML "
            f"or move it into a folder host_vars/{host}/"
        )
    return folder / f"{host}.yml"


class _InertDumper(yaml.SafeDumper):
    """YAML whose every string is tagged ``!unsafe``: Ansible reads such a value as data and never templates
    it, so what a node reported (its OS name, hostname, NIC names ...) cannot run code on the controller."""

    def represent_mapping(self, tag: str, mapping: Any, flow_style: Any = None) -> yaml.MappingNode:
        # Keys stay plain (Ansible never templates a key); only values carry the tag.
        node = super().represent_mapping(tag, mapping, flow_style)
        for key_node, _ in node.value:
            if key_node.tag == "!unsafe":
                key_node.tag = "tag:yaml.org,2002:str"
        return node


def _inert_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # Ansible reads a !unsafe scalar as the type its plain form resolves to (YAML 1.1: "22.03" a float, the
    # PCI address "0000:01:00.0" a sexagesimal 60.0): a string that reads as anything but a string is
    # written as a plain quoted string instead. No such string holds a template marker.
    if dumper.resolve(yaml.ScalarNode, value, (True, False)) != "tag:yaml.org,2002:str":  # type: ignore[no-untyped-call]
        return dumper.represent_str(value)
    return dumper.represent_scalar("!unsafe", value)


_InertDumper.add_representer(str, _inert_str)


def render_block(variables: Mapping[str, Any]) -> str:
    body = yaml.dump(
        dict(variables),
        Dumper=_InertDumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=1 << 16,  # one line a value: a folded one reads as a different block to a human
    )
    return f"{BEGIN}\n{BLOCK_NOTE}\n{body}{END}\n"


def replace_block(text: str, variables: Mapping[str, Any]) -> str:
    """``text`` (a YAML mapping document, maybe empty) with our block replaced or appended."""
    lines = text.splitlines(keepends=True)
    begin = next((i for i, line in enumerate(lines) if line.rstrip("\n") == BEGIN), None)
    block = render_block(variables)
    if begin is not None:
        end = next((i for i in range(begin, len(lines)) if lines[i].rstrip("\n") == END), len(lines) - 1)
        return "".join([*lines[:begin], block, *lines[end + 1 :]])
    if not text.strip():
        return "---\n" + block
    return text + ("" if text.endswith("\n") else "\n") + block


def user_keys(text: str) -> set[str]:
    """Top-level keys the user set outside our block (ours must not duplicate them)."""
    lines = text.splitlines(keepends=True)
    outside: list[str] = []
    inside = False
    for line in lines:
        stripped = line.rstrip("\n")
        if stripped == BEGIN:
            inside = True
        elif stripped == END and inside:
            inside = False
        elif not inside:
            outside.append(line)
    try:
        data = yaml.safe_load("".join(outside))
    except yaml.YAMLError:
        return set()
    return set(data) if isinstance(data, dict) else set()


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one step (same mode as before)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o644
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class HostEntry:
    """What the inventory should say about one bootstrapped host."""

    name: str
    connection: Mapping[str, str]
    """Variables for the host line (``ansible_host``, ``ansible_user``, ...)."""
    model: str | None
    npu_count: int
    facts: Mapping[str, Any]


def update_ini(
    text: str,
    entries: Sequence[HostEntry],
    known_hosts: Path,
    member_of: Mapping[str, Collection[str]] | None = None,
) -> tuple[str, dict[str, list[str]]]:
    """The new inventory text and, per host, what changed in it.

    ``member_of``: each host's groups as Ansible sees them before the edit (children groups included), so a
    host already in ``npu_nodes`` through a child group gets no extra line there.
    """
    ini = IniText.parse(text) if text.strip() else IniText.parse(NEW_FILE_HEADER)
    changes: dict[str, list[str]] = {}
    for entry in entries:
        notes: list[str] = []
        direct = set(ini.groups_of(entry.name))
        member = direct | set((member_of or {}).get(entry.name, ()))
        # A host already in npu_nodes stays there even when it shows no NPU now: preflight then says so.
        home = HOST_GROUP if entry.npu_count > 0 or HOST_GROUP in member else NO_NPU_GROUP
        wanted_groups = [home]
        if entry.model and entry.npu_count > 0:
            wanted_groups.append(model_group(entry.model))

        index = ini.find_host(entry.name, home)
        if index is None:
            index = ini.find_host(entry.name)
        wanted = dict(entry.connection)
        existing_args = ini.host_vars(index).get("ansible_ssh_common_args") if index is not None else None
        wanted["ansible_ssh_common_args"] = with_known_hosts(existing_args, known_hosts)
        if index is None:
            ini.add_host(home, entry.name, wanted)
            member.add(home)
            notes.append(f"added to [{home}]")
        else:
            names = ini.set_vars(index, wanted)
            if names:
                notes.append(f"set {', '.join(names)}")
        for group in wanted_groups:
            if group not in member:
                ini.add_host(group, entry.name)
                notes.append(f"added to [{group}]")
        for group in sorted((direct & MODEL_GROUPS) - set(wanted_groups)):
            if ini.remove_bare_host(group, entry.name):
                notes.append(f"removed from [{group}]")
        if notes:
            changes[entry.name] = notes
    return ini.text(), changes
