#!/usr/bin/python
"""Documentation of the ``systemd_unit`` action plugin (plugins/action/systemd_unit.py)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: systemd_unit
short_description: Manage a systemd unit that a role starts, and say why it failed
description:
  - Takes every option of M(ansible.builtin.systemd_service) and runs that module.
  - Before a start (O(ansible.builtin.systemd_service#module:state) V(started), V(restarted) or
    V(reloaded)) it resets the unit's failed state (C(systemctl reset-failed)), so that a unit which hit
    systemd's start limit on an earlier run (docker.service allows 3 starts in 60 s) starts again once the
    cause is fixed, as a rerun should.
  - When the module fails, its message is followed by the unit's state (C(systemctl show)) and the last
    O(log_lines) lines of the unit's journal, so the cause is in the task's failure, not on the node.
  - In check mode nothing is reset.
options:
  name:
    description: The unit (as for M(ansible.builtin.systemd_service)).
    type: str
  log_lines:
    description: Journal lines added to a failure's message (0 for none).
    type: int
    default: 20
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
author: provision (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Enable and start the engine
  provision.ascend.systemd_unit:
    name: docker
    enabled: true
    state: started
"""

RETURN = r"""
journal:
  description: The last lines of the unit's journal.
  returned: failure
  type: list
  elements: str
"""
