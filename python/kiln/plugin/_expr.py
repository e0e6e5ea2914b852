"""Symbolic shape expressions (``TensorDesc.shape_expr``), as in
``tensorrt.plugin``: ``+ - * //``, ``cdiv``, ``max``, ``min``, comparisons
and constants over the dims of a plugin's inputs.

An expression is a tree that the C side (python/src/plugin.c) turns into a
kiln expression of the builder's pool: an ``int``, ``("h", n)`` for a dim
that kiln gave this call, ``("st", SizeTensorDesc)`` for a size tensor's
symbol (resolved to ``("s", output index)`` when the register function
returns), ``(op, a, b)`` or ``("?", cond, a, b)``.  Constants fold in
Python, so ``int(e)`` and ``range(e)`` work on constant dims.  A tree made
in one call means nothing in another: keep descriptors only inside it.
"""
from __future__ import annotations

from typing import Iterable, Union

# kiln_expr_op (include/kiln/plugin.h)
_ADD, _SUB, _MUL, _FLOORDIV, _CEILDIV, _MOD, _MIN, _MAX, _EQ, _LT = range(2, 12)

_FOLD = {
    _ADD: lambda a, b: a + b,
    _SUB: lambda a, b: a - b,
    _MUL: lambda a, b: a * b,
    _FLOORDIV: lambda a, b: a // b,
    _CEILDIV: lambda a, b: -(-a // b),
    _MOD: lambda a, b: a % b,
    _MIN: min,
    _MAX: max,
    _EQ: lambda a, b: int(a == b),
    _LT: lambda a, b: int(a < b),
}


class ShapeExpr:
    """One symbolic dim (or an integer expression over dims)."""

    __slots__ = ("_tree", "_value", "_text")

    def __init__(self, tree, value: int | None = None, text: str | None = None):
        self._tree = tree
        self._value = value
        self._text = text

    @staticmethod
    def of(x: "ShapeExpr | int") -> "ShapeExpr":
        if isinstance(x, ShapeExpr):
            return x
        if isinstance(x, bool) or not isinstance(x, int):
            try:
                x = int(x.__index__())
            except (AttributeError, TypeError):
                raise TypeError(f"a shape expression must be an int or ShapeExpr, not {type(x).__name__}") from None
        return ShapeExpr(int(x), int(x))

    def _bin(self, op: int, other, swap: bool = False) -> "ShapeExpr":
        a, b = (ShapeExpr.of(other), self) if swap else (self, ShapeExpr.of(other))
        if op in (_FLOORDIV, _CEILDIV, _MOD) and b._value == 0:
            raise ZeroDivisionError("shape expression divided by 0")
        if a._value is not None and b._value is not None:
            return ShapeExpr.of(_FOLD[op](a._value, b._value))
        return ShapeExpr((op, a._tree, b._tree))

    __add__ = lambda s, o: s._bin(_ADD, o)
    __radd__ = lambda s, o: s._bin(_ADD, o, True)
    __sub__ = lambda s, o: s._bin(_SUB, o)
    __rsub__ = lambda s, o: s._bin(_SUB, o, True)
    __mul__ = lambda s, o: s._bin(_MUL, o)
    __rmul__ = lambda s, o: s._bin(_MUL, o, True)
    __floordiv__ = lambda s, o: s._bin(_FLOORDIV, o)
    __rfloordiv__ = lambda s, o: s._bin(_FLOORDIV, o, True)
    __mod__ = lambda s, o: s._bin(_MOD, o)
    __rmod__ = lambda s, o: s._bin(_MOD, o, True)

    def __neg__(self) -> "ShapeExpr":
        return ShapeExpr.of(0) - self

    # Comparisons fold to bool on constants; otherwise they are 0/1
    # expressions (use them in select()).
    def _cmp(self, op: int, other, swap=False):
        e = self._bin(op, other, swap)
        return bool(e._value) if e._value is not None else e

    def __eq__(self, o):  # type: ignore[override]
        if not isinstance(o, (ShapeExpr, int)):
            return NotImplemented
        return self._cmp(_EQ, o)

    def __ne__(self, o):  # type: ignore[override]
        if not isinstance(o, (ShapeExpr, int)):
            return NotImplemented
        r = self._cmp(_EQ, o)
        return (not r) if isinstance(r, bool) else ShapeExpr.of(1) - r

    __lt__ = lambda s, o: s._cmp(_LT, o)
    __gt__ = lambda s, o: s._cmp(_LT, o, True)
    __le__ = lambda s, o: s.__lt__(ShapeExpr.of(o) + 1)
    __ge__ = lambda s, o: s.__gt__(ShapeExpr.of(o) - 1)
    __hash__ = object.__hash__

    @property
    def is_constant(self) -> bool:
        return self._value is not None

    @property
    def constant_value(self) -> int:
        if self._value is None:
            raise ValueError(f"shape expression {self} is not a constant")
        return self._value

    @property
    def is_size_tensor(self) -> bool:
        return isinstance(self._tree, tuple) and self._tree[0] == "st"

    def __int__(self) -> int:
        return self.constant_value

    __index__ = __int__

    def __bool__(self) -> bool:
        if self._value is None:
            raise TypeError(f"shape expression {self} is symbolic: its truth is known only at run time")
        return bool(self._value)

    def __repr__(self) -> str:
        if self._value is not None:
            return str(self._value)
        return self._text or f"ShapeExpr({self._tree!r})"


ShapeLike = Union[ShapeExpr, int]


def cdiv(a: ShapeLike, b: ShapeLike) -> ShapeExpr:
    """ceil(a / b)."""
    return ShapeExpr.of(a)._bin(_CEILDIV, b)


def max(a: ShapeLike, b: ShapeLike) -> ShapeExpr:  # noqa: A001 - mirrors tensorrt.plugin
    return ShapeExpr.of(a)._bin(_MAX, b)


def min(a: ShapeLike, b: ShapeLike) -> ShapeExpr:  # noqa: A001
    return ShapeExpr.of(a)._bin(_MIN, b)


def select(cond: ShapeLike, a: ShapeLike, b: ShapeLike) -> ShapeExpr:
    """a if cond != 0 else b."""
    c, x, y = ShapeExpr.of(cond), ShapeExpr.of(a), ShapeExpr.of(b)
    if c._value is not None:
        return x if c._value else y
    return ShapeExpr(("?", c._tree, x._tree, y._tree))


class ShapeExprs(list):
    """The dims of a tensor descriptor: a mutable list of ShapeExpr
    (``desc.shape_expr[1] += 2`` works)."""

    def __init__(self, dims: Iterable[ShapeLike] = ()):
        super().__init__(ShapeExpr.of(d) for d in dims)

    def __setitem__(self, i, v):
        if isinstance(i, slice):
            super().__setitem__(i, [ShapeExpr.of(x) for x in v])
        else:
            super().__setitem__(i, ShapeExpr.of(v))

    def numel(self) -> ShapeExpr:
        n = ShapeExpr.of(1)
        for d in self:
            n = n * d
        return n


def resolve(tree, size_index):
    """tree with every ("st", desc) replaced by ("s", size_index(desc))."""
    if isinstance(tree, tuple):
        if tree[0] == "st":
            return ("s", size_index(tree[1]))
        return tuple(resolve(t, size_index) if isinstance(t, tuple) else t for t in tree)
    return tree
