"""What an ExecuTorch program (``.pte``) asks of the runtime: its methods' operators and delegates.

Read straight from the program's flatbuffer (``schema/program.fbs``: Program.execution_plan ->
ExecutionPlan.operators / .delegates), with every offset checked against the file, so it works
on any host without importing the export toolchain, and a damaged file is one line.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from edgekit.core.errors import InputFileError

MAX_PROGRAM_BYTES = 4 << 30
MAX_ITEMS = 1 << 20
# field slots in program.fbs (a table's fields in declaration order)
PROGRAM_EXECUTION_PLAN = 1
PLAN_NAME, PLAN_OPERATORS, PLAN_DELEGATES = 0, 6, 7
OPERATOR_NAME, OPERATOR_OVERLOAD = 0, 1
DELEGATE_ID = 0


@dataclass(frozen=True)
class Method:
    name: str
    operators: tuple[str, ...]  # "namespace::name.overload"
    delegates: tuple[str, ...]  # backend ids, e.g. XnnpackBackend


class _Reader:
    def __init__(self, data: bytes, path: Path):
        self.data, self.path = data, path

    def fail(self, what: str):
        raise InputFileError(f"{self.path} is not a readable ExecuTorch program ({what})")

    def u32(self, pos: int) -> int:
        if not 0 <= pos <= len(self.data) - 4:
            self.fail(f"offset {pos} outside the file")
        return struct.unpack_from("<I", self.data, pos)[0]

    def i32(self, pos: int) -> int:
        if not 0 <= pos <= len(self.data) - 4:
            self.fail(f"offset {pos} outside the file")
        return struct.unpack_from("<i", self.data, pos)[0]

    def u16(self, pos: int) -> int:
        if not 0 <= pos <= len(self.data) - 2:
            self.fail(f"offset {pos} outside the file")
        return struct.unpack_from("<H", self.data, pos)[0]

    def field(self, table: int, slot: int) -> int | None:
        """Where field ``slot`` of the table at ``table`` is stored, or None when it is absent."""
        vtable = table - self.i32(table)
        size = self.u16(vtable)
        entry = 4 + 2 * slot
        if entry + 2 > size:
            return None
        offset = self.u16(vtable + entry)
        return table + offset if offset else None

    def deref(self, pos: int) -> int:
        return pos + self.u32(pos)

    def vector(self, table: int, slot: int) -> list[int]:
        """Positions of the tables a vector-of-tables field points at."""
        where = self.field(table, slot)
        if where is None:
            return []
        start = self.deref(where)
        count = self.u32(start)
        if count > MAX_ITEMS or start + 4 + 4 * count > len(self.data):
            self.fail(f"a vector of {count} items runs past the end")
        return [self.deref(start + 4 + 4 * i) for i in range(count)]

    def string(self, table: int, slot: int) -> str:
        where = self.field(table, slot)
        if where is None:
            return ""
        start = self.deref(where)
        length = self.u32(start)
        if start + 4 + length > len(self.data):
            self.fail("a string runs past the end")
        try:
            return self.data[start + 4:start + 4 + length].decode("utf-8")
        except UnicodeDecodeError:
            self.fail("a name is not UTF-8")


def read_methods(path: str | Path) -> list[Method]:
    """Each method of the program with the operators and delegates its plan names."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > MAX_PROGRAM_BYTES:
            raise InputFileError(f"{path} is larger than {MAX_PROGRAM_BYTES >> 30} GiB; not read")
        data = path.read_bytes()
    except OSError as exc:
        raise InputFileError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) < 8 or data[4:6] != b"ET":
        raise InputFileError(f"{path} is not an ExecuTorch program (.pte)")
    reader = _Reader(data, path)
    root = reader.u32(0)
    methods = []
    for plan in reader.vector(root, PROGRAM_EXECUTION_PLAN):
        operators = []
        for op in reader.vector(plan, PLAN_OPERATORS):
            name, overload = reader.string(op, OPERATOR_NAME), reader.string(op, OPERATOR_OVERLOAD)
            operators.append(f"{name}.{overload}" if overload else name)
        delegates = tuple(reader.string(d, DELEGATE_ID) for d in reader.vector(plan, PLAN_DELEGATES))
        methods.append(Method(reader.string(plan, PLAN_NAME), tuple(operators), delegates))
    if not methods:
        reader.fail("it has no methods")
    return methods
