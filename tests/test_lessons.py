"""The lessons (lessons/*.ipynb) run top to bottom in a fresh kernel, quickly, with their figures,
and are committed without outputs.

Each notebook runs in its own new kernel, started from a kernel spec written for *this*
interpreter (so the kernel is the venv's Python even when a user-level "python3" kernel spec points
elsewhere), with MPLBACKEND=Agg and lessons/ as the working directory. New lessons are picked up
by the glob. Only the execution tests need nbclient/ipykernel; without them they are skipped.
"""

import json
import sys
import time
from pathlib import Path

import pytest

LESSONS = Path(__file__).resolve().parent.parent / "lessons"
NOTEBOOKS = sorted(LESSONS.glob("*.ipynb"))
IDS = [p.stem for p in NOTEBOOKS]
# A guard against a hanging cell, not a speed test (tests never assert on wall time: a loaded
# machine runs slower). A lesson should take seconds; `benchmarks/` is where speed is measured.
CELL_TIMEOUT_S = 600


def test_there_are_lessons():
    assert len(NOTEBOOKS) >= 4, f"expected the lesson notebooks in {LESSONS}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_committed_without_outputs(path):
    nb = json.loads(path.read_text(encoding="utf-8"))
    dirty = [
        i
        for i, cell in enumerate(nb["cells"])
        if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count"))
    ]
    assert not dirty, (
        f"{path.name}: cells {dirty} carry outputs or execution counts; clear them before "
        "committing (Jupyter: Edit -> Clear Outputs of All Cells, then save)"
    )
    assert "widgets" not in nb.get("metadata", {}), f"{path.name}: saved widget state in metadata"


@pytest.fixture(scope="session")
def kernel_dir(tmp_path_factory):
    """A Jupyter data dir holding a "python3" kernel spec that runs this interpreter."""
    pytest.importorskip("ipykernel")
    from ipykernel.kernelspec import write_kernel_spec

    root = tmp_path_factory.mktemp("jupyter")
    write_kernel_spec(path=str(root / "kernels" / "python3"))
    spec = json.loads((root / "kernels" / "python3" / "kernel.json").read_text())
    assert spec["argv"][0] == sys.executable, spec["argv"]
    return root


@pytest.fixture
def run_notebook(kernel_dir, monkeypatch):
    """Execute a notebook in a fresh kernel; return (executed notebook, seconds taken)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    # JUPYTER_PATH is searched before the user's and the environment's kernel specs.
    monkeypatch.setenv("JUPYTER_PATH", str(kernel_dir))
    monkeypatch.setenv("MPLBACKEND", "Agg")

    def run(nb):
        client = nbclient.NotebookClient(
            nb,
            kernel_name="python3",
            timeout=CELL_TIMEOUT_S,
            resources={"metadata": {"path": str(LESSONS)}},
        )
        start = time.perf_counter()
        client.execute()
        return nb, time.perf_counter() - start

    run.nbformat = nbformat
    return run


def _stdout(nb) -> str:
    return "".join(
        out.get("text", "")
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.outputs
        if out.output_type == "stream"
    )


def test_kernel_runs_this_python(run_notebook):
    nbf = run_notebook.nbformat
    nb = nbf.v4.new_notebook()
    nb.cells = [
        nbf.v4.new_code_cell("import os, sys; print(sys.executable); print(os.getcwd())"),
        nbf.v4.new_code_cell("import matplotlib; print(matplotlib.get_backend())"),
    ]
    nb, _ = run_notebook(nb)
    exe, cwd, backend = _stdout(nb).split()
    assert Path(exe).resolve() == Path(sys.executable).resolve()
    assert Path(cwd).resolve() == LESSONS
    assert backend.lower() == "agg"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=IDS)
def test_lesson_runs(path, run_notebook):
    nb = run_notebook.nbformat.read(str(path), as_version=4)
    # execute() raises CellExecutionError (with the cell and its traceback) on any error
    nb, _ = run_notebook(nb)
    images, figure_texts = 0, []
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            images += "image/png" in data
            text = data.get("text/plain", "")
            if "image/png" not in data and text.startswith(("<Figure size", "<matplotlib.figure")):
                figure_texts.append(i)
    # A Figure shown as text means the notebook's inline backend was never enabled.
    assert not figure_texts, f"{path.name}: cells {figure_texts} show a figure as text, not a PNG"
    assert images > 0, f"{path.name} drew no figure"
