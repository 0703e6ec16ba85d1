"""The files of an inventory, checked for what Ansible reads wrongly or skips without a word.

Ansible reads ``group_vars/<group>`` and ``host_vars/<host>`` beside the inventory (a file with no
extension or ``.yml``, ``.yaml``, ``.json``, or a folder of such files) and the inventory's own files. It
skips, silently: a file for a group or host the inventory does not have (``npu_node.yml``), a broken symlink,
a second file for the same group (``npu_nodes.yml`` beside ``npu_nodes/``); it keeps the later of two equal
keys with only a warning, and it reads bytes that are not UTF-8 as garbage. Each is refused here, naming the
file (and line).
"""

from __future__ import annotations

import difflib
import errno
import json
import os
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from provision.errors import InputError

VARS_DIRS = ("group_vars", "host_vars")
# libyaml's loader where PyYAML has it: ten times faster than the pure-Python one, on every validate.
YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class FileProblem:
    path: Path
    message: str
    line: int = 0

    def render(self, base: Path) -> str:
        try:
            shown = str(self.path.relative_to(base))
        except ValueError:
            shown = str(self.path)
        return f"{shown}:{self.line}: {self.message}" if self.line else f"{shown}: {self.message}"


class InvalidFiles(InputError):
    """Files of the inventory that Ansible would misread or skip; ``problems`` lists them all."""

    def __init__(self, source: Path, problems: Sequence[FileProblem]) -> None:
        self.problems = list(problems)
        base = vars_folder(source)
        lines = [f"{source}: {len(self.problems)} problem(s) in the inventory's files; no host was contacted"]
        lines += [f"  {problem.render(base)}" for problem in self.problems]
        super().__init__("\n".join(lines))


def vars_folder(source: Path) -> Path:
    """Where Ansible looks for group_vars/ and host_vars/: beside the inventory file (its real path), or in
    the inventory folder."""
    real = Path(os.path.realpath(source))
    return real if real.is_dir() else real.parent


def check_source(source: Path) -> None:
    """Refuse an inventory path that is a broken symlink (Ansible says only that it is not found)."""
    broken = _broken_link(source)
    if broken is not None:
        raise InputError(f"{source}: the inventory {broken}")


def check_inventory_text(source: Path) -> None:
    """The inventory's own files, before Ansible parses them; raise InvalidFiles listing all problems."""
    problems: list[FileProblem] = []
    for path in _inventory_files(Path(os.path.realpath(source)), problems):
        if not os.access(path, os.X_OK):  # an executable is an inventory script: Ansible runs it
            problems += _text_problems(path, vars_file=False)
    if problems:
        raise InvalidFiles(source, problems)


def yaml_problem(source: Path) -> str | None:
    """Where a YAML inventory file that Ansible could not parse breaks (Ansible's own message is one line
    per inventory plugin it tried)."""
    real = Path(os.path.realpath(source))
    if real.is_dir() or real.suffix not in (".yml", ".yaml"):
        return None
    try:
        yaml.compose(real.read_text(encoding="utf-8"), Loader=YAML_LOADER)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{real.name}:{mark.line + 1}" if mark is not None else real.name
        return f"{where}: invalid YAML: {getattr(exc, 'problem', None) or str(exc).splitlines()[0]}"
    except (OSError, UnicodeDecodeError):
        return None
    return None


def check_vars_files(source: Path, groups: Collection[str], hosts: Collection[str]) -> None:
    """Every group_vars/host_vars file Ansible reads for this inventory, and every broken symlink there;
    raise InvalidFiles listing all problems."""
    problems: list[FileProblem] = []
    for _kind, folder, entities in _vars_folders(source, groups, hosts):
        for path in _vars_files(folder, entities, problems):
            problems += _text_problems(path, vars_file=True)
    if problems:
        raise InvalidFiles(source, problems)


def check_vars_names(source: Path, groups: Collection[str], hosts: Collection[str]) -> None:
    """group_vars/host_vars entries Ansible never reads: for a group or host the inventory does not have, or
    a second one for the same group (``npu_nodes.yml`` beside ``npu_nodes/``); raise InvalidFiles.

    Not part of loading: ``provision bootstrap`` loads an inventory whose host_vars/ already holds files for
    the hosts it is about to add."""
    problems: list[FileProblem] = []
    exts = _extensions()
    for kind, folder, entities in _vars_folders(source, groups, hosts):
        what = "group" if kind == "group_vars" else "host"
        for path in _entries(folder, []):
            entity = _entity(path.name, entities, exts)
            if entity is None:
                stems = _stems(path.name, exts)
                if stems or "." not in path.name or path.is_dir():  # a name Ansible would read for one
                    problems.append(FileProblem(path, _unknown(what, (stems or [path.name])[0], entities)))
                continue
            first = _first(folder, entity, exts)
            if first != path:
                problems.append(
                    FileProblem(
                        path, f"never read: Ansible reads only {kind}/{first.name} for {what} {entity}"
                    )
                )
    if problems:
        raise InvalidFiles(source, problems)


def broken_vars_file(
    source: Path, groups: Collection[str], hosts: Collection[str], loader: Any = None
) -> str | None:
    """Which group_vars/host_vars file Ansible failed on, and why (Ansible names it only sometimes);
    ``loader`` is the DataLoader that failed (it holds the vault secrets)."""
    from ansible.errors import AnsibleError
    from ansible.parsing.dataloader import DataLoader

    for _kind, folder, entities in _vars_folders(source, groups, hosts):
        for path in _vars_files(folder, entities, []):
            try:
                data = (loader or DataLoader()).load_from_file(str(path))
            except AnsibleError as exc:
                origin = getattr(exc, "obj", None)
                line = getattr(origin, "line_num", 0) or 0
                where = f"{path}:{line}" if line else str(path)
                return f"{where}: {str(exc).splitlines()[0]}"
            if data and not isinstance(data, dict):
                return f"{path}: {_NOT_A_MAPPING} {'a list' if isinstance(data, list) else 'a single value'}"
    return None


_NOT_A_MAPPING = "must be a mapping of variable names to values, not"


# --- the files Ansible reads ------------------------------------------------------------------------------


def _extensions() -> list[str]:
    """Ansible's vars file extensions (YAML_FILENAME_EXTENSIONS), each with its dot."""
    from ansible import constants as C

    return [ext if "." in ext else f".{ext}" for ext in C.YAML_FILENAME_EXTENSIONS]


def _inventory_files(
    source: Path, problems: list[FileProblem], above: frozenset[str] = frozenset()
) -> Iterator[Path]:
    """The inventory file, or the files of an inventory folder that Ansible tries as sources."""
    if not source.is_dir():
        yield source
        return
    from ansible.inventory.manager import IGNORED

    above = above | {os.path.realpath(source)}
    for name in _listing(source, problems):
        if IGNORED.search(name.encode()):
            continue
        path = source / name
        broken = _broken_link(path) or _loop(path, above)
        if broken is not None:
            problems.append(FileProblem(path, broken))
        elif path.is_dir():
            yield from _inventory_files(path, problems, above)
        elif path.is_file():
            yield path


def _vars_folders(
    source: Path, groups: Collection[str], hosts: Collection[str]
) -> Iterator[tuple[str, Path, set[str]]]:
    """group_vars/ and host_vars/ with the names Ansible looks up in each. 'localhost' is Ansible's implicit
    host: its host_vars apply to plays run on the controller."""
    folder = vars_folder(source)
    yield "group_vars", folder / "group_vars", {*groups, "all"}
    yield "host_vars", folder / "host_vars", {*hosts, "localhost"}


def _entries(folder: Path, problems: list[FileProblem]) -> Iterator[Path]:
    """The entries of group_vars/ (or host_vars/) that are not hidden or backups; broken symlinks are
    problems."""
    broken = _broken_link(folder)
    if broken is not None:
        problems.append(FileProblem(folder, broken))
        return
    if not folder.exists():
        return
    if not folder.is_dir():
        problems.append(FileProblem(folder, "must be a folder (Ansible skips it)"))
        return
    for entry in _listing(folder, problems):
        if entry.startswith(".") or entry.endswith("~"):
            continue
        path = folder / entry
        broken = _broken_link(path)
        if broken is not None:
            problems.append(FileProblem(path, broken))
            continue
        yield path


def _stems(entry: str, exts: list[str]) -> list[str]:
    return [entry[: -len(ext)] for ext in exts if entry.endswith(ext) and len(entry) > len(ext)]


def _entity(entry: str, entities: Collection[str], exts: list[str]) -> str | None:
    """The group or host an entry is for: NAME, NAME.yml, NAME.yaml or NAME.json (a file or a folder)."""
    return next((name for name in (entry, *_stems(entry, exts)) if name in entities), None)


def _first(folder: Path, entity: str, exts: list[str]) -> Path:
    """The one entry Ansible reads for ``entity``: the first of NAME, NAME.yml, NAME.yaml, NAME.json that
    exists (``DataLoader.find_vars_files``)."""
    return next(
        (folder / f"{entity}{ext}" for ext in ("", *exts) if (folder / f"{entity}{ext}").exists()),
        folder / entity,
    )


def _vars_files(folder: Path, entities: Collection[str], problems: list[FileProblem]) -> Iterator[Path]:
    """The files Ansible reads from group_vars/ (or host_vars/) for ``entities``, in its order."""
    exts = _extensions()
    for path in _entries(folder, problems):
        entity = _entity(path.name, entities, exts)
        if entity is None or _first(folder, entity, exts) != path:
            continue  # never read (check_vars_names says so)
        if path.is_dir():
            yield from _dir_files(path, exts, problems, frozenset({os.path.realpath(path)}))
        elif path.is_file():
            yield path


def _dir_files(
    folder: Path, exts: list[str], problems: list[FileProblem], above: frozenset[str]
) -> Iterator[Path]:
    """The files of a group's or host's vars folder, as Ansible lists them (hidden files and backups
    skipped, sub-folders without an extension entered)."""
    for name in _listing(folder, problems):
        if name.startswith(".") or name.endswith("~"):
            continue
        path = folder / name
        ext = os.path.splitext(name)[1]
        broken = _broken_link(path)
        if broken is not None:
            problems.append(FileProblem(path, broken))
        elif path.is_dir() and not ext:
            loop = _loop(path, above)
            if loop is not None:
                problems.append(FileProblem(path, loop))
                continue
            yield from _dir_files(path, exts, problems, above | {os.path.realpath(path)})
        elif path.is_file() and (not ext or ext in exts):
            yield path


def _listing(folder: Path, problems: list[FileProblem]) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError as exc:
        problems.append(FileProblem(folder, f"cannot be read: {exc.strerror}"))
        return []


def _unknown(what: str, name: str, entities: Collection[str]) -> str:
    close = difflib.get_close_matches(name, sorted(entities), n=1, cutoff=0.6)
    hint = f"did you mean {close[0]}?" if close else "Ansible never reads this file"
    return f"no {what} {name} in the inventory; {hint}"


def _loop(path: Path, above: Collection[str]) -> str | None:
    """Why entering the folder ``path`` would go round in circles: a symlink back to a folder above it."""
    if not path.is_dir():
        return None
    real = os.path.realpath(path)
    if any(seen == real or seen.startswith(real + os.sep) for seen in above):
        return "is a symlink loop: it leads back to a folder above it"
    return None


def _broken_link(path: Path) -> str | None:
    """Why ``path`` is a symlink that leads nowhere: a loop, or a target that does not exist."""
    if not path.is_symlink():
        return None
    try:
        os.stat(path)
    except OSError as exc:
        target = os.readlink(path)
        if exc.errno == errno.ELOOP:
            return f"is a symlink loop ({path.name} -> {target})"
        return f"is a dangling symlink: it points to {target}, which does not exist"
    return None


# --- what is in them --------------------------------------------------------------------------------------


def _text_problems(path: Path, vars_file: bool) -> list[FileProblem]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        return [FileProblem(path, f"cannot be read: {exc.strerror}")]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return [
            FileProblem(
                path,
                f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset {exc.start}; save it as UTF-8",
                line,
            )
        ]
    if text.startswith("$ANSIBLE_VAULT"):  # a vault-encrypted file: only its decrypted text could be checked
        return []
    try:
        root = yaml.compose(text, Loader=YAML_LOADER)
    except yaml.YAMLError:
        # Not YAML: Ansible reads it as JSON (duplicates kept silently) or refuses it with its own message.
        return [_duplicate(path, key, 0, 0) for key in _json_duplicates(text)]
    out = [_duplicate(path, key, first, line) for key, first, line in _duplicate_keys(root)]
    if vars_file and isinstance(root, yaml.SequenceNode | yaml.ScalarNode) and root.tag != _NULL:
        kind = "a list" if isinstance(root, yaml.SequenceNode) else "a single value"
        out.append(FileProblem(path, f"{_NOT_A_MAPPING} {kind}", root.start_mark.line + 1))
    return out


_NULL = "tag:yaml.org,2002:null"


def _duplicate(path: Path, key: str, first: int, line: int) -> FileProblem:
    if not first:
        return FileProblem(path, f"duplicate key {key!r}: Ansible would keep only the later value")
    return FileProblem(
        path, f"duplicate key {key!r} (first at line {first}): Ansible would keep only this one", line
    )


def _duplicate_keys(root: yaml.Node | None) -> list[tuple[str, int, int]]:
    """(key, first line, later line) of every key written twice in one mapping. Ansible's YAML loader only
    warns and keeps the later value."""
    found: list[tuple[str, int, int]] = []
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], int] = {}
            for key, value in node.value:
                stack.append(value)
                if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
                    continue
                line = key.start_mark.line + 1
                if (key.tag, key.value) in seen:
                    found.append((key.value, seen[(key.tag, key.value)], line))
                else:
                    seen[(key.tag, key.value)] = line
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return sorted(found, key=lambda item: item[2])


def _json_duplicates(text: str) -> list[str]:
    """Keys written twice in one object of a JSON text (Ansible's JSON loader keeps the later silently)."""
    found: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [key for key, _ in items]
        found.extend(key for i, key in enumerate(keys) if key in keys[:i])
        return dict(items)

    try:
        json.loads(text, object_pairs_hook=pairs)
    except ValueError:
        return []
    return found
