"""Data sets: deterministic given the seed, the right shapes and labels, the shipped text, and
the batch iterator."""

import numpy as np
import pytest

from fpsim import data, nn, optim
from fpsim.formats import fp16, fp32
from fpsim.nn import functional as F


def test_two_moons_shape_labels_and_determinism():
    X, y = data.two_moons(101, noise=0.05, seed=3)
    assert X.shape == (101, 2) and X.dtype == np.float32 and y.dtype == np.int64
    assert sorted(np.bincount(y).tolist()) == [50, 51]
    X2, y2 = data.two_moons(101, noise=0.05, seed=3)
    assert np.array_equal(X, X2) and np.array_equal(y, y2)
    assert not np.array_equal(X, data.two_moons(101, noise=0.05, seed=4)[0])
    # noiseless moons: the upper one lies on the unit circle, the lower one on a shifted circle
    Xc, yc = data.two_moons(50, noise=0.0, seed=0)
    r_up = np.hypot(*Xc[yc == 0].T)
    r_low = np.hypot(Xc[yc == 1, 0] - 1, Xc[yc == 1, 1] - 0.5)
    np.testing.assert_allclose(r_up, 1.0, atol=1e-6)
    np.testing.assert_allclose(r_low, 1.0, atol=1e-6)


def test_spirals():
    X, y = data.spirals(301, n_classes=3, seed=0)
    assert X.shape == (301, 2) and np.bincount(y).tolist() == [101, 100, 100]
    assert np.abs(X).max() <= 1.0
    assert np.array_equal(X, data.spirals(301, n_classes=3, seed=0)[0])


def test_teacher_regression():
    X, Y = data.teacher_regression(64, in_features=5, hidden=7, out_features=2, seed=1)
    assert X.shape == (64, 5) and Y.shape == (64, 2) and Y.dtype == np.float32
    assert np.array_equal(Y, data.teacher_regression(64, 5, 7, 2, seed=1)[1])
    assert np.abs(Y).max() < 5 and Y.std() > 0.05
    noisy = data.teacher_regression(64, 5, 7, 2, noise=0.5, seed=1)[1]
    assert 0.3 < np.std(noisy - Y) < 0.7


def test_shipped_text_and_vocab():
    text = data.char_text()
    assert 4000 < len(text) < 8000
    assert text.startswith("From fairest creatures") and "summer's day" in text
    X, Y, vocab = data.char_dataset(seq_len=16)
    assert X.shape == Y.shape and X.shape[1] == 16 and X.dtype == np.int64
    assert np.array_equal(X[:, 1:], Y[:, :-1])  # targets are the next characters
    assert vocab.decode(X[0]) == text[:16] and vocab.decode(Y[0]) == text[1:17]
    assert len(vocab) == len(set(text)) and np.array_equal(vocab.encode(text[:5]), X[0, :5])
    Xs, _, _ = data.char_dataset(seq_len=8, stride=3)
    assert vocab.decode(Xs[1]) == text[3:11]


def test_batch_iterator_covers_everything_once_per_epoch():
    X = np.arange(10, dtype=np.float64).reshape(10, 1) + 0.1
    y = np.arange(10)
    it = data.BatchIterator(X, y, batch_size=4, seed=0, format="fp16")
    assert len(it) == 3
    epoch1 = list(it)
    assert [len(b[1]) for b in epoch1] == [4, 4, 2]
    xb, yb = epoch1[0]
    assert xb.format is fp16 and yb.format is None
    assert np.array_equal(xb.data[:, 0], np.float16(yb.data + 0.1).astype(np.float32))
    seen = np.concatenate([b[1].data for b in epoch1])
    assert sorted(seen.tolist()) == list(range(10))
    epoch2 = np.concatenate([b[1].data for b in it])
    assert not np.array_equal(seen, epoch2)  # reshuffled
    again = data.BatchIterator(X, y, batch_size=4, seed=0, format="fp16")
    assert np.array_equal(np.concatenate([b[1].data for b in again]), seen)  # reproducible
    assert len(data.BatchIterator(X, y, batch_size=4, drop_last=True)) == 2
    plain = list(data.batches(X, batch_size=3, shuffle=False))
    assert plain[0][0].format is fp32 and plain[-1][0].data[0, 0] == np.float32(9.1)
    with pytest.raises(ValueError, match="same length"):
        data.BatchIterator(X, y[:5])


def test_char_model_learns_the_text():
    X, Y, vocab = data.char_dataset(seq_len=8)
    V = len(vocab)

    class Bigram(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(V, 16, seed=0)
            self.out = nn.Linear(16, V, seed=1)

        def forward(self, idx):
            return self.out(F.gelu(self.emb(idx)))

    model = Bigram()
    opt = optim.Adam(model.parameters(), lr=0.05)
    losses = []
    for xb, yb in data.BatchIterator(X, Y, batch_size=64, seed=0):
        logits = model(xb)
        loss = F.cross_entropy(logits.reshape(-1, V), yb.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] > np.log(V) - 1 and np.mean(losses[-3:]) < 0.75 * losses[0]
