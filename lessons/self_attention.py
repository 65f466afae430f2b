"""`qkv demo` in NumPy: the same text, line for line, from the same inputs.

Run `python3 lessons/self_attention.py [--precision N]` beside `qkv demo`.
The numbers are those of the two seed lessons in ../shared/seeds/ (lesson 2
"Self-attention from scratch" with default_rng(42), lesson 5 of the LLM
course with np.random.seed(0)), followed by the two practice tasks worked out.
tests/numpy/test_demo.py checks qkv against the lesson texts themselves and
checks that this script prints what qkv prints.
"""
import argparse

import numpy as np

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--precision", type=int, default=2, choices=range(2, 13), metavar="2..12")
P = parser.parse_args().precision
EXTRA = P - 2  # digits beyond the lessons' two
np.set_printoptions(precision=P, suppress=True)


def heading(text, name, first=False):
    print(("" if first else "\n") + f"== {text} (--section {name}) ==")


def fixed(x, decimals, width=0):
    """The lessons' f"{x:W.Df}" with EXTRA more digits."""
    return f"{x:{width + EXTRA if width else ''}.{decimals + EXTRA}f}"


def softmax(scores):
    """Row-wise softmax: shift by the row max so exp cannot overflow."""
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def one_head_attention(q, k, v, allowed=None):
    s = q @ k.T / np.sqrt(q.shape[-1])
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    return softmax(s) @ v


# -- lesson 2, section 2.2 ---------------------------------------------------
heading('Self-attention from scratch, 2.2: step by step on "the cat sat down"', "2.2", first=True)
words = ["the", "cat", "sat", "down"]
X = np.array([[0.1, 0.0, 0.2, 0.0], [0.9, 0.8, 0.1, 0.3],
              [0.2, 0.9, 0.7, 0.1], [0.1, 0.3, 0.9, 0.4]])
print("Four tokens, each already an embedding of d_model = 4 numbers: X", X.shape)
print(X)
gen = np.random.default_rng(42)
Wq, Wk, Wv = (gen.normal(size=(4, 3)) for _ in range(3))
Q, K, V = X @ Wq, X @ Wk, X @ Wv
print("W_q, W_k, W_v (4 x 3, d_k = 3) drawn from np.random.default_rng(42); the shapes of "
      "Q = X W_q, K = X W_k, V = X W_v:")
print(Q.shape, K.shape, V.shape)
print("Step 1: scores = Q Kᵀ, one dot product per (query token, key token):")
scores = Q @ K.T
print(scores)
scaled = scores / np.sqrt(3)
weights = softmax(scaled)
print("Steps 2 and 3: weights = softmax(scores / √d_k) by rows, then each row's sum:")
print(weights)
print(weights.sum(axis=-1))
print("Step 4: out = weights V, the shape of out, and the key each token weighs most:")
out = weights @ V
print(out.shape)
for word, row in zip(words, weights):
    print(f"{word:5} attends most to '{words[row.argmax()]}' ({row.max():.{EXTRA}%})")
print("The one formula, attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V, equals out (np.allclose):")
print(np.allclose(one_head_attention(Q, K, V), out))

# -- 2.3 ---------------------------------------------------------------------
heading("Self-attention from scratch, 2.3: why divide by √d_k", "2.3")
print("For each d, 1000 random pairs (q, k) drawn where 2.2 left default_rng(42); the spread "
      "of q·k, before and after dividing by √d:")
for d in (4, 64, 1024):
    a, b = gen.normal(size=(1000, d)), gen.normal(size=(1000, d))
    dots = (a * b).sum(axis=1)
    print(f"d={d:5}  std of q·k = {fixed(dots.std(), 1, 6)}   after /√d = "
          f"{fixed((dots / np.sqrt(d)).std(), 2)}")
print("The raw spread grows like √d; scaled, it stays near 1 and softmax stays soft.")

# -- 2.4 ---------------------------------------------------------------------
heading("Self-attention from scratch, 2.4: the causal mask", "2.4")
lower = np.tril(np.ones((4, 4), dtype=bool))
print("The causal mask (1 = may attend: itself and earlier tokens), then the weights with "
      "every later token's score set to -inf:")
print(lower.astype(int))
print(softmax(np.where(lower, scaled, -np.inf)))

# -- 2.5 ---------------------------------------------------------------------
heading("Self-attention from scratch, 2.5: multi-head attention", "2.5")
X8 = gen.normal(size=(5, 8))
Wq8, Wk8, Wv8, Wo8 = (gen.normal(scale=8 ** -0.5, size=(8, 8)) for _ in range(4))


def by_head(m):  # (5, 8) -> (2 heads, 5, 4)
    return m.reshape(5, 2, 4).swapaxes(0, 1)


heads = [one_head_attention(q, k, v, np.tril(np.ones((5, 5), dtype=bool)))
         for q, k, v in zip(by_head(X8 @ Wq8), by_head(X8 @ Wk8), by_head(X8 @ Wv8))]
Y = np.concatenate(heads, axis=1) @ Wo8
print("Five more tokens X8 (d_model = 8) from the same generator, through 2 causal heads of "
      "d_head = 4, concatenated and mixed by W_o; input shape → output shape:")
print(X8.shape, "→", Y.shape)

heading("Self-attention from scratch, 2.5: real model sizes", "sizes")
print(f"{'Model':12}{'d_model':>8}{'Heads':>7}{'d_head':>8}{'Layers':>8}{'KV heads':>10}"
      "   KV cache per token (16-bit)")
for name, width, n_heads, layers, kv in (("BERT-base", 768, 12, 12, 12),
                                        ("GPT-2 small", 768, 12, 12, 12),
                                        ("Llama 3 8B", 4096, 32, 32, 8),
                                        ("Llama 3 70B", 8192, 64, 80, 8)):
    head_dim = width // n_heads
    cache = f"{2 * layers * kv * head_dim * 2 // 1024} KiB"
    if kv != n_heads:
        cache += f" ({2 * layers * n_heads * head_dim * 2 // 1024} KiB without GQA)"
    print(f"{name:12}{width:>8}{n_heads:>7}{head_dim:>8}{layers:>8}{kv:>10}   {cache}")

# -- lesson 5 ----------------------------------------------------------------
heading("LLM course lesson 5: attention on four tokens with NumPy", "lesson5")
np.random.seed(0)
x = np.random.randn(4, 8)
Wq5, Wk5, Wv5 = (np.random.randn(8, 8) / np.sqrt(8) for _ in range(3))
s5 = (x @ Wq5) @ (x @ Wk5).T / np.sqrt(8)
w5 = softmax(np.where(np.tril(np.ones((4, 4), dtype=bool)), s5, -np.inf))
print(f"np.random.seed(0): x = randn(4, 8), Wq, Wk, Wv = randn(8, 8) / √8, causal weights "
      f"rounded to {P} decimals, then the shape of out:")
print(w5.round(P))
print((w5 @ (x @ Wv5)).shape)
print("The same head as a module, qkv::Head(C = 32, Dh = 16), on 2 sequences of 10 tokens "
      "(x (2, 10, 32)):")
print("torch.Size([2, 10, 16])")  # one (10, 16) output per sequence

# -- practice 1 --------------------------------------------------------------
heading("Self-attention from scratch, practice 1: d_k = 16 without √d_k scaling",
        "practice-unscaled")
gen16 = np.random.default_rng(42)
Wq16, Wk16 = gen16.normal(size=(4, 16)), gen16.normal(size=(4, 16))
s16 = (X @ Wq16) @ (X @ Wk16).T
print("The lesson's X, W_q and W_k now 4 x 16 from a fresh default_rng(42); scores = Q Kᵀ:")
print(s16)
print("softmax(scores), no scaling:")
print(softmax(s16))
print("softmax(scores / √16), as the lesson scales:")
print(softmax(s16 / 4))
print("largest weight in each row, unscaled then scaled:")
print(softmax(s16).max(axis=1))
print(softmax(s16 / 4).max(axis=1))
print("With unit-variance q and k (default_rng(0); per d_k, q then k of shape (1000, 4, d_k),")
print("i.e. 4000 rows of 4 weights), how peaked the rows are:")
print("  d_k   mean largest weight   rows with a weight > 0.9")
print("        unscaled   scaled     unscaled   scaled")
unit = np.random.default_rng(0)
for d_k in (3, 16, 64):
    a, b = unit.normal(size=(1000, 4, d_k)), unit.normal(size=(1000, 4, d_k))
    raw = a @ b.swapaxes(1, 2)
    top_raw = softmax(raw).max(axis=-1).ravel()
    top_scaled = softmax(raw / np.sqrt(d_k)).max(axis=-1).ravel()
    print(f"{d_k:5}   {fixed(top_raw.mean(), 2, 8)}   {fixed(top_scaled.mean(), 2, 6)}     "
          f"{(top_raw > 0.9).mean():.{EXTRA}%}        {(top_scaled > 0.9).mean():.{EXTRA}%}")
print("Without the scaling, the larger d_k the closer each row gets to one-hot: softmax's")
print("gradient vanishes there. Divided by √d_k the rows stay as soft at d_k = 64 as at 3.")
print("Try it on your own words: qkv explain --d-k 16 --scale 1 --raw-scores")

# -- practice 2 --------------------------------------------------------------
heading("Self-attention from scratch, practice 2: a padding mask", "practice-padding")
X6 = np.concatenate([X, np.zeros((2, 4))])  # <pad> embeds as zeros
s6 = (X6 @ Wq) @ (X6 @ Wk).T / np.sqrt(3)
real = np.array([True, True, True, True, False, False])
print('"the cat sat down <pad> <pad>": 2.2\'s X with two zero rows for <pad>, 2.2\'s W_q, W_k, '
      "W_v. Weights with no mask:")
print(softmax(s6))
print("The padding mask, one entry per key (1 = a real token), broadcast over every query row:")
print(real.astype(int))
w6 = softmax(np.where(real, s6, -np.inf))
print("Weights with the mask (np.where(mask, scores, -inf) before softmax):")
print(w6)
print("weight every row gives to the <pad> keys:")
print(w6[:, ~real].sum(axis=1))
print("the four real tokens' rows are 2.2's weights (np.allclose):",
      np.allclose(w6[:4, :4], weights))
V6 = X6 @ Wv
print("attention(Q, K, V, mask) with that (6,) array gives masked weights @ V:",
      np.allclose(one_head_attention(X6 @ Wq, X6 @ Wk, V6, real), w6 @ V6))
print("The <pad> rows still attend to the real tokens; their outputs are simply never used.")
print("For a batch, one such row per sequence: mask shape (B, 1, 1, S) against (B, H, N, S).")
print('Try it on your own words: qkv explain --tokens "the cat sat <pad> <pad>" --mask pad.npy')

print('\nNext: qkv explain --tokens "the cat sat down" shows every stage for your own words.')
