"""The backward cases (format 2): PyTorch's autograd gradients of one forward call.

The loss is sum(attn_output * grad_attn_output) [+ sum(attn_output_weights *
grad_attn_output_weights)], as golden/FORMAT.md says; the upstream gradients are drawn from
the case's own seed after everything the forward draws. Gradients are taken per input
object (as x.grad) and per parameter (p.grad, under its state_dict name).

In training with dropout, the mask PyTorch's dropout drew is recorded exactly: F.dropout
is wrapped so that, right after PyTorch's own call, the generator is put back to the state
before it and F.dropout runs again on ones of the same shape, which draws the same
Bernoulli values; its nonzero entries are the kept ones. The forward is then replayed with
that mask in place of the draw, and must come out bit for bit the same as PyTorch's.
"""

import contextlib
import copy

import torch
import torch.nn.functional as F

from .case_tensors import make_tensors
from .cases import Case
from .draws import randn, seed_for
from .runner import (PYTORCH_SHARE_OF_TOLERANCE, call_forward, check_outputs, check_own_projection,
                     in_projection, recorded_warnings, slow_path_only)
from .versions import is_2x


@contextlib.contextmanager
def recording_dropout(masks: list):
    """F.dropout as PyTorch runs it, with the kept entries of each call appended to masks."""
    original = F.dropout

    def recorded(input, p=0.5, training=True, inplace=False):
        before = torch.get_rng_state()
        out = original(input, p, training, inplace)
        after = torch.get_rng_state()
        torch.set_rng_state(before)
        ones = original(torch.ones_like(input), p, training, False)
        assert torch.equal(torch.get_rng_state(), after), "the replay drew a different amount"
        masks.append(ones != 0)
        return out

    F.dropout = recorded
    try:
        yield
    finally:
        F.dropout = original


@contextlib.contextmanager
def replaying_dropout(mask: torch.Tensor):
    """F.dropout applying `mask` (True = kept) as PyTorch applies the mask it draws:
    input * (mask / (1 - p)), the noise made and scaled by the same operations."""
    original = F.dropout

    def replayed(input, p=0.5, training=True, inplace=False):
        assert training and not inplace and mask.shape == input.shape
        noise = mask.to(input.dtype)
        noise.div_(1 - p)
        return input * noise

    F.dropout = replayed
    try:
        yield
    finally:
        F.dropout = original


def distinct_inputs(tensors: dict) -> dict:
    """query, key, value by name, each object once (the first name it has): x.grad belongs
    to the object, so self-attention has one input to take a gradient of."""
    named = {}
    for name in ("query", "key", "value"):
        if all(tensors[name] is not t for t in named.values()):
            named[name] = tensors[name]
    return named


def upstream_gradients(case: Case, attn_output, attn_weights) -> dict:
    """grad_attn_output, and grad_attn_output_weights with grad_weights, from the case's seed."""
    generator = torch.Generator().manual_seed(seed_for(case.name + "/grad"))
    grads = {"grad_attn_output": randn(tuple(attn_output.shape), case.dtype, generator)}
    if case.grad_weights:
        grads["grad_attn_output_weights"] = randn(tuple(attn_weights.shape), case.dtype, generator)
    return grads


def gradients(mha, tensors: dict, attn_output, attn_weights, upstream: dict) -> dict:
    """loss.backward(): grad.<input> per distinct input object, grad.<parameter> by name."""
    loss = (attn_output * upstream["grad_attn_output"]).sum()
    if "grad_attn_output_weights" in upstream:
        loss = loss + (attn_weights * upstream["grad_attn_output_weights"]).sum()
    inputs = distinct_inputs(tensors)
    parameters = dict(mha.named_parameters())
    grads = torch.autograd.grad(loss, list(inputs.values()) + list(parameters.values()))
    names = [f"grad.{n}" for n in list(inputs) + list(parameters)]
    return dict(zip(names, grads))


def forward(mha, tensors: dict, case: Case, mask) -> tuple:
    """The case's forward on the slow path, its dropout replayed from `mask` (if any)."""
    replay = replaying_dropout(mask) if mask is not None else contextlib.nullcontext()
    with slow_path_only([]), replay:
        return call_forward(mha, tensors, case)


def check_replay(case: Case, mha, tensors: dict, mask, attn_output, attn_weights) -> None:
    """The recorded mask, applied in place of a draw, gives PyTorch's forward bit for bit."""
    out, weights = forward(mha, tensors, case, mask)
    torch.testing.assert_close(out, attn_output, rtol=0, atol=0, equal_nan=True,
                               msg=f"{case.name}: the replayed dropout changes attn_output")
    if case.need_weights:
        torch.testing.assert_close(weights, attn_weights, rtol=0, atol=0, equal_nan=True,
                                   msg=f"{case.name}: the replayed dropout changes the weights")


def check_float32_gradients(case: Case, mha, tensors: dict, mask, upstream: dict,
                            results: dict) -> None:
    """As runner.check_float32_accuracy, for the forward and the gradients together: a
    float64 copy, the same dropout replayed, the same upstream gradients; PyTorch's float32
    results must lie within PYTORCH_SHARE_OF_TOLERANCE of the case's tolerances of it."""
    if case.dtype != torch.float32:
        return
    wide = copy.deepcopy(mha).double()
    doubled = {}

    def double(t):
        if t is None or not t.is_floating_point():
            return t
        return doubled.setdefault(id(t), t.detach().double().requires_grad_(t.requires_grad))

    wide_tensors = {name: double(t) for name, t in tensors.items()}
    out, weights = forward(wide, wide_tensors, case, mask)
    wide_upstream = {name: t.double() for name, t in upstream.items()}
    exact = {"attn_output": out, "attn_output_weights": weights,
             **gradients(wide, wide_tensors, out, weights, wide_upstream)}
    for name, result in results.items():
        tolerance = case.backward_tolerance if name.startswith("grad.") else case.tolerance
        got, want = result.detach().double(), exact[name].detach()
        finite = torch.isfinite(got) & torch.isfinite(want)
        same = (got == want) | (torch.isnan(got) & torch.isnan(want))
        assert bool((finite | same).all()), f"{case.name}/{name}: NaN or inf not as in float64"
        used = ((got - want).abs() / (tolerance["atol"] + tolerance["rtol"] * want.abs()))[finite]
        share = float(used.max()) if used.numel() else 0.0
        assert share <= PYTORCH_SHARE_OF_TOLERANCE, (
            f"{case.name}/{name}: PyTorch's float32 result uses {share:.0%} of the tolerance "
            f"{tolerance} against its float64 result, more than {PYTORCH_SHARE_OF_TOLERANCE:.0%}")


def run_backward_case(case: Case) -> tuple:
    """Run one backward case through PyTorch; return (module, inputs, outputs, q/k/v,
    written), where `written` holds the upstream gradients, the dropout mask and the
    expected gradients, by file name, and the warnings PyTorch gave (pytorch_warnings)."""
    mha, tensors = make_tensors(case)
    for t in distinct_inputs(tensors).values():
        t.requires_grad_(True)
    mha.train(case.training)

    captured, masks, warned = [], [], []
    with slow_path_only(captured), recording_dropout(masks), recorded_warnings(warned):
        attn_output, attn_weights = call_forward(mha, tensors, case)
        q, k, v = in_projection(mha, tensors, case)
    check_own_projection(case, captured, (q, k, v))
    check_outputs(case, attn_output, attn_weights)
    assert len(masks) == (1 if case.training and case.dropout > 0 else 0), case.name
    mask = masks[0] if masks else None
    if mask is not None:
        check_replay(case, mha, tensors, mask, attn_output, attn_weights)

    upstream = upstream_gradients(case, attn_output, attn_weights)
    grads = gradients(mha, tensors, attn_output, attn_weights, upstream)
    outputs = {"attn_output": attn_output}
    if case.need_weights:
        outputs["attn_output_weights"] = attn_weights
    check_float32_gradients(case, mha, tensors, mask, upstream, {**outputs, **grads})
    if not case.expects_nan(is_2x()):
        assert all(bool(torch.isfinite(g).all()) for g in grads.values()), f"{case.name}: NaN in gradients"

    written = {"pytorch_warnings": warned, **upstream}
    if mask is not None:
        written["dropout_mask"] = mask
    written.update(grads)
    return mha, tensors, outputs, {"q": q, "k": k, "v": v}, written
