"""Time per training step (forward + backward + SGD step) of a 4-layer MLP, the char-level GPT
and the small CNN of ``fpsim.models``, in one process.

Network: Linear(512, 512) -> ReLU -> Linear(512, 512) -> ReLU -> Linear(512, 512) -> ReLU ->
Linear(512, 10), cross-entropy loss, batch 256, SGD(lr=0.01, momentum=0.9).

Rows ("recipes"):

* ``numpy (hand-written)``: the same network written directly in float32 numpy, backward by
  hand: the floor for any numpy-based engine;
* ``fpsim fp32``: ``fpsim.nn.MLP`` + ``F.cross_entropy`` + ``optim.SGD``;
* ``fpsim fp16 autocast + GradScaler``: the same model with fp32 parameters under
  ``fpsim.amp.autocast("cuda")`` (fp16 matmuls accumulated in fp32, every result rounded to
  fp16, the loss in fp32) and ``fpsim.amp.GradScaler``: PyTorch's AMP loop. Target: within 2x
  of fpsim fp32;
* ``torch fp32 (CPU)``: the same network in PyTorch, when it is installed.

Each recipe is a factory returning a ``step()`` closure. The recipes take turns in blocks of
``--block`` steps for ``--rounds`` rounds (so a busy machine slows them alike); the first step
of every block is not timed (thread pools of the previous recipe may still be spinning). Every
library runs ``--threads`` threads (default 1, see below). The table reports the median time
per step and its ratios to hand-written numpy and to fpsim fp32. Targets: fpsim fp32 within 1.5x
of numpy; fpsim fp16 autocast + GradScaler within 2x of fpsim fp32.

To add rows, append ``(name, factory)`` to ``RECIPES`` -- see ``add_recipe`` below;
``factory(x, y, weights)`` gets the batch and the shared initial weights (float32 arrays
``[(W, b), ...]``, W of shape ``(out, in)``).

The GPT and CNN tables (``--model gpt`` / ``cnn``): :class:`fpsim.models.CharGPT` (2 layers, 4
heads, width 64, context 32, batch 32 windows of the sonnets) and
:class:`fpsim.models.SmallCNN` (conv-BN-ReLU-pool x2, batch 64 images of 16 x 16 from
``fpsim.data.shapes``), SGD with momentum, cross-entropy; rows ``fpsim fp32``, ``fpsim bf16
autocast`` (``autocast("cpu")``) and ``torch fp32 (CPU)`` -- the same model written in
torch.nn (``tests/torch_twins.py``) loaded with the same weights. Target: fpsim fp32 within 2x
of torch fp32. Other rows (precision recipes) go into ``MODEL_RECIPES[model]`` with
``add_model_recipe``: ``factory(model, batch)`` gets a fresh fpsim model with the shared
weights and the batch, and returns a ``step()`` closure. The FP8/MX rows (``fpsim fp8_cast``,
``fp8_delayed``, ``fp8_current``, ``fp8_tensorwise``, ``mxfp8``, ``nvfp4``) convert the Linear
layers with :func:`fpsim.amp.convert_to_fp8`; target: each within 3x of fpsim fp32.

    python benchmarks/bench_train.py [--model mlp|gpt|cnn|all] [--rounds 6] [--block 6]
                                     [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

# Before numpy/torch start their thread pools: ``--threads N`` (default 1) fixes every pool's
# size; 0 keeps each library's default. On a small shared machine several spinning pools
# (OpenBLAS, PyTorch's OpenMP, numba) stall each other for whole scheduler slices, and the
# timings jump by 10x from run to run; one thread each gives reproducible ratios. Idle OpenMP
# threads must not spin either (PyTorch's Intel OpenMP spins 200 ms by default).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("KMP_BLOCKTIME", "0")
_THREADS = sys.argv[sys.argv.index("--threads") + 1] if "--threads" in sys.argv[:-1] else "1"
if _THREADS != "0":
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        os.environ[_var] = _THREADS

import numpy as np  # noqa: E402

WIDTH, DEPTH, BATCH, CLASSES = 512, 4, 256, 10
LR, MOMENTUM = 0.01, 0.9


def make_problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, WIDTH)).astype(np.float32)
    y = rng.integers(0, CLASSES, BATCH)
    sizes = [WIDTH] * DEPTH + [CLASSES]
    weights = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        bound = 1 / np.sqrt(a)
        W = rng.uniform(-bound, bound, (b, a)).astype(np.float32)
        bias = rng.uniform(-bound, bound, b).astype(np.float32)
        weights.append((W, bias))
    return x, y, weights


# ---- recipes ---------------------------------------------------------------------------------


def numpy_recipe(x, y, weights):
    """The network in float32 numpy with a hand-written backward and SGD with momentum."""
    Ws = [W.copy() for W, _ in weights]
    bs = [b.copy() for _, b in weights]
    vel = [None] * (2 * len(Ws))
    n = x.shape[0]
    rows = np.arange(n)

    def step():
        hs = [x]
        h = x
        for i, (W, b) in enumerate(zip(Ws, bs, strict=True)):
            z = h @ W.T + b
            h = np.maximum(z, 0) if i < len(Ws) - 1 else z
            hs.append(h)
        z = h - h.max(1, keepdims=True)
        e = np.exp(z)
        s = e.sum(1, keepdims=True)
        loss = float(np.mean(np.log(s[:, 0]) - z[rows, y]))
        g = e / s
        g[rows, y] -= 1
        g /= np.float32(n)
        grads = []
        for i in reversed(range(len(Ws))):
            gW = g.T @ hs[i]
            gb = g.sum(0)
            grads.append((i, gW, gb))
            if i > 0:
                g = (g @ Ws[i]) * (hs[i] > 0)
        for i, gW, gb in grads:
            for k, (p, gp) in enumerate(((Ws[i], gW), (bs[i], gb))):
                j = 2 * i + k
                vel[j] = gp.copy() if vel[j] is None else vel[j] * MOMENTUM + gp
                p -= LR * vel[j]
        return loss

    return step


def fpsim_fp32_recipe(x, y, weights):
    from fpsim import nn, optim
    from fpsim.autograd import tensor
    from fpsim.nn import functional as F

    model = nn.MLP([WIDTH] * DEPTH + [CLASSES], seed=0)
    linears = [m for m in model if isinstance(m, nn.Linear)]
    for lin, (W, b) in zip(linears, weights, strict=True):
        lin.weight.data[...] = W
        lin.bias.data[...] = b
    opt = optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    xt, yt = tensor(x), tensor(y)

    def step():
        loss = F.cross_entropy(model(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


def fpsim_amp_recipe(x, y, weights):
    """fp16 autocast ("cuda" policy table) + GradScaler: fp32 parameters, fp16 matmuls (fp32
    accumulation), fp32 loss, dynamic loss scaling -- PyTorch's recommended AMP loop."""
    from fpsim import nn, optim
    from fpsim.amp import GradScaler, autocast
    from fpsim.autograd import tensor
    from fpsim.nn import functional as F

    model = nn.MLP([WIDTH] * DEPTH + [CLASSES], seed=0)
    linears = [m for m in model if isinstance(m, nn.Linear)]
    for lin, (W, b) in zip(linears, weights, strict=True):
        lin.weight.data[...] = W
        lin.bias.data[...] = b
    opt = optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    scaler = GradScaler("cuda")
    xt, yt = tensor(x), tensor(y)

    def step():
        with autocast("cuda"):
            loss = F.cross_entropy(model(xt), yt)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.item()

    return step


def torch_recipe(x, y, weights):
    import torch

    layers = []
    for i, (W, b) in enumerate(weights):
        lin = torch.nn.Linear(W.shape[1], W.shape[0])
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(W))
            lin.bias.copy_(torch.from_numpy(b))
        layers.append(lin)
        if i < len(weights) - 1:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)

    def step():
        loss = torch.nn.functional.cross_entropy(model(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


RECIPES: list[tuple[str, object]] = [
    ("numpy (hand-written)", numpy_recipe),
    ("fpsim fp32", fpsim_fp32_recipe),
]


def add_recipe(name: str, factory) -> None:
    """Add a row (a name and a factory, see the module docstring)."""
    RECIPES.append((name, factory))


def _optional_recipes() -> None:
    add_recipe("fpsim fp16 autocast + GradScaler", fpsim_amp_recipe)
    try:
        import torch  # noqa: F401

        add_recipe("torch fp32 (CPU)", torch_recipe)
    except ImportError:
        pass


# ---- the GPT and the CNN ---------------------------------------------------------------------

GPT = dict(block_size=32, n_layer=2, n_head=4, n_embd=64)
GPT_BATCH, CNN_BATCH, CNN_SIZE = 32, 64, 16


def model_problem(which: str):
    """A fresh fpsim model (seed 0) and one batch ``(inputs, targets)`` as numpy arrays."""
    from fpsim import data, models

    if which == "gpt":
        X, Y, vocab = data.char_dataset(seq_len=GPT["block_size"])
        return models.CharGPT(len(vocab), seed=0, **GPT), (X[:GPT_BATCH], Y[:GPT_BATCH])
    X, y = data.shapes(CNN_BATCH, size=CNN_SIZE, seed=0)
    return models.SmallCNN(image_size=CNN_SIZE, seed=0), (X, y)


def _fpsim_loss(model, batch):
    from fpsim.autograd import tensor
    from fpsim.nn import functional as F

    x, y = batch
    out = model(tensor(x))
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), tensor(y.reshape(-1)))


def fpsim_model_step(model, batch, autocast_device: str | None = None):
    """A step of fpsim's loop; ``autocast_device`` runs the forward under ``autocast`` (fp32
    parameters, its default low-precision dtype)."""
    from contextlib import nullcontext

    from fpsim import optim
    from fpsim.amp import autocast

    opt = optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    region = (lambda: autocast(autocast_device)) if autocast_device else nullcontext

    def step():
        with region():
            loss = _fpsim_loss(model, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


def fpsim_model_fp32(model, batch):
    return fpsim_model_step(model, batch)


def fpsim_model_bf16_autocast(model, batch):
    """autocast("cpu"): bf16 matmuls, convolutions and attention (fp32 accumulation)."""
    return fpsim_model_step(model, batch, "cpu")


def torch_model_fp32(model, batch):
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from torch_twins import twin_of

    twin = twin_of(model)
    opt = torch.optim.SGD(twin.parameters(), lr=LR, momentum=MOMENTUM)
    x, y = (torch.from_numpy(np.ascontiguousarray(a)) for a in batch)

    def step():
        out = twin(x)
        loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return step


MODEL_RECIPES: dict[str, list[tuple[str, object]]] = {
    m: [("fpsim fp32", fpsim_model_fp32), ("fpsim bf16 autocast", fpsim_model_bf16_autocast)]
    for m in ("gpt", "cnn")
}


def add_model_recipe(model: str, name: str, factory) -> None:
    """Add a row to the GPT or CNN table (see the module docstring)."""
    MODEL_RECIPES[model].append((name, factory))


def fpsim_model_fp8(recipe: str):
    """The fp32 loop with the model's Linear layers converted to the GEMM recipe ``recipe``
    (``fpsim.amp.convert_to_fp8``: every Linear of the GPT; the CNN's head only, its
    convolutions stay fp32). Target: within 3x of fpsim fp32."""

    def factory(model, batch):
        from fpsim.amp import convert_to_fp8

        convert_to_fp8(model, recipe)
        return fpsim_model_step(model, batch)

    return factory


for _m in ("gpt", "cnn"):
    for _r in ("fp8_cast", "fp8_delayed", "fp8_current", "fp8_tensorwise", "mxfp8", "nvfp4"):
        add_model_recipe(_m, f"fpsim {_r} (convert_to_fp8)", fpsim_model_fp8(_r))


# ---- running ---------------------------------------------------------------------------------


def _time(fns: list, rounds: int, block: int) -> dict[str, list[float]]:
    """Median-ready step times: the recipes take turns in blocks; each block's first step is
    not timed."""
    times: dict[str, list[float]] = {name: [] for name, _ in fns}
    for _ in range(rounds):
        for name, fn in fns:
            fn()  # not timed: the switch from the previous recipe
            for _ in range(block - 1):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return times


def run(rounds: int = 6, block: int = 6) -> list[tuple[str, float, float, float, float]]:
    _optional_recipes()
    x, y, weights = make_problem()
    fns = [(name, factory(x, y, weights)) for name, factory in RECIPES]
    first_losses = {name: fn() for name, fn in fns}  # same weights, same batch: same loss
    times = _time(fns, rounds, block)
    base = statistics.median(times[fns[0][0]])
    fp32 = statistics.median(times["fpsim fp32"])
    rows = []
    for name, _ in fns:
        med = statistics.median(times[name])
        rows.append((name, med * 1e3, med / base, med / fp32, first_losses[name]))
    return rows


def run_model(which: str, rounds: int = 6, block: int = 6):
    """Rows ``(recipe, ms/step, x torch fp32, x fpsim fp32, first loss)`` for the GPT or CNN
    (``x torch`` is NaN without torch)."""
    recipes = list(MODEL_RECIPES[which])
    try:
        import torch  # noqa: F401

        recipes.append(("torch fp32 (CPU)", torch_model_fp32))
    except ImportError:
        pass
    fns = []
    for name, factory in recipes:
        model, batch = model_problem(which)  # a fresh model each: the same initial weights
        fns.append((name, factory(model, batch)))
    first_losses = {name: fn() for name, fn in fns}
    for _name, fn in fns:  # a few warm-up steps (numba kernels, caches)
        fn()
    times = _time(fns, rounds, block)
    fp32 = statistics.median(times["fpsim fp32"])
    ref = statistics.median(times["torch fp32 (CPU)"]) if "torch fp32 (CPU)" in times else None
    rows = []
    for name, _ in fns:
        med = statistics.median(times[name])
        rows.append((name, med * 1e3, med / ref if ref else float("nan"), med / fp32,
                     first_losses[name]))  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=["mlp", "gpt", "cnn", "all"], default="all")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--block", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1, help="BLAS/OpenMP/numba threads (0: default)")
    args = ap.parse_args()
    if args.threads:
        try:
            import torch

            torch.set_num_threads(args.threads)
        except ImportError:
            pass
    threads = "default threads" if args.threads == 0 else f"{args.threads} thread(s)"
    timed = f"median of {args.rounds} x {args.block - 1} timed steps per recipe; {threads}"
    if args.model in ("mlp", "all"):
        rows = run(args.rounds, args.block)
        print(f"MLP {WIDTH}x{DEPTH} layers, batch {BATCH}, SGD momentum; {timed}")
        print(
            f"| {'recipe':<34} | {'ms/step':>8} | {'x numpy':>7} | {'x fpsim fp32':>12} "
            f"| {'first loss':>10} |"
        )
        print(f"|{'-' * 36}|{'-' * 10}|{'-' * 9}|{'-' * 14}|{'-' * 12}|")
        for name, ms, ratio, ratio32, loss in rows:
            print(f"| {name:<34} | {ms:8.2f} | {ratio:7.2f} | {ratio32:12.2f} | {loss:10.6f} |")
    for which in ("gpt", "cnn"):
        if args.model not in (which, "all"):
            continue
        rows = run_model(which, args.rounds, args.block)
        if which == "gpt":
            what = (f"CharGPT {GPT['n_layer']} layers, {GPT['n_head']} heads, width "
                    f"{GPT['n_embd']}, context {GPT['block_size']}, batch {GPT_BATCH}")  # fmt: skip
        else:
            what = f"SmallCNN (conv-BN-ReLU-pool x2), batch {CNN_BATCH} of {CNN_SIZE}x{CNN_SIZE}"
        print(f"\n{what}, SGD momentum; {timed}")
        print(
            f"| {'recipe':<34} | {'ms/step':>8} | {'x torch fp32':>12} | {'x fpsim fp32':>12} "
            f"| {'first loss':>10} |"
        )
        print(f"|{'-' * 36}|{'-' * 10}|{'-' * 14}|{'-' * 14}|{'-' * 12}|")
        for name, ms, rt, r32, loss in rows:
            print(f"| {name:<34} | {ms:8.2f} | {rt:12.2f} | {r32:12.2f} | {loss:10.6f} |")


if __name__ == "__main__":
    main()
