"""The converged record and the apply that uses it: skip the nodes still as their last apply left them.

:mod:`~provision.converge.record` is what a record holds and how a node is compared with it;
:mod:`~provision.converge.engine` is the apply of site.yml built on it (verify, converge where needed,
record). Both reach Ansible only through :mod:`provision.runner`.
"""
