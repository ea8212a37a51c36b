"""Small deterministic data sets, generated in code (no downloads, ever), and a batch iterator.

Every generator takes a ``seed`` (int or numpy Generator) and returns numpy arrays: float32
features (so an fp32 model sees them exactly) and int64 labels.

* :func:`two_moons` -- two interleaving half circles (binary classification, 2-D);
* :func:`spirals` -- K interleaved spiral arms (multi-class, 2-D);
* :func:`teacher_regression` -- targets from a fixed random tanh "teacher" network;
* :func:`char_text`, :class:`CharVocab`, :func:`char_dataset` -- a character-level language
  modelling corpus: eight of Shakespeare's sonnets (public domain), shipped as a constant;
* :func:`shapes` -- small grey images of discs, squares, triangles and crosses drawn in numpy
  (image classification for a CNN);
* :class:`BatchIterator` / :func:`batches` -- shuffled mini-batches as fpsim Tensors.

>>> from fpsim import data
>>> X, y = data.two_moons(200, noise=0.1, seed=0)
>>> X.shape, X.dtype, y.shape, int(y.sum())
((200, 2), dtype('float32'), (200,), 100)
>>> xb, yb = next(iter(data.batches(X, y, batch_size=32, seed=0)))
>>> xb.shape, xb.format.name, yb.dtype
((32, 2), 'fp32', dtype('int64'))
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .autograd.tensor import Tensor, as_generator, tensor
from .formats import FormatLike

__all__ = [
    "two_moons",
    "spirals",
    "teacher_regression",
    "char_text",
    "CharVocab",
    "char_dataset",
    "shapes",
    "SHAPE_NAMES",
    "BatchIterator",
    "batches",
    "SONNETS",
]


def _rng(seed: Any) -> np.random.Generator:
    return as_generator(0 if seed is None else seed)


def two_moons(n_samples: int = 200, noise: float = 0.1, seed: Any = 0):
    """Two interleaving half circles (as scikit-learn's ``make_moons``), shuffled.

    Returns ``X`` (n, 2) float32 and ``y`` (n,) int64 (half 0: upper moon, half 1: lower).
    """
    rng = _rng(seed)
    n_out = n_samples // 2
    n_in = n_samples - n_out
    t_out = np.linspace(0, np.pi, n_out)
    t_in = np.linspace(0, np.pi, n_in)
    X = np.concatenate(
        [
            np.stack([np.cos(t_out), np.sin(t_out)], 1),
            np.stack([1 - np.cos(t_in), 1 - np.sin(t_in) - 0.5], 1),
        ]
    )
    y = np.concatenate([np.zeros(n_out, np.int64), np.ones(n_in, np.int64)])
    X = X + noise * rng.standard_normal(X.shape)
    order = rng.permutation(n_samples)
    return X[order].astype(np.float32), y[order]


def spirals(n_samples: int = 300, n_classes: int = 3, noise: float = 0.2, seed: Any = 0):
    """``n_classes`` interleaved spiral arms (the CS231n data set), shuffled.

    Returns ``X`` (n, 2) float32 in [-1, 1] and ``y`` (n,) int64 in ``[0, n_classes)``.
    """
    rng = _rng(seed)
    per = [
        n_samples // n_classes + (1 if k < n_samples % n_classes else 0) for k in range(n_classes)
    ]
    Xs, ys = [], []
    for k, n in enumerate(per):
        r = np.linspace(0.0, 1.0, n)
        t = np.linspace(k * 4.0, (k + 1) * 4.0, n) + noise * rng.standard_normal(n)
        Xs.append(np.stack([r * np.sin(t), r * np.cos(t)], 1))
        ys.append(np.full(n, k, np.int64))
    X, y = np.concatenate(Xs), np.concatenate(ys)
    order = rng.permutation(n_samples)
    return X[order].astype(np.float32), y[order]


def teacher_regression(
    n_samples: int = 512,
    in_features: int = 8,
    hidden: int = 32,
    out_features: int = 1,
    noise: float = 0.0,
    seed: Any = 0,
):
    """Inputs ``X ~ N(0, 1)`` and targets ``Y = tanh(X W1 + b1) W2 + noise * N(0, 1)`` from a
    random teacher (W1 ~ N(0, 1/in), b1 ~ N(0, 0.1^2), W2 ~ N(0, 1/hidden)), in float64 then
    stored as float32. A student with at least ``hidden`` tanh units can fit it exactly.
    """
    rng = _rng(seed)
    W1 = rng.standard_normal((in_features, hidden)) / np.sqrt(in_features)
    b1 = 0.1 * rng.standard_normal(hidden)
    W2 = rng.standard_normal((hidden, out_features)) / np.sqrt(hidden)
    X = rng.standard_normal((n_samples, in_features))
    Y = np.tanh(X @ W1 + b1) @ W2 + noise * rng.standard_normal((n_samples, out_features))
    return X.astype(np.float32), Y.astype(np.float32)


# ---- character-level text --------------------------------------------------------------------


def char_text() -> str:
    """The shipped corpus: Shakespeare's sonnets 1, 18, 29, 30, 55, 73, 116 and 130 (about 5 KB,
    public domain), sonnets separated by a blank line."""
    return SONNETS


class CharVocab:
    """The sorted set of characters of a text; ``encode`` / ``decode`` between text and ids.

    >>> v = CharVocab("hello")
    >>> len(v), v.encode("hole").tolist(), v.decode([3, 1, 2, 2, 3])
    (4, [1, 3, 2, 0], 'ohllo')
    """

    def __init__(self, text: str) -> None:
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}

    def __len__(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> np.ndarray:
        return np.array([self.stoi[c] for c in text], dtype=np.int64)

    def decode(self, ids) -> str:
        ids = ids.data if isinstance(ids, Tensor) else ids
        return "".join(self.chars[int(i)] for i in np.asarray(ids).reshape(-1))


def char_dataset(seq_len: int = 32, text: str | None = None, stride: int | None = None):
    """Next-character prediction windows: ``X[i] = ids[s : s+seq_len]``,
    ``Y[i] = ids[s+1 : s+seq_len+1]`` with ``s = i * stride`` (default stride: ``seq_len``).

    Returns ``(X, Y, vocab)``; X and Y are int64 arrays of shape (n, seq_len).
    """
    text = char_text() if text is None else text
    vocab = CharVocab(text)
    ids = vocab.encode(text)
    stride = seq_len if stride is None else stride
    starts = np.arange(0, len(ids) - seq_len, stride)
    X = np.stack([ids[s : s + seq_len] for s in starts])
    Y = np.stack([ids[s + 1 : s + seq_len + 1] for s in starts])
    return X, Y, vocab


# ---- drawn shapes ----------------------------------------------------------------------------

#: the classes of :func:`shapes`, by label
SHAPE_NAMES = ("disc", "square", "triangle", "cross")


def _inside(kind: int, u: np.ndarray, v: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Whether the points (u, v) -- in the shape's own rotated frame, centred -- are inside a
    shape of size ``r``."""
    if kind == 0:
        return u * u + v * v <= r * r
    if kind == 1:
        return (np.abs(u) <= 0.8 * r) & (np.abs(v) <= 0.8 * r)
    if kind == 2:  # equilateral, circumradius r, one vertex up: three half-planes
        inside = np.ones(np.broadcast_shapes(u.shape, r.shape), bool)
        for k in range(3):
            a = np.pi / 2 + 2 * np.pi * k / 3 + np.pi / 3  # outward normal of each side
            inside &= u * np.cos(a) + v * np.sin(a) <= r / 2
        return inside
    arm = 0.3 * r
    return ((np.abs(u) <= arm) & (np.abs(v) <= r)) | ((np.abs(v) <= arm) & (np.abs(u) <= r))


def shapes(n_samples: int = 512, size: int = 16, noise: float = 0.05, seed: Any = 0):
    """Grey images of the four :data:`SHAPE_NAMES` -- a disc, a square, a triangle, a cross --
    each at a random position, size and rotation, drawn in numpy with 4 x 4 supersampling
    (anti-aliased edges), on a dark background with Gaussian noise; balanced classes, shuffled.

    Returns ``X`` (n, 1, size, size) float32, about 0 mean and unit spread (``(image - 0.2) /
    0.4``), and ``y`` (n,) int64 labels.

    >>> X, y = shapes(8, size=12, seed=0)
    >>> X.shape, X.dtype, sorted(np.bincount(y).tolist())
    ((8, 1, 12, 12), dtype('float32'), [2, 2, 2, 2])
    """
    rng = _rng(seed)
    ss = 4
    grid = (np.arange(size * ss) + 0.5) / ss  # subpixel centres, in pixels
    gy, gx = np.meshgrid(grid, grid, indexing="ij")
    y = np.arange(n_samples, dtype=np.int64) % len(SHAPE_NAMES)
    images = np.empty((n_samples, size, size))
    for i, kind in enumerate(y):
        r = rng.uniform(0.22, 0.38) * size
        cx, cy = rng.uniform(r, size - r, 2)
        t = rng.uniform(0, 2 * np.pi)
        dx, dy = gx - cx, gy - cy
        u, v = dx * np.cos(t) + dy * np.sin(t), -dx * np.sin(t) + dy * np.cos(t)
        ink = _inside(int(kind), u, -v, np.asarray(r)).astype(np.float64)
        images[i] = ink.reshape(size, ss, size, ss).mean(axis=(1, 3))
    images += noise * rng.standard_normal(images.shape)
    order = rng.permutation(n_samples)
    X = ((images[order] - 0.2) / 0.4)[:, None].astype(np.float32)
    return X, y[order]


# ---- batches ---------------------------------------------------------------------------------


class BatchIterator:
    """Mini-batches of aligned arrays as Tensors, a new shuffle each epoch (own generator).

    ``BatchIterator(X, y, batch_size=32, shuffle=True, seed=0, drop_last=False,
    format="fp32")``: iterating gives one epoch of tuples ``(X_batch, y_batch)``; floating
    arrays become tensors of ``format``, integer arrays integer tensors. Two iterators with the
    same seed give the same sequence of epochs.
    """

    def __init__(
        self,
        *arrays,
        batch_size: int = 32,
        shuffle: bool = True,
        seed: Any = 0,
        drop_last: bool = False,
        format: FormatLike = "fp32",
    ):
        if not arrays:
            raise ValueError("BatchIterator needs at least one array")
        self.arrays = [a.data if isinstance(a, Tensor) else np.asarray(a) for a in arrays]
        n = len(self.arrays[0])
        if any(len(a) != n for a in self.arrays):
            raise ValueError("all arrays must have the same length")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.n, self.batch_size, self.shuffle = n, batch_size, shuffle
        self.drop_last, self.format = drop_last, format
        self.rng = (
            np.random.default_rng(seed) if not isinstance(seed, np.random.Generator) else seed
        )

    def __len__(self) -> int:
        full, rest = divmod(self.n, self.batch_size)
        return full if (self.drop_last or rest == 0) else full + 1

    def _as_tensor(self, a: np.ndarray) -> Tensor:
        return tensor(a) if a.dtype.kind in "iub" else tensor(a, self.format)

    def __iter__(self) -> Iterator[tuple[Tensor, ...]]:
        order = self.rng.permutation(self.n) if self.shuffle else np.arange(self.n)
        for k in range(len(self)):
            idx = order[k * self.batch_size : (k + 1) * self.batch_size]
            yield tuple(self._as_tensor(a[idx]) for a in self.arrays)


def batches(
    *arrays,
    batch_size: int = 32,
    shuffle: bool = True,
    seed: Any = 0,
    drop_last: bool = False,
    format: FormatLike = "fp32",
):
    """One epoch of mini-batches (see :class:`BatchIterator`)."""
    it = BatchIterator(
        *arrays,
        batch_size=batch_size,
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        format=format,
    )
    return iter(it)


SONNETS = """\
From fairest creatures we desire increase,
That thereby beauty's rose might never die,
But as the riper should by time decease,
His tender heir might bear his memory:
But thou, contracted to thine own bright eyes,
Feed'st thy light's flame with self-substantial fuel,
Making a famine where abundance lies,
Thyself thy foe, to thy sweet self too cruel.
Thou that art now the world's fresh ornament
And only herald to the gaudy spring,
Within thine own bud buriest thy content,
And, tender churl, mak'st waste in niggarding.
Pity the world, or else this glutton be,
To eat the world's due, by the grave and thee.

Shall I compare thee to a summer's day?
Thou art more lovely and more temperate:
Rough winds do shake the darling buds of May,
And summer's lease hath all too short a date;
Sometime too hot the eye of heaven shines,
And often is his gold complexion dimm'd;
And every fair from fair sometime declines,
By chance or nature's changing course untrimm'd;
But thy eternal summer shall not fade,
Nor lose possession of that fair thou ow'st;
Nor shall Death brag thou wander'st in his shade,
When in eternal lines to time thou grow'st:
So long as men can breathe or eyes can see,
So long lives this, and this gives life to thee.

When, in disgrace with fortune and men's eyes,
I all alone beweep my outcast state,
And trouble deaf heaven with my bootless cries,
And look upon myself and curse my fate,
Wishing me like to one more rich in hope,
Featur'd like him, like him with friends possess'd,
Desiring this man's art and that man's scope,
With what I most enjoy contented least;
Yet in these thoughts myself almost despising,
Haply I think on thee, and then my state,
Like to the lark at break of day arising
From sullen earth, sings hymns at heaven's gate;
For thy sweet love remember'd such wealth brings
That then I scorn to change my state with kings.

When to the sessions of sweet silent thought
I summon up remembrance of things past,
I sigh the lack of many a thing I sought,
And with old woes new wail my dear time's waste:
Then can I drown an eye, unused to flow,
For precious friends hid in death's dateless night,
And weep afresh love's long since cancell'd woe,
And moan the expense of many a vanish'd sight:
Then can I grieve at grievances foregone,
And heavily from woe to woe tell o'er
The sad account of fore-bemoaned moan,
Which I new pay as if not paid before.
But if the while I think on thee, dear friend,
All losses are restor'd and sorrows end.

Not marble, nor the gilded monuments
Of princes, shall outlive this powerful rhyme;
But you shall shine more bright in these contents
Than unswept stone, besmear'd with sluttish time.
When wasteful war shall statues overturn,
And broils root out the work of masonry,
Nor Mars his sword nor war's quick fire shall burn
The living record of your memory.
'Gainst death and all-oblivious enmity
Shall you pace forth; your praise shall still find room
Even in the eyes of all posterity
That wear this world out to the ending doom.
So, till the judgment that yourself arise,
You live in this, and dwell in lovers' eyes.

That time of year thou mayst in me behold
When yellow leaves, or none, or few, do hang
Upon those boughs which shake against the cold,
Bare ruin'd choirs, where late the sweet birds sang.
In me thou see'st the twilight of such day
As after sunset fadeth in the west,
Which by and by black night doth take away,
Death's second self, that seals up all in rest.
In me thou see'st the glowing of such fire
That on the ashes of his youth doth lie,
As the death-bed whereon it must expire,
Consum'd with that which it was nourish'd by.
This thou perceiv'st, which makes thy love more strong,
To love that well which thou must leave ere long.

Let me not to the marriage of true minds
Admit impediments. Love is not love
Which alters when it alteration finds,
Or bends with the remover to remove:
O no! it is an ever-fixed mark
That looks on tempests and is never shaken;
It is the star to every wandering bark,
Whose worth's unknown, although his height be taken.
Love's not Time's fool, though rosy lips and cheeks
Within his bending sickle's compass come;
Love alters not with his brief hours and weeks,
But bears it out even to the edge of doom.
If this be error and upon me proved,
I never writ, nor no man ever loved.

My mistress' eyes are nothing like the sun;
Coral is far more red than her lips' red;
If snow be white, why then her breasts are dun;
If hairs be wires, black wires grow on her head.
I have seen roses damask'd, red and white,
But no such roses see I in her cheeks;
And in some perfumes is there more delight
Than in the breath that from my mistress reeks.
I love to hear her speak, yet well I know
That music hath a far more pleasing sound;
I grant I never saw a goddess go;
My mistress, when she walks, treads on the ground:
And yet, by heaven, I think my love as rare
As any she belied with false compare.
"""
