"""The self-attention lesson in NumPy, the numbers `qkv demo` reproduces.

Run it with `python3 lessons/self_attention.py`; `qkv demo` prints the same
text, digit for digit (tests/numpy/test_demo.py checks that). Every random
number comes from NumPy's own generators, which qkv re-implements bit for bit:
default_rng(42) (PCG64 + ziggurat normal) for the first part and the legacy
np.random.seed(0) + randn (MT19937 + polar Box-Muller) for lesson 5.
"""
import numpy as np

np.set_printoptions(precision=4, suppress=True)


def softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))  # subtract the row max: no overflow
    return e / e.sum(axis=-1, keepdims=True)


def attention(Q, K, V, mask=None):
    """softmax(Q Kᵀ / √d_k) V, the whole lesson in one formula."""
    d_k = Q.shape[-1]
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(d_k)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)  # True = may attend
    return softmax(scores) @ V


print("== 1. Four tokens, four numbers each ==")
tokens = ["the", "cat", "sat", "down"]
X = np.array([[1.0, 0.2, 0.0, 0.5],   # the
              [0.1, 0.9, 0.3, 0.0],   # cat
              [0.0, 0.8, 1.0, 0.2],   # sat
              [0.4, 0.0, 0.6, 0.9]])  # down
print("X", X.shape)
print(X)

print()
print("== 2. Queries, keys and values: three projections of X ==")
rng = np.random.default_rng(42)
d_model, d_k = 4, 3
W_q = rng.normal(size=(d_model, d_k))
W_k = rng.normal(size=(d_model, d_k))
W_v = rng.normal(size=(d_model, d_k))
Q, K, V = X @ W_q, X @ W_k, X @ W_v
print("W_q")
print(W_q)
print("Q", Q.shape, "K", K.shape, "V", V.shape)
print("Q")
print(Q)

print()
print("== 3. Scores: every query against every key ==")
scores = Q @ K.T
print("scores = Q @ K.T", scores.shape)
print(scores)
scaled = scores / np.sqrt(d_k)
print("scaled = scores / sqrt(d_k), sqrt(3) =", round(float(np.sqrt(d_k)), 4))
print(scaled)

print()
print("== 4. Softmax: scores become weights ==")
weights = softmax(scaled)
print(weights)
print("row sums:", weights.sum(axis=-1))
for i, tok in enumerate(tokens):
    j = int(weights[i].argmax())
    print(f"{tok:<5} attends most to '{tokens[j]}' ({weights[i, j]:.0%})")

print()
print("== 5. Output: a weighted average of the values ==")
output = weights @ V
print(output)
print("attention(Q, K, V) matches the step-by-step result:",
      np.allclose(attention(Q, K, V), output))

print()
print("== 6. Why divide by sqrt(d_k)? ==")
print("d_k   std(q.k)   std(q.k / sqrt(d_k))   (1000 random pairs each)")
for d in (4, 64, 1024):
    q = rng.normal(size=(1000, d))
    k = rng.normal(size=(1000, d))
    dots = (q * k).sum(axis=1)
    print(f"{d:<5} {dots.std():8.2f}   {(dots / np.sqrt(d)).std():8.2f}")

print()
print("== 7. Causal mask: no peeking at later tokens ==")
mask = np.tril(np.ones((4, 4), dtype=bool))
print(mask.astype(int))
masked = np.where(mask, scaled, -np.inf)
print(masked)
causal_weights = softmax(masked)
print(causal_weights)

print()
print("== 8. Multi-head attention: split, attend, concatenate, project ==")
n_tokens, d_model, n_heads = 5, 8, 2
d_head = d_model // n_heads
X5 = rng.normal(size=(n_tokens, d_model))
W_q5, W_k5, W_v5, W_o5 = (rng.normal(size=(d_model, d_model)) for _ in range(4))


def split_heads(M):  # (T, d_model) -> (heads, T, d_head)
    return M.reshape(n_tokens, n_heads, d_head).transpose(1, 0, 2)


heads = attention(split_heads(X5 @ W_q5), split_heads(X5 @ W_k5), split_heads(X5 @ W_v5))
concat = heads.transpose(1, 0, 2).reshape(n_tokens, d_model)
out5 = concat @ W_o5
print("input", X5.shape, "-> heads", heads.shape, "-> concat", concat.shape,
      "-> output", out5.shape)

print()
print("== 9. Lesson 5: one causal head, np.random.seed(0) ==")
np.random.seed(0)
T, d = 4, 8
x = np.random.randn(T, d)
W_query = np.random.randn(d, d) / np.sqrt(d)
W_key = np.random.randn(d, d) / np.sqrt(d)
W_value = np.random.randn(d, d) / np.sqrt(d)
q, k, v = x @ W_query, x @ W_key, x @ W_value
wei = q @ k.T / np.sqrt(d)
wei = np.where(np.tril(np.ones((T, T), dtype=bool)), wei, -np.inf)
wei = softmax(wei)
print("causal weights, rounded to 2 decimals")
print(np.round(wei, 2))
print("out", (wei @ v).shape)
print((wei @ v)[-1])
