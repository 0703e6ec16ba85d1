"""``provision bench`` takes ``vllm bench serve``'s command lines: its options with vLLM's meaning, its
multi-value options (``--goodput ttft:500 tpot:50``), its result file (``--save-result`` with
``--result-dir`` / ``--result-filename``, the keys vLLM writes), and every option checked before any request
(exit 2 naming the option). Against the stub OpenAI server of test_bench_cli."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from provision.cli._bench_vllm import normalise
from provision.errors import InputError
from tests.unit.test_bench_cli import Stub, run, serving_stub

pytestmark = pytest.mark.unit


@pytest.fixture
def stub() -> Iterator[Stub]:
    with serving_stub() as state:
        yield state


SMALL = ["--num-prompts", "4", "--random-input-len", "16", "--random-output-len", "3"]

# ------------------------------------------------------------------------------------------ argv


def test_multi_value_options_become_one_option_a_value() -> None:
    args = ["--goodput", "ttft:500", "tpot:50", "--header", "x-a=1", "x-b=2", "--num-prompts", "3"]
    assert normalise(args) == [
        "--goodput", "ttft:500", "--goodput", "tpot:50", "--header", "x-a=1", "--header", "x-b=2",
        "--num-prompts", "3",
    ]  # fmt: skip


def test_a_url_after_a_multi_value_option_stays_the_target() -> None:
    assert normalise(["--goodput", "ttft:500", "http://h:8000"]) == ["--goodput", "ttft:500", "http://h:8000"]
    assert normalise(["--metadata", "a=1", "--", "x=y"]) == ["--metadata", "a=1", "--", "x=y"]


def test_underscores_in_option_names_are_vllms_dashes() -> None:
    assert normalise(["--dataset_name", "random", "--random_input_len=8"]) == [
        "--dataset-name",
        "random",
        "--random-input-len=8",
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--profile"], "--profile (vllm bench serve): no equivalent"),
        (["--plot-timeline"], "--plot-timeline (vllm bench serve): provision's plots: --report DIR"),
        (["--ramp-up-strategy", "linear"], "one run per rate instead: --sweep-rate 1,2,4,inf"),
        (["--hf-split", "train"], "--hf-split (vllm bench serve): hf only, a dataset provision does not"),
        (["--lora_modules", "a"], "--lora-modules (vllm bench serve): one served name per run: --model"),
        (
            ["--save-result", "out.json"],
            "--save-result out.json: --save-result is vLLM's flag now (the file is named as vLLM names "
            "it); give --save-result --result-filename out.json",
        ),
        (["--save-result=out.json"], "--save-result out.json: --save-result is vLLM's flag now"),
    ],
)
def test_options_without_an_equivalent_are_refused_naming_what_to_use(args: list[str], message: str) -> None:
    with pytest.raises(InputError) as info:
        normalise(args)
    assert message in str(info.value) and str(info.value).startswith(args[0].split("=")[0].replace("_", "-"))


# ------------------------------------------------------------------------------------------ a run


def test_a_vllm_command_line_runs_with_vllms_meaning_and_its_result_file(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    args = ["--backend", "vllm", "--base-url", stub.url, "--endpoint", "/v1/completions"]
    args += ["--dataset-name", "random", *SMALL, "--max-concurrency", "2", "--seed", "42"]
    args += ["--goodput", "ttft:60000", "tpot:60000", "--percentile-metrics", "ttft,tpot"]
    args += ["--metric-percentiles", "50,90", "--temperature=0", "--top-k", "10", "--header", "x-bench=1"]
    args += ["--label", "nightly", "--metadata", "tp=1", "build=abc", "--save-result"]
    args += ["--result-dir", str(tmp_path / "out"), "--result-filename", "run.json"]
    code, out, err = run(args, monkeypatch, capsys)
    assert code == 0, err
    assert f"result: {tmp_path / 'out' / 'run.json'}" in out
    saved = json.loads((tmp_path / "out" / "run.json").read_text())
    # vLLM's keys for what provision computes, none of the unselected metrics or percentiles
    for key in (
        "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts",
        "request_rate", "burstiness", "max_concurrency", "duration", "completed", "failed",
        "total_input_tokens", "total_output_tokens", "request_throughput", "request_goodput",
        "output_throughput", "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests",
        "mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms", "p90_ttft_ms", "mean_tpot_ms",
        "p50_tpot_ms", "p90_tpot_ms", "latencies",
    ):  # fmt: skip
        assert key in saved, key
    assert not [k for k in saved if re.match(r"(p99|mean|median)_(itl|e2el)_ms|p99_", k)]
    assert "ttfts" not in saved and len(saved["latencies"]) == 4  # not --save-detailed: as vLLM
    assert (saved["backend"], saved["endpoint_type"], saved["label"]) == ("vllm", "vllm", "nightly")
    assert (saved["tp"], saved["build"]) == ("1", "abc")
    assert saved["request_goodput"] == pytest.approx(saved["request_throughput"])
    # vLLM's peaks count per one-second bucket: the requests active in the same second, all 4 here at most
    assert 2 <= saved["max_concurrent_requests"] <= 4
    assert 0 < saved["max_output_tokens_per_s"] <= saved["total_output_tokens"] == 12
    # the random dataset generates every token (vLLM sets ignore_eos for it), the sampling parameters
    # and the headers go with every request
    assert len(stub.bodies) == 4
    assert all(b["ignore_eos"] is True and b["temperature"] == 0 and b["top_k"] == 10 for b in stub.bodies)
    assert all(h.get("x-bench") == "1" for h in stub.headers)


def test_save_result_names_the_file_as_vllm_does(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    port = stub.url.rsplit(":", 1)[1]
    args = ["--host", "127.0.0.1", "--port", port, *SMALL, "--max-concurrency", "2"]
    code, out, err = run(
        [*args, "--save-result", "--save-detailed", "--result-dir", str(tmp_path)], monkeypatch, capsys
    )
    assert code == 0, err
    (file,) = tmp_path.iterdir()
    assert re.fullmatch(r"openai-infqps-concurrency2-stub-\d{8}-\d{6}\.json", file.name), file.name
    saved = json.loads(file.read_text())
    assert len(saved["ttfts"]) == 4 and saved["generated_texts"] == ["xxx"] * 4  # --save-detailed
    assert f"result: {file}" in out


def test_append_result_adds_one_json_object_a_line(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    file = tmp_path / "all.json"
    for _ in range(2):
        code, _, err = run(
            [stub.url, *SMALL, "--append-result", "--result-filename", str(file)], monkeypatch, capsys
        )
        assert code == 0, err
    lines = file.read_text().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["completed"] == 4 for line in lines)


def test_custom_dataset_sends_each_prompt_as_written(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "What is the capital of India?"}\n{"prompt": "And of Iran?"}\n')
    args = [stub.url, "--dataset-name", "custom", "--dataset-path", str(data), "--skip-chat-template"]
    args += [
        "--custom-output-len",
        "2",
        "--num-prompts",
        "5",
        "--no-oversample",
        "--disable-shuffle",
        "--max-concurrency",  # one request at a time: the stub sees them in the order they were sent
        "1",
        "--json",
    ]
    code, out, err = run(args, monkeypatch, capsys)
    assert code == 0, err
    assert [b["prompt"] for b in stub.bodies] == ["What is the capital of India?", "And of Iran?"]
    assert all(b["max_tokens"] == 2 and "ignore_eos" not in b for b in stub.bodies)
    assert json.loads(out)["completed"] == 2


def test_the_chat_backend_goes_to_its_endpoint(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["--base-url", stub.url, "--backend", "openai-chat", "--endpoint", "/v1/chat/completions"]
    args += ["--port", "9"]  # ignored beside --base-url, as vLLM ignores it
    code, out, err = run([*args, *SMALL, "--json"], monkeypatch, capsys)
    assert code == 0, err
    assert all(b["messages"][0]["role"] == "user" for b in stub.bodies)
    assert json.loads(out)["backend"] == "openai-chat"


# ------------------------------------------------------------------------------------------ checks


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--random-input-len", "-5"], "--random-input-len -5: must be at least 1"),
        (["--random-output-len", "-1"], "--random-output-len -1: must be at least 1"),
        (["--input-len", "-3"], "--input-len -3: must be at least 1"),
        (["--output-len", "0"], "--output-len 0: must be at least 1"),
        (["--random-prefix-len", "-1"], "--random-prefix-len -1: must be 0 or more"),
        (["--random-range-ratio", "1"], "--random-range-ratio 1: must be in [0, 1)"),
        (["--random-range-ratio", '{"input": 0.2, "output": 1.5}'], "--random-range-ratio 1.5: must be in"),
        (["--random-range-ratio", "wide"], '--random-range-ratio wide: not a number nor {"input"'),
        (
            ["--dataset-name", "fixed", "--fixed-output-len", "-2"],
            "--fixed-output-len -2: must be at least 1",
        ),
        (["--sweep-concurrency", "1,,4"], "--sweep-concurrency 1,,4: an empty item"),
        (["--sweep-rate", "1,"], "--sweep-rate 1,: an empty item"),
        (["--sweep-rate", ""], "--sweep-rate '': no value given"),
        (["--percentile-metrics", "ttft,,tpot"], "--percentile-metrics ttft,,tpot: an empty item"),
        (
            ["--percentile-metrics", "ttft,client_queue_time"],
            "--percentile-metrics ttft,client_queue_time: provision does not measure client_queue_time",
        ),
        (["--metric-percentiles", "50,101"], "--metric-percentiles 50,101: '101' is not a percentile"),
        (["--metric-percentiles", "50,"], "--metric-percentiles 50,: an empty item"),
        (["--goodput", "ttft:soon"], "--goodput ttft:soon: ttft='soon' is not a number of milliseconds"),
        (["--goodput", "queue:5"], "--goodput queue:5: 'queue:5' is not METRIC=MILLISECONDS"),
        (["--goodput", "ttft:5", "--slo", "ttft=5"], "--slo and --goodput: give one of them"),
        (["--backend", "openai-audio"], "--backend openai-audio: provision bench measures generation"),
        (
            ["--backend", "openai-chat", "--endpoint", "/v1/completions"],
            "--endpoint /v1/completions: --backend openai-chat sends to a path ending in chat/completions",
        ),
        (["--endpoint", "v1/completions"], "--endpoint v1/completions: a path on the server"),
        (["--backend", "vllm", "--endpoint-type", "chat"], "--backend vllm and --endpoint-type chat"),
        (["--dataset-name", "hf"], "--dataset-name hf: a vllm bench serve dataset provision does not build"),
        (["--tokenizer-mode", "mistral"], "--tokenizer-mode mistral: provision uses the model's own"),
        (["--header", "novalue"], "--header novalue: not KEY=VALUE"),
        (["--extra-body", "[1]"], "--extra-body [1]: not a JSON object"),
        (["--percentile-metrics", "tpot", "--report", "r"], "--report needs p99 TTFT"),
        (["--base-url", "http://h:1"], "and --base-url: give the server once"),
    ],
)
def test_every_option_is_checked_before_any_request(
    args: list[str],
    message: str,
    stub: Stub,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = run([stub.url, *SMALL, *args], monkeypatch, capsys)
    assert code == 2, out + err
    assert err.startswith("error: ") and message in err, err
    assert stub.hits == 0  # not even /v1/models: refused before any request


def test_a_custom_dataset_needs_the_prompts_as_written_and_a_jsonl_file(
    stub: Stub, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text('{"prompt": "hi"}\n{"text": "no prompt"}\n')
    args = [stub.url, "--dataset-name", "custom", "--dataset-path", str(data)]
    code, _, err = run(args, monkeypatch, capsys)
    assert code == 2 and "give --skip-chat-template (sent as written), or --backend openai-chat" in err
    code, _, err = run([*args, "--skip-chat-template"], monkeypatch, capsys)
    assert code == 2 and f'{data}:2: no "prompt" text in this entry' in err
    assert stub.hits == 0
