#!/usr/bin/python3
"""Generate the golden cases: what real torch.nn.MultiheadAttention computes.

Every case is a folder `<case-name>/` holding `case.json` and `.npy` tensors, in the
format of golden/FORMAT.md (version 1). The expected numbers come from a real
`torch.nn.MultiheadAttention` (PyTorch 1.13, Debian's python3-torch) in eval mode, run
on its slow path, `torch.nn.functional.multi_head_attention_forward`: the same math as
the C++ code, step by step. `q.npy`, `k.npy`, `v.npy` come from PyTorch's own
in-projection helpers (`_in_projection_packed`, `_in_projection`), called on exactly
the tensor objects the module passes them. Rejection cases (`expect_error: true`)
hold invalid inputs or options and no expected outputs; where PyTorch 1.13 rejects
them too, the generator checks that it does.

This is not a test and not a reader of cases: it only writes them. Nobody edits a
golden by hand; change this file and regenerate.

Run it from anywhere (Debian's /usr/bin/python3: that is where PyTorch is installed):

    golden/generate.py                  # rewrite golden/: cases/, layouts/, weights/
    golden/generate.py --out DIR        # write those three folders into DIR instead
    golden/generate.py --check          # regenerate into a temporary folder and compare
                                        # with golden/ (exit 1 if they differ)
    golden/generate.py --check DIR      # the same for a golden folder DIR
    ... --case NAME                     # with any of these: only that case (repeatable),
                                        # plus the layouts and weights, which are few

A golden folder holds cases/ (the golden cases), layouts/ (one real MultiheadAttention's
weights permuted into GPT-2, BERT, GPT-NeoX, Megatron, Llama and ONNX Runtime layouts) and
weights/ (a real TransformerEncoder's state_dict as safetensors, and F16/BF16 data): see
write_layout and write_transformer_encoder below. Only cases/ holds golden cases.

--check compares every file, in one of two ways (see "--check" at the end). What the
generator draws or copies -- case.json, parameters, inputs, masks, the JSON and
safetensors files -- must match byte for byte. What PyTorch computes with floating-point
kernels -- attn_output, attn_output_weights, q, k, v -- must match in dtype and shape
exactly and in value within a few ULPs of the tensor's largest magnitude: those kernels
(OpenBLAS's GEMMs, ATen's vectorised loops) round differently on different CPUs.

Seeds are fixed and derived from each case's name, so adding a case changes no other.
"""

import os

# One thread everywhere: BLAS and PyTorch sum in a different order with more threads,
# and the last bits of the goldens would then depend on the machine.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import argparse
import contextlib
import copy
import dataclasses
import filecmp
import functools
import json
import math
import shutil
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)

# L = target length, S = source length, N = batch, E = embed_dim, H = heads,
# D = head_dim = E / H, kdim / vdim = feature sizes of key / value.

FORMAT_VERSION = 1
BASE_SEED = 20240601
# The golden folder: cases/, layouts/ and weights/, next to this file.
GOLDEN = Path(__file__).resolve().parent

# PyTorch's own torch.testing defaults for these dtypes.
TOLERANCE = {
    torch.float32: {"rtol": 1.3e-6, "atol": 1e-5},
    torch.float64: {"rtol": 1e-7, "atol": 1e-7},
}
DTYPE_NAME = {torch.float32: "float32", torch.float64: "float64"}

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
                                      # (see check_float32_accuracy); else the dtype's

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
        return self.attn_mask == "causal"

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
        return {
            "need_weights": self.need_weights,
            "average_attn_weights": self.average_attn_weights,
            "is_causal": self.is_causal,
            "training": False,
        }


@dataclasses.dataclass(frozen=True)
class Rejection:
    """A case the implementation must reject: a valid `base` case, then broken.

    defect(tensors) replaces entries of the tensor dict (query, key, value, attn_mask,
    key_padding_mask); module_override / forward_override change the recorded options.
    torch_rejects: PyTorch 1.13 rejects it too, and the generator checks that it does;
    False when only 2.x rejects it (1.13 accepts it, or cannot express it).
    """
    name: str
    description: str
    base: Case
    defect: Optional[Callable[[dict], None]] = None
    module_override: dict = dataclasses.field(default_factory=dict)
    forward_override: dict = dataclasses.field(default_factory=dict)
    torch_rejects: bool = True


# --------------------------------------------------------------------------------------
# The cases
# --------------------------------------------------------------------------------------

F64 = torch.float64

CASES = [
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
              "attn_mask of dtype uint8: PyTorch 2.x accepts only bool and floating masks. "
              "PyTorch 1.13 still accepted it (deprecated, as bool), so no PyTorch 1.13 check.",
              _base("b", attn_mask="bool_2d"),
              defect=_set("attn_mask", lambda t: t["attn_mask"].to(torch.uint8)),
              torch_rejects=False),
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
# Random draws: the same under every CPU kernel
# --------------------------------------------------------------------------------------
#
# PyTorch 1.13 draws float32 normals (16 or more contiguous values) with an AVX2 kernel
# only under ATen's AVX2 capability, and with a scalar one, which rounds differently,
# under any other. Its float64 kernels are scalar, but compiled once per capability, and
# the AVX2 copy fuses `u * (high - low) + low` (uniform_) and `z * std + mean` (normal_)
# into one FMA, which rounds once instead of twice. What is the same everywhere: the
# standard draws in float64, torch.randn and torch.rand, whose scaling multiplies by 1
# and adds 0. So every random value here is drawn so, scaled in float64 by separate
# operations and cast to its dtype: each of those is correctly rounded, so the same on
# every CPU. Integer draws (torch.randint) involve no rounding.

def randn(shape, dtype: torch.dtype, generator=None) -> torch.Tensor:
    """Standard normal values of `dtype`, drawn in float64 and cast (see above)."""
    return torch.randn(shape, dtype=torch.float64, generator=generator).to(dtype)


def uniform(shape, low: float, high: float, dtype: torch.dtype, generator=None) -> torch.Tensor:
    """Values uniform between low and high, of `dtype`: drawn in [0, 1) in float64,
    scaled and shifted in float64, and cast (see above)."""
    u = torch.rand(shape, dtype=torch.float64, generator=generator)
    return u.mul(high - low).add(low).to(dtype)


@contextlib.contextmanager
def pytorch_init_drawn_in_float64():
    """PyTorch's own parameter initialisation (nn.init's xavier_uniform_, kaiming_uniform_,
    uniform_, normal_, ..., which all end in Tensor.uniform_ or Tensor.normal_), with those
    two methods drawing through randn() and uniform() above: the same distributions, and
    the same values under every CPU kernel."""
    saved = torch.Tensor.uniform_, torch.Tensor.normal_

    def uniform_(tensor, low=0.0, high=1.0, *, generator=None):
        return tensor.copy_(uniform(tensor.shape, low, high, tensor.dtype, generator))

    def normal_(tensor, mean=0.0, std=1.0, *, generator=None):
        z = randn(tensor.shape, torch.float64, generator)
        return tensor.copy_(z.mul(std).add(mean))  # copy_ casts to the tensor's dtype

    torch.Tensor.uniform_, torch.Tensor.normal_ = uniform_, normal_
    try:
        yield
    finally:
        torch.Tensor.uniform_, torch.Tensor.normal_ = saved


# --------------------------------------------------------------------------------------
# Making the tensors
# --------------------------------------------------------------------------------------

def seed_for(name: str) -> int:
    """A seed from the case name alone, so adding or reordering cases changes no other case."""
    return BASE_SEED + zlib.crc32(name.encode("utf-8"))


def make_module(case: Case) -> torch.nn.MultiheadAttention:
    """A real MultiheadAttention with every parameter, biases included, set to non-zero values.

    PyTorch initialises the biases to zero; random biases make a wrong bias order or a
    forgotten bias fail the comparison. (PyTorch's own initial values are replaced, so
    they may depend on the CPU kernel; how many values it draws does not.)
    """
    mha = torch.nn.MultiheadAttention(**case.module_options(), dtype=case.dtype)
    with torch.no_grad():
        for _, p in mha.named_parameters():
            p.copy_(uniform(p.shape, -0.5, 0.5, p.dtype))
    mha.eval()
    return mha


def input_shape(case: Case, length: int, dim: int) -> tuple:
    if case.layout == SEQ_FIRST:
        return (length, case.N, dim)
    if case.layout == BATCH_FIRST:
        return (case.N, length, dim)
    return (length, dim)


def make_inputs(case: Case) -> tuple:
    """query, key, value with the object identity the case asks for."""
    query = randn(input_shape(case, case.L, case.E), case.dtype)
    if case.inputs == SELF:
        return query, query, query
    key = randn(input_shape(case, case.S, case.kdim_), case.dtype)
    if case.inputs == ENC_DEC:
        return query, key, key
    value = randn(input_shape(case, case.S, case.vdim_), case.dtype)
    return query, key, value


def make_key_padding_mask(case: Case) -> torch.Tensor:
    """Right padding: batch entry n has lengths[n] real keys, the rest are True (padded)."""
    lengths = torch.randint(1, case.S + 1, (case.N,))
    if case.S > 1 and bool((lengths == case.S).all()):
        lengths[-1] = case.S - 1  # make sure something is padded
    if case.fully_padded_batch:
        lengths[-1] = 0
    positions = torch.arange(case.S)
    mask = positions.unsqueeze(0) >= lengths.unsqueeze(1)  # (N, S)
    return mask[0] if case.layout == UNBATCHED else mask


def attn_mask_shape(case: Case) -> tuple:
    if case.attn_mask.endswith("_2d") or case.attn_mask == "causal":
        return (case.L, case.S)
    heads = case.H if case.layout == UNBATCHED else case.N * case.H
    return (heads, case.L, case.S)


def make_attn_mask(case: Case, key_padding_mask: Optional[torch.Tensor]) -> torch.Tensor:
    """A random bool or float mask that leaves every row at least one key to attend to.

    The kept key of each row lies in the part no batch entry pads, so no row ends up fully
    masked unless the case asks for it (fully_masked_row / fully_padded_batch).
    """
    if case.attn_mask == "causal":
        return torch.ones(case.L, case.S, dtype=torch.bool).triu(diagonal=1)
    shape = attn_mask_shape(case)
    unpadded = case.S
    if key_padding_mask is not None:
        padded = key_padding_mask.reshape(-1, case.S)
        unpadded = max(1, int((~padded).sum(-1).min()))
    keep = torch.randint(0, unpadded, shape[:-1]).unsqueeze(-1)  # (..., L, 1)
    if case.attn_mask.startswith("bool"):
        mask = uniform(shape, 0.0, 1.0, torch.float64) < 0.4
        mask.scatter_(-1, keep, False)
        if case.fully_masked_row:
            mask[2, :] = True
        return mask
    mask = randn(shape, case.dtype)
    minus_inf = uniform(shape, 0.0, 1.0, torch.float64) < 0.25
    minus_inf.scatter_(-1, keep, False)
    mask.masked_fill_(minus_inf, float("-inf"))
    if case.fully_masked_row:
        mask[2, :] = float("-inf")
    return mask


def make_tensors(case: Case) -> tuple:
    """The module and every forward input of a case, from the case's own seed."""
    torch.manual_seed(seed_for(case.name))
    mha = make_module(case)
    query, key, value = make_inputs(case)
    kpm = make_key_padding_mask(case) if case.key_padding_mask else None
    attn_mask = make_attn_mask(case, kpm) if case.attn_mask else None
    tensors = {"query": query, "key": key, "value": value,
               "key_padding_mask": kpm, "attn_mask": attn_mask}
    return mha, tensors


# --------------------------------------------------------------------------------------
# Running PyTorch: slow path only, and its own q, k, v
# --------------------------------------------------------------------------------------

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


def call_forward(mha: torch.nn.MultiheadAttention, tensors: dict, case: Case):
    return mha(tensors["query"], tensors["key"], tensors["value"],
               key_padding_mask=tensors["key_padding_mask"],
               need_weights=case.need_weights,
               attn_mask=tensors["attn_mask"],
               average_attn_weights=case.average_attn_weights)


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
# combinations measured for MAX_ULPS below, every float32 case uses at most 6% of its
# tolerance so measured. extreme_1e30_in_value_f32, whose outputs cancel, used more than
# all of the default one, and has its own rtol.)
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
    with slow_path_only([]):
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


def run_case(case: Case) -> tuple:
    """Run one numeric case through PyTorch; return (module, inputs, outputs, q/k/v)."""
    mha, tensors = make_tensors(case)
    captured = []
    with slow_path_only(captured):
        attn_output, attn_weights = call_forward(mha, tensors, case)
        q, k, v = in_projection(mha, tensors, case)
    assert captured[0] == "multi_head_attention_forward", case.name
    module_qkv = captured[1]
    assert len(captured) == 3, f"{case.name}: expected one forward and one own projection"

    # Our direct call must reproduce what the module computed inside, bit for bit.
    for mine, theirs in zip((q, k, v), module_qkv):
        assert torch.equal(mine, theirs), f"{case.name}: q/k/v differ from the module's"
    assert q.shape == (case.L, case.N, case.E), case.name
    assert k.shape == v.shape == (case.S, case.N, case.E), case.name

    out_shape, weights_shape = expected_shapes(case)
    assert tuple(attn_output.shape) == out_shape, (case.name, attn_output.shape)
    if case.need_weights:
        assert tuple(attn_weights.shape) == weights_shape, (case.name, attn_weights.shape)
    else:
        assert attn_weights is None, case.name
    has_nan = bool(torch.isnan(attn_output).any())
    assert has_nan == case.expect_nan, f"{case.name}: NaN in output is {has_nan}"

    outputs = {"attn_output": attn_output}
    if case.need_weights:
        outputs["attn_output_weights"] = attn_weights
    check_float32_accuracy(case, mha, tensors, {**outputs, "q": q, "k": k, "v": v})
    return mha, tensors, outputs, {"q": q, "k": k, "v": v}


def check_torch_rejects(rejection: Rejection, mha, tensors: dict, case: Case) -> None:
    """Assert that PyTorch 1.13 rejects the broken case (construction or forward)."""
    options = {**case.module_options(), **rejection.module_override}
    try:
        if rejection.module_override:
            broken = torch.nn.MultiheadAttention(**options, dtype=case.dtype)
            broken.load_state_dict(mha.state_dict())
            mha = broken.eval()
        with slow_path_only([]):
            call_forward(mha, tensors, case)
    except FastPathTaken:
        raise
    except Exception:  # AssertionError or RuntimeError, whichever PyTorch raises
        return
    raise SystemExit(f"generate.py: {rejection.name}: PyTorch 1.13 accepted it")


# --------------------------------------------------------------------------------------
# Writing a case folder
# --------------------------------------------------------------------------------------

ALLOWED_NPY_DTYPES = {"<f4", "<f8", "|b1", "<i4", "|u1"}


def save_npy(folder: Path, name: str, tensor: torch.Tensor) -> None:
    array = np.ascontiguousarray(tensor.detach().cpu().numpy())
    assert array.dtype.str in ALLOWED_NPY_DTYPES, (name, array.dtype.str)
    np.save(folder / f"{name}.npy", array, allow_pickle=False)


def save_parameters(folder: Path, mha: torch.nn.MultiheadAttention) -> None:
    """PyTorch's own parameter names: in_proj_weight, out_proj.weight, bias_k, ..."""
    for name, p in mha.named_parameters():
        save_npy(folder, name, p)


def save_inputs(folder: Path, tensors: dict) -> None:
    for name in ("query", "key", "value", "key_padding_mask", "attn_mask"):
        if tensors[name] is not None:
            save_npy(folder, name, tensors[name])


def case_json(description: str, case: Case, module: dict, forward: dict, tensors: dict,
              expect_error: bool) -> str:
    document = {
        "format": FORMAT_VERSION,
        "description": description,
        "dtype": DTYPE_NAME[case.dtype],
        "module": module,
        "forward": forward,
        "tolerance": case.tolerance,
        "expect_error": expect_error,
        # Our own field: was forward called with the same tensor object? (The packed
        # in-projection takes a different route for self- and encoder-decoder attention.)
        "inputs": {"query_is_key": tensors["query"] is tensors["key"],
                   "key_is_value": tensors["key"] is tensors["value"]},
    }
    return json.dumps(document, indent=2) + "\n"


def write_case(out: Path, case: Case) -> None:
    mha, tensors, outputs, qkv = run_case(case)
    folder = new_folder(out / case.name)
    (folder / "case.json").write_text(
        case_json(case.description, case, case.module_options(), case.forward_options(),
                  tensors, expect_error=False))
    save_parameters(folder, mha)
    save_inputs(folder, tensors)
    for name, tensor in {**outputs, **qkv}.items():
        save_npy(folder, name, tensor)


def write_rejection(out: Path, rejection: Rejection) -> None:
    case = dataclasses.replace(rejection.base, name=rejection.name,
                               description=rejection.description)
    mha, tensors = make_tensors(case)
    if rejection.defect is not None:
        rejection.defect(tensors)
    if rejection.torch_rejects:
        check_torch_rejects(rejection, mha, tensors, case)
    folder = new_folder(out / case.name)
    module = {**case.module_options(), **rejection.module_override}
    forward = {**case.forward_options(), **rejection.forward_override}
    (folder / "case.json").write_text(
        case_json(rejection.description, case, module, forward, tensors, expect_error=True))
    save_parameters(folder, mha)
    save_inputs(folder, tensors)


def new_folder(path: Path) -> Path:
    """An empty folder at `path`, replacing the one an earlier run wrote there."""
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)
    return path


def remove_stale_folders(out: Path, marker: str) -> None:
    """Delete every folder in `out` that holds `marker` (case.json, layout.json): what an
    earlier run wrote, including cases or layouts that no longer exist. Nothing else in
    `out` is touched, so --out may point at a folder that holds other things too."""
    for child in sorted(out.iterdir()):
        if child.is_dir() and (child / marker).exists():
            shutil.rmtree(child)


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


def write_extreme_case(out: Path, extreme: Extreme) -> None:
    """As write_case, with the extreme entry written into the drawn tensors first."""
    case = extreme.case
    mha, tensors = make_tensors(case)
    with torch.no_grad():
        tensors[extreme.tensor][extreme.index] = extreme.value
    captured = []
    with slow_path_only(captured):
        attn_output, attn_weights = call_forward(mha, tensors, case)
        q, k, v = in_projection(mha, tensors, case)
    assert captured[0] == "multi_head_attention_forward", case.name
    for mine, theirs in zip((q, k, v), captured[1]):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=0, equal_nan=True)
    out_shape, weights_shape = expected_shapes(case)
    assert tuple(attn_output.shape) == out_shape, case.name
    assert attn_weights is not None and tuple(attn_weights.shape) == weights_shape, case.name
    has_nan = bool(torch.isnan(attn_output).any())
    assert has_nan == case.expect_nan, f"{case.name}: NaN in output is {has_nan}"
    assert has_nan or bool(torch.isfinite(attn_output).all()), f"{case.name}: inf in output"

    folder = new_folder(out / case.name)
    (folder / "case.json").write_text(
        case_json(case.description, case, case.module_options(), case.forward_options(),
                  tensors, expect_error=False))
    save_parameters(folder, mha)
    save_inputs(folder, tensors)
    outputs = {"attn_output": attn_output, "attn_output_weights": attn_weights,
               "q": q, "k": k, "v": v}
    check_float32_accuracy(case, mha, tensors, outputs)
    for name, tensor in outputs.items():
        save_npy(folder, name, tensor)


def case_writers() -> dict:
    """Every golden case by name, with the function that writes it: name -> write(out)."""
    writers = [(c.name, functools.partial(write_case, case=c)) for c in CASES]
    writers += [(r.name, functools.partial(write_rejection, rejection=r)) for r in REJECTIONS]
    writers += [(x.case.name, functools.partial(write_extreme_case, extreme=x))
                for x in EXTREME_CASES]
    assert len(writers) == len(dict(writers)), "case names must be unique"
    return dict(writers)


def generate(out: Path, names: Optional[list] = None) -> int:
    """Write the cases called `names` (all cases when None) into `out`. Each case draws
    from its own seed, so a case written alone is the same as written with the others."""
    writers = case_writers()
    out.mkdir(parents=True, exist_ok=True)
    if names is None:
        names = list(writers)
        remove_stale_folders(out, "case.json")
    for name in names:
        writers[name](out)
    return len(names)


# --------------------------------------------------------------------------------------
# Other models' weight layouts (golden/layouts/), and a TransformerEncoder saved as
# safetensors (golden/weights/)
# --------------------------------------------------------------------------------------
#
# golden/layouts/<layout>/ holds one real nn.MultiheadAttention's weights twice: under
# PyTorch's names (prefix "self_attn.") and permuted into another model's layout with
# that model's published formula (under a checkpoint-style prefix), as .npy files named
# by state_dict keys; plus query.npy and PyTorch's attn_output.npy for forward(query,
# query, query). layout.json names the layout, its prefix and the sizes. (Not
# case.json: these folders are not golden cases.)

LAYOUT_SIZES = {"E": 12, "H": 3, "L": 5, "N": 2}   # D = 4: per-head permutations matter
LLAMA_SIZES = {"E": 16, "H": 4, "Hkv": 2, "L": 5, "N": 2}


def layout_gpt2(w: dict, H: int) -> dict:
    """HF GPT-2 (modeling_gpt2.py): Conv1D stores weight (in, out) and computes x @ W + b."""
    return {"c_attn.weight": w["in_proj_weight"].t(), "c_attn.bias": w["in_proj_bias"],
            "c_proj.weight": w["out_proj.weight"].t(), "c_proj.bias": w["out_proj.bias"]}


def layout_bert(w: dict, H: int) -> dict:
    """HF BERT (modeling_bert.py): three nn.Linear query, key, value and output.dense."""
    q, k, v = w["in_proj_weight"].chunk(3)
    bq, bk, bv = w["in_proj_bias"].chunk(3)
    return {"self.query.weight": q, "self.query.bias": bq, "self.key.weight": k,
            "self.key.bias": bk, "self.value.weight": v, "self.value.bias": bv,
            "output.dense.weight": w["out_proj.weight"], "output.dense.bias": w["out_proj.bias"]}


def qkv_head_order(t: torch.Tensor, H: int, permutation: tuple) -> torch.Tensor:
    """[Q; K; V] rows seen as (3, H, D, C), axes permuted, flattened back to (3E, C)."""
    C = t.shape[1] if t.dim() == 2 else 1
    D = t.shape[0] // 3 // H
    return t.reshape(3, H, D, C).permute(*permutation).reshape(t.shape)


def layout_query_key_value(w: dict, H: int, permutation: tuple) -> dict:
    return {"query_key_value.weight": qkv_head_order(w["in_proj_weight"], H, permutation),
            "query_key_value.bias": qkv_head_order(w["in_proj_bias"], H, permutation),
            "dense.weight": w["out_proj.weight"], "dense.bias": w["out_proj.bias"]}


def layout_gpt_neox(w: dict, H: int) -> dict:
    """GPT-NeoX / Megatron checkpoint v2: rows [head][q,k,v][head_dim]."""
    return layout_query_key_value(w, H, (1, 0, 2, 3))


def layout_megatron_v1(w: dict, H: int) -> dict:
    """Megatron checkpoint v1: rows [head][head_dim][q,k,v]."""
    return layout_query_key_value(w, H, (1, 2, 0, 3))


def layout_onnx_attention(w: dict, H: int) -> dict:
    """ONNX Runtime com.microsoft.Attention: weights (input_hidden, 3E), Q = X W[:, :E] + b[:E]."""
    return {"weight": w["in_proj_weight"].t(), "bias": w["in_proj_bias"],
            "out_proj.weight": w["out_proj.weight"], "out_proj.bias": w["out_proj.bias"]}


def megatron_to_v3(param: torch.Tensor, version: float, H: int) -> torch.Tensor:
    """fix_query_key_value_ordering of HF's convert_megatron_gpt2_checkpoint.py, restated:
    the fused rows of checkpoint `version` regrouped as [q,k,v][head][head_dim]."""
    shape, D = param.shape, param.shape[0] // 3 // H
    if version == 1.0:
        param = param.view(H, D, 3, *shape[1:]).transpose(0, 2).transpose(1, 2)
    else:
        param = param.view(H, 3, D, *shape[1:]).transpose(0, 1)
    return param.reshape(shape)


def check_layout_formula(name: str, layout: dict, w: dict, H: int, x: torch.Tensor) -> None:
    """Recompute q, k, v the way the source model does, from the layout's own tensors."""
    E = x.shape[-1]
    D = E // H
    want = F.linear(x, w["in_proj_weight"], w["in_proj_bias"])  # (L, N, 3E) = [q | k | v]
    if name in ("gpt2", "onnx_attention"):
        got = x @ layout["c_attn.weight" if name == "gpt2" else "weight"] + \
            layout["c_attn.bias" if name == "gpt2" else "bias"]
    elif name == "bert":
        got = torch.cat([F.linear(x, layout[f"self.{p}.weight"], layout[f"self.{p}.bias"])
                         for p in ("query", "key", "value")], dim=-1)
    else:
        fused = F.linear(x, layout["query_key_value.weight"], layout["query_key_value.bias"])
        if name in ("gpt_neox", "megatron_v2"):  # modeling_gpt_neox.py: view(..., H, 3*D)
            per_head = fused.view(*fused.shape[:-1], H, 3, D)
            got = per_head.permute(*range(fused.dim() - 1), -2, -3, -1).reshape(want.shape)
        else:  # v1: each head's rows hold D groups of (q, k, v)
            per_head = fused.view(*fused.shape[:-1], H, D, 3)
            got = per_head.permute(*range(fused.dim() - 1), -1, -3, -2).reshape(want.shape)
        version = 1.0 if name == "megatron_v1" else 2.0
        assert torch.equal(megatron_to_v3(layout["query_key_value.weight"], version, H),
                           w["in_proj_weight"]), name
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), name


LAYOUTS = {
    # name: (function, checkpoint-style prefix)
    "gpt2": (layout_gpt2, "h.0.attn."),
    "bert": (layout_bert, "bert.encoder.layer.0.attention."),
    "gpt_neox": (layout_gpt_neox, "gpt_neox.layers.0.attention."),
    "megatron_v2": (layout_gpt_neox, "language_model.encoder.layers.0.self_attention."),
    "megatron_v1": (layout_megatron_v1, "language_model.transformer.layers.0.attention."),
    "onnx_attention": (layout_onnx_attention, "attention."),
}


def layout_module(name: str, E: int, H: int, bias: bool) -> torch.nn.MultiheadAttention:
    """A real MultiheadAttention, every parameter random (biases included), eval mode."""
    torch.manual_seed(seed_for("layout_" + name))
    mha = torch.nn.MultiheadAttention(E, H, bias=bias)
    with torch.no_grad():
        for _, p in mha.named_parameters():
            p.copy_(uniform(p.shape, -0.5, 0.5, p.dtype))
    return mha.eval()


def run_self_attention(mha: torch.nn.MultiheadAttention, x: torch.Tensor) -> torch.Tensor:
    with slow_path_only([]):
        out, _ = mha(x, x, x, need_weights=False)
    return out


def write_layout(out: Path, name: str, mha, layout: dict, prefix: str, info: dict) -> None:
    folder = new_folder(out / name)
    x = randn((info["L"], info["N"], info["embed_dim"]), torch.float32)  # (L, N, E), seq-first
    document = {"format": FORMAT_VERSION, "layout": name, "prefix": prefix,
                "pytorch_prefix": "self_attn.", "dtype": "float32",
                "embed_dim": info["embed_dim"], "num_heads": info["num_heads"],
                "bias": mha.in_proj_bias is not None, "tolerance": TOLERANCE[torch.float32]}
    if "num_key_value_heads" in info:
        document["num_key_value_heads"] = info["num_key_value_heads"]
    (folder / "layout.json").write_text(json.dumps(document, indent=2) + "\n")
    for key, p in mha.state_dict().items():
        save_npy(folder, "self_attn." + key, p)
    for key, t in layout.items():
        save_npy(folder, prefix + key, t)
    save_npy(folder, "query", x)
    save_npy(folder, "attn_output", run_self_attention(mha, x))


def write_llama_layout(out: Path) -> None:
    """Llama (HF modeling_llama.py): q_proj (H*D, E), k_proj and v_proj (Hkv*D, E), o_proj,
    no biases; each K/V head serves H/Hkv query heads (repeat_kv). A real MultiheadAttention
    can hold that layer only with each group's K/V heads equal, so the first head of each
    group is copied over the others; then PyTorch runs it. Rotary embeddings are not part
    of nn.MultiheadAttention and are left out on both sides."""
    E, H, Hkv, L, N = (LLAMA_SIZES[k] for k in ("E", "H", "Hkv", "L", "N"))
    D, group = E // H, H // Hkv
    mha = layout_module("llama", E, H, bias=False)
    with torch.no_grad():
        w = mha.in_proj_weight
        for block in (1, 2):  # W_k, W_v: (H, D, E) heads; keep head g * group of each group
            heads = w[block * E:(block + 1) * E].view(H, D, E)
            first = heads[::group].clone()  # (Hkv, D, E)
            heads.copy_(first.repeat_interleave(group, dim=0))
    q_rows, k_rows, v_rows = mha.in_proj_weight.detach().chunk(3)
    layout = {"q_proj.weight": q_rows,
              "k_proj.weight": k_rows.view(H, D, E)[::group].reshape(Hkv * D, E),
              "v_proj.weight": v_rows.view(H, D, E)[::group].reshape(Hkv * D, E),
              "o_proj.weight": mha.out_proj.weight.detach()}
    info = {"embed_dim": E, "num_heads": H, "num_key_value_heads": Hkv, "L": L, "N": N}
    write_layout(out, "llama", mha, layout, "model.layers.0.self_attn.", info)

    # Grouped-query attention as Llama computes it (without rotary), from the layout's
    # own tensors: it must be what MultiheadAttention returned.
    folder = out / "llama"
    x = torch.from_numpy(np.load(folder / "query.npy"))
    x_bf = x.transpose(0, 1)  # (N, L, E)
    q = (x_bf @ layout["q_proj.weight"].t()).view(N, L, H, D).transpose(1, 2)     # (N, H, L, D)
    k = (x_bf @ layout["k_proj.weight"].t()).view(N, L, Hkv, D).transpose(1, 2)   # (N, Hkv, L, D)
    v = (x_bf @ layout["v_proj.weight"].t()).view(N, L, Hkv, D).transpose(1, 2)
    k = k[:, :, None].expand(N, Hkv, group, L, D).reshape(N, H, L, D)  # repeat_kv
    v = v[:, :, None].expand(N, Hkv, group, L, D).reshape(N, H, L, D)
    scores = torch.softmax(q @ k.transpose(-1, -2) / D ** 0.5, dim=-1)
    gqa = ((scores @ v).transpose(1, 2).reshape(N, L, E) @ layout["o_proj.weight"].t()).transpose(0, 1)
    expected = torch.from_numpy(np.load(folder / "attn_output.npy"))
    assert torch.allclose(gqa, expected, rtol=1e-5, atol=1e-6), "llama: GQA != MultiheadAttention"


def generate_layouts(out: Path) -> int:
    """golden/layouts/: one folder per layout (see above)."""
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_folders(out, "layout.json")
    E, H = LAYOUT_SIZES["E"], LAYOUT_SIZES["H"]
    for name, (to_layout, prefix) in LAYOUTS.items():
        mha = layout_module(name, E, H, bias=True)
        weights = {k: v.detach() for k, v in mha.state_dict().items()}
        layout = to_layout(weights, H)
        check_layout_formula(name, layout, weights, H, randn((3, 2, E), torch.float32))
        write_layout(out, name, mha, layout, prefix,
                     {"embed_dim": E, "num_heads": H, "L": LAYOUT_SIZES["L"], "N": LAYOUT_SIZES["N"]})
    write_llama_layout(out)
    return len(LAYOUTS) + 1


SAFETENSORS_DTYPE = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16",
                     torch.bfloat16: "BF16", torch.int64: "I64"}


def write_safetensors(path: Path, tensors: dict, metadata: dict) -> None:
    """The safetensors format, written out by hand (Debian has no safetensors package):
    8-byte little-endian header length, a JSON header of dtype/shape/data_offsets per
    tensor (and __metadata__), padded with spaces to a multiple of 8, then the data, each
    tensor little-endian and C-ordered, in the order of the sorted names."""
    header, chunks, offset = {"__metadata__": metadata}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": SAFETENSORS_DTYPE[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    path.write_bytes(len(text).to_bytes(8, "little") + text + b"".join(chunks))


def write_transformer_encoder(out: Path) -> None:
    """A real nn.TransformerEncoder (2 layers, d_model 8, 2 heads) and its state_dict as
    transformer_encoder/model.safetensors: the keys are layers.0.self_attn.in_proj_weight
    and so on, the situation of model.transformer_encoder.layers[0].self_attn. Its weights
    are PyTorch's initialisation (its draws made in float64, as everywhere here) plus
    noise, as if trained a little (the layers start as deep copies of one another, and
    the attention biases at zero). Saved with them: src.npy and what layers[0].self_attn
    returns for it in the model's forward pass."""
    torch.manual_seed(seed_for("weights_transformer_encoder"))
    with pytorch_init_drawn_in_float64():
        layer = torch.nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16,
                                                 dropout=0.0)
    model = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * randn(p.shape, p.dtype))
    model.eval()
    src = randn((5, 2, 8), torch.float32)  # (L, N, E), seq-first

    captured = []
    hook = model.layers[0].self_attn.register_forward_hook(lambda m, i, o: captured.append(o[0]))
    with slow_path_only([]):
        model(src)
    hook.remove()
    direct = run_self_attention(model.layers[0].self_attn, src)
    assert len(captured) == 1 and torch.equal(captured[0], direct), "layer 0 self_attn"

    folder = new_folder(out / "transformer_encoder")
    write_safetensors(folder / "model.safetensors", model.state_dict(), {"format": "pt"})
    document = {"format": FORMAT_VERSION, "model": "torch.nn.TransformerEncoder",
                "d_model": 8, "nhead": 2, "num_layers": 2, "dim_feedforward": 16,
                "layer": "layers.0.self_attn.", "dtype": "float32",
                "tolerance": TOLERANCE[torch.float32]}
    (folder / "model.json").write_text(json.dumps(document, indent=2) + "\n")
    save_npy(folder, "src", src)
    save_npy(folder, "layers.0.self_attn.attn_output", direct)


def write_dtypes(out: Path) -> None:
    """dtypes/dtypes.safetensors: the same values as F32, F64, F16 and BF16 (PyTorch's
    casts), plus an I64 tensor; and PyTorch's widening of the F16 and BF16 tensors back
    to float32 and float64, to check the reader's conversions against."""
    torch.manual_seed(seed_for("weights_dtypes"))
    special = torch.tensor([0.0, -0.0, 1.0, -2.5, 65504.0, 1e5, 6e-8, 1e-40, 3.0e-5,
                            float("inf"), float("-inf"), float("nan")])
    values = torch.cat([special, randn(20, torch.float32) * 10])  # (32)
    # PyTorch's bfloat16 cast writes NaN as 0x7FC0, except its AVX2 loop, which writes
    # 0xFFFF: the NaN is written again, by the scalar conversion, to be the same everywhere.
    bf16 = values.bfloat16().masked_fill(values.isnan(), float("nan"))
    tensors = {"f32": values, "f64": values.double(), "f16": values.half(),
               "bf16": bf16, "position_ids": torch.arange(6)}
    folder = new_folder(out / "dtypes")
    write_safetensors(folder / "dtypes.safetensors", tensors, {"format": "pt"})
    for source in ("f16", "bf16"):
        save_npy(folder, f"{source}_as_float32", tensors[source].float())
        save_npy(folder, f"{source}_as_float64", tensors[source].double())


def generate_weights(out: Path) -> int:
    """golden/weights/: transformer_encoder/ and dtypes/ (see above)."""
    out.mkdir(parents=True, exist_ok=True)
    write_transformer_encoder(out)
    write_dtypes(out)
    return 2


def generate_golden(root: Path, case_names: Optional[list] = None) -> str:
    """Write a golden folder: root/cases, root/layouts, root/weights; nothing outside root.
    Returns what was written, for the user."""
    cases = generate(root / "cases", case_names)
    layouts = generate_layouts(root / "layouts")
    weights = generate_weights(root / "weights")
    return f"{cases} cases, {layouts} layouts, {weights} weight sets"


# --------------------------------------------------------------------------------------
# --check: regenerate, then compare file by file
# --------------------------------------------------------------------------------------
#
# A file is compared in one of two ways, decided by how this generator makes it.
#
# Byte for byte: everything the generator draws from a seeded generator, copies,
# permutes, casts or writes as text -- case.json, layout.json, model.json, the parameters,
# inputs and masks, the layouts' permuted weights, both safetensors files (parameters and
# dtype casts only). Those bits depend on no CPU kernel: nothing in them passes through
# OpenBLAS, and every random value is drawn as randn() and uniform() draw it, the same
# under every ATen capability (see "Random draws" above).
#
# Within a bound: the tensors PyTorch computes with floating-point kernels, named in
# COMPUTED_TENSORS. Their GEMMs run in OpenBLAS, whose kernel (chosen per CPU, or by
# OPENBLAS_CORETYPE) sums in its own order; softmax and the element-wise steps run in
# ATen's vectorised loops (chosen per CPU, or by ATEN_CPU_CAPABILITY). Both are
# deterministic on one machine but round differently on another.

# File stems (without .npy) of the tensors that write_case, write_extreme_case,
# write_layout and write_transformer_encoder compute; every other file is exact.
COMPUTED_TENSORS = {"attn_output", "attn_output_weights", "q", "k", "v",
                    "layers.0.self_attn.attn_output"}

# The bound: |generated - file| <= MAX_ULPS * ulp(max |generated|), elementwise, the ulp
# taken in the tensor's own dtype (np.spacing). Why 8: across the kernels that could be
# run on the machine where this was measured (OpenBLAS's Prescott, Sandybridge, Haswell
# and Zen, each with ATen's default and AVX2 loops: 8 combinations, 28 pairs), the
# largest distance between two of them is 4 ULPs (extreme_1e30_in_query_f32/attn_output,
# default against AVX2 loops; layouts/megatron_v2/attn_output, Prescott against
# Haswell); 98% of the computed tensors differ by at most 2. 8 is twice that, left for
# kernels that could not be run there (OpenBLAS's SkylakeX needs AVX-512). It stays
# tight: a float32 value changed by a relative 1e-5 moves by 84 to 168 of its own ULPs,
# so the bound catches that change in any value of at least a tenth of the tensor's
# largest magnitude (tests/golden_regeneration_test.py changes the largest value and
# expects a failure).
MAX_ULPS = 8


@dataclasses.dataclass
class Comparison:
    """What comparing a fresh golden folder with a given one found."""
    problems: list = dataclasses.field(default_factory=list)   # one line per bad file
    exact_files: int = 0          # files compared byte for byte
    computed_tensors: int = 0     # tensors compared within the bound
    inexact_tensors: int = 0      # ... of which not bit for bit identical
    largest: tuple = (0.0, "")    # (distance in ULPs, file) of the farthest tensor

    def add_distance(self, distance: float, name: str) -> None:
        self.computed_tensors += 1
        self.inexact_tensors += distance > 0
        if distance > self.largest[0] or not self.largest[1]:
            self.largest = (distance, name)


def read_npy(path: Path) -> tuple:
    """(header, array, trailing bytes): the bytes before the data (magic, version, dtype,
    order and shape), the data, and whatever follows it (nothing, in a good file)."""
    with open(path, "rb") as f:
        array = np.lib.format.read_array(f, allow_pickle=False)
        end = f.tell()
        trailing = f.read()
    header = path.read_bytes()[:end - array.nbytes]
    return header, array, trailing


def ulp_distance(expected: np.ndarray, got: np.ndarray) -> tuple:
    """(distance, index): the largest |got - expected| over the finite entries, in ULPs of
    the largest finite |expected|, and where it is. A NaN or +-inf must be the same in
    both (NaN equal to NaN); where it is not, the distance is inf."""
    nonfinite = ~np.isfinite(expected) | ~np.isfinite(got)
    same = (expected == got) | (np.isnan(expected) & np.isnan(got))
    if (nonfinite & ~same).any():
        return math.inf, np.unravel_index(np.argmax(nonfinite & ~same), expected.shape)
    finite = ~nonfinite
    if not finite.any():
        return 0.0, None
    # The unit: the gap between the largest magnitude and the next value of the dtype.
    unit = float(np.spacing(np.abs(expected[finite]).max()))
    difference = np.zeros(expected.shape)  # float64: a float32 difference cannot overflow
    difference[finite] = np.abs(got[finite].astype(np.float64) -
                                expected[finite].astype(np.float64))
    index = np.unravel_index(np.argmax(difference), expected.shape)
    return float(difference[index]) / unit, index


def compare_computed_tensor(fresh: Path, given: Path, name: str, found: Comparison) -> None:
    """A tensor PyTorch computed: the same header (dtype, shape) and bytes after it, and
    values within MAX_ULPS of the freshly generated ones. The unit comes from the fresh
    tensor, so an edited file cannot widen its own bound."""
    expected_header, expected, _ = read_npy(fresh)
    try:
        header, got, trailing = read_npy(given)
    except ValueError as error:
        found.problems.append(f"differs: {name}: not a readable .npy file ({error})")
        return
    if header != expected_header or trailing:
        found.problems.append(f"differs: {name}: {got.dtype.str} {got.shape}, generated "
                              f"{expected.dtype.str} {expected.shape} (header or size differs)")
        return
    distance, index = ulp_distance(expected, got)
    if distance > MAX_ULPS:
        what = ("NaN or inf not matched" if math.isinf(distance) else
                f"{distance:.4g} ULPs of its largest magnitude (bound {MAX_ULPS})")
        found.problems.append(f"differs: {name}: {what} at {tuple(int(i) for i in index)}: "
                              f"generated {expected[index]!r}, the file holds {got[index]!r}")
        return
    found.add_distance(distance, name)


def relative_files(root: Path) -> set:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


def by_folder(names: set, other: Path) -> list:
    """The relative file names, sorted; the files of a top-level folder that `other` lacks
    as a whole are named once, as that folder ("bert/"), not file by file."""
    named = set()
    for name in names:
        top = name.split("/")[0]
        whole_folder = "/" in name and not (other / top).exists()
        named.add(top + "/" if whole_folder else name)
    return sorted(named)


def compare_folders(fresh: Path, given: Path, prefix: str, found: Comparison,
                    only: Optional[list] = None) -> None:
    """Every file of `given` against the freshly generated `fresh`: none missing, none
    extra, each equal byte for byte or, for a computed tensor, within the bound. With
    `only`, just the files under those top-level folders (cases, by name)."""
    expected = relative_files(fresh)
    present = relative_files(given) if given.is_dir() else set()
    if only is not None:
        expected = {n for n in expected if n.split("/")[0] in only}
        present = {n for n in present if n.split("/")[0] in only}
    found.problems += [f"missing: {prefix}{n}" for n in by_folder(expected - present, given)]
    found.problems += [f"extra: {prefix}{n}" for n in by_folder(present - expected, fresh)]
    for n in sorted(expected & present):
        if n.endswith(".npy") and Path(n).name[:-len(".npy")] in COMPUTED_TENSORS:
            compare_computed_tensor(fresh / n, given / n, prefix + n, found)
        elif filecmp.cmp(fresh / n, given / n, shallow=False):
            found.exact_files += 1
        else:
            found.problems.append(f"differs: {prefix}{n} (must match byte for byte)")


def compare_golden(fresh: Path, given: Path, case_names: Optional[list]) -> Comparison:
    """Two golden folders, part by part; with case_names, only those cases of cases/."""
    found = Comparison()
    compare_folders(fresh / "cases", given / "cases", "cases/", found, only=case_names)
    for part in ("layouts", "weights"):
        compare_folders(fresh / part, given / part, f"{part}/", found)
    return found


def print_agreement(found: Comparison) -> None:
    """What agreed: the exact files, the computed tensors, and the largest distance."""
    distance, name = found.largest
    print(f"  {found.exact_files} files match byte for byte, {found.computed_tensors} computed "
          f"tensors within {MAX_ULPS} ULPs of their largest magnitude "
          f"({found.inexact_tensors} of them not bit for bit)\n"
          f"  largest distance: {distance:.2f} ULPs, {name or '(no computed tensor)'}")


def check(given: Path, case_names: Optional[list]) -> int:
    """Regenerate into a temporary folder and compare `given` with it; 0 when they agree."""
    with tempfile.TemporaryDirectory(prefix="golden-check-") as tmp:
        written = generate_golden(Path(tmp), case_names)
        found = compare_golden(Path(tmp), given, case_names)
    for line in found.problems:
        print(line)
    if found.problems:
        print_agreement(found)
        print(f"{given} does not regenerate from golden/generate.py: "
              f"{len(found.problems)} difference(s)")
        return 1
    print(f"{given} regenerates from golden/generate.py ({written}):")
    print_agreement(found)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n")[0],
        epilog="A golden folder holds cases/, layouts/ and weights/; golden/ is one.")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--out", type=Path, default=GOLDEN, metavar="DIR",
                        help="the golden folder to write: DIR/cases, DIR/layouts and "
                             "DIR/weights, nothing outside DIR (default: golden/)")
    action.add_argument("--check", type=Path, nargs="?", const=GOLDEN, metavar="DIR",
                        help="regenerate into a temporary folder and compare the golden "
                             "folder DIR with it (default: golden/); exit 1 if they differ")
    parser.add_argument("--case", action="append", metavar="NAME", dest="cases",
                        help="only this case (repeatable); the layouts and weights, which "
                             "are few, are always included")
    args = parser.parse_args()
    unknown = [name for name in args.cases or [] if name not in case_writers()]
    if unknown:
        parser.error(f"--case: no case named {', '.join(unknown)}")
    if args.check is not None:
        return check(args.check, args.cases)
    print(f"wrote {generate_golden(args.out, args.cases)} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
