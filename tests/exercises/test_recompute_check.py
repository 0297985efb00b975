"""The recomputation exercise (14.1), visible and hidden checks: both fail a forward that keeps
every activation and a rerun that draws other dropout masks, naming which."""

import types

import minidl as md
from minidl import random
from minidl.exercises import get, grader, hidden_catalogue
from minidl.exercises.checks import recompute as check
from minidl.reference import recompute


def verdict():
    (result,) = grader.grade([get("14.1")])
    return result


def hidden_verdict():
    (result,) = grader.grade([e for e in hidden_catalogue() if e.id == "14.1"])
    return result


def test_the_reference_passes():
    assert verdict().ok
    assert hidden_verdict().ok


def test_a_forward_that_keeps_every_activation_fails_on_its_bytes(monkeypatch):
    """Backpropagating through the recorded graph gives the right gradients; the bytes held
    between the passes give it away."""

    def keeps_the_graph(layers, bounds, x):
        x = md.Tensor(x, requires_grad=True)
        out = x
        for layer in layers:
            out = layer(out)
        return out.data, [(x, out)]

    def through_the_graph(layers, bounds, saved, grad):
        ((x, out),) = saved
        out.backward(grad)
        return x.grad

    monkeypatch.setattr(check, "checkpointed_forward", keeps_the_graph)
    monkeypatch.setattr(check, "checkpointed_backward", through_the_graph)
    result = verdict()
    assert result.status == "failed"
    assert "keeps the inputs of the 3 segments" in result.message
    assert "not every activation" in result.message
    hidden = hidden_verdict()
    assert hidden.status == "failed"
    assert "keeps the inputs of the 2 segments" in hidden.message


def test_a_rerun_with_fresh_random_draws_fails_on_the_gradients(monkeypatch):
    fresh = types.SimpleNamespace(snapshot=random.snapshot, restore=lambda saved: None)
    monkeypatch.setattr(recompute, "random", fresh)
    result = verdict()
    assert result.status == "failed"
    assert "draws the first run's dropout masks" in result.message
    hidden = hidden_verdict()
    assert hidden.status == "failed" and "draws the first run's dropout masks" in hidden.message
