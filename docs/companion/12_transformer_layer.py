#!/usr/bin/python3
"""Companion to docs/12-transformer-layer.md: where attention sits in a Transformer layer.

With the shipped golden/weights/transformer_encoder/model.safetensors (a real
nn.TransformerEncoder, 2 layers, d_model 8, nhead 2, dim_feedforward 16), this checks the
page's claims against PyTorch 1.13.1's own nn.TransformerEncoderLayer: its parameters;
that its forward is, written out, norm1(x + self_attn(x, x, x)) then
norm2(x + linear2(relu(linear1(x)))) (norm_first=False), or x + self_attn(norm1(x)) then
x + ff(norm2(x)) (norm_first=True); LayerNorm's formula; that self_attn gets one tensor
as query, key and value and need_weights=False; that the encoder is its layers one after
the other; that attention alone knows no order (permuting the positions permutes the
output), so positions must be added to the input; and the decoder layer's two
attentions.
Run: /usr/bin/python3 docs/companion/12_transformer_layer.py
"""

import json

import numpy as np
import torch
import torch.nn.functional as F

from common import ROOT, check, close, done, read_safetensors, title

title("12 attention in a Transformer layer")
FOLDER = ROOT / "golden" / "weights" / "transformer_encoder"
info = json.loads((FOLDER / "model.json").read_text())
sd = read_safetensors(FOLDER / "model.safetensors")
src = torch.from_numpy(np.load(FOLDER / "src.npy"))  # (L, N, E) = (5, 2, 8), sequence first
E, H, FF = info["d_model"], info["nhead"], info["dim_feedforward"]
tol = dict(rtol=1e-6, atol=1e-6)  # float32, sums in another order than the fused layer's


def encoder(norm_first=False):
    layer = torch.nn.TransformerEncoderLayer(d_model=E, nhead=H, dim_feedforward=FF, dropout=0.0,
                                             norm_first=norm_first)
    model = torch.nn.TransformerEncoder(layer, num_layers=info["num_layers"], enable_nested_tensor=False)
    model.load_state_dict(sd, strict=True)
    return model.eval()


model = encoder()
layer0 = model.layers[0]

print("-- 1) what a TransformerEncoderLayer holds --")
keys = sorted(k[len("layers.0."):] for k in sd if k.startswith("layers.0."))
print(f"  layers.0.: {keys}")
check("self_attn (4 tensors), linear1, linear2, norm1, norm2 (2 each): 12 tensors, no position",
      keys == sorted(["self_attn.in_proj_weight", "self_attn.in_proj_bias", "self_attn.out_proj.weight",
                      "self_attn.out_proj.bias", "linear1.weight", "linear1.bias", "linear2.weight",
                      "linear2.bias", "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"]))
check("linear1 (dim_feedforward, E) = (16, 8), linear2 (E, dim_feedforward) = (8, 16)",
      tuple(sd["layers.0.linear1.weight"].shape) == (16, 8) and tuple(sd["layers.0.linear2.weight"].shape) == (8, 16))
check("self_attn is an nn.MultiheadAttention(8, 2); activation relu; norm_first False by default",
      isinstance(layer0.self_attn, torch.nn.MultiheadAttention) and layer0.self_attn.num_heads == 2
      and layer0.activation is F.relu and layer0.norm_first is False)

fused, fused_calls = torch._transformer_encoder_layer_fwd, []
torch._transformer_encoder_layer_fwd = lambda *a, **k: fused_calls.append(1) or fused(*a, **k)
try:
    with torch.no_grad():
        layer0(src)                                      # sequence-first: the written-out path
        check("the shipped (sequence-first) layer never takes the fused path, even under no_grad",
              len(fused_calls) == 0)
        batch_first = torch.nn.TransformerEncoderLayer(E, H, FF, dropout=0.0, batch_first=True).eval()
        batch_first(src.transpose(0, 1))
        check("(a batch_first=True layer in eval mode under no_grad does)", len(fused_calls) == 1)
finally:
    torch._transformer_encoder_layer_fwd = fused

print("-- 2) what self_attn is given --")
calls = []
hook = layer0.self_attn.register_forward_pre_hook(lambda m, args: calls.append(args))
forward = layer0.self_attn.forward


def spy(*args, **kwargs):
    calls.append(kwargs)
    return forward(*args, **kwargs)


layer0.self_attn.forward = spy
try:
    out_layer = layer0(src)
finally:
    layer0.self_attn.forward = forward
    hook.remove()
args, kwargs = calls[0], calls[1]
check("query, key and value are one tensor: self-attention", args[0] is args[1] is args[2])
check("need_weights=False: the layer never uses the weights", kwargs.get("need_weights") is False)


def self_attention(layer, x):
    return layer.self_attn(x, x, x, need_weights=False)[0]


def feed_forward(layer, x):
    return layer.linear2(F.relu(layer.linear1(x)))


print("-- 3) post-norm (norm_first=False, the default) --")
with torch.no_grad():
    x = src
    x1 = layer0.norm1(x + self_attention(layer0, x))
    x2 = layer0.norm2(x1 + feed_forward(layer0, x1))
check("layer(x) = norm2(y + ff(y)) with y = norm1(x + self_attn(x))", close(out_layer, x2, **tol))
mean = x1.mean(-1, keepdim=True)
var = ((x1 - mean) ** 2).mean(-1, keepdim=True)  # biased: divided by E, not E - 1
by_hand = (x1 - mean) / torch.sqrt(var + 1e-5) * layer0.norm2.weight + layer0.norm2.bias
check("LayerNorm: (x - mean) / sqrt(var + 1e-5) * weight + bias over the E features",
      close(layer0.norm2(x1), by_hand, **tol))
with torch.no_grad():
    two = model.layers[1](model.layers[0](src))
check("the encoder is its layers one after the other", close(model(src), two, **tol))
stored = torch.from_numpy(np.load(FOLDER / "layers.0.self_attn.attn_output.npy"))
check("layer 0's self_attn(src) is the stored output (the one 13-weights.md runs)",
      close(self_attention(layer0, src), stored, **info["tolerance"]))

print("-- 4) pre-norm (norm_first=True), the same weights --")
pre = encoder(norm_first=True).layers[0]
with torch.no_grad():
    y1 = src + self_attention(pre, pre.norm1(src))
    y2 = y1 + feed_forward(pre, pre.norm2(y1))
check("layer(x) = y + ff(norm2(y)) with y = x + self_attn(norm1(x))", close(pre(src), y2, **tol))
check("another output than post-norm's, from the same parameters", not close(pre(src), out_layer, **tol))

print("-- 5) positions: attention alone knows no order --")
perm = torch.tensor([3, 0, 4, 1, 2])
with torch.no_grad():
    permuted = self_attention(layer0, src[perm])
    check("self_attn(x[perm]) == self_attn(x)[perm]: the same outputs, moved", close(permuted, stored[perm], **tol))
    check("the whole layer too: layer(x[perm]) == layer(x)[perm]", close(layer0(src[perm]), out_layer[perm], **tol))
    position = torch.randn(5, 1, E, generator=torch.Generator().manual_seed(0))  # one vector per place
    with_pos = layer0(src + position)
    with_pos_permuted = layer0(src[perm] + position)
check("once a vector per place is added, a permuted input gives other outputs",
      not close(with_pos_permuted, with_pos[perm], **tol))

print("-- 6) the decoder layer: two attentions --")
dec = torch.nn.TransformerDecoderLayer(d_model=E, nhead=H, dim_feedforward=FF, dropout=0.0)
check("TransformerDecoderLayer has self_attn and multihead_attn, both nn.MultiheadAttention",
      isinstance(dec.self_attn, torch.nn.MultiheadAttention) and isinstance(dec.multihead_attn, torch.nn.MultiheadAttention))
seen = {}
dec.self_attn.register_forward_pre_hook(lambda m, a: seen.setdefault("self", a))
dec.multihead_attn.register_forward_pre_hook(lambda m, a: seen.setdefault("cross", a))
tgt, memory = torch.randn(3, 2, E), torch.randn(5, 2, E)
dec.eval()(tgt, memory, tgt_mask=torch.triu(torch.ones(3, 3, dtype=torch.bool), diagonal=1))
check("self_attn: query, key, value one tensor (the target side)", seen["self"][0] is seen["self"][1] is seen["self"][2])
check("multihead_attn: key and value are the encoder's output, the query is not",
      seen["cross"][1] is seen["cross"][2] is memory and seen["cross"][0] is not memory)

print("-- the page's exercises (worked out in the teachers' answer key) --")
with torch.no_grad():
    silent_post, silent_pre = encoder().layers[0], encoder(norm_first=True).layers[0]
    for silent in (silent_post, silent_pre):
        silent.self_attn.out_proj.weight.zero_()  # the attention output is now 0 everywhere
        silent.self_attn.out_proj.bias.zero_()
    y = silent_post.norm1(src)
    check("exercise 1: attention 0, post-norm: norm2(y + ff(y)) with y = norm1(x)",
          close(silent_post(src), silent_post.norm2(y + feed_forward(silent_post, y)), **tol))
    check("  ... pre-norm: x + ff(norm2(x)), x itself carried on",
          close(silent_pre(src), src + feed_forward(silent_pre, silent_pre.norm2(src)), **tol))
    causal = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    check("exercise 2: with a causal src_mask, a permuted input no longer gives permuted outputs",
          not close(layer0(src[perm], src_mask=causal), layer0(src, src_mask=causal)[perm], **tol))
small = torch.nn.Transformer(d_model=16, nhead=2, dim_feedforward=16)  # the same 6 + 6 layers as the defaults
attentions = [name for name, m in small.named_modules() if isinstance(m, torch.nn.MultiheadAttention)]
cross = [name for name in attentions if name.endswith("multihead_attn")]
check("exercise 3: nn.Transformer holds 18 attention modules, 6 of them cross-attention",
      len(attentions) == 18 and len(cross) == 6 and len(small.encoder.layers) == len(small.decoder.layers) == 6)
done()
