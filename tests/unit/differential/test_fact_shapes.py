"""The fact tuples' layout is stated once for Python (``bernstein.schemas.fact_shapes``) and once in Rust
(``native/src/facts.rs``, exported as ``FACT_SHAPES`` / ``FACT_KINDS``): the two tables are equal, name for name,
tag for tag and field for field, so a field added on one side fails here until the other side has it."""

from __future__ import annotations

import importlib
from typing import Any

from bernstein.schemas import fact_shapes
from bernstein.verifier import facts


def _native() -> Any:
    # not built is a failure, not a skip: the extension's table is what this test holds Python to
    return importlib.import_module("bernstein_native")


def test_python_states_the_extensions_shapes_exactly() -> None:
    exported = {name: (tag, tuple(fields)) for name, (tag, fields) in _native().FACT_SHAPES.items()}
    assert list(fact_shapes.SHAPES) == list(exported)  # same shapes, same order
    for name, shape in fact_shapes.SHAPES.items():
        assert shape == exported[name], name


def test_python_states_the_extensions_kind_tags_exactly() -> None:
    assert fact_shapes.KINDS == _native().FACT_KINDS


def test_every_named_tuple_is_a_shape_and_its_kind_field_comes_first() -> None:
    classes = [
        value
        for value in vars(fact_shapes).values()
        if isinstance(value, type) and issubclass(value, tuple) and value.__module__ == fact_shapes.__name__
    ]
    assert len(classes) == len(fact_shapes.SHAPES)
    listed = {fields for _, fields in fact_shapes.SHAPES.values()}
    for cls in classes:
        assert cls._fields in listed, cls.__name__
    for tag, fields in fact_shapes.SHAPES.values():
        assert tag is None or fields[0] == "kind"


def test_the_verifier_and_the_fold_take_their_tags_from_the_table() -> None:
    for name, tag in fact_shapes.KINDS["verifier"].items():
        assert getattr(facts, name) == tag, name
    assert fact_shapes.AUDIT_RECORD_AT.mac == fact_shapes.AuditRecordFact._fields.index("mac")
    assert list(fact_shapes.AUDIT_RECORD_AT) == list(range(len(fact_shapes.AuditRecordFact._fields)))
