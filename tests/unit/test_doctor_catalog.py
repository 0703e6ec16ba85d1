"""The known-failure catalogue (provision/data/failures.yml): typed, every regex compiles, every entry has a
public source; a broken catalogue is refused naming the entry and the field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from provision.doctor.catalog import OUTPUTS, catalog_path, load_catalog, shipped
from provision.doctor.conditions import CONDITIONS
from provision.errors import InputError

pytestmark = pytest.mark.unit

RAW = yaml.safe_load(catalog_path().read_text(encoding="utf-8"))


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
        assert re.match(r"^https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+$", source["url"]), source
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
