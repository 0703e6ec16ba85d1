"""provision: turn Kunpeng + Ascend 910B servers into healthy vLLM-Ascend endpoints.

The package is both a CLI (``provision ...``) and a library: parsers of the vendor tools
(:mod:`provision.ascend`), inventory loading and validation (:mod:`provision.inventory`), and the one
seam into Ansible (:mod:`provision.runner`).
"""

from __future__ import annotations

import logging

__version__ = "0.1.0"

# A library never configures logging; the CLI does.
logging.getLogger(__name__).addHandler(logging.NullHandler())
