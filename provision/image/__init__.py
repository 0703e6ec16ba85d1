"""The vllm-ascend serving image: build, push, list, save and load it through the Docker Engine API.

:mod:`~provision.image.spec` derives tags and build arguments from the version lock (pure);
:mod:`~provision.image.engine` connects to dockerd or Podman's compatible service;
:mod:`~provision.image.build` builds with streamed progress and a run record;
:mod:`~provision.image.registry` pushes and pulls with credentials that are never shown;
:mod:`~provision.image.transfer` saves and loads tars for air-gapped sites;
:mod:`~provision.image.catalog` lists what the lock describes and what the engine has.
"""
