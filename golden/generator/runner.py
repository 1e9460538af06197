"""Running PyTorch on a case: its slow path only, the module's own q, k, v, and the
checks on what it returns (shapes, NaN where expected, float32 accuracy against float64,
and that PyTorch rejects what a rejection case breaks). A case with grad disabled runs
under torch.no_grad() instead, where the module picks its path as it does for a user
(the native fast path when its conditions hold); what PyTorch did and the warnings it
gave are recorded for case.json."""

import contextlib
import copy
import warnings
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from .case_tensors import input_shape, make_tensors
from .cases import BATCH_FIRST, UNBATCHED, Case, Rejection
from .versions import generation, is_2x


class FastPathTaken(Exception):
    """MultiheadAttention took torch._native_multi_head_attention: not the math we mirror."""


@contextlib.contextmanager
def slow_path_only(captured: list):
    """Fail if the fused fast path runs; count slow-path calls; capture PyTorch's q, k, v.

    The 1.13 fast path is skipped anyway while grad is enabled and parameters require grad
    (they do here); the patch proves it for every call instead of trusting it.
    """
    saved = (torch._native_multi_head_attention, F.multi_head_attention_forward,
             F._in_projection_packed, F._in_projection)

    def no_fast_path(*args, **kwargs):
        raise FastPathTaken("MultiheadAttention took its fast path")

    def counting_forward(*args, **kwargs):
        captured.append("multi_head_attention_forward")
        return saved[1](*args, **kwargs)

    def capture_packed(*args, **kwargs):
        out = saved[2](*args, **kwargs)
        captured.append(tuple(out))
        return out

    def capture_separate(*args, **kwargs):
        out = saved[3](*args, **kwargs)
        captured.append(tuple(out))
        return out

    torch._native_multi_head_attention = no_fast_path
    F.multi_head_attention_forward = counting_forward
    F._in_projection_packed = capture_packed
    F._in_projection = capture_separate
    try:
        with torch.enable_grad():
            yield
    finally:
        (torch._native_multi_head_attention, F.multi_head_attention_forward,
         F._in_projection_packed, F._in_projection) = saved


@contextlib.contextmanager
def grad_disabled(taken: list):
    """torch.no_grad(), the module free to take its native fast path; "fast_path" is
    appended to `taken` each time torch._native_multi_head_attention runs."""
    saved = torch._native_multi_head_attention

    def spy(*args, **kwargs):
        taken.append("fast_path")
        return saved(*args, **kwargs)

    torch._native_multi_head_attention = spy
    try:
        with torch.no_grad():
            yield
    finally:
        torch._native_multi_head_attention = saved


def pytorch_call(case: Case, captured: list):
    """How the case's module call runs: on the slow path with grad enabled (captured gets
    the forward and the in-projection), or under torch.no_grad() (captured gets the fast
    path if taken)."""
    return slow_path_only(captured) if case.grad_enabled else grad_disabled(captured)


@contextlib.contextmanager
def recorded_warnings(messages: list):
    """Every warning raised inside, its message appended to `messages`."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    messages.extend(str(w.message) for w in caught)


def pytorch_path(case: Case, fast_path_taken: bool) -> str:
    """What PyTorch ran: its native fast path, or multi_head_attention_forward, whose 2.x
    branch without weights calls scaled_dot_product_attention ("sdpa"); 1.13's computes
    the weights either way ("weights")."""
    if fast_path_taken:
        return "fast_path"
    return "sdpa" if is_2x() and not case.need_weights else "weights"


def call_forward(mha: torch.nn.MultiheadAttention, tensors: dict, case: Case,
                 is_causal: Optional[bool] = None):
    """The module's forward with the case's arguments (is_causal, when given, in place of
    the case's); is_causal only under 2.x (1.13 has no such argument: its causal cases
    pass the causal mask as attn_mask)."""
    causal = {"is_causal": case.is_causal if is_causal is None else is_causal} if is_2x() else {}
    return mha(tensors["query"], tensors["key"], tensors["value"],
               key_padding_mask=tensors["key_padding_mask"],
               need_weights=case.need_weights,
               attn_mask=tensors["attn_mask"],
               average_attn_weights=case.average_attn_weights, **causal)


def seq_first_batched(query, key, value, batch_first: bool) -> tuple:
    """The inputs as MultiheadAttention.forward and multi_head_attention_forward hand them on.

    Mirrors the identity rules there: batch_first transposes once per distinct tensor, so
    self-attention stays one object; unbatched input is unsqueezed one tensor at a time, so
    even self-attention becomes three objects (and the packed projection runs three linears).
    """
    if query.dim() == 2:
        return query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
    if not batch_first:
        return query, key, value
    if key is value:
        if query is key:
            query = key = value = query.transpose(1, 0)
        else:
            query, key = [x.transpose(1, 0) for x in (query, key)]
            value = key
        return query, key, value
    return tuple(x.transpose(1, 0) for x in (query, key, value))


def in_projection(mha: torch.nn.MultiheadAttention, tensors: dict, case: Case) -> tuple:
    """q (L, N, E), k (S, N, E), v (S, N, E): PyTorch's own in-projection, before bias_k/bias_v."""
    q_in, k_in, v_in = seq_first_batched(tensors["query"], tensors["key"], tensors["value"],
                                         batch_first=case.layout == BATCH_FIRST)
    if mha._qkv_same_embed_dim:
        return F._in_projection_packed(q_in, k_in, v_in, mha.in_proj_weight, mha.in_proj_bias)
    b_q = b_k = b_v = None
    if mha.in_proj_bias is not None:
        b_q, b_k, b_v = mha.in_proj_bias.chunk(3)
    return F._in_projection(q_in, k_in, v_in, mha.q_proj_weight, mha.k_proj_weight,
                            mha.v_proj_weight, b_q, b_k, b_v)


def expected_shapes(case: Case) -> tuple:
    s_prime = case.S + int(case.add_bias_kv) + int(case.add_zero_attn)
    out = input_shape(case, case.L, case.E)
    rows = (case.L, s_prime) if case.average_attn_weights else (case.H, case.L, s_prime)
    weights = rows if case.layout == UNBATCHED else (case.N,) + rows
    return out, weights


# A float32 case's tolerance must leave room for implementations that sum in another
# order: PyTorch's own float32 results may use at most this share of it, measured against
# PyTorch's float64 results for the same parameters and inputs. (Under each of the kernel
# combinations measured for MAX_ULPS in check.py, every float32 case uses at most 6% of
# its tolerance so measured. extreme_1e30_in_value_f32, whose outputs cancel, used more
# than all of the default one, and has its own rtol.)
PYTORCH_SHARE_OF_TOLERANCE = 0.25


def check_float32_accuracy(case: Case, mha, tensors: dict, results: dict) -> None:
    """Fail unless PyTorch's float32 results (attn_output, attn_output_weights, q, k, v)
    are within PYTORCH_SHARE_OF_TOLERANCE of the case's tolerance of what a float64 copy
    of the module computes from the same inputs, with NaN and +-inf at the same places.
    Float64 cases have nothing wider to be checked against."""
    if case.dtype != torch.float32:
        return
    wide = copy.deepcopy(mha).double()
    doubled = {}  # by object, so that inputs that were one object stay one object

    def double(t):
        if t is None or not t.is_floating_point():
            return t
        return doubled.setdefault(id(t), t.double())

    wide_tensors = {name: double(t) for name, t in tensors.items()}
    with pytorch_call(case, []), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # recorded once, from the case's own call
        attn_output, attn_weights = call_forward(wide, wide_tensors, case)
        q, k, v = in_projection(wide, wide_tensors, case)
    exact = {"attn_output": attn_output, "attn_output_weights": attn_weights,
             "q": q, "k": k, "v": v}
    rtol, atol = case.tolerance["rtol"], case.tolerance["atol"]
    for name, result in results.items():
        got, want = result.detach().double(), exact[name].detach()
        finite = torch.isfinite(got) & torch.isfinite(want)
        same = (got == want) | (torch.isnan(got) & torch.isnan(want))
        assert bool((finite | same).all()), f"{case.name}/{name}: NaN or inf not as in float64"
        used = ((got - want).abs() / (atol + rtol * want.abs()))[finite]
        share = float(used.max()) if used.numel() else 0.0
        assert share <= PYTORCH_SHARE_OF_TOLERANCE, (
            f"{case.name}/{name}: PyTorch's float32 result uses {share:.0%} of the tolerance "
            f"(rtol {rtol}, atol {atol}) against its float64 result, more than "
            f"{PYTORCH_SHARE_OF_TOLERANCE:.0%}: too ill-conditioned for that tolerance")


def run_case(case: Case, alter: Optional[Callable[[dict], None]] = None) -> tuple:
    """Run one numeric case through PyTorch; return (module, inputs, outputs, q/k/v,
    facts): facts are what case.json records of the call under 2.x or with grad disabled
    (pytorch_path, pytorch_warnings). alter, when given, changes the drawn inputs first
    (see make_tensors). With grad disabled, q, k, v are not written: the fast path
    computes them inside one operator."""
    mha, tensors = make_tensors(case, alter)
    captured, warned = [], []
    with pytorch_call(case, captured), recorded_warnings(warned):
        attn_output, attn_weights = call_forward(mha, tensors, case)
    qkv = {}
    if case.grad_enabled:
        with slow_path_only(captured):
            qkv = dict(zip("qkv", in_projection(mha, tensors, case)))
        check_own_projection(case, captured, tuple(qkv.values()))
    check_outputs(case, attn_output, attn_weights)
    taken = "fast_path" in captured
    expected = any(g == generation() or (g == "2.x" and is_2x()) for g in case.fast_path)
    assert taken == expected, f"{case.name}: PyTorch {generation()} took the fast path: {taken}"

    outputs = {"attn_output": attn_output}
    if case.need_weights:
        outputs["attn_output_weights"] = attn_weights
    check_float32_accuracy(case, mha, tensors, {**outputs, **qkv})
    facts = {"pytorch_path": pytorch_path(case, taken), "pytorch_warnings": warned}
    return mha, tensors, outputs, qkv, facts


def check_own_projection(case: Case, captured: list, qkv: tuple) -> None:
    """The module ran its slow path once, with one in-projection, and our own call of
    that projection (in_projection) gave its q, k, v."""
    assert captured[0] == "multi_head_attention_forward", case.name
    module_qkv = captured[1]
    assert len(captured) == 3, f"{case.name}: expected one forward and one own projection"

    # Our direct call must reproduce what the module computed inside, bit for bit
    # (NaN where the module's holds NaN, in the extreme cases).
    for mine, theirs in zip(qkv, module_qkv):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0, equal_nan=True,
                                   msg=f"{case.name}: q/k/v differ from the module's")
    q, k, v = qkv
    assert q.shape == (case.L, case.N, case.E), case.name
    assert k.shape == v.shape == (case.S, case.N, case.E), case.name


def check_outputs(case: Case, attn_output: torch.Tensor,
                  attn_weights: Optional[torch.Tensor]) -> None:
    """The outputs have the shapes the case implies, weights only when it asks for them,
    and NaN exactly when the case expects NaN; no +-inf anywhere."""
    out_shape, weights_shape = expected_shapes(case)
    assert tuple(attn_output.shape) == out_shape, (case.name, attn_output.shape)
    if case.need_weights:
        assert tuple(attn_weights.shape) == weights_shape, (case.name, attn_weights.shape)
    else:
        assert attn_weights is None, case.name
    has_nan = bool(torch.isnan(attn_output).any())
    assert has_nan == case.expects_nan(is_2x()), f"{case.name}: NaN in output is {has_nan}"
    assert has_nan or bool(torch.isfinite(attn_output).all()), f"{case.name}: inf in output"


def check_torch_rejects(rejection: Rejection, mha, tensors: dict) -> None:
    """Assert that PyTorch rejects the broken case (construction or forward)."""
    case = rejection.case
    try:
        if rejection.module_override:
            broken = torch.nn.MultiheadAttention(**rejection.module_options(), dtype=case.dtype)
            broken.load_state_dict(mha.state_dict())
            mha = broken.eval()
        with pytorch_call(case, []):  # the slow path, or with grad disabled PyTorch's own choice
            call_forward(mha, tensors, case, rejection.forward_options()["is_causal"])
    except FastPathTaken:
        raise
    except Exception:  # AssertionError or RuntimeError, whichever PyTorch raises
        return
    raise SystemExit(f"generate.py: {rejection.name}: PyTorch {torch.__version__} accepted it")


def run_self_attention(mha: torch.nn.MultiheadAttention, x: torch.Tensor) -> torch.Tensor:
    """forward(x, x, x) on the slow path, without weights: the output alone."""
    with slow_path_only([]):
        out, _ = mha(x, x, x, need_weights=False)
    return out

