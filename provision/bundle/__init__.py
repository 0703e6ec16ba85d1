"""The offline bundle: one checksummed archive holding the mirror an air-gapped rack installs from.

:mod:`~provision.bundle.needs` decides what an inventory's nodes need, :mod:`~provision.bundle.build` gathers
it into an archive with its :mod:`~provision.bundle.manifest`, :mod:`~provision.bundle.verify` checks an
archive or folder against it (and unpacks), :mod:`~provision.bundle.serve` serves a verified one over HTTP.
"""
