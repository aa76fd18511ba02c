"""Nodes inside an ONNX graph's subgraphs (``If`` branches, ``Loop``/``Scan`` bodies).

A model exported with control flow (silero-vad picks its 8 kHz or 16 kHz network in an ``If`` on
the sample rate) keeps every weighted layer inside a branch: a walk over the top-level nodes finds
nothing to quantize. ONNX Runtime's quantizer reaches subgraphs only when asked (``EnableSubgraph``)
and only for weights held as initializers, while exporters write a branch's weights as ``Constant``
nodes: ``lift_constants`` moves them into the branch's initializers first.
"""

from __future__ import annotations

from typing import Iterator


def _subgraphs(node) -> Iterator:
    from onnx import AttributeProto

    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            yield attr.g
        elif attr.type == AttributeProto.GRAPHS:
            yield from attr.graphs


def _constants(graph) -> set[str]:
    names = {init.name for init in graph.initializer}
    names |= {out for node in graph.node if node.op_type == "Constant" for out in node.output}
    return names


def walk(graph, outer: frozenset[str] = frozenset()) -> Iterator[tuple[object, frozenset[str]]]:
    """(node, the constant tensor names it can see) for every node, subgraphs included, in order;
    a subgraph sees its own constants and those of the graphs around it."""
    consts = frozenset(outer | _constants(graph))
    for node in graph.node:
        yield node, consts
        for sub in _subgraphs(node):
            yield from walk(sub, consts)


def has_subgraphs(model) -> bool:
    return any(True for node in model.graph.node for _ in _subgraphs(node))


def lift_constants(model) -> int:
    """Every ``Constant`` node (with a tensor ``value``) inside a subgraph becomes an initializer of
    that subgraph, under its output's name; -> how many moved. The top-level graph is left as it is."""
    moved = 0

    def lift(graph) -> None:
        nonlocal moved
        kept = []
        for node in graph.node:
            if node.op_type == "Constant" and [a.name for a in node.attribute] == ["value"]:
                tensor = graph.initializer.add()
                tensor.CopyFrom(node.attribute[0].t)
                tensor.name = node.output[0]
                moved += 1
                continue
            for sub in _subgraphs(node):
                lift(sub)
            kept.append(node)
        if len(kept) != len(graph.node):
            del graph.node[:]
            graph.node.extend(kept)

    for node in model.graph.node:
        for sub in _subgraphs(node):
            lift(sub)
    return moved
