"""The known-failure catalogue (provision/data/failures.yml): typed, every regex compiles, every entry has a
public source; a broken catalogue is refused naming the entry and the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from provision.doctor.catalog import OUTPUTS, catalog_path, load_catalog, shipped, with_table
from provision.doctor.conditions import CONDITIONS
from provision.errors import InputError

pytestmark = pytest.mark.unit

RAW = yaml.safe_load(catalog_path().read_text(encoding="utf-8"))
# A public issue or pull request, or a page of Huawei's Ascend documentation (its error-code reference and
# HCCL's fault guide), which the failures of HCCL and CANN are documented in.
PUBLIC_REPORT = (
    r"^https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+$"
    r"|^https://www\.hiascend\.com/(document/detail|doc_center/source)/[\w%./-]+\.html$"
)


def test_the_shipped_catalogue_loads_with_enough_real_entries() -> None:
    catalog = shipped()
    assert len(catalog.failures) >= 15
    assert len({f.id for f in catalog.failures}) == len(catalog.failures)


@pytest.mark.parametrize("entry", RAW["failures"], ids=lambda e: str(e.get("id")))
def test_every_entry_compiles_and_cites_a_public_source(entry: dict[str, object]) -> None:
    signature = entry["signature"]
    assert isinstance(signature, dict)
    for key in ("regex", "unless"):
        if key in signature:
            re.compile(str(signature[key]), re.IGNORECASE)
    if "regex" in signature:
        assert set(signature["in"]) <= set(OUTPUTS)
    else:
        assert signature["condition"] in CONDITIONS
    sources = entry["sources"]
    assert isinstance(sources, list) and sources
    for source in sources:
        assert re.match(PUBLIC_REPORT, source["url"]), source
        assert source["shows"].strip()
    for key in ("title", "cause", "fix"):
        assert str(entry[key]).strip()


def test_every_condition_is_used() -> None:
    used = {f.signature.condition for f in shipped().failures}
    assert set(CONDITIONS) <= used


def _broken(tmp_path: Path, change: dict[str, object]) -> Path:
    data = yaml.safe_load(catalog_path().read_text(encoding="utf-8"))
    data["failures"][1].update(change)
    path = tmp_path / "failures.yml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"signature": {"regex": "dcmi (", "in": ["npu_smi"]}},
            "failures.1 (npu-foreign-process).signature.regex",
        ),
        ({"signature": {"condition": "no_such_check"}}, "unknown condition 'no_such_check'"),
        ({"signature": {"regex": "x", "in": ["syslog"]}}, "signature.in.0"),
        ({"signature": {"regex": "x"}}, "a regex needs in:"),
        ({"sources": []}, "failures.1 (npu-foreign-process).sources"),
        ({"sources": [{"url": "somewhere", "shows": "x"}]}, "must be an https:// URL"),
        ({"id": "npu-busy-8005"}, "failure id 'npu-busy-8005' is given twice"),
        ({"remedy": "x"}, "failures.1 (npu-foreign-process).remedy: Extra inputs are not permitted"),
    ],
)
def test_a_broken_catalogue_is_refused_naming_entry_and_field(
    tmp_path: Path, change: dict[str, object], message: str
) -> None:
    path = _broken(tmp_path, change)
    with pytest.raises(InputError) as error:
        load_catalog(path)
    assert str(error.value).startswith(f"{path}: ")
    assert message in str(error.value)


def test_the_doc_lists_every_known_failure_as_generated_from_the_catalogue() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "doctor.md").read_text(encoding="utf-8")
    assert with_table(doc, shipped()) == doc, "run: python -m provision.doctor.catalog docs/doctor.md"
    for failure in shipped().failures:
        assert f"| `{failure.id}` |" in doc
        for source in failure.sources:
            assert f"({source.url})" in doc


def test_a_peer_regex_must_name_what_it_reads(tmp_path: Path) -> None:
    entry = dict(RAW["failures"][0])
    entry["signature"] = {"regex": "EI0013", "in": ["plog"], "peer": "device IP ([0-9.]+)"}
    path = tmp_path / "failures.yml"
    path.write_text(yaml.safe_dump({"failures": [entry]}), encoding="utf-8")
    with pytest.raises(
        InputError, match=r"failures\.0 \(npu-busy-8005\)\.signature\.peer: .*server, npu, ip, rank"
    ):
        load_catalog(path)
