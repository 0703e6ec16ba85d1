"""Node-side files of the hardware simulator (installed into a node's rootfs, run by the node's python3).

Nothing here is imported by production code. ``ascendsim`` is copied to ``/usr/lib/provision-sim/ascendsim``
inside each node and into every simulated ``.run`` payload; it uses the standard library only.
"""
