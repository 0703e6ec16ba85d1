"""The serving image's stack labels against the node's driver and NPU line."""

from __future__ import annotations

import pytest

from provision.image import spec
from provision.serving.image_stack import verdict

pytestmark = pytest.mark.unit

IMAGE = "vllm-ascend:0.23.0-cann9.1.0-openeuler24.03-arm64"
LABELS = spec.Target("0.23.0").labels()  # what `provision image build` labels the default image with


def test_the_locked_image_fits_an_a2_node_with_the_locked_driver() -> None:
    found = verdict(IMAGE, LABELS, host="node1", driver="25.5.1", line="910b")
    assert found.problems == []
    assert found.checked == f"{IMAGE}: CANN 9.1.0, SoC 910b against node1's driver 25.5.1 and 910b NPUs"


def test_a_driver_outside_the_cann_s_hdk_lines_is_refused_naming_both_sides() -> None:
    (problem,) = verdict(IMAGE, LABELS, host="node2", driver="25.0.rc1.1", line="910b").problems
    assert problem.startswith(
        f"{IMAGE} carries CANN 9.1.0 (stack 0.23.0), which works with Ascend HDK 25.2.X"
    )
    assert "node2 runs NPU driver 25.0.rc1.1" in problem
    assert "ascend_driver_version" in problem and "provision version --stacks" in problem
    # the same driver fits the CANN of an older stack's image
    older = spec.Target("0.18.0").labels()
    assert verdict("old", older, host="node2", driver="25.0.rc1.1", line="910b").problems == []


def test_an_image_of_another_npu_line_is_refused() -> None:
    a3 = spec.Target("0.23.0", soc="a3").labels()
    (problem,) = verdict("img-a3", a3, host="node1", driver="25.5.1", line="910b").problems
    assert problem.startswith(
        "img-a3 is built for the a3 NPU line (provision.stack.soc=a3); node1 shows 910b"
    )
    assert "leave vllm_serve_image_soc unset, which follows the node's line, or set it to 910b" in problem


def test_a_300i_duo_image_on_a_300i_duo_node_fits_and_on_an_a2_node_is_refused() -> None:
    duo = spec.Target("0.23.0", soc="310p").labels()
    assert duo["provision.stack.soc"] == "310p"
    assert verdict("img-310p", duo, host="node3", driver="25.5.1", line="310p").problems == []
    (problem,) = verdict("img-310p", duo, host="node1", driver="25.5.1", line="910b").problems
    assert "built for the 310p NPU line" in problem and "node1 shows 910b" in problem


def test_an_unknown_stack_is_judged_by_its_cann_and_an_unknown_cann_says_the_driver_was_not_compared() -> (
    None
):
    labels = {**LABELS, "provision.stack": "site-build"}
    assert (
        "as in stack 0.23.0" in verdict("x", labels, host="n", driver="25.0.rc1.1", line="910b").problems[0]
    )
    labels = {**labels, "provision.stack.cann": "7.0.0"}
    found = verdict("x", labels, host="n", driver="25.0.rc1.1", line="910b")
    assert found.problems == []
    assert "the lock knows no HDK range for CANN 7.0.0: the driver is not compared" in found.checked


def test_an_image_without_our_labels_is_not_judged_and_says_so() -> None:
    found = verdict("quay.io/ascend/vllm-ascend:v0.23.0", {}, host="node1", driver="25.5.1", line="910b")
    assert found.problems == []
    assert "carries no provision.stack labels" in found.checked
    assert verdict("i", None, host="n", driver=None, line=None).problems == []
