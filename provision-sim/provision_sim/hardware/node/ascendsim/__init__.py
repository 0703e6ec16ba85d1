"""The simulated Ascend 910B hardware and vendor tools (node side, standard library only).

Entry points (``python3 -m ascendsim <tool> ...`` with ``/usr/lib/provision-sim`` on ``sys.path``):
``npu-smi``, ``hccn_tool``, ``boot`` (the boot-time "driver load"), ``install`` (the body of a ``.run``),
``uninstall``. Every absolute path goes through :func:`ascendsim.common.host_path`, which prefixes
``$PROVISION_SIM_ROOT`` (set only by unit tests that run the tools in a temporary root).
"""

__version__ = "1"
