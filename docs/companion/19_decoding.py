#!/usr/bin/python3
"""Companion to docs/19-decoding.md: a KV cache through static_k and static_v.

Runs the golden case functional_decode_step_f64 through F.multi_head_attention_forward,
then decodes T tokens one at a time: each step projects the new token's k and v, appends
them to a cache (N*H, t, D), passes the cache as static_k and static_v, and is checked
against the row of the full causal forward. Then cross-attention with kdim != vdim != E
(the golden case functional_cross_attention_kdim_vdim_f64, through a module with kdim and
vdim, and through static_k and static_v computed once), and last the call with
out_proj_weight=None, which PyTorch 1.13.1 refuses inside linear().
Run: /usr/bin/python3 docs/companion/19_decoding.py
"""

import torch
import torch.nn.functional as F

from common import check, close, done, load_case, max_abs_err, title

title("19 decoding, one token at a time")
torch.manual_seed(13)


def call(query, key, value, t, **kwargs):
    """F.multi_head_attention_forward with the golden case t's parameters, in PyTorch's order."""
    f = info["functional"]
    return F.multi_head_attention_forward(
        query, key, value, f["embed_dim_to_check"], f["num_heads"], t.get("in_proj_weight"),
        t.get("in_proj_bias"), None, None, False, 0.0, t.get("out_proj_weight"), t.get("out_proj_bias"),
        training=False, **kwargs)


def heads(x, H):
    """(L, N, E) -> (N*H, L, D), as PyTorch splits k and v: batch-head b = n*H + h."""
    L, N, E = x.shape
    return x.contiguous().view(L, N * H, E // H).transpose(0, 1)


print("-- 1) one cached step: the golden case functional_decode_step_f64 --")
info, t = load_case("functional_decode_step_f64")
tol = info["tolerance"]
token = t["query"]  # the newest token, (1, N, E); key and value are the same object
print(f"  query {tuple(token.shape)}, static_k {tuple(t['static_k'].shape)}, static_v {tuple(t['static_v'].shape)}")
out, w = call(token, token, token, t, static_k=t["static_k"], static_v=t["static_v"])
check("attn_output (1, N, E) is the golden attn_output.npy", close(out, t["attn_output"], **tol))
check("attn_output_weights (N, 1, t) = (2, 1, 6) are the golden ones",
      tuple(w.shape) == (2, 1, 6) and close(w, t["attn_output_weights"], **tol))

print("-- 2) decoding T = 6 tokens one at a time, the cache as static_k, static_v --")
T, N, E, H = 6, 2, 8, 2
W, b = t["in_proj_weight"], t["in_proj_bias"]
x = torch.randn(T, N, E, dtype=torch.float64)  # the whole sequence (T, N, E)
causal = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)  # True above the diagonal: masked
full, full_w = call(x, x, x, t, attn_mask=causal)  # (T, N, E), (N, T, T)
cache_k = torch.empty(N * H, 0, E // H, dtype=torch.float64)  # (N*H, t, D)
cache_v = torch.empty(N * H, 0, E // H, dtype=torch.float64)
largest = 0.0
for i in range(T):
    new = x[i:i + 1]  # (1, N, E)
    # The caller projects the new token's k and v and appends them: PyTorch keeps no cache.
    k = new @ W[E:2 * E].T + b[E:2 * E]
    v = new @ W[2 * E:].T + b[2 * E:]
    cache_k = torch.cat([cache_k, heads(k, H)], dim=1)  # (N*H, i + 1, D)
    cache_v = torch.cat([cache_v, heads(v, H)], dim=1)
    step, step_w = call(new, new, new, t, static_k=cache_k, static_v=cache_v)  # no mask needed
    diff = max_abs_err(step, full[i:i + 1])
    largest = max(largest, diff, max_abs_err(step_w[:, 0], full_w[:, i, :i + 1]))
    print(f"  token {i}: static_k {tuple(cache_k.shape)} -> step vs causal row {i}: max |diff| = {diff:.1e}")
print(f"  largest difference over the {T} steps, outputs and weights: {largest:.1e}")
check("every step is its row of the causal forward (float64, 1e-12)", largest <= 1e-12)
check("the causal row gives the positions after it weight 0",
      all(bool((full_w[:, i, i + 1:] == 0).all()) for i in range(T)))
check("the last step: one token (1, N, E), a cache of all T positions",
      tuple(step.shape) == (1, N, E) and tuple(cache_k.shape) == (N * H, T, E // H))

print("-- 3) PyTorch 1.13.1 projects key and value anyway, and drops them --")
seen = []
packed = F._in_projection_packed
F._in_projection_packed = lambda *a, **k: seen.append(packed(*a, **k)) or seen[-1]
try:
    again, _ = call(new, new, new, t, static_k=cache_k, static_v=cache_v)
    zeros = torch.zeros_like(new)  # key and value of another content: not read
    other, _ = call(new, zeros, zeros, t, static_k=cache_k, static_v=cache_v)
finally:
    F._in_projection_packed = packed
check("_in_projection_packed ran; its k, (1, N, E), was dropped",
      len(seen) == 2 and tuple(seen[0][1].shape) == (1, N, E))
check("the result does not depend on what key and value hold", torch.equal(again, other) and torch.equal(again, step))

print("-- 4) cross-attention: decoder queries, encoder keys and values, kdim != vdim != E --")
info, t = load_case("functional_cross_attention_kdim_vdim_f64")
tol = info["tolerance"]
query, key, value, padding = t["query"], t["key"], t["value"], t["key_padding_mask"]
E, H = info["functional"]["embed_dim_to_check"], info["functional"]["num_heads"]
kdim, vdim = key.shape[-1], value.shape[-1]
print(f"  query (L, N, E) {tuple(query.shape)}, key (S, N, kdim) {tuple(key.shape)}, "
      f"value (S, N, vdim) {tuple(value.shape)}")
module = torch.nn.MultiheadAttention(E, H, kdim=kdim, vdim=vdim, dtype=torch.float64).eval()
module.load_state_dict({"q_proj_weight": t["q_proj_weight"], "k_proj_weight": t["k_proj_weight"],
                        "v_proj_weight": t["v_proj_weight"], "in_proj_bias": t["in_proj_bias"],
                        "out_proj.weight": t["out_proj_weight"], "out_proj.bias": t["out_proj_bias"]})
out, w = module(query, key, value, key_padding_mask=padding)
check("MultiheadAttention(12, 3, kdim=6, vdim=10): separate weights",
      (E, kdim, vdim) == (12, 6, 10) and module._qkv_same_embed_dim is False)
check("the module gives the golden call's attn_output and weights",
      close(out, t["attn_output"], **tol) and close(w, t["attn_output_weights"], **tol))
# A decoder runs this at every step on the same encoder output: its k and v, projected once.
b_q, b_k, b_v = t["in_proj_bias"].chunk(3)
enc_k = heads(key @ t["k_proj_weight"].T + b_k, H)  # (N*H, S, D)
enc_v = heads(value @ t["v_proj_weight"].T + b_v, H)
rows = []
for i in range(query.shape[0]):  # the decoder's queries, one at a time
    row, _ = F.multi_head_attention_forward(
        query[i:i + 1], key, value, E, H, None, t["in_proj_bias"], None, None, False, 0.0,
        t["out_proj_weight"], t["out_proj_bias"], training=False, key_padding_mask=padding,
        use_separate_proj_weight=True, q_proj_weight=t["q_proj_weight"], k_proj_weight=t["k_proj_weight"],
        v_proj_weight=t["v_proj_weight"], static_k=enc_k, static_v=enc_v)
    rows.append(row)
check("a query at a time, encoder k, v as static_k, static_v: same", close(torch.cat(rows), out, **tol))

print("-- 5) out_proj_weight=None: PyTorch 1.13.1 fails inside linear() --")
info, t = load_case("functional_reject_out_proj_weight_none")
try:
    call(t["query"], t["key"], t["value"], t)  # t has no out_proj_weight: None
    message = None
except TypeError as error:
    message = str(error)
print(f"  TypeError: {message}")
check("a TypeError from linear(): weight must be Tensor, not NoneType",
      message == "linear(): argument 'weight' (position 2) must be Tensor, not NoneType")
check("the message the golden case recorded", message == info["pytorch_error"])
done()
