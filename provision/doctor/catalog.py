"""The known failures ``provision doctor`` looks for: ``provision/data/failures.yml``, typed and checked.

Each entry names its signature (a regex over one of :data:`OUTPUTS`, or a condition of
:mod:`provision.doctor.conditions`), its cause, its fix and the public reports that document it. A file
that breaks these rules is refused as a whole, naming the entry and the field.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator

from provision.doctor.conditions import CONDITIONS
from provision.errors import InputError
from provision.paths import data_dir

OUTPUTS = ("npu_smi", "engine_log", "plog", "docker_log", "dkms", "kernel_log")
"""The tool outputs and logs a regex signature may search (see :func:`provision.doctor.diagnose.outputs`)."""
Output = Literal["npu_smi", "engine_log", "plog", "docker_log", "dkms", "kernel_log"]
PEER_GROUPS = ("server", "npu", "ip", "rank")
"""The named groups a ``peer`` regex may capture: which node, NPU, NPU address or rank the evidence blames."""
FAILURE_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")


def _regex(value: str) -> str:
    try:
        re.compile(value, re.IGNORECASE)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from None
    return value


def _condition(value: str) -> str:
    if value not in CONDITIONS:
        raise ValueError(f"unknown condition {value!r}; known: {', '.join(sorted(CONDITIONS))}")
    return value


def _url(value: str) -> str:
    if not re.match(r"^https://[^\s/]+\.[^\s/]+/\S+$", value):
        raise ValueError("must be an https:// URL of a public page")
    return value


Regex = Annotated[str, AfterValidator(_regex)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _peer(value: str) -> str:
    groups = set(re.compile(value).groupindex)
    if not groups or not groups <= set(PEER_GROUPS):
        raise ValueError(
            f"a peer regex names its parts with (?P<name>...), name one of {', '.join(PEER_GROUPS)}"
        )
    return value


class Signature(_Strict):
    regex: Regex | None = None
    unless: Regex | None = None
    outputs: tuple[Output, ...] = Field(default=(), alias="in")
    condition: Annotated[str, AfterValidator(_condition)] | None = None
    peer: Annotated[Regex, AfterValidator(_peer)] | None = None
    """Over a matched line: the other end it names (its server, NPU, NPU address, rank), for the report."""

    @model_validator(mode="after")
    def _one_kind(self) -> Signature:
        if (self.regex is None) == (self.condition is None):
            raise ValueError("give either regex (with in: [outputs]) or condition")
        if self.regex is not None and not self.outputs:
            raise ValueError(f"a regex needs in: [...], one or more of {', '.join(OUTPUTS)}")
        if self.condition is not None and (self.outputs or self.unless or self.peer):
            raise ValueError("a condition takes no in:, unless: or peer:")
        return self


class Source(_Strict):
    url: Annotated[str, AfterValidator(_url)]
    shows: str = Field(min_length=1)


class Failure(_Strict):
    id: Annotated[str, Field(pattern=FAILURE_ID.pattern)]
    title: str = Field(min_length=1)
    signature: Signature
    cause: str = Field(min_length=1)
    fix: str = Field(min_length=1)
    sources: tuple[Source, ...] = Field(min_length=1)
    symptoms: tuple[str, ...] = ()
    """The failures this one causes (ids): a report names it before them, as their cause."""

    def search(self, text: str) -> str | None:
        """The first line of ``text`` the regex matches (unless ``unless`` matches ``text``), or None."""
        if self.signature.regex is None:
            return None
        if self.signature.unless and re.search(self.signature.unless, text, re.IGNORECASE):
            return None
        pattern = re.compile(self.signature.regex, re.IGNORECASE)
        return next((line.strip() for line in text.splitlines() if pattern.search(line)), None)

    def peer(self, line: str) -> dict[str, str]:
        """The parts of the other end ``line`` names (``{"server", "npu", "ip", "rank"}``, those found)."""
        if self.signature.peer is None:
            return {}
        m = re.search(self.signature.peer, line, re.IGNORECASE)
        return {k: v.strip() for k, v in m.groupdict().items() if v and v.strip()} if m else {}


class Catalog(_Strict):
    failures: tuple[Failure, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> Catalog:
        seen: set[str] = set()
        for failure in self.failures:
            if failure.id in seen:
                raise ValueError(f"failure id {failure.id!r} is given twice")
            seen.add(failure.id)
        for failure in self.failures:
            unknown = [s for s in failure.symptoms if s not in seen or s == failure.id]
            if unknown:
                raise ValueError(f"failure {failure.id!r}: symptoms names no other failure: {unknown[0]!r}")
        loop = self._cycle()
        if loop:
            raise ValueError(f"symptoms run in a circle: {' -> '.join(loop)}")
        return self

    def _cycle(self) -> list[str]:
        """A circle of cause -> symptom ids (empty when there is none): no order could put causes first."""
        causes = {f.id: f.symptoms for f in self.failures}
        done: set[str] = set()

        def visit(fid: str, path: list[str]) -> list[str]:
            if fid in path:
                return [*path[path.index(fid) :], fid]
            if fid in done:
                return []
            for symptom in causes[fid]:
                loop = visit(symptom, [*path, fid])
                if loop:
                    return loop
            done.add(fid)
            return []

        for fid in causes:
            loop = visit(fid, [])
            if loop:
                return loop
        return []

    def caused_by(self, failure_id: str) -> tuple[str, ...]:
        """The ids of the failures that list ``failure_id`` among their symptoms."""
        return tuple(f.id for f in self.failures if failure_id in f.symptoms)


def catalog_path() -> Path:
    return data_dir() / "failures.yml"


def load_catalog(path: Path | None = None) -> Catalog:
    """The catalogue at ``path`` (default: the shipped one); InputError naming the entry and field."""
    path = path or catalog_path()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read the failure catalogue: {exc}") from None
    try:
        return Catalog.model_validate(data)
    except ValidationError as exc:
        raise InputError(f"{path}: {_message(exc, data)}") from None


@cache
def shipped() -> Catalog:
    return load_catalog()


DOC_BEGIN = "<!-- BEGIN known failures: generated from provision/data/failures.yml -->"
DOC_END = "<!-- END known failures -->"


def markdown_table(catalog: Catalog) -> str:
    """The known failures as the Markdown table of docs/doctor.md: id, title, signature, the failures it
    causes (named after it in a report), sources."""
    rows = ["| id | what | signature | causes | sources |", "|---|---|---|---|---|"]
    for failure in catalog.failures:
        sig = failure.signature
        if sig.condition is not None:
            signature = f"condition `{sig.condition}`"
        else:
            signature = f"`{sig.regex}` in {', '.join(sig.outputs)}"
            if sig.unless:
                signature += f", unless `{sig.unless}`"
        sources = ", ".join(f"[{_short(s.url)}]({s.url})" for s in failure.sources)
        # a | of a regex would end its table cell
        causes = ", ".join(f"`{s}`" for s in failure.symptoms)
        cells = (f"`{failure.id}`", failure.title, signature, causes, sources)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(rows) + "\n"


def _short(url: str) -> str:
    m = re.match(r"^https://github\.com/([^/]+/[^/]+)/(?:issues|pull)/(\d+)$", url)
    if m:
        return f"{m.group(1)}#{m.group(2)}"
    return "Ascend docs " + url.rstrip("/").rsplit("/", 1)[-1].removesuffix(".html")


def with_table(doc: str, catalog: Catalog) -> str:
    """``doc`` with the text between :data:`DOC_BEGIN` and :data:`DOC_END` replaced by the table."""
    head, begin, rest = doc.partition(DOC_BEGIN)
    _, end, tail = rest.partition(DOC_END)
    if not begin or not end:
        raise InputError(f"the document has no {DOC_BEGIN} ... {DOC_END} block")
    return f"{head}{DOC_BEGIN}\n{markdown_table(catalog)}{DOC_END}{tail}"


def _message(exc: ValidationError, data: object) -> str:
    lines = []
    for error in exc.errors():
        where = list(error["loc"])
        if len(where) >= 2 and where[0] == "failures" and isinstance(where[1], int):
            entries = data.get("failures") if isinstance(data, dict) else None
            entry = entries[where[1]] if isinstance(entries, list) and len(entries) > where[1] else None
            name = entry.get("id") if isinstance(entry, dict) else None
            where[1] = f"{where[1]} ({name})" if name else where[1]
        place = ".".join(str(w) for w in where)
        lines.append(f"{place}: {error['msg']}" if place else str(error["msg"]))
    return "; ".join(lines)


if __name__ == "__main__":  # python -m provision.doctor.catalog docs/doctor.md: write the table into it
    import sys

    for name in sys.argv[1:]:
        doc = Path(name)
        doc.write_text(with_table(doc.read_text(encoding="utf-8"), shipped()), encoding="utf-8")
