"""``python -m fpsim.demo torch``: it runs on short settings, what it prints agrees with itself
and with an independent run, and its figures pass the checks every demo figure passes.

Independent checks: the fp32 losses equal those of the same training run *without* a watch
(watching must not change the numbers); each sentence's numbers are the printed table's, or
follow from the printed skip lines (GradScaler halves the scale at each skip and grows only
after 2000 clean steps)."""

from __future__ import annotations

import re

import matplotlib
import pytest

matplotlib.use("Agg")

torch = pytest.importorskip("torch")
from test_demo_figures import SUPERSCRIPTS, assert_texts_inside, texts  # noqa: E402

from fpsim.demo import _common  # noqa: E402
from fpsim.demo import torch_model as demo  # noqa: E402
from fpsim.demo.__main__ import main  # noqa: E402


def prose(out: str) -> str:
    return re.sub(r"\s*\n\s*", " ", out)


def unwatched_losses(steps: int, seed: int, lr: float, batch: int) -> list[float]:
    import fpsim.torch as ft
    from fpsim.torch.models import sonnet_vocab_size

    torch.manual_seed(seed)
    model = ft.TinyGPT(sonnet_vocab_size(), seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    data = ft.sonnet_batches(batch, model.block_size, seed=seed)
    out = []
    for _ in range(steps):
        x, y = next(data)
        loss = model.loss(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        out.append(float(loss.detach()))
    return out


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("torch_demo")
    figs = {}
    save = _common.save_figure

    def keep(fig, out, name):
        figs[name] = fig
        return save(fig, out, name)

    import contextlib
    import io

    buf = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(buf):
        mp.setattr(demo, "save_figure", keep)
        assert main(["torch", "--steps", "4", "--seed", "1", "--batch", "8",
                     "--out", str(out_dir), "--quiet"]) == 0  # fmt: skip
    return buf.getvalue(), figs, out_dir


def test_losses_are_those_of_the_same_run_unwatched(run):
    out, _, _ = run
    m = re.search(r"1\. In fp32, watched: loss (\S+) -> (\S+)", out)
    want = unwatched_losses(4, 1, 3e-3, 8)
    assert (float(m.group(1)), float(m.group(2))) == (round(want[0], 3), round(want[-1], 3))
    assert "4 steps of AdamW (lr 0.003), batches of 8 x 32 characters, seed 1" in prose(out)


def test_sentences_agree_with_the_tables(run):
    out, _, _ = run
    text = prose(out)
    # the activation-gradient rows of the three tables: as stored, per tensor, per block
    stored, per_tensor, per_block = (ln.split() for ln in out.splitlines()
                                     if re.match(r"\(all\)\s+activation_grad\s", ln))  # fmt: skip
    # cells: (all) activation_grad values fp16 "/" ovf bf16 "/" ovf e4m3 "/" ovf e5m2 "/" ovf
    assert f"fp16 would lose {stored[3]} of the non-zero activation gradients" in text
    assert f"bf16 {stored[6]}; fp8 E4M3 would lose {stored[9]} of them" in text
    assert f"per tensor only {per_tensor[9]}." in text
    assert f"flushes {per_block[3]} of the activation gradients and saturates {per_block[5]}" in text
    skips = re.findall(r"step (\d+) was skipped \(loss scale 2\^(\d+) -> 2\^(\d+)\)", out)
    m = re.search(r"skipped (\d+) of (\d+) steps, halving its scale each time, and ended at "
                  r"2\^(\d+)", text)  # fmt: skip
    if skips:
        assert int(m.group(1)) == len(skips) and int(m.group(2)) == 4
        assert int(m.group(3)) == 24 - len(skips)  # backs off by 2 per skip, no growth
        for (_, a, b) in skips:
            assert int(b) == int(a) - 1
    else:
        assert "skipped no step in 4" in text
    assert "bf16, with fp32's exponent range, needs none" in text


def test_figures(run):
    _, figs, out_dir = run
    assert set(figs) == set(demo.FIGURES)
    for name, fig in figs.items():
        assert (out_dir / name).stat().st_size < 400_000
        assert_texts_inside(name, fig)
        for t in texts(fig):
            plain = re.sub(r"\$[^$]*\$", "", t.get_text())
            assert "2^" not in plain and not set(plain) & set(SUPERSCRIPTS), (name, t.get_text())


def test_usage_errors(capsys):
    assert main(["torch", "--init-scale", "1000"]) == 2
    assert "power of two" in capsys.readouterr().err
    assert main(["torch", "--steps", "0"]) == 2
