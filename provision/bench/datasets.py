"""The workloads of ``provision bench``, after ``vllm bench serve``'s datasets (its datasets/datasets.py).

``random``
    Input and output lengths drawn uniformly from the integers in ``[L * (1 - r), L * (1 + r)]`` around
    ``--random-input-len`` / ``--random-output-len`` (``r`` = ``--random-range-ratio``, in [0, 1)); each
    prompt is a run of token ids of the served model's vocabulary turned into text by its own tokenizer.
    Without ``--tokenizer`` that tokenizer is the server's (vLLM's ``/tokenize`` and ``/detokenize``), so
    no local copy of the model is needed. Decoding and re-encoding can shift a prompt by a token or two, as
    in vLLM; the prompt's real length is the server's ``usage.prompt_tokens``.
``sharegpt``
    A ShareGPT-style file (``--dataset-path``: a JSON list, or JSON Lines, of ``{"conversations": [{"from":
    ..., "value": ...}, ...]}``): the first turn is the prompt, the second's token count the output length
    (unless ``--sharegpt-output-len``); entries with fewer than two turns are skipped, as vLLM does, and the
    list is repeated when it has fewer entries than ``--num-prompts``.
``custom``
    vLLM's CustomDataset: JSON Lines with a ``"prompt"`` per line, ``--custom-output-len`` tokens each
    (default 256), sent as written (``--skip-chat-template``: provision applies no chat template).
``fixed``
    One prompt (``--fixed-prompt``) sent ``--num-prompts`` times, ``--fixed-output-len`` tokens each.
"""

from __future__ import annotations

import json
import math
import random
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from provision.errors import InputError

DATASETS = ("random", "sharegpt", "custom", "fixed")
DEFAULT_FIXED_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


@dataclass(frozen=True)
class SampleRequest:
    prompt: str
    prompt_len: int
    """The prompt's tokens as the tokenizer counted them (the server's usage, when it sends it, wins)."""
    expected_output_len: int
    """``max_tokens`` of the request."""


class Tokenizer(Protocol):
    """What the datasets need of a tokenizer: the served model's, on the server or local."""

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


def length_range(mean: int, ratio: float) -> tuple[int, int]:
    """vLLM's integer sampling interval around ``mean`` (``get_sampling_params``)."""
    return math.floor(mean * (1 - ratio)), math.ceil(mean * (1 + ratio))


def range_ratios(text: str) -> tuple[float, float]:
    """``--random-range-ratio``: one number for input and output, or vLLM's JSON ``{"input": r, "output":
    r}``; each in [0, 1). InputError naming the option otherwise."""
    shown = f"--random-range-ratio {text}"
    try:
        ratios = [float(text)] * 2
    except ValueError:
        try:
            data = json.loads(text)
        except json.JSONDecodeError:
            raise InputError(f'{shown}: not a number nor {{"input": R, "output": R}}') from None
        if not isinstance(data, dict) or not set(data) <= {"input", "output"}:
            raise InputError(f'{shown}: a JSON object has the keys "input" and "output" only') from None
        try:
            ratios = [float(data.get(key, 0.0)) for key in ("input", "output")]
        except (TypeError, ValueError):
            raise InputError(f"{shown}: the ratios must be numbers") from None
    for ratio in ratios:
        if not 0.0 <= ratio < 1.0:
            raise InputError(f"--random-range-ratio {ratio:g}: must be in [0, 1)")
    return ratios[0], ratios[1]


def check_random(
    input_len: int, output_len: int, ratio: float, output_ratio: float | None = None, prefix_len: int = 0
) -> None:
    """InputError naming the option when the random lengths are not usable."""
    for value in (ratio, output_ratio if output_ratio is not None else ratio):
        if not 0.0 <= value < 1.0:
            raise InputError(f"--random-range-ratio {value:g}: must be in [0, 1)")
    if input_len < 1:
        raise InputError(f"--random-input-len {input_len}: must be at least 1")
    if output_len < 1:
        raise InputError(f"--random-output-len {output_len}: must be at least 1")
    if prefix_len < 0:
        raise InputError(f"--random-prefix-len {prefix_len}: must be 0 or more")
    if length_range(input_len, ratio)[0] < 1:
        raise InputError(
            f"--random-input-len {input_len} with --random-range-ratio {ratio:g} can draw an empty prompt"
        )


def token_pool(tokenizer: Tokenizer, seed: int = 0) -> list[int]:
    """Ordinary token ids of the model's vocabulary: those of a long text of random letter words (special
    tokens cannot appear in it, so none is drawn)."""
    rng = random.Random(seed)
    words = (
        "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9))) for _ in range(3000)
    )
    ids = sorted(set(tokenizer.encode(" ".join(words))))
    if len(ids) < 2:
        raise InputError("the tokenizer returned no tokens for a plain text: cannot build random prompts")
    return ids


def random_requests(
    tokenizer: Tokenizer,
    count: int,
    *,
    input_len: int,
    output_len: int,
    range_ratio: float = 0.0,
    seed: int = 0,
    output_range_ratio: float | None = None,
    prefix_len: int = 0,
) -> list[SampleRequest]:
    """``count`` random prompts (lengths as in vLLM's RandomDataset), decoded by ``tokenizer``; with
    ``prefix_len``, each starts with the same ``prefix_len`` random tokens (``--random-prefix-len``)."""
    out_ratio = range_ratio if output_range_ratio is None else output_range_ratio
    check_random(input_len, output_len, range_ratio, out_ratio, prefix_len)
    rng = random.Random(seed)
    pool = token_pool(tokenizer, seed)
    prefix = [rng.choice(pool) for _ in range(prefix_len)]
    in_low, in_high = length_range(input_len, range_ratio)
    out_low, out_high = length_range(output_len, out_ratio)
    out: list[SampleRequest] = []
    for _ in range(count):
        length = rng.randint(in_low, in_high)
        prompt, got = decode_to_length(
            tokenizer, prefix + [rng.choice(pool) for _ in range(length)], prefix_len + length, pool, rng
        )
        out.append(SampleRequest(prompt, got, rng.randint(max(out_low, 1), max(out_high, 1))))
    return out


def decode_to_length(
    tokenizer: Tokenizer,
    ids: list[int],
    length: int,
    pool: Sequence[int],
    rng: random.Random,
    tries: int = 10,
) -> tuple[str, int]:
    """Text that the tokenizer reads back as ``length`` tokens, as vLLM's ``gen_prompt_decode_to_target_len``
    makes it: decode, re-encode, cut or pad the ids, again (a few tries); (text, its token count)."""
    while True:
        prompt = tokenizer.decode(ids)
        ids = tokenizer.encode(prompt)
        tries -= 1
        if len(ids) == length or tries <= 0:
            return prompt, len(ids)
        ids = (
            ids[:length] if len(ids) > length else ids + [rng.choice(pool) for _ in range(length - len(ids))]
        )


def fixed_requests(
    count: int, prompt: str, output_len: int, tokenizer: Tokenizer | None
) -> list[SampleRequest]:
    if not prompt.strip():
        raise InputError("--fixed-prompt: the prompt is empty")
    if output_len < 1:
        raise InputError(f"--fixed-output-len {output_len}: must be at least 1")
    prompt_len = len(tokenizer.encode(prompt)) if tokenizer else 0
    return [SampleRequest(prompt, prompt_len, output_len)] * count


def _entries(path: Path) -> list[Any]:
    """A JSON list, or JSON Lines: InputError naming the file (and line) for anything else."""
    shown = f"--dataset-path {path}"
    if not path.exists():
        raise InputError(f"{shown}: no such file")
    if not path.is_file():
        raise InputError(f"{shown}: not a file")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{shown}: not UTF-8 text") from None
    except OSError as exc:
        raise InputError(f"{shown}: cannot read it: {exc.strerror or exc}") from None
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
        return list(data)
    entries: list[Any] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number}: not valid JSON Lines: {exc.msg}") from None
    return entries


def _turns(entry: Any) -> tuple[str, str] | None:
    if not isinstance(entry, dict):
        return None
    turns = entry.get("conversations")
    if not isinstance(turns, list) or len(turns) < 2:
        return None
    values = [turn.get("value") if isinstance(turn, dict) else None for turn in turns[:2]]
    if not all(isinstance(v, str) and v for v in values):
        return None
    return str(values[0]), str(values[1])


def sharegpt_pairs(path: Path) -> list[tuple[str, str]]:
    """The (prompt, answer) pairs of a ShareGPT-style file; InputError naming the file when it has none."""
    pairs = [pair for pair in map(_turns, _entries(path)) if pair]
    if not pairs:
        raise InputError(
            f"--dataset-path {path}: no entry with a 'conversations' list of two turns or more "
            '(ShareGPT format: {"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]})'
        )
    return pairs


def sharegpt_requests(
    path: Path | Sequence[tuple[str, str]],
    count: int,
    tokenizer: Tokenizer | None,
    *,
    output_len: int | None = None,
    seed: int = 0,
    shuffle: bool = True,
    oversample: bool = True,
) -> list[SampleRequest]:
    """``count`` requests from a ShareGPT-style file, or its :func:`sharegpt_pairs` (shuffled with
    ``seed`` unless ``shuffle`` is off, repeated when short unless ``oversample`` is off)."""
    pairs = sharegpt_pairs(path) if isinstance(path, Path) else list(path)
    if output_len is None and tokenizer is None:
        raise InputError(
            "--dataset-name sharegpt needs a tokenizer for the output lengths, or --sharegpt-output-len"
        )
    if shuffle:
        random.Random(seed).shuffle(pairs)
    out: list[SampleRequest] = []
    for prompt, completion in pairs[:count]:
        prompt_len = len(tokenizer.encode(prompt)) if tokenizer else 0
        wanted = (
            output_len if output_len is not None else len(tokenizer.encode(completion)) if tokenizer else 0
        )
        out.append(SampleRequest(prompt, prompt_len, max(wanted, 1)))
    while oversample and len(out) < count:  # vLLM oversamples a short dataset the same way
        out.append(out[len(out) % len(pairs)])
    return out


def custom_prompts(path: Path) -> list[str]:
    """The ``"prompt"`` of every line of a JSON Lines file (vLLM's CustomDataset); InputError naming the
    file and line for anything else."""
    if path.suffix != ".jsonl":
        raise InputError(f"--dataset-path {path}: --dataset-name custom reads a .jsonl file (as vLLM)")
    prompts: list[str] = []
    for number, entry in enumerate(_entries(path), 1):
        prompt = entry.get("prompt") if isinstance(entry, dict) else None
        if not isinstance(prompt, str) or not prompt:
            raise InputError(f'{path}:{number}: no "prompt" text in this entry')
        prompts.append(prompt)
    if not prompts:
        raise InputError(f"--dataset-path {path}: no entry")
    return prompts


def custom_requests(
    prompts: Sequence[str],
    count: int,
    tokenizer: Tokenizer | None,
    *,
    output_len: int,
    seed: int = 0,
    shuffle: bool = True,
    oversample: bool = True,
) -> list[SampleRequest]:
    """``count`` requests of ``prompts`` (:func:`custom_prompts`), ``output_len`` tokens each."""
    if output_len < 1:
        raise InputError(f"--custom-output-len {output_len}: must be at least 1")
    chosen = list(prompts)
    if shuffle:
        random.Random(seed).shuffle(chosen)
    out = [SampleRequest(p, len(tokenizer.encode(p)) if tokenizer else 0, output_len) for p in chosen[:count]]
    while oversample and len(out) < count:
        out.append(out[len(out) % len(chosen)])
    return out
