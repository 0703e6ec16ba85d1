"""``provision bundle serve``: a verified bundle folder over HTTP, as the mirror the roles read.

Static files only (the standard library's ``ThreadingHTTPServer`` with ``SimpleHTTPRequestHandler``): the
nodes fetch with ``get_url`` / dnf / apt, every file checked against the sha256 the bundle lists. A folder
is answered 404, never listed: the nodes name every file they fetch (from the repositories' metadata and
the roles' file names), and a listing would only tell a stranger what the site runs. The variables to put
in the inventory's ``group_vars`` come from what the bundle holds.
"""

from __future__ import annotations

import functools
import io
import os
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO

from provision.bundle import manifest as mf


def group_vars(base_url: str, manifest: mf.Manifest) -> str:
    """The ``group_vars/npu_nodes.yml`` lines that point the roles at a bundle served at ``base_url``."""
    url = base_url.rstrip("/")
    paths = [entry.path for entry in manifest.files]
    lines = [
        "# provision bundle serve: every package, installer and image comes from this bundle.",
        f"provision_mirror_url: {url}/ascend",
    ]
    if any(path.startswith("openeuler/") for path in paths):
        lines.append(f"openeuler_repos_mirror_url: {url}/openeuler")
    if any(path.startswith("ubuntu/") for path in paths):
        lines.append(f"openeuler_repos_apt_mirror_url: {url}/ubuntu")
        # the apt key of the suites: the mirror's, or the bundle's own when it re-signed them (the only one)
        keys = [e.path for e in manifest.files if e.kind == "os-key" and e.path.startswith("ubuntu/")]
        if keys:
            lines.append(f"openeuler_repos_apt_signed_by: {url}/{keys[0]}")
    lines.append("openeuler_repos_disable_other_sources: true")
    for image in (entry for entry in manifest.files if entry.kind == "image"):
        # The variables the inventory names the image by (vllm_serve_image, container_runtime_verify_image):
        # each gets its download URL; a bundle from before they were recorded: one comment line per image.
        for variable in image.variables:
            lines.append(f"{variable}_url: {url}/{image.path}")
        if not image.variables:
            lines.append(f"# image {image.version}: {url}/{image.path}")
    for entry in manifest.files:
        if entry.kind == "weights":
            lines.append(
                f"# weights: model_url: {url}/{entry.path} in the profile that serves {entry.version}"
            )
    return "\n".join(lines) + "\n"


class FilesOnly(SimpleHTTPRequestHandler):
    """``SimpleHTTPRequestHandler`` without folder listings (nor its redirect of ``/folder`` to ``/folder/``,
    nor an ``index.html`` served for a folder)."""

    def send_head(self) -> io.BytesIO | BinaryIO | None:
        if os.path.isdir(self.translate_path(self.path)):
            self.send_error(HTTPStatus.NOT_FOUND, "No folder listings")
            return None
        return super().send_head()


def open_server(root: Path, bind: str, port: int) -> ThreadingHTTPServer:
    """A server of the files below ``root`` on ``bind:port`` (port 0: any free one), not yet serving."""
    handler = functools.partial(FilesOnly, directory=str(root))
    server = ThreadingHTTPServer((bind, port), handler)
    server.daemon_threads = True
    return server
