"""Does the serving image's stack fit the node? Its labels against the node's driver and NPU line.

``provision image build`` labels every image with its stack (the Dockerfile's ``LABEL``s, the lock's values:
``provision.stack``, ``provision.stack.cann``, ``provision.stack.soc``, ...). Before an instance starts, the
serving role reads them (``docker image inspect``) and compares them with what the node runs:

* the **NPU line**: an image built for one SoC family (``SOC_VERSION``: ``ascend910b1`` for A2,
  ``ascend910_9391`` for A3, ``ascend310p1`` for a 300I Duo) does not run on another; the node's line comes
  from its PCI device id (the facts probe);
* the **driver**: the CANN inside the image works with a range of Ascend HDK releases (CANN's release notes,
  the lock's ``hdk`` lines). A driver too old for the CANN in the image is among the most reported start
  failures (vllm-ascend#5468, #3190; GPUStack#755).

An image without our labels (the official ``quay.io/ascend/vllm-ascend`` images carry none of them) cannot be
judged: the verdict says so instead of passing silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from provision.ascend import lock

STACK = "provision.stack"
CANN = "provision.stack.cann"
SOC = "provision.stack.soc"


@dataclass(frozen=True)
class Verdict:
    """``problems`` (each naming both sides and the fix; empty: the image fits) and what was ``checked``."""

    problems: list[str] = field(default_factory=list)
    checked: str = ""


def _hdk_lines(labels: Mapping[str, str]) -> tuple[str, list[str]] | None:
    """(how the lines were found, the lines) of the image's CANN: its stack's entry, else a lock entry with
    that CANN; None when the lock knows neither."""
    name, cann = labels.get(STACK, ""), labels.get(CANN, "")
    if name in lock.stack_names():
        return f"stack {name}", [str(line) for line in lock.stack(name)["hdk"]]
    for other in lock.stack_names():
        entry = lock.stack(other)
        if cann and str(entry["cann"]) == cann:
            return f"CANN {cann} (as in stack {other})", [str(line) for line in entry["hdk"]]
    return None


def verdict(
    image: str, labels: Mapping[str, str] | None, *, host: str, driver: str | None, line: str | None
) -> Verdict:
    """Whether ``image`` (with its ``labels``) fits ``host``, which runs ``driver`` on NPUs of ``line``."""
    labels = {str(k): str(v) for k, v in (labels or {}).items()}
    if STACK not in labels and CANN not in labels:
        return Verdict(
            checked=f"{image} carries no {STACK} labels (not built by `provision image build`): its CANN and "
            f"SoC cannot be compared with {host}'s driver and NPUs"
        )
    problems: list[str] = []
    soc = labels.get(SOC)
    if soc and line and soc != line:
        problems.append(
            f"{image} is built for the {soc} NPU line ({SOC}={soc}); {host} shows {line} NPUs on its PCI "
            f"bus: serve the image built for {line} (leave vllm_serve_image_soc unset, which follows the "
            f"node's line, or set it to {line}; `provision image build --soc {line}`)"
        )
    found = _hdk_lines(labels)
    cann = labels.get(CANN, "?")
    if driver and found is not None:
        how, lines = found
        if not lock.hdk_matches(driver, lines):
            problems.append(
                f"{image} carries CANN {cann} ({how}), which works with Ascend HDK {', '.join(lines)}; "
                f"{host} runs NPU driver {driver}: install a driver of those lines (ascend_driver_version) "
                "or serve an image of a stack whose CANN works with this driver (provision version --stacks)"
            )
    checked = f"{image}: CANN {cann}, SoC {soc or '?'} against {host}'s driver {driver or '?'}"
    checked += f" and {line or '?'} NPUs"
    if found is None:
        checked += f" (the lock knows no HDK range for CANN {cann}: the driver is not compared)"
    return Verdict(problems, checked)
