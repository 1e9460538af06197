"""The version-3 cases (golden/FORMAT.md): one call of the functional form,
torch.nn.functional.multi_head_attention_forward, with no module around it.

Functional is one call: its sizes and which of the function's optional arguments it
passes (static_k and static_v among them: a KV cache, already projected and split into
heads). Its tensors are drawn from the case's own seed; PyTorch is called with exactly the
tensor objects written to the case (one object where query is key), and what it returns
is written next to them. A decoding step (decode_step) is the last token of a causal
self-attention attending over a cache of all T tokens' keys and values, computed by
PyTorch's own in-projection; the generator checks that the step gives the last row of the
full causal forward.

FunctionalRejection is a valid call, then broken: PyTorch must raise, with a message that
holds the one in the table, and its message is written to case.json as pytorch_error.

To add a case, add it to FUNCTIONAL_CASES or FUNCTIONAL_REJECTIONS and regenerate.
"""

import dataclasses
import functools
from pathlib import Path
from typing import Callable, Optional

import torch
import torch.nn.functional as F

from .case_tensors import make_attn_mask, make_key_padding_mask
from .cases import CROSS, DTYPE_NAME, ENC_DEC, SELF, SEQ_FIRST, TOLERANCE, UNBATCHED, Case
from .draws import randn, seed_for, uniform
from .files import new_folder, save_npy, write_json
from .runner import PYTORCH_SHARE_OF_TOLERANCE
from .versions import generation, is_2x, is_golden_pytorch

# The version of golden/FORMAT.md these cases are written in.
FUNCTIONAL_FORMAT = 3

# The function's tensor arguments, each written as <name>.npy when the call passes it.
TENSOR_ARGUMENTS = ("query", "key", "value", "in_proj_weight", "in_proj_bias", "bias_k", "bias_v",
                    "out_proj_weight", "out_proj_bias", "key_padding_mask", "attn_mask",
                    "q_proj_weight", "k_proj_weight", "v_proj_weight", "static_k", "static_v")
# Its other arguments: case.json's "functional" object.
OPTION_ARGUMENTS = ("embed_dim_to_check", "num_heads", "add_zero_attn", "dropout_p", "training",
                    "need_weights", "average_attn_weights", "use_separate_proj_weight")

# How close a decoding step's output must be to the last row of the full causal forward:
# the same sums, but the GEMMs see one row instead of T, and may round differently.
DECODE_STEP_ATOL = {torch.float32: 1e-5, torch.float64: 1e-12}


# --------------------------------------------------------------------------------------
# What a case is
# --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Functional:
    """One call of F.multi_head_attention_forward. L = target length, S = the key's
    length, N = batch, E = embed_dim, H = heads, D = E / H.

    inputs: SELF (query is key is value), ENC_DEC (key is value) or CROSS.
    static_k, static_v: None (not passed), or the length S_static of the tensor passed,
            (N*H, S_static, D), or (H, S_static, D) unbatched.
    attn_mask: None, "float_2d" or "bool_2d": (L, S). key_padding_mask: bool (N, S'')
            (unbatched (S'')), S'' being static_k's length when it is given, else S.
    decode_step: the query is the last of T = static_k tokens, key = value = query, and
            static_k, static_v are PyTorch's projections of all T (see decode_step_inputs).
    """
    name: str
    description: str
    dtype: torch.dtype = torch.float32
    E: int = 8
    H: int = 2
    L: int = 4
    S: int = 4
    N: int = 2
    kdim: Optional[int] = None     # the key's features (use_separate_proj_weight only)
    vdim: Optional[int] = None     # the value's features (use_separate_proj_weight only)
    unbatched: bool = False
    inputs: str = CROSS
    separate: bool = False         # use_separate_proj_weight: q/k/v_proj_weight
    in_proj_bias: bool = True
    out_proj_bias: bool = True
    bias_kv: bool = False          # bias_k and bias_v, (1, 1, E)
    add_zero_attn: bool = False
    dropout_p: float = 0.0
    training: bool = False
    need_weights: bool = True
    average_attn_weights: bool = True
    static_k: Optional[int] = None
    static_v: Optional[int] = None
    attn_mask: Optional[str] = None
    key_padding_mask: bool = False
    decode_step: bool = False
    fully_masked_row: bool = False  # row 2 of the 2-D attn_mask fully masked (as Case's)
    expect_nan: bool = False        # attn_output holds NaN (1.13; 2.x: expect_nan_2x if given)
    expect_nan_2x: Optional[bool] = None
    generations: tuple = ("1.13", "2.x")  # the generations of PyTorch that write the case

    def __post_init__(self):
        assert self.name.startswith("functional_"), self.name
        assert self.inputs in (SELF, ENC_DEC, CROSS), self.name
        assert self.E % self.H == 0 and self.E <= 12, self.name
        assert self.L <= 7 and self.S <= 7 and self.N <= 3, self.name
        assert max(self.static_k or 0, self.static_v or 0) <= 7, self.name
        assert self.separate or (self.kdim is None and self.vdim is None), self.name
        assert self.attn_mask in (None, "float_2d", "bool_2d"), self.name
        assert not (self.training and self.dropout_p > 0), f"{self.name}: dropout must be off"
        if self.inputs == SELF:
            assert self.L == self.S and self.kdim_ == self.vdim_ == self.E, self.name
        if self.inputs == ENC_DEC:
            assert self.kdim_ == self.vdim_, self.name
        if self.unbatched:
            assert self.N == 1, f"{self.name}: unbatched means N == 1"
        if self.static_k is not None and self.static_v is not None:
            assert not self.bias_kv, f"{self.name}: PyTorch adds no bias to a static key"
        if (self.static_k is None) != (self.static_v is None):
            # The other of k, v comes from the key's projection, of length S.
            assert (self.static_k or self.static_v) == self.S, self.name
        if self.attn_mask is not None:
            assert self.key_length == self.S, f"{self.name}: attn_mask is (L, S)"
        if self.decode_step:
            assert self.inputs == SELF and self.L == self.S == 1, self.name
            assert self.static_k == self.static_v and not self.separate, self.name

    @property
    def kdim_(self) -> int:
        return self.E if self.kdim is None else self.kdim

    @property
    def vdim_(self) -> int:
        return self.E if self.vdim is None else self.vdim

    @property
    def D(self) -> int:
        return self.E // self.H

    @property
    def key_length(self) -> int:
        """The length of the keys attended to before bias_k and the zero key: static_k's
        when it is given, else S."""
        return self.S if self.static_k is None else self.static_k

    @property
    def tolerance(self) -> dict:
        return TOLERANCE[self.dtype]

    def shape(self, length: int, dim: int) -> tuple:
        """An input's shape: (length, N, dim), or (length, dim) unbatched."""
        return (length, dim) if self.unbatched else (length, self.N, dim)

    def static_shape(self, length: int) -> tuple:
        """static_k's or static_v's shape: (N*H, length, D)."""
        return (self.N * self.H, length, self.D)

    def expected_shapes(self) -> tuple:
        """(attn_output's shape, attn_output_weights' shape) that PyTorch returns."""
        s_prime = self.key_length + int(self.bias_kv) + int(self.add_zero_attn)
        rows = (self.L, s_prime) if self.average_attn_weights else (self.H, self.L, s_prime)
        return self.shape(self.L, self.E), rows if self.unbatched else (self.N,) + rows

    def mask_case(self) -> Case:
        """A version-1 Case with this call's mask shapes (S counted as key_length), so
        that the masks are drawn as case_tensors draws every other case's."""
        return Case(self.name, self.description, dtype=self.dtype, E=self.E, H=self.H, L=self.L,
                    S=self.key_length, N=self.N, layout=UNBATCHED if self.unbatched else SEQ_FIRST,
                    inputs=CROSS, attn_mask=self.attn_mask, key_padding_mask=self.key_padding_mask,
                    fully_masked_row=self.fully_masked_row)

    def expects_nan(self) -> bool:
        """Whether PyTorch's attn_output holds NaN, under the PyTorch here."""
        return self.expect_nan_2x if is_2x() and self.expect_nan_2x is not None else self.expect_nan


@dataclasses.dataclass(frozen=True)
class FunctionalRejection:
    """A valid call (`base`), then broken by defect(call), which changes the keyword
    arguments; PyTorch must raise with a message holding `error`. Where PyTorch 2.x
    words the rejection differently, error_2x is what 2.x's message holds. Each
    generation's case records the message its PyTorch gave."""
    name: str
    description: str
    base: Functional
    defect: Callable[[dict], None]
    error: str
    error_2x: Optional[str] = None
    generations: tuple = ("1.13", "2.x")  # ("2.x",) when 1.13 accepts the call

    @property
    def spec(self) -> Functional:
        """The base call under this rejection's name: its tensors are drawn from the
        rejection's own seed, and defect then breaks them."""
        return dataclasses.replace(self.base, name=self.name, description=self.description)


# --------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------

F64 = torch.float64

FUNCTIONAL_CASES = [
    # 1) In-projection and out-projection: packed, separate, with and without biases.
    Functional("functional_packed_f32",
               "The packed in_proj_weight (3E, E) and in_proj_bias, out_proj_weight and "
               "out_proj_bias, cross attention (three objects), averaged weights.",
               L=4, S=5, N=2),
    Functional("functional_self_attention_f64",
               "Self-attention: query, key and value are one object (the one-GEMM packed "
               "in-projection), with a float (L, S) attn_mask holding -inf entries; float64.",
               dtype=F64, L=5, S=5, N=2, inputs=SELF, attn_mask="float_2d"),
    Functional("functional_use_separate_proj_weight_f32",
               "use_separate_proj_weight=True: q_proj_weight, k_proj_weight, v_proj_weight (E, E) "
               "with kdim == vdim == E, in_proj_bias split in three; E=12, H=3.",
               E=12, H=3, L=3, S=4, N=2, separate=True),
    Functional("functional_cross_attention_kdim_vdim_f64",
               "A decoder's queries on an encoder's keys and values of other sizes: "
               "use_separate_proj_weight with k_proj_weight (E, kdim=6), v_proj_weight "
               "(E, vdim=10), E=12, H=3, and a bool key_padding_mask; float64.",
               dtype=F64, E=12, H=3, L=3, S=6, N=2, kdim=6, vdim=10, separate=True,
               key_padding_mask=True),
    Functional("functional_no_in_proj_bias_f32",
               "in_proj_bias=None, out_proj_bias given; key is value (the two-GEMM branch).",
               L=4, S=4, N=2, inputs=ENC_DEC, in_proj_bias=False),
    Functional("functional_no_out_proj_bias_f64",
               "out_proj_bias=None, in_proj_bias given; self-attention, float64.",
               dtype=F64, L=4, S=4, N=3, inputs=SELF, out_proj_bias=False),
    Functional("functional_no_biases_f32",
               "in_proj_bias=None and out_proj_bias=None: no projection bias at all.",
               L=3, S=5, N=2, in_proj_bias=False, out_proj_bias=False),

    # 2) The other arguments.
    Functional("functional_bias_kv_add_zero_attn_f32",
               "bias_k and bias_v (1, 1, E) appended after the in-projection, then the zero key "
               "and value (add_zero_attn), with a bool key_padding_mask (N, S) padded twice: "
               "weights (N, L, S+2).",
               L=3, S=5, N=3, inputs=ENC_DEC, bias_kv=True, add_zero_attn=True,
               key_padding_mask=True),
    Functional("functional_dropout_not_training_f64",
               "dropout_p=0.5 with training=False: the training argument turns dropout off, "
               "and the result is exact; float64.",
               dtype=F64, L=4, S=4, N=2, dropout_p=0.5),

    # 3) static_k and static_v: keys and values already projected and split into heads,
    #    which replace k and v after the in-projection (a KV cache).
    Functional("functional_static_kv_f32",
               "static_k and static_v (N*H, 6, D), longer than the key (S=3): a cache longer "
               "than the keys; the key's own projection is computed and discarded. "
               "Weights (N, L, 6).",
               L=4, S=3, N=2, inputs=ENC_DEC, static_k=6, static_v=6),
    Functional("functional_static_kv_f64",
               "static_k and static_v (N*H, 7, D) with S=4, E=12, H=3, N=3, cross attention; "
               "float64.",
               dtype=F64, E=12, H=3, L=2, S=4, N=3, static_k=7, static_v=7),
    Functional("functional_static_kv_key_padding_mask_f32",
               "static_k and static_v (N*H, 6, D) with S=3 and a bool key_padding_mask of shape "
               "(N, 6): PyTorch checks the mask against the static length, not S.",
               L=4, S=3, N=2, static_k=6, static_v=6, key_padding_mask=True),
    Functional("functional_static_kv_attn_mask_f64",
               "static_k and static_v of the key's own length (S_static == S == 5), a float "
               "(L, S) attn_mask and a bool key_padding_mask (N, S); float64.",
               dtype=F64, L=4, S=5, N=2, inputs=ENC_DEC, static_k=5, static_v=5,
               attn_mask="float_2d", key_padding_mask=True),
    Functional("functional_static_kv_add_zero_attn_f64",
               "static_k and static_v (N*H, 5, D) with S=3, then the zero key and value "
               "(add_zero_attn) after them, with a key_padding_mask (N, 5): weights (N, L, 6); "
               "float64.",
               dtype=F64, L=3, S=3, N=2, static_k=5, static_v=5, add_zero_attn=True,
               key_padding_mask=True),
    Functional("functional_static_kv_unbatched_f32",
               "Unbatched query, key and value (L, E), (S, E) with static_k and static_v of "
               "shape (H, 5, D): weights (L, 5).",
               L=4, S=2, N=1, unbatched=True, static_k=5, static_v=5),
    Functional("functional_static_kv_per_head_weights_f64",
               "static_k and static_v (N*H, 6, D), S=4, with average_attn_weights=False: "
               "per-head weights (N, H, L, 6); E=12, H=3, float64.",
               dtype=F64, E=12, H=3, L=3, S=4, N=2, static_k=6, static_v=6,
               average_attn_weights=False),
    Functional("functional_static_kv_no_weights_f32",
               "static_k and static_v (N*H, 5, D), S=2, need_weights=False: no weights file.",
               L=3, S=2, N=3, inputs=ENC_DEC, static_k=5, static_v=5, need_weights=False),
    Functional("functional_static_k_only_f32",
               "static_k alone (N*H, S, D); v comes from the value's projection. PyTorch needs "
               "static_k's length to equal S, the length of that v.",
               L=4, S=4, N=2, static_k=4),
    Functional("functional_static_kv_separate_proj_f64",
               "use_separate_proj_weight with kdim=5, vdim=6 (E=8) and static_k, static_v "
               "(N*H, 6, D), S=3: the projections of key and value are computed and replaced; "
               "float64.",
               dtype=F64, L=3, S=3, N=2, kdim=5, vdim=6, separate=True, static_k=6, static_v=6),

    # 4) A KV-cache decoding step.
    Functional("functional_decode_step_f64",
               "One decoding step of causal self-attention over T=6 tokens: query = key = value "
               "is the last token (1, N, E), one object; static_k and static_v (N*H, 6, D) are "
               "the head-split k and v of all six tokens from PyTorch's own packed "
               "in-projection. attn_output equals the last row of the full causal forward "
               "(to 1e-12); float64.",
               dtype=F64, L=1, S=1, N=2, inputs=SELF, static_k=6, static_v=6, decode_step=True),
    Functional("functional_decode_step_f32",
               "One decoding step of causal self-attention over T=6 tokens, as "
               "functional_decode_step_f64, in float32: attn_output equals the last row of the "
               "full causal forward to 1e-5.",
               L=1, S=1, N=2, inputs=SELF, static_k=6, static_v=6, decode_step=True),
]


def _base(**kwargs) -> Functional:
    """A valid base of a rejection case: L=3, S=4, N=2, E=8, H=2 (D=4) unless told."""
    return Functional("functional_base", "(valid base of a rejection case)",
                      **{"L": 3, "S": 4, "N": 2, **kwargs})


def _static_kv(**kwargs) -> Functional:
    """A valid base with static_k and static_v (N*H, 6, D), longer than S=4."""
    return _base(static_k=6, static_v=6, **kwargs)


def _set(name: str, make: Callable[[dict], Optional[torch.Tensor]]) -> Callable[[dict], None]:
    """A defect that replaces the argument `name` with make(call)."""
    def defect(call: dict) -> None:
        call[name] = make(call)
    return defect


def _add_static_kv(call: dict) -> None:
    """static_k and static_v (N*H, S, D), drawn, added to a call that has bias_k and bias_v."""
    bsz = call["query"].shape[1]
    shape = (bsz * call["num_heads"], call["key"].shape[0],
             call["embed_dim_to_check"] // call["num_heads"])
    call["static_k"] = randn(shape, call["query"].dtype)
    call["static_v"] = randn(shape, call["query"].dtype)


def _float_mask_of_key_length(call: dict) -> torch.Tensor:
    """A float attn_mask (L, S), drawn: the shape of the key, not of static_k."""
    shape = (call["query"].shape[0], call["key"].shape[0])
    return randn(shape, call["query"].dtype)


def _grow(name: str, dim: int) -> Callable[[dict], None]:
    """A defect that makes dimension `dim` of the argument `name` one longer."""
    return _set(name, lambda c: torch.cat([c[name], c[name].narrow(dim, 0, 1)], dim))


FUNCTIONAL_REJECTIONS = [
    FunctionalRejection("functional_reject_static_k_with_bias_k",
                        "bias_k and bias_v with static_k and static_v: PyTorch adds no bias to a "
                        "static key.",
                        _base(bias_kv=True),
                        _add_static_kv, "bias cannot be added to static key."),
    FunctionalRejection("functional_reject_static_k_size0",
                        "static_k of shape (N*H+1, S_static, D): its first dimension must be N*H.",
                        _static_kv(), _grow("static_k", 0),
                        "expecting static_k.size(0) of 4, but got 5"),
    FunctionalRejection("functional_reject_static_k_size2",
                        "static_k of shape (N*H, S_static, D+1): its last dimension must be D.",
                        _static_kv(), _grow("static_k", 2),
                        "expecting static_k.size(2) of 4, but got 5"),
    FunctionalRejection("functional_reject_static_v_size0",
                        "static_v of shape (N*H+1, S_static, D): its first dimension must be N*H.",
                        _static_kv(), _grow("static_v", 0),
                        "expecting static_v.size(0) of 4, but got 5"),
    FunctionalRejection("functional_reject_static_v_size2",
                        "static_v of shape (N*H, S_static, D+1): its last dimension must be D.",
                        _static_kv(), _grow("static_v", 2),
                        "expecting static_v.size(2) of 4, but got 5"),
    FunctionalRejection("functional_reject_static_kv_lengths_differ",
                        "static_k (N*H, 6, D) and static_v (N*H, 5, D): keys and values of "
                        "different lengths (PyTorch fails in bmm).",
                        _static_kv(), _set("static_v", lambda c: c["static_v"][:, :-1].clone()),
                        "Expected size for first two dimensions of batch2 tensor to be: [4, 6] "
                        "but got: [4, 5]."),
    FunctionalRejection("functional_reject_embed_dim_to_check",
                        "embed_dim_to_check=9 with query's E=8.",
                        _base(),
                        _set("embed_dim_to_check", lambda c: 9),
                        "was expecting embedding dimension of 9, but got 8"),
    FunctionalRejection("functional_reject_no_in_proj_weight",
                        "use_separate_proj_weight=False with in_proj_weight None (no "
                        "in_proj_weight.npy).",
                        _base(),
                        _set("in_proj_weight", lambda c: None),
                        "use_separate_proj_weight is False but in_proj_weight is None"),
    FunctionalRejection("functional_reject_no_q_proj_weight",
                        "use_separate_proj_weight=True with q_proj_weight None (no "
                        "q_proj_weight.npy).",
                        _base(separate=True),
                        _set("q_proj_weight", lambda c: None),
                        "use_separate_proj_weight is True but q_proj_weight is None"),
    FunctionalRejection("functional_reject_out_proj_weight_none",
                        "out_proj_weight None (no out_proj_weight.npy): PyTorch 1.13 fails "
                        "inside linear.",
                        _base(),
                        _set("out_proj_weight", lambda c: None),
                        "linear(): argument 'weight' (position 2) must be Tensor, not NoneType"),
    FunctionalRejection("functional_reject_attn_mask_static_length",
                        "A float (L, S) attn_mask with static_k and static_v of length 6 != S=4: "
                        "it passes the (L, S) check, and PyTorch fails in baddbmm.",
                        _static_kv(), _set("attn_mask", _float_mask_of_key_length),
                        "The expanded size of the tensor (6) must match the existing size (4) "
                        "at non-singleton dimension 2."),
    FunctionalRejection("functional_reject_key_padding_mask_static_length",
                        "A key_padding_mask (N, S=4) with static_k and static_v of length 6: it "
                        "must be (N, 6).",
                        _static_kv(key_padding_mask=True),
                        _set("key_padding_mask", lambda c: c["key_padding_mask"][:, :4].clone()),
                        "expecting key_padding_mask shape of (2, 6), but got torch.Size([2, 4])",
                        # 2.x checks the mask's length against the keys after the static ones.
                        error_2x="Expected key_padded_mask.shape[1] to be 6, but got 4"),
]


# --------------------------------------------------------------------------------------
# Drawing a call
# --------------------------------------------------------------------------------------

def draw_parameters(spec: Functional) -> dict:
    """The projections, uniform between -0.5 and 0.5 (biases too, as for the modules'
    cases), in the order of the function's arguments; None where the call passes none."""
    E, dtype = spec.E, spec.dtype

    def draw(*shape):
        return uniform(shape, -0.5, 0.5, dtype)

    p = dict.fromkeys(("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight",
                       "in_proj_bias", "bias_k", "bias_v", "out_proj_weight", "out_proj_bias"))
    if spec.separate:
        p["q_proj_weight"], p["k_proj_weight"] = draw(E, E), draw(E, spec.kdim_)
        p["v_proj_weight"] = draw(E, spec.vdim_)
    else:
        p["in_proj_weight"] = draw(3 * E, E)
    if spec.in_proj_bias:
        p["in_proj_bias"] = draw(3 * E)
    if spec.bias_kv:
        p["bias_k"], p["bias_v"] = draw(1, 1, E), draw(1, 1, E)
    p["out_proj_weight"] = draw(E, E)
    if spec.out_proj_bias:
        p["out_proj_bias"] = draw(E)
    return p


def draw_inputs(spec: Functional) -> dict:
    """query, key and value, with the object identity the case asks for, then static_k
    and static_v."""
    query = randn(spec.shape(spec.L, spec.E), spec.dtype)
    if spec.inputs == SELF:
        key = value = query
    else:
        key = randn(spec.shape(spec.S, spec.kdim_), spec.dtype)
        value = key if spec.inputs == ENC_DEC else randn(spec.shape(spec.S, spec.vdim_), spec.dtype)
    heads = spec.H if spec.unbatched else spec.N * spec.H
    static = {name: None if length is None else randn((heads, length, spec.D), spec.dtype)
              for name, length in (("static_k", spec.static_k), ("static_v", spec.static_v))}
    return {"query": query, "key": key, "value": value, **static}


def decode_step_inputs(spec: Functional, parameters: dict) -> tuple:
    """(inputs, sequence): a causal self-attention's whole sequence (T, N, E), drawn, and
    the step's inputs: its last token as query, key and value (one object), and static_k,
    static_v the head-split k and v of all T tokens from PyTorch's packed in-projection."""
    T, N, H, D = spec.static_k, spec.N, spec.H, spec.D
    sequence = randn((T, N, spec.E), spec.dtype)
    _, k, v = F._in_projection_packed(sequence, sequence, sequence,
                                      parameters["in_proj_weight"], parameters["in_proj_bias"])
    cache = [t.contiguous().view(T, N * H, D).transpose(0, 1).contiguous() for t in (k, v)]
    token = sequence[-1:].clone()
    inputs = {"query": token, "key": token, "value": token,
              "static_k": cache[0], "static_v": cache[1]}
    return inputs, sequence


def draw_call(spec: Functional) -> tuple:
    """(call, sequence): the keyword arguments of F.multi_head_attention_forward, drawn
    from the case's own seed; and, for a decoding step, the whole sequence (else None)."""
    torch.manual_seed(seed_for(spec.name))
    parameters = draw_parameters(spec)
    sequence = None
    if spec.decode_step:
        inputs, sequence = decode_step_inputs(spec, parameters)
    else:
        inputs = draw_inputs(spec)
    masks = spec.mask_case()
    key_padding_mask = make_key_padding_mask(masks) if spec.key_padding_mask else None
    attn_mask = make_attn_mask(masks, key_padding_mask) if spec.attn_mask else None
    call = {
        **inputs,
        "embed_dim_to_check": spec.E, "num_heads": spec.H,
        **parameters,
        "add_zero_attn": spec.add_zero_attn, "dropout_p": spec.dropout_p,
        "training": spec.training, "key_padding_mask": key_padding_mask,
        "need_weights": spec.need_weights, "attn_mask": attn_mask,
        "use_separate_proj_weight": spec.separate,
        "average_attn_weights": spec.average_attn_weights,
    }
    return call, sequence


# --------------------------------------------------------------------------------------
# Running PyTorch and checking what it returns
# --------------------------------------------------------------------------------------

def call_pytorch(call: dict) -> tuple:
    """(attn_output, attn_output_weights) of F.multi_head_attention_forward(**call)."""
    with torch.no_grad():
        return F.multi_head_attention_forward(**call)


def check_outputs(spec: Functional, attn_output, attn_weights) -> None:
    """The shapes the case implies, weights only when asked for, and finite values (NaN
    only where the case expects it)."""
    out_shape, weights_shape = spec.expected_shapes()
    assert tuple(attn_output.shape) == out_shape, (spec.name, attn_output.shape)
    has_nan = bool(torch.isnan(attn_output).any())
    assert has_nan == spec.expects_nan(), f"{spec.name}: NaN in attn_output is {has_nan}"
    assert has_nan or bool(torch.isfinite(attn_output).all()), f"{spec.name}: inf in attn_output"
    if spec.need_weights:
        assert tuple(attn_weights.shape) == weights_shape, (spec.name, attn_weights.shape)
        assert has_nan or bool(torch.isfinite(attn_weights).all()), f"{spec.name}: NaN or inf in the weights"
    else:
        assert attn_weights is None, spec.name


def check_float32_accuracy(spec: Functional, call: dict, results: dict) -> None:
    """As runner.check_float32_accuracy, for a call: PyTorch's float32 results must lie
    within PYTORCH_SHARE_OF_TOLERANCE of the case's tolerance of the same call in float64
    (every floating argument widened, one object staying one object)."""
    if spec.dtype != torch.float32:
        return
    doubled = {}

    def double(value):
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            return value
        return doubled.setdefault(id(value), value.double())

    attn_output, attn_weights = call_pytorch({name: double(v) for name, v in call.items()})
    exact = {"attn_output": attn_output, "attn_output_weights": attn_weights}
    rtol, atol = spec.tolerance["rtol"], spec.tolerance["atol"]
    for name, result in results.items():
        got, want = result.double(), exact[name]
        finite = torch.isfinite(got) & torch.isfinite(want)
        same = (got == want) | (torch.isnan(got) & torch.isnan(want))
        assert bool((finite | same).all()), f"{spec.name}/{name}: NaN or inf not as in float64"
        used = ((got - want).abs() / (atol + rtol * want.abs()))[finite]
        share = float(used.max()) if used.numel() else 0.0
        assert share <= PYTORCH_SHARE_OF_TOLERANCE, (
            f"{spec.name}/{name}: PyTorch's float32 result uses {share:.0%} of the tolerance "
            f"(rtol {rtol}, atol {atol}) against its float64 result, more than "
            f"{PYTORCH_SHARE_OF_TOLERANCE:.0%}")


def check_decode_step(spec: Functional, call: dict, sequence: torch.Tensor, results: dict) -> None:
    """The step's output (and weights) are the last row of the full causal forward of
    the sequence, to DECODE_STEP_ATOL: what makes static_k and static_v a KV cache."""
    T = sequence.shape[0]
    causal = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
    full = {**call, "query": sequence, "key": sequence, "value": sequence,
            "static_k": None, "static_v": None, "attn_mask": causal}
    attn_output, attn_weights = call_pytorch(full)
    last = {"attn_output": attn_output[-1:],
            "attn_output_weights": None if attn_weights is None else attn_weights[..., -1:, :]}
    for name, result in results.items():
        torch.testing.assert_close(result, last[name], rtol=0, atol=DECODE_STEP_ATOL[spec.dtype],
                                   msg=f"{spec.name}: {name} is not the full forward's last row")


def run_functional(spec: Functional) -> tuple:
    """(call, outputs): one numeric case's call and what PyTorch returned, checked."""
    call, sequence = draw_call(spec)
    attn_output, attn_weights = call_pytorch(call)
    check_outputs(spec, attn_output, attn_weights)
    outputs = {"attn_output": attn_output}
    if spec.need_weights:
        outputs["attn_output_weights"] = attn_weights
    check_float32_accuracy(spec, call, outputs)
    if spec.decode_step:
        check_decode_step(spec, call, sequence, outputs)
    return call, outputs


def pytorch_error(rejection: FunctionalRejection, call: dict) -> str:
    """PyTorch's message for the broken call, which must raise, with `error` in it (under
    2.x, error_2x where 2.x words it differently)."""
    try:
        call_pytorch(call)
    except (AssertionError, RuntimeError, TypeError) as error:
        message = str(error)
    else:
        raise SystemExit(f"generate.py: {rejection.name}: PyTorch {torch.__version__} accepted it")
    expected = rejection.error_2x if rejection.error_2x is not None and is_2x() else rejection.error
    assert expected in message, f"{rejection.name}: PyTorch {torch.__version__} said {message!r}"
    return message


# --------------------------------------------------------------------------------------
# Writing the case folders
# --------------------------------------------------------------------------------------

def functional_document(spec: Functional, call: dict, error: Optional[str] = None) -> dict:
    """case.json of a version-3 case: the call's options, as the function names them; for a
    rejection case (error: PyTorch's message), expect_error and pytorch_error."""
    document = {"format": FUNCTIONAL_FORMAT}
    if not is_golden_pytorch():
        document["pytorch"] = generation()
    document.update({
        "description": spec.description,
        "dtype": DTYPE_NAME[spec.dtype],
        "functional": {name: call[name] for name in OPTION_ARGUMENTS},
        "tolerance": spec.tolerance,
        "expect_error": error is not None,
    })
    if error is not None:
        document["pytorch_error"] = error
    # Was the function called with the same tensor object? (The packed in-projection
    # takes a different route for self- and encoder-decoder attention.)
    document["inputs"] = {"query_is_key": call["query"] is call["key"],
                          "key_is_value": call["key"] is call["value"]}
    return document


def write_call(out: Path, spec: Functional, document: dict, call: dict) -> Path:
    """A new folder holding case.json and every tensor argument the call passes."""
    folder = new_folder(out / spec.name)
    write_json(folder / "case.json", document)
    for name in TENSOR_ARGUMENTS:
        if call[name] is not None:
            save_npy(folder, name, call[name])
    return folder


def write_functional(out: Path, spec: Functional) -> None:
    """A numeric version-3 case: the call's tensors and what PyTorch returned."""
    call, outputs = run_functional(spec)
    folder = write_call(out, spec, functional_document(spec, call), call)
    for name, tensor in outputs.items():
        save_npy(folder, name, tensor)


def write_functional_rejection(out: Path, rejection: FunctionalRejection) -> None:
    """A version-3 rejection case: the broken call's tensors and PyTorch's message."""
    spec = rejection.spec
    call, _ = draw_call(spec)
    rejection.defect(call)
    document = functional_document(spec, call, pytorch_error(rejection, call))
    write_call(out, spec, document, call)


def functional_writers(cases: list, rejections: list) -> list:
    """(name, write(out)) for these version-3 cases and rejections, numeric cases first."""
    return ([(s.name, functools.partial(write_functional, spec=s)) for s in cases] +
            [(r.name, functools.partial(write_functional_rejection, rejection=r))
             for r in rejections])


def computed_inputs() -> set:
    """The input files, relative to cases/, that PyTorch computed instead of the generator
    drawing them: each decoding step's static_k and static_v (its in-projection, a GEMM)."""
    return {f"{spec.name}/{name}.npy" for spec in FUNCTIONAL_CASES if spec.decode_step
            for name in ("static_k", "static_v")}
