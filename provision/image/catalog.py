"""``provision image list``: the images the lock describes, and which of them the engine has.

Every stack of the lock × base OS × SoC family, for one architecture. Each row says ``present`` (with ID,
size, age and whether its labels still match the lock), ``missing``, or ``unknown`` when no engine answers;
then the repository's other local tags, which no lock entry describes any more (``not in lock``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import docker
import docker.errors

from provision.image.build import check_labels
from provision.image.spec import Target, lock_targets


@dataclass
class Row:
    reference: str
    state: str  # present | missing | unknown | not in lock
    stack: str = ""
    os_variant: str = ""
    soc: str = ""
    image_id: str = ""
    size: int = 0
    created: str = ""
    label_problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "state": self.state,
            "stack": self.stack,
            "os": self.os_variant,
            "soc": self.soc,
            "image_id": self.image_id,
            "size": self.size,
            "created": self.created,
            "label_problems": self.label_problems,
        }


def catalog(client: docker.DockerClient | None, arch: str, repository: str) -> list[Row]:
    """Rows for every lock target (``unknown`` state without a client), then local tags not in the lock."""
    targets = lock_targets(arch, repository)
    rows = [_row(client, target) for target in targets]
    if client is None:
        return rows
    known = {t.reference for t in targets}
    try:
        local = client.images.list(name=repository)
    except docker.errors.APIError:
        local = []
    extra: list[Row] = []
    for image in local:
        for tag in image.tags or []:
            if tag.rpartition(":")[0] == repository and tag not in known:
                labels = image.labels or {}
                extra.append(
                    Row(
                        reference=tag,
                        state="not in lock",
                        stack=labels.get("provision.stack", ""),
                        os_variant=labels.get("provision.stack.os", ""),
                        soc=labels.get("provision.stack.soc", ""),
                        image_id=_short(image.id),
                        size=int(image.attrs.get("Size") or 0),
                        created=str(image.attrs.get("Created") or ""),
                    )
                )
    return rows + sorted(extra, key=lambda r: r.reference)


def _row(client: docker.DockerClient | None, target: Target) -> Row:
    row = Row(
        reference=target.reference,
        state="unknown",
        stack=target.stack,
        os_variant=target.os_variant,
        soc=target.soc,
    )
    if client is None:
        return row
    try:
        image = client.images.get(target.reference)
    except docker.errors.ImageNotFound:
        row.state = "missing"
        return row
    row.state = "present"
    row.image_id = _short(image.id)
    row.size = int(image.attrs.get("Size") or 0)
    row.created = str(image.attrs.get("Created") or "")
    row.label_problems = check_labels(image.labels or {}, target)
    return row


def _short(image_id: str | None) -> str:
    return (image_id or "").removeprefix("sha256:")[:12]


def age(created: str, now: datetime | None = None) -> str:
    """``2026-11-30T04:10:00.123456789Z`` → ``3 h ago`` (empty when unparsable)."""
    if not created:
        return ""
    stamp = created.rstrip("Z").split(".")[0]
    try:
        when = datetime.fromisoformat(stamp).replace(tzinfo=UTC)
    except ValueError:
        return ""
    seconds = ((now or datetime.now(UTC)) - when).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return "just now"
