"""``provision bench``: serving performance measured as ``vllm bench serve`` measures it, plus energy.

The load generator (:mod:`provision.bench.client`) streams OpenAI-compatible completions or chat
completions with aiohttp on one asyncio loop; :mod:`provision.bench.metrics` turns each request's timings into
``vllm bench serve``'s metrics under its own result keys (definitions in docs/bench.md);
:mod:`provision.bench.power` integrates the NPU power sampled on the serving nodes into J/token;
:mod:`provision.bench.datasets` and :mod:`provision.bench.arrivals` make the workload;
:mod:`provision.bench.run` ties one run (or a sweep) together; :mod:`provision.bench.baseline` compares it
with a previous one (the regression gate) and :mod:`provision.bench.report` writes its report folder. The
library never prints.
"""
