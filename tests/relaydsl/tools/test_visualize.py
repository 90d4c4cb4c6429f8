"""relay.visualize: the dataflow graph of a function as DOT text, rendered by Graphviz where
it is installed (issue 13, item 6)."""
from __future__ import annotations

import re
import shutil

import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.tools import visualize as viz


@relay
def mlp(x: Tensor[Float, (4, 8)], w1: Tensor[Float, (16, 8)], b1: Tensor[Float, (16,)],
        w2: Tensor[Float, (3, 16)]) -> Tensor[Float, (4, 3)]:
    hidden = relay.relu(relay.dense(x, w1) + b1)
    return relay.softmax(relay.dense(hidden, w2))


def nodes(source: str) -> dict[str, str]:
    """Node name -> label."""
    return dict(re.findall(r'^\s*(n\d+) \[label="([^"]*)"', source, re.M))


def edges(source: str) -> list[tuple[str, str, str]]:
    """(source label, target label, edge label) for every edge."""
    labels = nodes(source)
    return [(labels[a], labels[b], text) for a, b, text in
            re.findall(r'^\s*(n\d+) -> (n\d+)(?: \[label="([^"]*)"\])?;', source, re.M)]


def test_the_graph_is_the_dataflow_of_op_calls_with_shapes_on_the_edges():
    graph = relay.visualize(mlp)
    source = graph.source
    assert source.startswith(f'digraph "{mlp.global_var.name_hint}" {{')
    assert source.rstrip().endswith("}")
    assert sorted(nodes(source).values()) == sorted(
        ["%x", "%w1", "%b1", "%w2", "dense", "add", "relu", "dense", "softmax", "return"])
    flow = edges(source)
    assert ("%x", "dense", "4x8 float32") in flow
    assert ("%w1", "dense", "16x8 float32") in flow
    assert ("dense", "add", "4x16 float32") in flow and ("%b1", "add", "16 float32") in flow
    assert ("relu", "dense", "4x16 float32") in flow
    assert ("softmax", "return", "4x3 float32") in flow
    assert "subgraph cluster" not in source  # no fusion before the backend's pipeline
    assert str(graph) == source and mlp.visualize().source == source


def test_fused_groups_are_clusters():
    source = relay.visualize(mlp, fused=True).source
    clusters = re.findall(r'subgraph cluster_\d+ \{\s*label="fused: ([^"]*)"', source)
    # a dense fuses the elementwise ops after it; softmax (a reduction) is its own kernel
    assert clusters == ["dense + add + relu", "dense", "softmax"]
    assert len(clusters) == mlp.astext(fused=True).count("Primitive=1")
    assert ("%x", "dense", "4x8 float32") in edges(source)


@relay
def branchy(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
    if relay.sum(x) > 0.0:
        y = relay.exp(x)
    else:
        y = relay.negative(x)
    return y


def test_an_if_is_a_node_fed_by_its_condition_and_branches():
    flow = edges(relay.visualize(branchy).source)
    assert ("greater", "if", "cond scalar bool") in flow
    assert ("exp", "if", "then 3 float32") in flow
    assert ("negative", "if", "else 3 float32") in flow


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_rendered_to_svg_and_png_by_graphviz(tmp_path):
    graph = relay.visualize(mlp, fused=True)
    assert graph._repr_svg_().lstrip().startswith(("<?xml", "<svg"))
    assert graph.render(tmp_path / "mlp.png").read_bytes().startswith(b"\x89PNG")
    assert "<svg" in graph._repr_html_()


def test_without_graphviz_the_error_says_what_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(viz.shutil, "which", lambda name: None)
    graph = relay.visualize(mlp)
    with pytest.raises(RuntimeError, match=r"Graphviz's `dot` program, which is not on PATH: "
                                           r"install Graphviz \(apt-get install graphviz"):
        graph.render(tmp_path / "mlp.svg")
    assert graph._repr_svg_() is None  # Jupyter then shows the HTML: the DOT text
    assert "install Graphviz" in graph._repr_html_() and "digraph" in graph._repr_html_()
    # the DOT text itself needs nothing
    assert graph.render(tmp_path / "mlp.dot").read_text() == graph.source


def test_a_plain_python_function_is_refused_naming_the_parameter():
    with pytest.raises(TypeError, match=r"relay.visualize\(fn\) takes a function decorated "
                                        r"with @relay, got function"):
        relay.visualize(lambda x: x)
    with pytest.raises(TypeError, match=r"relay.to_python\(fn\) takes a function decorated "
                                        r"with @relay, got int"):
        relay.to_python(3)
