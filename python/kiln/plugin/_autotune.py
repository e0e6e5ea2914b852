"""AutoTuneCombination, KernelLaunchParams and SymIntExprs of kiln.plugin."""
from __future__ import annotations

from typing import Iterable, List, Optional, Sequence, Union

from .._dtypes import DataType, combo_name
from ._expr import ShapeExpr, ShapeLike


class AutoTuneCombination:
    """Type/format combinations and tactics an op offers the builder, in
    TensorRT's grammar: one comma-separated slot per input then output,
    ``A|B`` tied alternatives (all tied slots take their k-th choice
    together), ``A*B`` independent ones; a single slot applies everywhere.

        AutoTuneCombination("FP32|FP16, FP32|FP16")
        AutoTuneCombination().pos([0, 1], "FP32|FP16").tactics([1, 2])
    """

    def __init__(self, io_types: Optional[str] = None, layouts: Optional[str] = None,
                 tactics: Optional[Sequence[int]] = None):
        self.io_types = io_types
        self.layouts = layouts
        self._pos: dict[int, tuple[str, Optional[str]]] = {}
        self._tactics: List[int] = []
        if tactics is not None:
            self.tactics(tactics)

    def pos(self, pos: Union[int, Iterable[int]], io_types: str, layouts: Optional[str] = None) -> "AutoTuneCombination":
        """Types (and layouts) of the positions ``pos`` (inputs first, then
        outputs); positions never named keep their tensor's type, LINEAR."""
        for p in [pos] if isinstance(pos, int) else pos:
            if p < 0:
                raise ValueError(f"AutoTuneCombination.pos: position {p} < 0")
            self._pos[int(p)] = (io_types, layouts)
        return self

    def tactics(self, tactics: Sequence[int]) -> "AutoTuneCombination":
        """The tactics valid for these combinations (ints > 0)."""
        t = [int(x) for x in tactics]
        if any(x <= 0 for x in t):
            raise ValueError(f"tactics must be > 0 (0 is the default tactic), got {t}")
        self._tactics = t
        return self

    def _strings(self, defaults: Sequence[DataType]) -> tuple[str, Optional[str], List[int]]:
        """(types, layouts, tactics) for kiln; defaults: each position's dtype."""
        if not self._pos:
            if self.io_types is None:
                raise ValueError("AutoTuneCombination has no io_types and no pos()")
            return self.io_types, self.layouts, self._tactics
        if self.io_types is not None:
            raise ValueError("AutoTuneCombination: give io_types or pos(), not both")
        n = len(defaults)
        bad = [p for p in self._pos if p >= n]
        if bad:
            raise ValueError(f"AutoTuneCombination.pos: position {bad[0]} but the op has {n} inputs + outputs")
        types = [self._pos[p][0] if p in self._pos else combo_name(defaults[p]) for p in range(n)]
        lay = [self._pos[p][1] or "LINEAR" if p in self._pos else "LINEAR" for p in range(n)]
        return ", ".join(types), ", ".join(lay), self._tactics

    def __repr__(self) -> str:
        return f"AutoTuneCombination({self.io_types!r}, {self.layouts!r}, tactics={self._tactics})"


class KernelLaunchParams:
    """Launch extents of an AOT kernel as expressions.  On the CPU the kernel
    runs over ``grid_x * grid_y * grid_z`` work items split across the
    thread pool (block and shared memory are for CUDA kernels).

    kiln's addition for CUDA kernels: ``scratch``, the bytes per block of
    each hidden trailing pointer parameter (Triton's compiled kernels take
    two, global and profile scratch: ``[compiled.metadata.global_scratch_size,
    compiled.metadata.profile_scratch_size]``; 0 passes NULL).  None (the
    default): the pointers the kernel's PTX declares beyond inputs, outputs
    and scalars, all NULL."""

    def __init__(self):
        self.grid_x: ShapeLike = 1
        self.grid_y: ShapeLike = 1
        self.grid_z: ShapeLike = 1
        self.block_x: ShapeLike = 1
        self.block_y: ShapeLike = 1
        self.block_z: ShapeLike = 1
        self.shared_mem: ShapeLike = 0
        self.scratch = None

    def extent(self) -> ShapeExpr:
        return ShapeExpr.of(self.grid_x) * self.grid_y * self.grid_z


class SymInt32(ShapeExpr):
    """An int32 scalar argument of an AOT kernel (a shape expression)."""

    _kind = 1

    def __init__(self, e: ShapeLike):
        e = ShapeExpr.of(e)
        super().__init__(e._tree, e._value, e._text)


class SymInt64(SymInt32):
    """An int64 scalar argument of an AOT kernel."""

    _kind = 2


class SymFloat32:
    """A float32 constant scalar argument of an AOT kernel."""

    _kind = 3

    def __init__(self, v: float):
        self.value = float(v)


class SymIntExprs(list):
    """The scalar arguments of an AOT kernel, in order: ``SymIntExprs(2)``
    then ``args[0] = SymInt32(n)``."""

    def __init__(self, n: int = 0):
        super().__init__([None] * n)

    @staticmethod
    def from_tuple(items) -> "SymIntExprs":
        s = SymIntExprs(len(items))
        for i, x in enumerate(items):
            s[i] = x
        return s


SymExprs = SymIntExprs


def _scalar(x, i: int):
    if isinstance(x, SymFloat32):
        return (3, x.value)
    if isinstance(x, float):
        return (3, x)
    if isinstance(x, SymInt32):
        return (x._kind, x._tree)
    if isinstance(x, (ShapeExpr, int)):
        return (1, ShapeExpr.of(x)._tree)
    raise TypeError(f"AOT scalar argument {i} is {type(x).__name__}: expected SymInt32/SymInt64/SymFloat32")

