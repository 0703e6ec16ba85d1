"""Parsers of the Ascend version files and install logs.

* ``/usr/local/Ascend/driver/version.info`` and ``/usr/local/Ascend/firmware/version.info``:
  ``key=value`` lines (``Version=25.0.rc1.1``); ``package_version`` is absent in older drivers.
* CANN ``ascend_toolkit_install.info`` (``.../ascend-toolkit/<v>/<arch>-linux/`` up to CANN 8.3,
  ``/usr/local/Ascend/cann/<arch>-linux/`` from 8.5): ``key=value`` (``version=8.5.0``).
* ``/etc/ascend_install.info``: ``key=value`` (``Driver_Install_Path_Param=/usr/local/Ascend``).
* The driver/firmware ``.run`` installer output (``[Driver] [date time] [INFO]message`` lines).

Keys are looked up case-insensitively (the driver writes ``Innerversion``, CANN ``innerversion``).
Blank lines and ``#`` comment lines are skipped in ``key=value`` files; any other line without
``=`` raises :class:`ParseError`, as does a file without its identifying key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from provision.ascend.npu_smi import ParseError

__all__ = [
    "AscendInstallInfo",
    "CannInstallInfo",
    "DriverVersionInfo",
    "FirmwareVersionInfo",
    "InstallLog",
    "InstallLogEntry",
    "parse_ascend_install_info",
    "parse_bracket_list",
    "parse_cann_install_info",
    "parse_driver_version_info",
    "parse_firmware_version_info",
    "parse_install_log",
    "parse_key_equals",
]


def parse_key_equals(text: str, what: str = "key=value file") -> dict[str, str]:
    """Parse ``key=value`` lines into a dict (keys and values stripped; a repeated key: last wins)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        key, found, value = s.partition("=")
        if not found or not key.strip():
            raise ParseError(f"expected 'key=value' lines in {what}, got {s!r}")
        out[key.strip()] = value.strip()
    if not out:
        raise ParseError(f"expected 'key=value' lines in {what}, got empty text")
    return out


def _get(data: dict[str, str], key: str) -> str | None:
    want = key.lower()
    for k, v in data.items():
        if k.lower() == want:
            return v or None
    return None


def _require(data: dict[str, str], key: str, what: str) -> str:
    value = _get(data, key)
    if value is None:
        raise ParseError(f"expected '{key}=...' in {what}")
    return value


def parse_bracket_list(value: str | None) -> tuple[tuple[str, ...], ...]:
    """``"[7.0.0,7.7.99]"`` → ``(("7.0.0", "7.7.99"),)``; ``"[A],[B]"`` → ``(("A",), ("B",))``."""
    if not value:
        return ()
    return tuple(
        tuple(part.strip() for part in group.split(",") if part.strip())
        for group in re.findall(r"\[([^\]]*)\]", value)
    )


@dataclass(frozen=True, slots=True)
class DriverVersionInfo:
    """``/usr/local/Ascend/driver/version.info``.

    ``compatible_versions`` are the inner-version lines it accepts (``V100R001C21``...);
    ``compatible_firmware`` the firmware ranges (``(("7.0.0", "7.7.99"),)``).
    """

    version: str
    package_version: str | None
    inner_version: str | None
    ascendhal_version: str | None
    compatible_versions: tuple[str, ...]
    compatible_firmware: tuple[tuple[str, ...], ...]
    raw: dict[str, str] = field(hash=False)


def parse_driver_version_info(text: str) -> DriverVersionInfo:
    """Parse the driver ``version.info`` (``Version=25.0.rc1.1``)."""
    what = "driver version.info"
    data = parse_key_equals(text, what)
    return DriverVersionInfo(
        version=_require(data, "Version", what),
        package_version=_get(data, "package_version"),
        inner_version=_get(data, "Innerversion"),
        ascendhal_version=_get(data, "ascendhal_version"),
        compatible_versions=tuple(g[0] for g in parse_bracket_list(_get(data, "compatible_version")) if g),
        compatible_firmware=parse_bracket_list(_get(data, "compatible_version_fw")),
        raw=data,
    )


@dataclass(frozen=True, slots=True)
class FirmwareVersionInfo:
    """``/usr/local/Ascend/firmware/version.info``; ``compatible_drivers`` as printed ranges."""

    version: str
    firmware_version: str | None
    package_version: str | None
    compatible_drivers: tuple[tuple[str, ...], ...]
    raw: dict[str, str] = field(hash=False)


def parse_firmware_version_info(text: str) -> FirmwareVersionInfo:
    """Parse the firmware ``version.info`` (``Version=7.7.0.1.231``)."""
    what = "firmware version.info"
    data = parse_key_equals(text, what)
    return FirmwareVersionInfo(
        version=_require(data, "Version", what),
        firmware_version=_get(data, "firmware_version"),
        package_version=_get(data, "package_version"),
        compatible_drivers=parse_bracket_list(_get(data, "compatible_version_drv")),
        raw=data,
    )


@dataclass(frozen=True, slots=True)
class CannInstallInfo:
    """CANN ``ascend_toolkit_install.info``."""

    package_name: str | None
    version: str
    inner_version: str | None
    arch: str | None
    os: str | None
    path: str | None
    compatible_versions: tuple[str, ...]
    raw: dict[str, str] = field(hash=False)


def parse_cann_install_info(text: str) -> CannInstallInfo:
    """Parse ``ascend_toolkit_install.info`` (``version=8.5.0``)."""
    what = "ascend_toolkit_install.info"
    data = parse_key_equals(text, what)
    return CannInstallInfo(
        package_name=_get(data, "package_name"),
        version=_require(data, "version", what),
        inner_version=_get(data, "innerversion"),
        arch=_get(data, "arch"),
        os=_get(data, "os"),
        path=_get(data, "path"),
        compatible_versions=tuple(g[0] for g in parse_bracket_list(_get(data, "compatible_version")) if g),
        raw=data,
    )


@dataclass(frozen=True, slots=True)
class AscendInstallInfo:
    """``/etc/ascend_install.info`` (written by the driver/firmware installers)."""

    driver_install_path: str | None
    firmware_install_path: str | None
    user_name: str | None
    user_group: str | None
    driver_install_status: str | None
    raw: dict[str, str] = field(hash=False)


def parse_ascend_install_info(text: str) -> AscendInstallInfo:
    """Parse ``/etc/ascend_install.info`` (e.g. ``Driver_Install_Path_Param=/usr/local/Ascend``)."""
    what = "/etc/ascend_install.info"
    data = parse_key_equals(text, what)
    if not any(k.lower().startswith(("driver_", "firmware_", "username", "usergroup")) for k in data):
        raise ParseError(f"expected Driver_*/Firmware_*/UserName keys in {what}")
    return AscendInstallInfo(
        driver_install_path=_get(data, "Driver_Install_Path_Param"),
        firmware_install_path=_get(data, "Firmware_Install_Path_Param"),
        user_name=_get(data, "UserName"),
        user_group=_get(data, "UserGroup"),
        driver_install_status=_get(data, "Driver_Install_Status"),
        raw=data,
    )


@dataclass(frozen=True, slots=True)
class InstallLogEntry:
    """``[Driver] [2025-07-17 10:35:21] [INFO]Start time: ...``."""

    component: str
    timestamp: str
    level: str
    message: str


@dataclass(frozen=True, slots=True)
class InstallLog:
    """The bracketed lines of a driver/firmware ``.run`` installer output (other lines are dropped)."""

    entries: tuple[InstallLogEntry, ...]

    @property
    def component(self) -> str:
        """``Driver`` or ``Firmware`` (of the first entry)."""
        return self.entries[0].component

    @property
    def succeeded(self) -> bool:
        """An INFO line says ``... package installed|upgraded|uninstalled successfully`` and none is ERROR."""
        return not self.errors and any(
            e.level == "INFO" and re.search(r"package \w+ successfully", e.message, re.IGNORECASE)
            for e in self.entries
        )

    @property
    def errors(self) -> tuple[InstallLogEntry, ...]:
        return tuple(e for e in self.entries if e.level == "ERROR")

    @property
    def mentions_reboot(self) -> bool:
        """The installer asked for a reboot (firmware always needs one; so does a driver upgrade)."""
        return any("reboot" in e.message.lower() for e in self.entries)

    @property
    def last_percentage(self) -> int | None:
        pct: int | None = None
        for e in self.entries:
            m = re.search(r"upgradePercentage:\s*(\d+)%", e.message)
            if m:
                pct = int(m.group(1))
        return pct

    @property
    def chips_upgraded(self) -> int | None:
        """``The firmware of [8] chips are successfully upgraded.`` → 8."""
        for e in self.entries:
            m = re.search(r"firmware of \[(\d+)\] chips? (?:are|is) successfully upgraded", e.message)
            if m:
                return int(m.group(1))
        return None

    @property
    def install_type(self) -> str | None:
        """``driver install type: DKMS`` → ``"DKMS"``."""
        for e in self.entries:
            m = re.search(r"install type:\s*(\S+)", e.message)
            if m:
                return m.group(1)
        return None


_LOG_RE = re.compile(
    r"^\s*\[(?P<comp>[^\]]+)\]\s*\[(?P<ts>[^\]]+)\]\s*\[(?P<level>[A-Za-z]+)\]\s*(?P<msg>.*?)\s*$"
)


def parse_install_log(text: str) -> InstallLog:
    """Parse driver/firmware ``.run`` installer output; lines not like ``[C] [T] [LEVEL]msg`` are ignored."""
    entries = tuple(
        InstallLogEntry(m.group("comp"), m.group("ts"), m.group("level").upper(), m.group("msg"))
        for m in map(_LOG_RE.match, text.splitlines())
        if m
    )
    if not entries:
        raise ParseError("expected installer output lines like '[Driver] [2025-07-17 10:35:21] [INFO]...'")
    return InstallLog(entries)
