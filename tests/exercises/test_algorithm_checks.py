"""Checks test the algorithm, not only its values: wrong solutions that give the right numbers
on the visible cases are rejected with a message that names what is wrong."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from minidl.exercises import get, grader
from minidl.exercises.checks.collectives import hierarchical_pattern, layouts, tree_pattern
from minidl.reference.conv import winograd
from minidl.reference.data import colour
from minidl.reference.dist import compression
from minidl.reference.functional import linear, loss
from minidl_app.launch import mpi_unavailable_reason
from minidl_course.student import write_student_tree

from .test_submission import set_region

RING = "minidl/reference/dist/allreduce.py"


def verdict(exercise_id):
    (result,) = grader.grade([get(exercise_id)])
    return result


def direct_3x3(x, w, padding):
    """A direct 3x3 correlation: the right output without Winograd's transforms."""
    xpad = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    out_h, out_w = xpad.shape[2] - 2, xpad.shape[3] - 2
    out = np.zeros((x.shape[0], w.shape[0], out_h, out_w))
    for u in range(3):
        for v in range(3):
            out += np.einsum(
                "kc,nchw->nkhw", w[:, :, u, v], xpad[:, :, u : u + out_h, v : v + out_w]
            )
    return out


def test_a_direct_convolution_does_not_pass_as_winograd(monkeypatch):
    monkeypatch.setattr(winograd, "winograd_f2x2_3x3", direct_3x3)
    result = verdict("3.5")
    assert result.status == "failed"
    assert "transform_tiles result times 2" in result.message
    assert "not another convolution" in result.message


def test_masking_the_residual_is_not_error_feedback(monkeypatch):
    def masked(compress, gradient, residual):
        corrected = gradient + residual
        sent = compress(corrected)
        return sent, np.where(sent != 0, 0, corrected)

    monkeypatch.setattr(compression, "error_feedback", masked)
    result = verdict("9.1")
    assert result.status == "failed"
    assert "the new residual e' = (g + e) - C(g + e)" in result.message


def test_a_softmax_cache_changed_in_place_is_named(monkeypatch):
    def in_place(dout, cache):
        p, labels = cache
        p[np.arange(p.shape[0]), labels] -= 1
        p *= dout / p.shape[0]
        return p

    monkeypatch.setattr(loss, "softmax_cross_entropy_backward", in_place)
    result = verdict("2.2")
    assert result.status == "failed"
    assert "changed its input cache[0] in place" in result.message


def test_an_upstream_gradient_zeroed_in_place_is_named_not_compared(monkeypatch):
    original = linear.linear_backward

    def zeroes_dout(dout, cache):
        grads = original(dout, cache)
        dout[...] = 0
        return grads

    monkeypatch.setattr(linear, "linear_backward", zeroes_dout)
    result = verdict("2.1")
    assert result.status == "failed"
    assert "changed its input dout in place" in result.message
    assert "expected" not in result.message


def test_a_hang_in_process_names_its_line_and_gives_the_hint(fake_exercises):
    (result,) = grader.grade([fake_exercises["90.6"]])
    assert result.status == "timed_out"
    assert "stuck at tests/exercises/fake_student.py, line" in result.message
    assert "in spin" in result.message and result.hint == "the loop needs an exit"


def test_check_json_stays_one_document_when_the_solution_prints(fake_exercises, capfd):
    from minidl_app.cli import main

    assert main(["exercise", "check", "90.8", "--json"]) == 0
    out, _ = capfd.readouterr()
    (result,) = json.loads(out)["results"]
    assert result["status"] == "passed"
    assert "printed by the solution" in result["output"]
    assert "written to file descriptor 1" in result["output"]


UNSAFE_RING = """\
for step in range(size - 1):
    target = blocks[(rank - step - 1) % size]
    received = xp.empty_like(target)
    comm.send(blocks[(rank - step) % size], right)
    comm.recv(received, left)
    target += received
for step in range(size - 1):
    comm.sendrecv(blocks[(rank + 1 - step) % size], right, blocks[(rank - step) % size], left)
"""

WHOLE_ARRAYS = """\
total, passing = x.astype("float64"), x.copy()
for step in range(size - 1):
    received = xp.empty_like(passing)
    comm.sendrecv(passing, right, received, left)
    total += received
    passing = received
x[...] = total.astype(x.dtype)
"""


@pytest.fixture(scope="module")
def ring_tree(tmp_path_factory):
    tree = tmp_path_factory.mktemp("ring") / "tree"
    write_student_tree(tree, only=["6.1"])
    return tree


BUTTERFLY_AS_RABENSEIFNER = """\
if comm.rank < p2:
    received = xp.empty_like(x)
    distance = 1
    while distance < p2:
        comm.sendrecv(x, comm.rank ^ distance, received, comm.rank ^ distance)
        x += received
        distance *= 2
"""


def check_in(tree, *argv):
    done = subprocess.run(
        [sys.executable, "-m", "minidl", "exercise", "check", *argv, "--json"],
        cwd=tree,
        env=dict(os.environ, PYTHONPATH=str(tree)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    return {r["id"]: r for r in json.loads(done.stdout)["results"]}


@pytest.mark.mpi
@pytest.mark.timeout(150)
@pytest.mark.skipif(mpi_unavailable_reason() is not None, reason="needs mpi4py and mpiexec")
def test_a_ring_that_sends_before_it_receives_deadlocks_and_is_named(ring_tree):
    set_region(str(ring_tree), RING, "6.1", UNSAFE_RING)
    result = check_in(ring_tree, "6.1", "--timeout", "4")["6.1"]
    assert result["status"] == "timed_out"
    assert (
        "still in the check, stuck at minidl/reference/dist/allreduce.py, line" in result["message"]
    )
    assert "comm.send(" in result["message"] and "rank 0" in result["message"]
    assert "comm.sendrecv" in result["hint"]


@pytest.mark.mpi
@pytest.mark.timeout(150)
@pytest.mark.skipif(mpi_unavailable_reason() is not None, reason="needs mpi4py and mpiexec")
def test_whole_arrays_passed_around_are_held_to_the_algorithms_pattern(ring_tree):
    set_region(str(ring_tree), RING, "6.1", WHOLE_ARRAYS)
    set_region(str(ring_tree), RING, "6.4", BUTTERFLY_AS_RABENSEIFNER)
    results = check_in(ring_tree, "6.1", "6.4")
    ring, halving = results["6.1"], results["6.4"]
    assert ring["status"] == "failed"
    assert "the messages of 'ring' follow its pattern" in ring["message"]
    assert "not whole arrays" in ring["message"]
    assert halving["status"] == "failed"
    assert "halving then doubling among 4 ranks sends 2 log2 P = 4" in halving["message"]


def test_a_compressor_that_overwrites_its_input_is_named(monkeypatch):
    original = compression.qsgd_encode

    def overwrites(v, levels, rng):
        encoded = original(v, levels, rng)
        v /= 2
        return encoded

    monkeypatch.setattr(compression, "qsgd_encode", overwrites)
    result = verdict("9.2")
    assert result.status == "failed" and "QSGD s=1: the code changed its input v" in result.message


def test_os_exit_is_refused_to_the_checked_code_and_left_to_the_graders_threads(monkeypatch):
    import threading

    from minidl.exercises import Exercise

    exits = []
    monkeypatch.setattr(os, "_exit", os._exit)  # restored after the test, whatever happens
    monkeypatch.setattr(grader, "EXIT", exits.append)

    def exits_from_another_thread():
        watchdog = threading.Thread(target=os._exit, args=(3,))
        watchdog.start()
        watchdog.join()

    def exits_itself():
        os._exit(0)

    other = Exercise("90.9", "t", "tests/exercises/fake_student.py", "-", exits_from_another_thread)
    assert grader.run_in_process(other).status == "passed" and exits == [3]
    itself = Exercise("90.9", "t", "tests/exercises/fake_student.py", "-", exits_itself)
    result = grader.run_in_process(itself)
    assert result.status == "error" and "called os._exit(0)" in result.message
    assert os._exit is grader.EXIT  # put back after each check


def test_colour_pca_is_held_to_its_order_and_columns_not_to_the_eigenvectors_signs(monkeypatch):
    original = colour.colour_pca
    wrong = {
        "eigenvalues, largest first": lambda m, v, p: (m, v[::-1], p[:, ::-1]),  # eigh's order
        "eigenvectors (columns, each up to its sign)": lambda m, v, p: (m, v, p.T),
        None: lambda m, v, p: (m, v, -p),  # another sign is as right
    }
    for named, change in wrong.items():
        monkeypatch.setattr(colour, "colour_pca", lambda images, c=change: c(*original(images)))
        result = verdict("13.1")
        if named is None:
            assert result.status == "passed", result.message
        else:
            assert result.status == "failed" and named in result.message, result.message


def test_colour_noise_without_the_square_root_and_top_k_of_the_smallest_fail(monkeypatch):
    def unscaled(image, eigenvalues, eigenvectors, alpha):
        return image.astype(np.float64) + (eigenvectors @ (alpha * eigenvalues))[:, None, None]

    monkeypatch.setattr(colour, "pca_lighting", unscaled)
    result = verdict("13.1")
    assert result.status == "failed" and "colour noise on a (3, 4, 6) image" in result.message

    def top_k_of_the_smallest(s, y, k=5):
        return np.mean([label not in np.argsort(row)[:k] for row, label in zip(s, y)])

    monkeypatch.setattr(colour, "top_k_error", top_k_of_the_smallest)
    result = verdict("13.2")
    assert result.status == "failed" and "top-1 error of (40, 9) scores" in result.message, (
        result.message
    )


def test_a_flat_gather_is_not_a_binomial_tree_from_four_ranks_on():
    """On 3 ranks rank 0's children in a binomial tree are ranks 1 and 2, as in a flat gather;
    from 4 ranks on the flat root sends more than ceil(log2 P) arrays (the hidden check's 5)."""
    whole = 8 * 10
    for size, flat_fails in ((3, False), (4, True), (5, True)):
        flat = [(r, whole) for r in range(1, size)]
        assert bool(tree_pattern(flat, 0, size, 10, 8)) is flat_fails
    binomial_root = [(4, whole), (2, whole), (1, whole)]  # P = 5: children at 4, 2, 1
    assert tree_pattern(binomial_root, 0, 5, 10, 8) == []
    assert tree_pattern([(2, whole), (3, whole)], 2, 5, 10, 8) == []  # to its parent, a child


def test_the_hierarchical_pattern_names_who_talks_across_nodes():
    layout, whole = [[0, 1], [2, 3]], 8 * 10
    pattern = hierarchical_pattern(layout)
    assert pattern([(1, whole), (2, whole)], 0, 4, 10, 8) == []  # a member, the other leader
    assert pattern([(2, whole)], 3, 4, 10, 8) == []  # a member sends to its leader only
    assert "only the leaders [0, 2] talk" in pattern([(3, whole)], 0, 4, 10, 8)[0]
    assert "its node's leader, rank 2" in pattern([(0, whole)], 3, 4, 10, 8)[0]
    assert "must be exchanged among the leaders" in pattern([(1, whole)], 0, 4, 10, 8)[0]
    assert layouts(4) == [[[0, 1], [2, 3]], [[0, 2], [1, 3]], [[0, 1, 2, 3]]]
    assert layouts(2) == [[[0], [1]], [[0, 1]]]
