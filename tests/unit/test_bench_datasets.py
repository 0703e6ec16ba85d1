"""The workloads of ``provision bench``: random lengths as vLLM draws them, ShareGPT files, a fixed prompt."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from provision.bench.datasets import (
    check_random,
    fixed_requests,
    length_range,
    random_requests,
    sharegpt_requests,
)
from provision.errors import InputError

pytestmark = pytest.mark.unit


class Chars:
    """A tokenizer with one token per character, except that "ab" reads back as one token: a decoded
    prompt does not always re-encode to the same length, as with real tokenizers."""

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        i = 0
        while i < len(text):
            if text.startswith("ab", i):
                out.append(1000)
                i += 2
            else:
                out.append(ord(text[i]))
                i += 1
        return out

    def decode(self, ids: Sequence[int]) -> str:
        return "".join("ab" if i == 1000 else chr(i) for i in ids)


def test_random_lengths_fall_in_vllms_range_and_prompts_read_back_at_that_length() -> None:
    tok = Chars()
    low, high = length_range(100, 0.25)
    assert (low, high) == (75, 125)  # floor(L * (1 - r)), ceil(L * (1 + r))
    requests = random_requests(tok, 200, input_len=100, output_len=40, range_ratio=0.25, seed=1)
    assert len(requests) == 200
    assert all(75 <= r.prompt_len <= 125 for r in requests)
    assert all(len(tok.encode(r.prompt)) == r.prompt_len for r in requests)
    assert all(30 <= r.expected_output_len <= 50 for r in requests)
    assert len({r.prompt_len for r in requests}) > 10  # drawn, not constant


def test_random_without_a_range_is_exact_and_seeded() -> None:
    one = random_requests(Chars(), 5, input_len=64, output_len=16, seed=4)
    assert {(r.prompt_len, r.expected_output_len) for r in one} == {(64, 16)}
    assert one == random_requests(Chars(), 5, input_len=64, output_len=16, seed=4)
    assert one != random_requests(Chars(), 5, input_len=64, output_len=16, seed=5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((128, 64, 1.0), "--random-range-ratio 1: must be in [0, 1)"),
        ((0, 64, 0.0), "--random-input-len 0: must be at least 1"),
        ((128, 0, 0.0), "--random-output-len 0: must be at least 1"),
        ((1, 8, 0.5), "--random-input-len 1 with --random-range-ratio 0.5 can draw an empty prompt"),
    ],
)
def test_bad_random_lengths_name_the_option(args: tuple[int, int, float], message: str) -> None:
    with pytest.raises(InputError) as info:
        check_random(*args)
    assert str(info.value) == message


def _conv(prompt: str, answer: str) -> dict[str, object]:
    return {"conversations": [{"from": "human", "value": prompt}, {"from": "gpt", "value": answer}]}


def test_sharegpt_json_and_jsonl_give_the_same_requests(tmp_path: Path) -> None:
    entries = [
        _conv("hello there", "hi"),
        {"conversations": [{"from": "human", "value": "alone"}]},
        _conv("q", "a long answer"),
    ]
    as_json = tmp_path / "data.json"
    as_json.write_text(json.dumps(entries))
    as_jsonl = tmp_path / "data.jsonl"
    as_jsonl.write_text("\n".join(json.dumps(e) for e in entries) + "\n")
    one = sharegpt_requests(as_json, 2, Chars(), seed=0)
    assert one == sharegpt_requests(as_jsonl, 2, Chars(), seed=0)
    by_prompt = {r.prompt: r for r in one}
    assert set(by_prompt) == {"hello there", "q"}  # the one-turn entry is skipped
    assert by_prompt["hello there"].expected_output_len == 2  # the answer's tokens
    assert by_prompt["q"].expected_output_len == len("a long answer")


def test_sharegpt_repeats_a_short_file_and_takes_a_given_output_len(tmp_path: Path) -> None:
    path = tmp_path / "d.json"
    path.write_text(json.dumps([_conv("a", "b"), _conv("c", "d")]))
    got = sharegpt_requests(path, 5, None, output_len=7)
    assert len(got) == 5 and {r.expected_output_len for r in got} == {7}


def test_sharegpt_file_problems_name_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(InputError, match=f"^--dataset-path {missing}: no such file$"):
        sharegpt_requests(missing, 1, Chars())
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(_conv("a", "b")) + "\n{not json\n")
    with pytest.raises(InputError, match=f"^{broken}:2: not valid JSON Lines"):
        sharegpt_requests(broken, 1, Chars())
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    with pytest.raises(InputError, match="no entry with a 'conversations' list of two turns"):
        sharegpt_requests(empty, 1, Chars())
    with pytest.raises(
        InputError, match="needs a tokenizer for the output lengths, or --sharegpt-output-len"
    ):
        sharegpt_requests(_write(tmp_path / "ok.json"), 1, None)


def _write(path: Path) -> Path:
    path.write_text(json.dumps([_conv("a", "b")]))
    return path


def test_fixed_prompt_is_sent_every_time() -> None:
    got = fixed_requests(3, "Hello", 9, Chars())
    assert [(r.prompt, r.prompt_len, r.expected_output_len) for r in got] == [("Hello", 5, 9)] * 3
    with pytest.raises(InputError, match="--fixed-prompt: the prompt is empty"):
        fixed_requests(3, " ", 9, None)
