"""The golden cases, as tables: what each case asks of torch.nn.MultiheadAttention.

Case is one forward call (module options, input shapes, masks); Rejection is a valid case
then broken, which an implementation must reject; Extreme is a valid case with one input
entry set to +-inf, NaN or 1e30. CASES, REJECTIONS and EXTREME_CASES list them all. To add
a golden case, add it here and regenerate (golden/generate.py).
"""

import dataclasses
from typing import Callable, Optional

import torch

# L = target length, S = source length, N = batch, E = embed_dim, H = heads,
# D = head_dim = E / H, kdim / vdim = feature sizes of key / value.

# How close a reimplementation's result must come to PyTorch's, per dtype.
# float32: PyTorch's own torch.testing defaults. A float32 result carries float32's
# rounding (eps 6e-8) through sums of up to E * S products, and another summation order
# (another GEMM kernel, another CPU) moves it by several of those roundings; PyTorch's own
# float32 result uses at most PYTORCH_SHARE_OF_TOLERANCE of this against its float64
# result (runner.py checks), so nothing tighter holds across machines.
# float64: 1e-12, not torch.testing's 1e-7. float64's eps is 2.2e-16, and these cases'
# sums run over at most a few hundred products of values near 1, so two correct
# summation orders differ by about 1e-14 (measured: every case on every path is within
# 1e-14 of PyTorch under OpenBLAS's Prescott, Haswell and SkylakeX kernels). 1e-12 leaves
# 100x for other CPUs and compilers, and fails an error of 1e-10, which 1e-7 let through.
TOLERANCE = {
    torch.float32: {"rtol": 1.3e-6, "atol": 1e-5},
    torch.float64: {"rtol": 1e-12, "atol": 1e-12},
}

# How case.json names each dtype.
DTYPE_NAME = {torch.float32: "float32", torch.float64: "float64"}

# The gradients' tolerance. float32: rtol 1e-5, atol 1e-5, wider than the forward's 1.3e-6,
# because a gradient is a sum over every position, head and batch entry of products that
# partly cancel (dL/dW sums over L*N rows, dL/dK over L queries), and an implementation
# that sums them in another order (loops against PyTorch's GEMMs) moves the result by
# several float32 roundings of the summands' size, not of the result's. backward.py checks
# that PyTorch's own float32 gradients use at most PYTORCH_SHARE_OF_TOLERANCE of it
# against its float64 gradients, as runner.py does for the forward. float64: the forward's
# 1e-12, for the same reason (measured within 1e-14 too).
BACKWARD_TOLERANCE = {
    torch.float32: {"rtol": 1e-5, "atol": 1e-5},
    torch.float64: {"rtol": 1e-12, "atol": 1e-12},
}

# The layouts a forward call accepts, and the three ways to relate query, key and value.
SEQ_FIRST, BATCH_FIRST, UNBATCHED = "seq_first", "batch_first", "unbatched"
SELF, ENC_DEC, CROSS = "self", "enc_dec", "cross"


# --------------------------------------------------------------------------------------
# What a case is
# --------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Case:
    """One forward call of MultiheadAttention: module options, input shapes and masks.

    inputs: SELF   -> forward(x, x, x), one tensor object;
            ENC_DEC -> forward(q, m, m), key is value (encoder-decoder attention);
            CROSS  -> forward(q, k, v), three distinct tensors.
    attn_mask: None, "bool_2d", "float_2d", "bool_3d", "float_3d" or "causal"
            (3-D is (N*H, L, S) batched, (H, L, S) unbatched; "causal" is the bool
            (L, S) mask with True above the diagonal, recorded as is_causal=true).
    """
    name: str
    description: str
    dtype: torch.dtype = torch.float32
    E: int = 8
    H: int = 2
    L: int = 4
    S: int = 4
    N: int = 2
    kdim: Optional[int] = None
    vdim: Optional[int] = None
    layout: str = SEQ_FIRST
    inputs: str = SELF
    bias: bool = True
    add_bias_kv: bool = False
    add_zero_attn: bool = False
    dropout: float = 0.0
    attn_mask: Optional[str] = None
    key_padding_mask: bool = False
    need_weights: bool = True
    average_attn_weights: bool = True
    fully_masked_row: bool = False    # one row of the 2-D attn_mask all True
    fully_padded_batch: bool = False  # the last batch entry's keys all padded
    expect_nan: bool = False          # the expected output holds NaN (on purpose)
    rtol: Optional[float] = None      # the case's own rtol, the reason in its description
                                      # (see check_float32_accuracy in runner.py); else
                                      # the dtype's
    worked_example: bool = False      # parameters and input written out by hand
                                      # (case_tensors.WORKED_EXAMPLE), not drawn
    training: bool = False            # train mode: dropout on (its mask recorded)
    backward: bool = False            # a format-2 case: gradients too (backward.py)
    grad_weights: bool = False        # the loss has the weights term (grad_attn_output_weights)
    # The generations of PyTorch (1.13, 2.x) differ on the cases of generations.py:
    is_causal_hint: bool = False      # is_causal=True with the case's own attn_mask, causal or
                                      # not (2.x only: 1.13 has no is_causal argument)
    grad_enabled: bool = True         # False: the call runs under torch.no_grad(), the
                                      # native fast path's condition
    float_key_padding_mask: bool = False  # key_padding_mask as a float mask: -inf where
                                      # padded, -1.0 on key 1 where not (case_tensors)
    expect_nan_2x: Optional[bool] = None  # expect_nan under 2.x, where it differs
    fast_path: tuple = ()             # the generations whose module takes its native fast
                                      # path here ("1.13", "2.x"); only with grad disabled
    generations: tuple = ("1.13", "2.x")  # the generations of PyTorch that write the case
    generations_differ: bool = False  # a case of generations.py: 1.13 and 2.x compute it
                                      # differently (case.json says so, for readers)

    def __post_init__(self):
        assert self.layout in (SEQ_FIRST, BATCH_FIRST, UNBATCHED), self.name
        assert self.inputs in (SELF, ENC_DEC, CROSS), self.name
        assert self.E % self.H == 0, self.name
        assert self.L <= 7 and self.S <= 7 and self.N <= 3 and self.E <= 16, self.name
        if self.inputs == SELF:
            assert self.L == self.S and self.kdim_ == self.E and self.vdim_ == self.E, self.name
        if self.inputs == ENC_DEC:
            assert self.kdim_ == self.vdim_, self.name
        if self.layout == UNBATCHED:
            assert self.N == 1, f"{self.name}: unbatched means N == 1"
        if self.fully_masked_row:
            assert self.attn_mask in ("bool_2d", "float_2d"), self.name
        if self.training or self.grad_weights:
            assert self.backward, f"{self.name}: training and grad_weights are for backward cases"
        if self.grad_weights:
            assert self.need_weights, self.name
        if self.is_causal_hint:
            assert self.generations == ("2.x",), f"{self.name}: 1.13 has no is_causal argument"
        if not self.grad_enabled:
            assert not self.backward, f"{self.name}: gradients need grad enabled"

    @property
    def tolerance(self) -> dict:
        """rtol and atol for case.json: the dtype's, with the case's own rtol if it has one."""
        return {**TOLERANCE[self.dtype], **({} if self.rtol is None else {"rtol": self.rtol})}

    @property
    def kdim_(self) -> int:
        return self.E if self.kdim is None else self.kdim

    @property
    def vdim_(self) -> int:
        return self.E if self.vdim is None else self.vdim

    @property
    def is_causal(self) -> bool:
        return self.attn_mask == "causal" or self.is_causal_hint

    def expects_nan(self, under_2x: bool) -> bool:
        """Whether PyTorch's output holds NaN, under 2.x or under 1.13."""
        return self.expect_nan_2x if under_2x and self.expect_nan_2x is not None else self.expect_nan

    def module_options(self) -> dict:
        """The keyword arguments of torch.nn.MultiheadAttention(...), as case.json names them."""
        return {
            "embed_dim": self.E,
            "num_heads": self.H,
            "dropout": self.dropout,
            "bias": self.bias,
            "add_bias_kv": self.add_bias_kv,
            "add_zero_attn": self.add_zero_attn,
            "kdim": self.kdim_,
            "vdim": self.vdim_,
            "batch_first": self.layout == BATCH_FIRST,
        }

    def forward_options(self) -> dict:
        options = {
            "need_weights": self.need_weights,
            "average_attn_weights": self.average_attn_weights,
            "is_causal": self.is_causal,
            "training": self.training,
        }
        if not self.grad_enabled:  # absent means true (golden-format.md)
            options["grad_enabled"] = False
        return options

    @property
    def format(self) -> int:
        """The version of golden/FORMAT.md the case is written in: 2 with gradients."""
        return 2 if self.backward else 1

    @property
    def backward_tolerance(self) -> dict:
        """rtol and atol of the gradients (case.json's backward.tolerance)."""
        return BACKWARD_TOLERANCE[self.dtype]


@dataclasses.dataclass(frozen=True)
class Rejection:
    """A case the implementation must reject: a valid `base` case, then broken.

    defect(tensors) replaces entries of the tensor dict (query, key, value, attn_mask,
    key_padding_mask); module_override / forward_override change the recorded options.
    torch_rejects: PyTorch 1.13 rejects it too, and the generator checks that it does;
    False when only 2.x rejects it (1.13 accepts it, or cannot express it). PyTorch 2.x
    rejects every rejection case, and the generator checks that under 2.x.
    generations: ("2.x",) when 1.13 accepts the call (a rejection only of 2.x).
    """
    name: str
    description: str
    base: Case
    defect: Optional[Callable[[dict], None]] = None
    module_override: dict = dataclasses.field(default_factory=dict)
    forward_override: dict = dataclasses.field(default_factory=dict)
    torch_rejects: bool = True
    generations: tuple = ("1.13", "2.x")  # the generations of PyTorch that write the case

    @property
    def case(self) -> Case:
        """The base case under this rejection's name and description: its tensors are drawn
        from the rejection's own seed, and defect then breaks them."""
        return dataclasses.replace(self.base, name=self.name, description=self.description)

    def module_options(self) -> dict:
        return {**self.case.module_options(), **self.module_override}

    def forward_options(self) -> dict:
        return {**self.case.forward_options(), **self.forward_override}



# --------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------

F64 = torch.float64

CASES = [
    # 0) The worked example of docs/01: small integers a student can multiply by hand.
    Case("worked_example_f64",
         "The worked example (tutorial 01, docs/01-worked-example.md): E = 4, H = 2 heads of "
         "D = 2, L = S = 3, one batch entry, self-attention; every parameter and input a small "
         "integer written out in case_tensors.WORKED_EXAMPLE, so that q, k, v and the scores "
         "can be computed by hand.",
         dtype=F64, E=4, H=2, L=3, S=3, N=1, worked_example=True),
    # 1) Layouts x the three ways query, key and value relate.
    Case("self_seqfirst_f32",
         "Self-attention (query, key and value are one tensor) on seq-first (L, N, E) input: "
         "the packed in-projection runs as one linear and is split into q, k, v.",
         L=5, S=5, N=3),
    Case("self_batchfirst_f32",
         "Self-attention with batch_first=True (N, L, E): the module transposes once and keeps "
         "query, key and value one tensor; output comes back batch-first.",
         L=5, S=5, N=2, layout=BATCH_FIRST),
    Case("self_unbatched_f32",
         "Self-attention on unbatched (L, E) input: output (L, E), weights (L, S); PyTorch "
         "unsqueezes query, key and value separately, so the in-projection sees three tensors.",
         L=5, S=5, N=1, layout=UNBATCHED),
    Case("encdec_seqfirst_f32",
         "Encoder-decoder attention (key is value, query distinct) with S != L, seq-first.",
         L=4, S=6, N=2, inputs=ENC_DEC),
    Case("encdec_batchfirst_f32",
         "Encoder-decoder attention (key is value) with S != L and batch_first=True.",
         L=3, S=5, N=3, inputs=ENC_DEC, layout=BATCH_FIRST),
    Case("encdec_unbatched_f32",
         "Encoder-decoder attention (key is value) on unbatched input, S < L.",
         L=5, S=3, N=1, inputs=ENC_DEC, layout=UNBATCHED),
    Case("cross_seqfirst_f32",
         "Fully cross attention: query, key and value are three distinct tensors, seq-first, S < L.",
         L=5, S=3, N=2, inputs=CROSS),
    Case("cross_batchfirst_f32",
         "Fully cross attention with batch_first=True, S > L.",
         L=2, S=6, N=3, inputs=CROSS, layout=BATCH_FIRST),
    Case("cross_unbatched_f32",
         "Fully cross attention on unbatched (L, E) / (S, E) input.",
         L=3, S=4, N=1, inputs=CROSS, layout=UNBATCHED),
    Case("self_seqfirst_f64",
         "Self-attention, seq-first, in float64: the same math with a tighter tolerance.",
         dtype=F64, L=6, S=6, N=2),
    Case("encdec_batchfirst_f64",
         "Encoder-decoder attention (key is value), batch_first=True, float64.",
         dtype=F64, L=4, S=7, N=2, inputs=ENC_DEC, layout=BATCH_FIRST),
    Case("cross_unbatched_f64",
         "Fully cross attention, unbatched, float64.",
         dtype=F64, L=4, S=2, N=1, inputs=CROSS, layout=UNBATCHED),

    # 2) kdim / vdim: separate q, k, v projection weights instead of one packed matrix.
    Case("cross_kdim_vdim_seqfirst_f32",
         "kdim=5 and vdim=3 differ from E=8: separate q_proj/k_proj/v_proj weights, "
         "in_proj_bias still packed (3E), seq-first.",
         L=4, S=6, N=2, kdim=5, vdim=3, inputs=CROSS),
    Case("cross_kdim_vdim_batchfirst_f64",
         "kdim=6 and vdim=10 (vdim > E) with separate weights, batch_first=True, float64.",
         dtype=F64, L=3, S=5, N=3, kdim=6, vdim=10, inputs=CROSS, layout=BATCH_FIRST),
    Case("cross_kdim_vdim_unbatched_f32",
         "kdim=3 and vdim=7 with separate weights on unbatched input.",
         L=4, S=5, N=1, kdim=3, vdim=7, inputs=CROSS, layout=UNBATCHED),
    Case("encdec_kdim_eq_vdim_f32",
         "kdim == vdim == 6 != E with key is value: separate weights even though key and "
         "value are one tensor.",
         L=3, S=5, N=2, kdim=6, vdim=6, inputs=ENC_DEC),
    Case("cross_kdim_eq_embed_vdim_differs_f32",
         "kdim == E but vdim=5: one differing size is enough for separate weights.",
         L=4, S=3, N=2, kdim=8, vdim=5, inputs=CROSS),

    # 3) Attention masks and key padding masks.
    Case("attn_mask_bool_2d_f32",
         "Bool 2-D attn_mask (L, S): True means 'may not attend' and becomes -inf, shared "
         "by every batch entry and head.",
         L=5, S=5, N=2, attn_mask="bool_2d"),
    Case("attn_mask_float_2d_f32",
         "Float 2-D attn_mask (L, S) added to the scores, with some -inf entries; cross attention.",
         L=4, S=6, N=2, inputs=CROSS, attn_mask="float_2d"),
    Case("attn_mask_bool_3d_batchfirst_f32",
         "Bool 3-D attn_mask (N*H, L, S), a different mask per batch entry and head (index "
         "n*H + h), batch_first=True encoder-decoder attention.",
         L=4, S=5, N=3, inputs=ENC_DEC, layout=BATCH_FIRST, attn_mask="bool_3d"),
    Case("attn_mask_float_3d_f64",
         "Float 3-D attn_mask (N*H, L, S) with H=4, float64, cross attention.",
         dtype=F64, H=4, L=3, S=5, N=2, inputs=CROSS, attn_mask="float_3d"),
    Case("attn_mask_bool_3d_unbatched_f32",
         "Unbatched input with a bool 3-D attn_mask (H, L, S): one mask per head.",
         E=12, H=4, L=4, S=6, N=1, inputs=CROSS, layout=UNBATCHED, attn_mask="bool_3d"),
    Case("attn_mask_float_2d_unbatched_f64",
         "Unbatched self-attention with a float 2-D attn_mask (L, S), float64.",
         dtype=F64, L=5, S=5, N=1, layout=UNBATCHED, attn_mask="float_2d"),
    Case("key_padding_mask_bool_f32",
         "Bool key_padding_mask (N, S): True marks padded key positions, ignored per batch entry.",
         L=4, S=6, N=3, inputs=ENC_DEC, key_padding_mask=True),
    Case("key_padding_mask_bool_batchfirst_f64",
         "Bool key_padding_mask (N, S) with batch_first=True self-attention, float64.",
         dtype=F64, L=5, S=5, N=3, layout=BATCH_FIRST, key_padding_mask=True),
    Case("key_padding_mask_bool_unbatched_f32",
         "Unbatched input with a bool key_padding_mask of shape (S).",
         L=3, S=6, N=1, inputs=CROSS, layout=UNBATCHED, key_padding_mask=True),
    Case("attn_mask_bool_2d_key_padding_mask_bool_f32",
         "Bool attn_mask (L, S) and bool key_padding_mask (N, S) together: merged by logical or.",
         L=5, S=5, N=2, attn_mask="bool_2d", key_padding_mask=True),
    Case("attn_mask_float_3d_key_padding_mask_bool_f32",
         "Float 3-D attn_mask (N*H, L, S) and bool key_padding_mask (N, S): padded positions "
         "become -inf on top of the float mask; batch_first cross attention.",
         L=4, S=6, N=2, inputs=CROSS, layout=BATCH_FIRST, attn_mask="float_3d",
         key_padding_mask=True),
    Case("attn_mask_float_2d_key_padding_mask_bool_f64",
         "Float 2-D attn_mask and bool key_padding_mask, encoder-decoder attention, float64.",
         dtype=F64, L=3, S=6, N=3, inputs=ENC_DEC, attn_mask="float_2d", key_padding_mask=True),
    Case("attn_mask_bool_3d_key_padding_mask_unbatched_f32",
         "Unbatched input with a bool (H, L, S) attn_mask and a bool (S) key_padding_mask.",
         L=4, S=5, N=1, inputs=ENC_DEC, layout=UNBATCHED, attn_mask="bool_3d",
         key_padding_mask=True),
    Case("attn_mask_bool_2d_fully_masked_row",
         "Row 2 of the bool attn_mask is all True: softmax over only -inf gives NaN, so that "
         "query position is NaN in the output (every batch entry) and in the weights.",
         L=5, S=5, N=2, attn_mask="bool_2d", fully_masked_row=True, expect_nan=True),
    Case("attn_mask_bool_2d_fully_masked_row_add_zero_attn",
         "The same fully masked row with add_zero_attn=True: the appended zero key is never "
         "masked, so the row attends only to it (weight 1, value 0) and nothing is NaN.",
         L=5, S=5, N=2, attn_mask="bool_2d", fully_masked_row=True, add_zero_attn=True),
    Case("attn_mask_float_2d_fully_masked_row_f64",
         "A float attn_mask whose row 2 is all -inf: NaN in that row, as with a bool mask; float64.",
         dtype=F64, L=4, S=5, N=2, inputs=CROSS, attn_mask="float_2d", fully_masked_row=True,
         expect_nan=True),
    Case("key_padding_mask_fully_padded_batch",
         "The last batch entry's key_padding_mask is all True: that batch entry is NaN in the "
         "output and the weights, the others are finite.",
         L=4, S=5, N=3, inputs=ENC_DEC, key_padding_mask=True, fully_padded_batch=True,
         expect_nan=True),

    # 4) is_causal. PyTorch 1.13's forward has no is_causal argument: these goldens pass the
    #    causal mask as attn_mask; in 2.x is_causal=True is a hint that attn_mask is causal,
    #    and with the mask given the result is the same.
    Case("is_causal_self_f32",
         "is_causal=true with its causal attn_mask (L, S), True above the diagonal, in "
         "self-attention. Generated with PyTorch 1.13, which has no is_causal argument, by "
         "passing that mask; in 2.x is_causal is a hint that attn_mask is causal, same result.",
         L=5, S=5, N=2, attn_mask="causal"),
    Case("is_causal_batchfirst_key_padding_mask_f64",
         "is_causal=true with its causal attn_mask plus a bool key_padding_mask, batch_first, "
         "float64 (2.x merges the masks and drops the hint). Generated with PyTorch 1.13 by "
         "passing the causal mask as attn_mask.",
         dtype=F64, L=6, S=6, N=2, layout=BATCH_FIRST, attn_mask="causal", key_padding_mask=True),
    Case("is_causal_need_weights_false_f32",
         "is_causal=true with its causal attn_mask and need_weights=false (where 2.x may use "
         "the hint alone). Generated with PyTorch 1.13 by passing the causal mask as attn_mask.",
         L=4, S=4, N=3, attn_mask="causal", need_weights=False),
    Case("is_causal_cross_short_query_f32",
         "is_causal=true with L=3 < S=5: the causal mask is top-left aligned (query i sees "
         "keys 0..i), as torch.ones(L, S).tril() in 2.x. Generated with PyTorch 1.13 by "
         "passing that mask as attn_mask.",
         L=3, S=5, N=2, inputs=CROSS, attn_mask="causal"),

    # 5) add_bias_kv and add_zero_attn: both append one key/value position (S' = S + 1 each).
    Case("add_bias_kv_f32",
         "add_bias_kv=True: bias_k and bias_v are appended as one more key/value position "
         "after the in-projection; weights have S+1 columns.",
         L=4, S=4, N=2, add_bias_kv=True),
    Case("add_bias_kv_masks_f32",
         "add_bias_kv with a bool attn_mask and key_padding_mask: both masks get one more "
         "column, False, so the bias position is always attended.",
         L=3, S=5, N=2, inputs=ENC_DEC, add_bias_kv=True, attn_mask="bool_2d",
         key_padding_mask=True),
    Case("add_bias_kv_float_mask_batchfirst_f64",
         "add_bias_kv with a float 3-D attn_mask (its new column is 0), batch_first, float64.",
         dtype=F64, L=4, S=3, N=2, inputs=CROSS, layout=BATCH_FIRST, add_bias_kv=True,
         attn_mask="float_3d"),
    Case("add_zero_attn_f32",
         "add_zero_attn=True: a zero key and value are appended per head after splitting "
         "heads; weights have S+1 columns.",
         L=4, S=5, N=2, inputs=CROSS, add_zero_attn=True),
    Case("add_zero_attn_masks_f32",
         "add_zero_attn with a float 3-D attn_mask and a bool key_padding_mask, both padded "
         "with one unmasked column; batch_first encoder-decoder attention.",
         L=3, S=4, N=2, inputs=ENC_DEC, layout=BATCH_FIRST, add_zero_attn=True,
         attn_mask="float_3d", key_padding_mask=True),
    Case("add_bias_kv_add_zero_attn_f32",
         "add_bias_kv and add_zero_attn together (S' = S + 2, bias column before the zero "
         "column) with bool attn_mask and key_padding_mask.",
         L=4, S=4, N=2, add_bias_kv=True, add_zero_attn=True, attn_mask="bool_2d",
         key_padding_mask=True),
    Case("add_bias_kv_add_zero_attn_kdim_vdim_unbatched_f64",
         "add_bias_kv and add_zero_attn with kdim/vdim separate weights, unbatched input, "
         "bool (H, L, S) attn_mask and (S) key_padding_mask, float64.",
         dtype=F64, L=3, S=4, N=1, kdim=5, vdim=6, inputs=CROSS, layout=UNBATCHED,
         add_bias_kv=True, add_zero_attn=True, attn_mask="bool_3d", key_padding_mask=True),
    Case("add_bias_kv_rescues_fully_padded_batch_f32",
         "The last batch entry's keys are all padded, but add_bias_kv appends an unpadded "
         "bias position, so nothing is NaN.",
         L=3, S=4, N=2, inputs=ENC_DEC, add_bias_kv=True, key_padding_mask=True,
         fully_padded_batch=True),

    # 6) Other options.
    Case("no_bias_self_f32",
         "bias=False: no in_proj_bias and no out_proj.bias.",
         L=4, S=4, N=2, bias=False),
    Case("no_bias_kdim_vdim_f64",
         "bias=False with kdim/vdim separate weights, cross attention, float64.",
         dtype=F64, L=3, S=5, N=2, kdim=4, vdim=6, inputs=CROSS, bias=False),
    Case("no_bias_add_bias_kv_f32",
         "bias=False but add_bias_kv=True: bias_k and bias_v exist without any projection bias.",
         L=4, S=5, N=2, inputs=ENC_DEC, bias=False, add_bias_kv=True),
    Case("need_weights_false_f32",
         "need_weights=False: only attn_output is returned (no attn_output_weights file).",
         L=4, S=6, N=2, inputs=CROSS, attn_mask="bool_2d", need_weights=False),
    Case("need_weights_false_unbatched_f64",
         "need_weights=False on unbatched self-attention, float64.",
         dtype=F64, L=5, S=5, N=1, layout=UNBATCHED, need_weights=False),
    Case("per_head_weights_f32",
         "average_attn_weights=False: per-head weights (N, H, L, S) instead of their mean, "
         "H=4, with a key_padding_mask.",
         H=4, L=3, S=5, N=2, inputs=ENC_DEC, key_padding_mask=True, average_attn_weights=False),
    Case("per_head_weights_unbatched_f64",
         "average_attn_weights=False on unbatched input: per-head weights (H, L, S), float64.",
         dtype=F64, H=4, L=4, S=3, N=1, inputs=CROSS, layout=UNBATCHED,
         average_attn_weights=False),
    Case("per_head_weights_add_bias_kv_add_zero_attn_f32",
         "average_attn_weights=False with add_bias_kv and add_zero_attn: (N, H, L, S+2).",
         L=3, S=3, N=2, add_bias_kv=True, add_zero_attn=True, average_attn_weights=False),
    Case("dropout_ignored_in_eval_f32",
         "dropout=0.5 in eval mode (training=false): dropout is off and the result is exact.",
         L=4, S=4, N=2, dropout=0.5),

    # 7) Degenerate sizes.
    Case("one_head_f32",
         "num_heads=1: one head of size D = E = 8.",
         H=1, L=4, S=5, N=2, inputs=CROSS),
    Case("head_dim_one_f32",
         "head_dim 1 (E == H == 4): scores are scaled by 1/sqrt(1).",
         E=4, H=4, L=4, S=4, N=2),
    Case("query_len_one_f32",
         "L=1: a single query position attending over S=5 keys.",
         L=1, S=5, N=2, inputs=CROSS),
    Case("source_len_one_f32",
         "S=1: a single key, so every weight is exactly 1.",
         L=4, S=1, N=2, inputs=ENC_DEC),
    Case("batch_one_batchfirst_f32",
         "N=1 batched (not unbatched) batch_first self-attention: output (1, L, E).",
         L=5, S=5, N=1, layout=BATCH_FIRST),
    Case("minimal_sizes_f64",
         "E = H = L = S = N = 1, the smallest valid call, float64.",
         dtype=F64, E=1, H=1, L=1, S=1, N=1),
    Case("largest_e16_h4_f32",
         "The largest case: E=16, H=4, L=S=7, N=3, with a bool attn_mask and key_padding_mask.",
         E=16, H=4, L=7, S=7, N=3, attn_mask="bool_2d", key_padding_mask=True),
]


def _set(name: str, make: Callable[[dict], torch.Tensor]) -> Callable[[dict], None]:
    """A defect that replaces tensors[name] with make(tensors)."""
    def defect(tensors: dict) -> None:
        tensors[name] = make(tensors)
    return defect


def _grow_key_batch(tensors: dict) -> None:
    """One more batch entry in key (which is value): (S, N, E) -> (S, N+1, E)."""
    key = torch.cat([tensors["key"], tensors["key"][:, :1]], 1)
    tensors["key"] = tensors["value"] = key


def _base(name: str, **kwargs) -> Case:
    return Case(name, "(valid base of a rejection case)", **kwargs)


REJECTIONS = [
    Rejection("reject_attn_mask_int32",
              "attn_mask of dtype int32: only bool and floating masks are allowed.",
              _base("b", attn_mask="bool_2d"),
              defect=_set("attn_mask", lambda t: t["attn_mask"].to(torch.int32))),
    Rejection("reject_attn_mask_uint8",
              "attn_mask of dtype uint8: PyTorch 2.x accepts only bool and floating masks "
              "(\"only bool and floating types of attn_mask are supported\"). PyTorch 1.13 "
              "accepted it with a warning and read it as bool, so this is a case of 2.x only.",
              _base("b", attn_mask="bool_2d"),
              defect=_set("attn_mask", lambda t: t["attn_mask"].to(torch.uint8)),
              torch_rejects=False, generations=("2.x",)),
    Rejection("reject_attn_mask_2d_wrong_shape",
              "2-D attn_mask of shape (L, S+1) instead of (L, S).",
              _base("b", L=4, S=4, attn_mask="bool_2d"),
              defect=_set("attn_mask", lambda t: torch.zeros(4, 5, dtype=torch.bool))),
    Rejection("reject_attn_mask_3d_wrong_first_dim",
              "3-D attn_mask of shape (N, L, S) instead of (N*H, L, S).",
              _base("b", H=2, N=3, L=4, S=4, attn_mask="bool_3d"),
              defect=_set("attn_mask", lambda t: torch.zeros(3, 4, 4, dtype=torch.bool))),
    Rejection("reject_attn_mask_4d",
              "4-D attn_mask (N, H, L, S): only 2-D and 3-D masks are allowed.",
              _base("b", H=2, N=2, L=4, S=4, attn_mask="bool_3d"),
              defect=_set("attn_mask", lambda t: t["attn_mask"].view(2, 2, 4, 4))),
    Rejection("reject_attn_mask_unbatched_3d_wrong_heads",
              "Unbatched input with a 3-D attn_mask of shape (H+1, L, S) instead of (H, L, S).",
              _base("b", H=2, N=1, L=3, S=3, layout=UNBATCHED, attn_mask="bool_3d"),
              defect=_set("attn_mask", lambda t: torch.zeros(3, 3, 3, dtype=torch.bool))),
    Rejection("reject_key_padding_mask_wrong_shape",
              "key_padding_mask of shape (N, S+1) instead of (N, S).",
              _base("b", N=2, L=3, S=5, inputs=ENC_DEC, key_padding_mask=True),
              defect=_set("key_padding_mask", lambda t: torch.zeros(2, 6, dtype=torch.bool))),
    Rejection("reject_key_padding_mask_1d_for_batched",
              "key_padding_mask of shape (S) with batched input: it must be (N, S).",
              _base("b", N=2, L=3, S=5, inputs=ENC_DEC, key_padding_mask=True),
              defect=_set("key_padding_mask", lambda t: t["key_padding_mask"][0].clone())),
    Rejection("reject_key_padding_mask_int32",
              "key_padding_mask of dtype int32: only bool (and, in 2.x, floating) masks are allowed.",
              _base("b", N=2, L=3, S=5, inputs=ENC_DEC, key_padding_mask=True),
              defect=_set("key_padding_mask", lambda t: t["key_padding_mask"].to(torch.int32))),
    Rejection("reject_query_4d",
              "query of 4 dimensions: it must be 2-D (unbatched) or 3-D (batched).",
              _base("b", N=2, L=3, S=4, inputs=CROSS),
              defect=_set("query", lambda t: t["query"].unsqueeze(0))),
    Rejection("reject_key_value_shape_mismatch",
              "key (S, N, E) and value (S+1, N, E) of different shapes, packed weights.",
              _base("b", N=2, L=3, S=4, inputs=CROSS),
              defect=_set("value", lambda t: torch.cat([t["value"], t["value"][:1]]))),
    Rejection("reject_key_value_length_mismatch_kdim_vdim",
              "Separate weights (kdim=5, vdim=3) with key length S and value length S+1.",
              _base("b", N=2, L=3, S=4, kdim=5, vdim=3, inputs=CROSS),
              defect=_set("value", lambda t: torch.cat([t["value"], t["value"][:1]]))),
    Rejection("reject_query_embed_dim_mismatch",
              "query's last dimension is E+1 = 9, the module's embed_dim is 8.",
              _base("b", N=2, L=3, S=4, inputs=CROSS),
              defect=_set("query", lambda t: torch.cat([t["query"], t["query"][..., :1]], -1))),
    Rejection("reject_key_dim_not_kdim",
              "Module built with kdim=5, key's last dimension is 6.",
              _base("b", N=2, L=3, S=4, kdim=5, vdim=3, inputs=CROSS),
              defect=_set("key", lambda t: torch.cat([t["key"], t["key"][..., :1]], -1))),
    Rejection("reject_key_batch_mismatch",
              "key and value have batch N+1 = 3, query has N = 2.",
              _base("b", N=2, L=3, S=4, inputs=ENC_DEC),
              defect=_grow_key_batch),
    Rejection("reject_unbatched_query_batched_key",
              "Unbatched (L, E) query with batched (S, N, E) key and value.",
              _base("b", N=2, L=3, S=4, inputs=CROSS),
              defect=_set("query", lambda t: t["query"][:, 0].clone())),
    Rejection("reject_is_causal_without_attn_mask",
              "is_causal=true with no attn_mask: in 2.x is_causal is only a hint about a given "
              "mask, and MultiheadAttention needs the mask. PyTorch 1.13 has no is_causal "
              "argument, so no PyTorch 1.13 check.",
              _base("b", N=2, L=4, S=4),
              forward_override={"is_causal": True},
              torch_rejects=False),
    Rejection("reject_embed_dim_not_divisible_by_heads",
              "embed_dim=8 with num_heads=3: 8 is not divisible by 3 (the constructor rejects it).",
              _base("b", N=2, L=3, S=3),
              module_override={"num_heads": 3}),
]



# --------------------------------------------------------------------------------------
# Extreme values: +-inf, NaN and 1e30 in the inputs and masks
# --------------------------------------------------------------------------------------
#
# Each case is an ordinary Case whose drawn tensors then get one extreme entry written
# into them (`poke`), before PyTorch runs. What PyTorch returns, NaN and inf included,
# is the expectation: the C++ code must propagate them the same way, position by
# position. The index of each poke is (position, batch, feature) on seq-first input.

@dataclasses.dataclass(frozen=True)
class Extreme:
    """A valid case, then one entry of one input set to an extreme value."""
    case: Case
    tensor: str       # "query", "key", "value" or "attn_mask"
    index: tuple
    value: float

    def poke(self, tensors: dict) -> None:
        """Write the extreme value into the drawn tensors (where key is value, into both)."""
        with torch.no_grad():
            tensors[self.tensor][self.index] = self.value


def _extreme(name: str, description: str, tensor: str, index: tuple, value: float,
             **kwargs) -> Extreme:
    return Extreme(Case(name, description, **kwargs), tensor, index, value)


INF, NAN = float("inf"), float("nan")

EXTREME_CASES = [
    _extreme("extreme_nan_in_query_f32",
             "query[1, 0, 3] is NaN: q row (1, 0) is NaN, so that query position of batch 0 is NaN "
             "in the output and the weights; every other row is finite.",
             "query", (1, 0, 3), NAN, L=4, S=5, N=2, inputs=CROSS, expect_nan=True),
    _extreme("extreme_nan_in_key_f64",
             "key[2, 1, 0] is NaN (key is value): key position 2 of batch 1 is NaN in every head's "
             "scores, so every row of batch 1 is NaN; batch 0 is finite. float64.",
             "key", (2, 1, 0), NAN, dtype=F64, L=3, S=4, N=2, inputs=ENC_DEC, expect_nan=True),
    _extreme("extreme_nan_in_value_f32",
             "value[0, 0, 5] is NaN: the weights stay finite, but every output of batch 0 mixes in "
             "value position 0 and is NaN.",
             "value", (0, 0, 5), NAN, L=3, S=4, N=2, inputs=CROSS, expect_nan=True),
    _extreme("extreme_pos_inf_in_query_f32",
             "query[0, 1, 2] is +inf: q row (0, 1) holds +-inf, its scores +-inf or NaN, and "
             "softmax over them NaN; other rows are finite.",
             "query", (0, 1, 2), INF, L=3, S=4, N=2, inputs=CROSS, expect_nan=True),
    _extreme("extreme_neg_inf_in_key_f32",
             "key[1, 0, 4] is -inf: key position 1 of batch 0 gives +-inf scores in every row of "
             "batch 0, and softmax NaN there.",
             "key", (1, 0, 4), -INF, L=3, S=4, N=2, inputs=CROSS, expect_nan=True),
    _extreme("extreme_inf_in_value_f64",
             "value[1, 0, 0] is +inf: v row (1, 0) holds +-inf, which every output of batch 0 mixes "
             "in (inf - inf is NaN in out_proj). float64.",
             "value", (1, 0, 0), INF, dtype=F64, L=3, S=4, N=2, inputs=CROSS, expect_nan=True),
    _extreme("extreme_pos_inf_in_float_attn_mask_f32",
             "A float attn_mask with +inf at (1, 2): the row maximum is +inf and softmax gives "
             "inf - inf = NaN for that query row in every batch entry.",
             "attn_mask", (1, 2), INF, L=4, S=4, N=2, attn_mask="float_2d", expect_nan=True),
    _extreme("extreme_nan_in_float_attn_mask_f64",
             "A float attn_mask with NaN at (0, 1): that query row is NaN in every batch entry. "
             "float64.",
             "attn_mask", (0, 1), NAN, dtype=F64, L=3, S=4, N=2, inputs=CROSS, attn_mask="float_2d",
             expect_nan=True),
    _extreme("extreme_1e30_in_float_attn_mask_f32",
             "A float attn_mask with 1e30 at (0, 3): row 0 puts weight 1 on key 3 and exactly 0 "
             "elsewhere; nothing overflows.",
             "attn_mask", (0, 3), 1e30, L=4, S=5, N=2, inputs=CROSS, attn_mask="float_2d"),
    _extreme("extreme_1e30_in_query_f32",
             "query[2, 0, 1] is 1e30: q row (2, 0) is about 1e30, its scores about 1e29, and softmax "
             "one-hot; the output stays finite.",
             "query", (2, 0, 1), 1e30, L=3, S=4, N=2, inputs=CROSS),
    _extreme("extreme_1e30_in_key_f64",
             "key[1, 0, 4] is 1e30 (key is value, so value too): huge scores for key 1 of batch 0, "
             "one-hot or zero weights, and a huge but finite output. float64.",
             "key", (1, 0, 4), 1e30, dtype=F64, L=3, S=4, N=2, inputs=ENC_DEC),
    _extreme("extreme_1e30_in_value_f32",
             "value[2, 1, 3] is 1e30: v row (2, 1) is about 1e30 and batch 1's outputs with it, "
             "finite in float32 (max about 3.4e38). rtol is 5e-5 here, not 1.3e-6: batch 1's "
             "outputs are sums of eight float32 products of about 1e28 that partly cancel, to "
             "as little as a hundredth of the products' size, so rounding the products (each by "
             "up to 6e-8 of that size) can move an output by up to about 5e-5 of its value. "
             "PyTorch's own float32 result is more than 1.3e-6 from its float64 result.",
             "value", (2, 1, 3), 1e30, L=3, S=4, N=2, inputs=CROSS, rtol=5e-5),
]



# --------------------------------------------------------------------------------------
# The backward pass (format 2): gradients of every input and parameter
# --------------------------------------------------------------------------------------
#
# Each is an ordinary Case with backward=True: written with grad_attn_output (and, with
# grad_weights, grad_attn_output_weights), and PyTorch's gradients of
# loss = sum(attn_output * grad_attn_output) [+ sum(attn_output_weights * grad_attn_output_weights)].
# Small sizes, so that the folder and the test time barely grow.

def _backward(name: str, description: str, **kwargs) -> Case:
    return Case(name, description, backward=True, **kwargs)


BACKWARD_CASES = [
    _backward("backward_self_seqfirst_f32",
              "Gradients of self-attention (one object: its gradient is the sum of its three uses; "
              "the packed in-projection's one-GEMM branch), seq-first, averaged weights with their "
              "own upstream gradient.",
              L=4, S=4, N=2, grad_weights=True),
    _backward("backward_self_seqfirst_f64",
              "Gradients of self-attention, seq-first, float64, weights not in the loss.",
              dtype=F64, L=3, S=3, N=2),
    _backward("backward_self_unbatched_f32",
              "Gradients of unbatched self-attention: PyTorch unsqueezes the one object three times, "
              "so the in-projection runs three GEMMs, yet x.grad still sums the three uses.",
              L=4, S=4, N=1, layout=UNBATCHED, grad_weights=True),
    _backward("backward_encdec_batchfirst_f32",
              "Gradients of encoder-decoder attention (key is value: the two-GEMM branch, one "
              "gradient for key and value) with batch_first, per-head weights in the loss.",
              L=3, S=5, N=2, inputs=ENC_DEC, layout=BATCH_FIRST, average_attn_weights=False,
              grad_weights=True),
    _backward("backward_cross_unbatched_f64",
              "Gradients of cross attention (three objects, three gradients) on unbatched input, "
              "need_weights=False.",
              dtype=F64, L=3, S=4, N=1, inputs=CROSS, layout=UNBATCHED, need_weights=False),
    _backward("backward_bool_mask_2d_key_padding_mask_f32",
              "Gradients through a bool (L, S) attn_mask and a key_padding_mask: masked scores get "
              "no gradient.",
              L=4, S=5, N=2, inputs=CROSS, attn_mask="bool_2d", key_padding_mask=True,
              grad_weights=True),
    _backward("backward_bool_mask_3d_f32",
              "Gradients through a bool (N*H, L, S) attn_mask, batch_first.",
              L=3, S=4, N=2, inputs=CROSS, layout=BATCH_FIRST, attn_mask="bool_3d"),
    _backward("backward_float_mask_2d_f64",
              "Gradients through a float (L, S) attn_mask with -inf entries, float64.",
              dtype=F64, L=4, S=4, N=2, attn_mask="float_2d", grad_weights=True),
    _backward("backward_float_mask_3d_key_padding_mask_f64",
              "Gradients through a float (N*H, L, S) attn_mask and a key_padding_mask, key is value.",
              dtype=F64, L=3, S=5, N=2, inputs=ENC_DEC, attn_mask="float_3d", key_padding_mask=True),
    _backward("backward_is_causal_f32",
              "Gradients with the is_causal hint and the causal mask, need_weights=False.",
              L=4, S=4, N=2, attn_mask="causal", need_weights=False),
    _backward("backward_add_bias_kv_f32",
              "Gradients of bias_k and bias_v (add_bias_kv): the appended position's gradient "
              "summed over the batch.",
              L=3, S=4, N=2, inputs=CROSS, add_bias_kv=True, grad_weights=True),
    _backward("backward_add_zero_attn_f32",
              "Gradients with add_zero_attn: the zero key and value take none.",
              L=3, S=4, N=2, inputs=ENC_DEC, add_zero_attn=True, average_attn_weights=False,
              grad_weights=True),
    _backward("backward_add_bias_kv_add_zero_attn_masks_f64",
              "Gradients with bias_k, bias_v and the zero key, a bool attn_mask and a "
              "key_padding_mask (both padded twice), float64.",
              dtype=F64, L=4, S=3, N=2, inputs=CROSS, add_bias_kv=True, add_zero_attn=True,
              attn_mask="bool_2d", key_padding_mask=True, grad_weights=True),
    _backward("backward_kdim_vdim_f32",
              "Gradients of the separate projections q_proj_weight (8, 8), k_proj_weight (8, 5), "
              "v_proj_weight (8, 6): kdim and vdim differ from embed_dim.",
              L=3, S=4, N=2, inputs=CROSS, kdim=5, vdim=6, grad_weights=True),
    _backward("backward_kdim_vdim_add_bias_kv_unbatched_f64",
              "Gradients of separate projections with add_bias_kv on unbatched input, float64.",
              dtype=F64, L=3, S=4, N=1, inputs=CROSS, kdim=5, vdim=6, layout=UNBATCHED,
              add_bias_kv=True),
    _backward("backward_no_bias_f32",
              "Gradients with bias=False: no in_proj_bias, no out_proj.bias.",
              L=4, S=4, N=2, bias=False, grad_weights=True),
    _backward("backward_no_bias_add_bias_kv_f64",
              "Gradients with bias=False but add_bias_kv=True, key is value, float64.",
              dtype=F64, L=3, S=4, N=2, inputs=ENC_DEC, bias=False, add_bias_kv=True),
    _backward("backward_dropout_training_f32",
              "Gradients in training with dropout=0.25: dropout_mask.npy holds the mask PyTorch "
              "drew (recorded by running its dropout again on ones from the same generator "
              "state, and proved by replaying it: the forward comes out identical). Averaged "
              "weights (after dropout, as PyTorch returns them) in the loss.",
              L=4, S=4, N=2, dropout=0.25, training=True, grad_weights=True),
    _backward("backward_dropout_training_per_head_f64",
              "Gradients in training with dropout=0.25, cross attention, per-head weights in the "
              "loss, add_zero_attn (the mask covers the zero key too), float64.",
              dtype=F64, L=3, S=4, N=2, inputs=CROSS, dropout=0.25, training=True,
              average_attn_weights=False, add_zero_attn=True, grad_weights=True),
    _backward("backward_fully_masked_row_f32",
              "Gradients with a fully masked query row (bool attn_mask row 2 all True): that row's "
              "weights are NaN, and autograd carries the NaN into the gradients as the formulas do.",
              L=4, S=4, N=2, attn_mask="bool_2d", fully_masked_row=True, expect_nan=True,
              grad_weights=True),
]
