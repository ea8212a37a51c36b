"""The README's op table (section "Today's small models") against the implementation's autocast
policy tables: every engine op appears exactly once, with the policy ``amp.op_policy`` gives
for "cpu" and "cuda" (which tests/test_amp.py checks against PyTorch's measured tables)."""

import re
from pathlib import Path

from fpsim import amp
from fpsim.autograd import registry

README = Path(__file__).resolve().parent.parent / "README.md"


def _table_rows():
    text = README.read_text()
    start = text.index("| ops | autocast \"cpu\" | autocast \"cuda\" |")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows.append((re.findall(r"`([^`]+)`", cells[0]), cells[1], cells[2]))
    return rows


def test_readme_op_table_lists_every_engine_op_once_with_its_policy():
    rows = _table_rows()
    listed = [op for ops, _, _ in rows for op in ops]
    engine = {name for name, f in registry.items() if f.dispatch}
    assert len(listed) == len(set(listed)), "an op is listed twice"
    assert set(listed) == engine, set(listed) ^ engine
    for ops, cpu, cuda in rows:
        for op in ops:
            assert (amp.op_policy(op, "cpu"), amp.op_policy(op, "cuda")) == (cpu, cuda), op
