#!/usr/bin/python3
"""Companion to docs/18-train-it.md: the golden training run, replayed with PyTorch.

Rebuilds the page's model (Reverser of golden/generator/training.py) from
golden/training/reverse/initial/, trains it on the run's 20 batches with
torch.optim.Adam(lr=0.01), and checks the page's claims: the targets are the tokens
reversed; the 20 losses and the final parameters are the run's within 1e-12; the first
and last loss as the page prints them; log 8; the page's Adam update, written out, is
torch.optim.Adam's; its first step moves every parameter by about lr; with dW_q and dW_k
swapped the losses part from step 2 on; the formulas of the backward pass (cross-entropy,
embedding) are autograd's; and why bias=False: the key bias's gradient is round-off.
Run: /usr/bin/python3 docs/companion/18_train_it.py
"""

import json
import math
import sys

import numpy as np
import torch

from common import ROOT, check, close, done, max_abs_err, title

sys.path.insert(0, str(ROOT / "golden"))
from generator.training import Reverser, reverse_loss  # noqa: E402

title("18 train it")
RUN = ROOT / "golden" / "training" / "reverse"
settings = json.loads((RUN / "training.json").read_text())
tokens, targets = (torch.from_numpy(np.load(RUN / f"{n}.npy")).long() for n in ("tokens", "targets"))  # (K, N, L)
pytorch_losses = torch.from_numpy(np.load(RUN / "loss.npy"))
initial = {p.stem: torch.from_numpy(np.load(p)) for p in (RUN / "initial").glob("*.npy")}
final = {p.stem: torch.from_numpy(np.load(p)) for p in (RUN / "final").glob("*.npy")}
V, L, E, H, N, K = (settings[k] for k in ("vocab", "length", "embed_dim", "num_heads", "batch", "steps"))
tol = dict(rtol=1e-12, atol=1e-12)  # the program's tolerance

print("-- the task and the model --")
check("V = 8 tokens, L = 8, E = 16, H = 2, N = 32, 20 steps, lr 0.01",
      (V, L, E, H, N, K, settings["lr"]) == (8, 8, 16, 2, 32, 20, 0.01))
check("tokens (K, N, L) = (20, 32, 8); the targets are the tokens reversed",
      tuple(tokens.shape) == (20, 32, 8) and torch.equal(targets, tokens.flip(-1)))
check("the parameters: embedding.weight, position, attention.in_proj_weight, "
      "attention.out_proj.weight, readout.weight, readout.bias",
      sorted(initial) == sorted(["embedding.weight", "position", "attention.in_proj_weight",
                                 "attention.out_proj.weight", "readout.weight", "readout.bias"]))


def model_from(state):
    model = Reverser(V, L, E, H)
    model.load_state_dict(state, strict=True)  # bias=False: no in_proj_bias, no out_proj.bias
    return model


def train(update="torch", swap_qk=False):
    """The 20 steps: torch.optim.Adam, or the page's update written out ("page"), or it
    without the bias correction ("uncorrected"). Returns the losses, the model, and the
    largest and smallest move of a parameter entry in the first update."""
    model = model_from(initial)
    params = list(model.parameters())
    optimizer = torch.optim.Adam(params, lr=0.01) if update == "torch" else None
    m = [torch.zeros_like(w) for w in params]
    v = [torch.zeros_like(w) for w in params]
    losses, first_moves = [], None
    for t in range(1, K + 1):
        model.zero_grad()
        loss = reverse_loss(model, tokens[t - 1], targets[t - 1])
        loss.backward()
        losses.append(loss.item())
        if swap_qk:
            g = model.attention.in_proj_weight.grad
            g[:E], g[E:2 * E] = g[E:2 * E].clone(), g[:E].clone()
        before = [w.detach().clone() for w in params]
        if optimizer:
            optimizer.step()
        else:
            correct = update == "page"
            step_size = 0.01 / (1 - 0.9 ** t) if correct else 0.01
            denominator_scale = math.sqrt(1 - 0.999 ** t) if correct else 1.0
            with torch.no_grad():
                for w, m_w, v_w in zip(params, m, v):
                    m_w.mul_(0.9).add_(0.1 * w.grad)                       # m = b1 m + (1 - b1) g
                    v_w.mul_(0.999).add_(0.001 * w.grad * w.grad)          # v = b2 v + (1 - b2) g^2
                    w.add_(-step_size * (m_w / (v_w.sqrt() / denominator_scale + 1e-8)))
        if t == 1:
            moves = torch.cat([(w.detach() - b).abs().flatten() for w, b in zip(params, before)])
            grads = torch.cat([w.grad.abs().flatten() for w in params])
            first_moves = moves[grads > 1e-6]  # entries with a gradient well above eps
    return torch.tensor(losses, dtype=torch.float64), model, first_moves


print("-- the golden trajectory, replayed with torch.optim.Adam --")
losses, model, first_moves = train()
print(f"  losses: step 1 {losses[0]:.4f}, step 20 {losses[-1]:.4f}")
check("the 20 losses are the run's loss.npy (within 1e-12)", close(losses, pytorch_losses, **tol))
check("the parameters after 20 steps are final/ (within 1e-12)",
      all(close(w, final[name], **tol) for name, w in model.state_dict().items()))
check("step 1 2.0737 and step 20 1.2466, as the page prints",
      f"{losses[0]:.4f}" == "2.0737" and f"{losses[-1]:.4f}" == "1.2466")
check("log 8 = 2.0794: the loss of a uniform guess, near step 1's", f"{math.log(8):.2f}" == "2.08")

print("-- Adam --")
page_losses, page_model, _ = train("page")
check("the page's update, written out, is torch.optim.Adam's (within 1e-12)",
      close(page_losses, losses, **tol) and all(close(w, final[n], **tol) for n, w in page_model.state_dict().items()))
print(f"  first update: |move| between {float(first_moves.min()):.5f} and {float(first_moves.max()):.5f}")
check("the first update moves every parameter by about lr = 0.01 (0.0099 to 0.0100)",
      bool((first_moves > 0.0099).all() and (first_moves <= 0.01 + 1e-12).all()))
uncorrected, _, moves_u = train("uncorrected")
check("exercise 1: without the bias correction, step 1's loss is the same, step 2's is not",
      uncorrected[0] == losses[0] and abs(uncorrected[1] - losses[1]) > 1e-6)
print(f"  without it, the first update: |move| up to {float(moves_u.max()):.4f}")
check("  ... and the first update moves by up to 0.0316 = 0.01 sqrt(10) instead", f"{float(moves_u.max()):.4f}" == "0.0316")

print("-- a wrong gradient: dW_q and dW_k swapped --")
swapped, _, _ = train(swap_qk=True)
check("the first loss is the same (no update has run), the second differs",
      swapped[0] == losses[0] and abs(swapped[1] - losses[1]) > 1e-6)
print(f"  the 20 losses, Q and K blocks swapped: max_abs_err = {max_abs_err(swapped, losses):.2f}")
check("  ... by 0.76, as tutorial 18 prints", f"{max_abs_err(swapped, losses):.2f}" == "0.76")

print("-- the backward pass, from the loss back --")
model = model_from(initial)
x = (model.embedding(tokens[0]) + model.position).transpose(0, 1)  # (L, N, E)
x.retain_grad()
logits = model.readout(model.attention(x, x, x, need_weights=False)[0])  # (L, N, V)
logits.retain_grad()
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), targets[0].transpose(0, 1).reshape(-1))
loss.backward()
M = N * L
P = torch.softmax(logits.detach(), -1)
onehot = torch.nn.functional.one_hot(targets[0].transpose(0, 1), V).double()  # (L, N, V)
check("d logits = (P - onehot(target)) / M", close(logits.grad, (P - onehot) / M, 1e-12, 1e-15))
check("each row of d logits sums to 0", float(logits.grad.sum(-1).abs().max()) < 1e-15)
dx = x.grad  # (L, N, E)
d_embedding = torch.zeros(V, E, dtype=torch.float64)
for i in range(L):
    for n in range(N):
        d_embedding[tokens[0][n, i]] += dx[i, n]
check("d embedding[v] = sum of dx where token v was", close(model.embedding.weight.grad, d_embedding, 1e-12, 1e-15))
check("d position[i] = sum of dx(i, n) over n", close(model.position.grad, dx.sum(1), 1e-12, 1e-15))

print("-- why bias=False: the key bias's gradient is round-off --")
with_biases = Reverser(V, L, E, H)
with_biases.attention = torch.nn.MultiheadAttention(E, H, dtype=torch.float64)  # bias=True
state = dict(initial, **{"attention.in_proj_bias": torch.zeros(3 * E, dtype=torch.float64),
                         "attention.out_proj.bias": torch.zeros(E, dtype=torch.float64)})
with_biases.load_state_dict(state, strict=True)
reverse_loss(with_biases, tokens[0], targets[0]).backward()
g = with_biases.attention.in_proj_bias.grad  # [b_q; b_k; b_v]
g_q, g_k, g_v = (float(part.abs().max()) for part in g.chunk(3))
print(f"  step 1, biases at 0: max |grad b_q| {g_q:.1e}, |grad b_k| {g_k:.1e}, |grad b_v| {g_v:.1e}")
check("grad b_k is round-off, below 1e-15; grad b_q and b_v are above 1e-3",
      g_k < 1e-15 and g_q > 1e-3 and g_v > 1e-3)
done()
