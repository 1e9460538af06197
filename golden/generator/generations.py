"""The cases where PyTorch 1.13 and PyTorch 2.x differ (docs/15-versions.md), as tables.

Each case is written by every generation it names in `generations` ("1.13", "2.x"), each
into its own folder (versions.py), so that the two folders hold the same call as each
generation computes it. A case of 2.x alone is one that 1.13 cannot express (the
is_causal hint) or accepts where 2.x rejects it (a uint8 attn_mask).

  sdpa_*              need_weights=False: 2.x runs scaled_dot_product_attention, whose
                      softmax gives a fully masked row weight 0 (the row's output is then
                      out_proj.bias), where 1.13 and 2.x's weights branch give NaN;
  is_causal_hint_*    is_causal=True with a mask that is not causal: 2.x's SDPA branch runs
                      causal and never reads the mask; with the weights or a
                      key_padding_mask it drops the hint and applies the mask; its native
                      fast path ignores the hint;
  mismatched_masks_*, float_masks_*
                      a bool and a float mask: 2.x makes both float and adds them, and
                      warns that the types differ; 1.13 merges them by logical_or (a
                      nonzero float masks the key) or merges nothing into a float
                      attn_mask;
  fast_path_*, grad_disabled_*, grad_enabled_*
                      forward.grad_enabled false: the call runs under torch.no_grad(), and
                      the module takes torch._native_multi_head_attention when its
                      conditions hold, which differ by generation (a float mask rules it
                      out in 2.x; an attn_mask in 1.13, where a float key_padding_mask is
                      made bool instead, with a warning). The fast path gives a fully
                      masked row NaN in both.
"""

import dataclasses

import torch

from .cases import BATCH_FIRST, CROSS, ENC_DEC, UNBATCHED, Case, Rejection, _base, _set
from .functional import Functional, FunctionalRejection
from .functional import _base as _functional_base
from .functional import _set as _functional_set

F64 = torch.float64
BOTH, ONLY_2X = ("1.13", "2.x"), ("2.x",)

GENERATION_CASES = [
    # 1) A fully masked row through scaled_dot_product_attention (2.x, need_weights=False).
    Case("sdpa_fully_masked_row_f32",
         "Row 2 of the bool attn_mask is all True, need_weights=False. 2.x: the SDPA branch's "
         "softmax gives the row weight 0, so that query position's output is out_proj.bias; "
         "1.13: NaN (the weights computed and dropped).",
         L=5, S=5, N=2, attn_mask="bool_2d", fully_masked_row=True, need_weights=False,
         expect_nan=True, expect_nan_2x=False),
    Case("sdpa_fully_padded_batch_f64",
         "The last batch entry's keys all padded, need_weights=False, key is value: 2.x gives "
         "that batch entry out_proj.bias (SDPA), 1.13 NaN. float64.",
         dtype=F64, L=4, S=5, N=3, inputs=ENC_DEC, key_padding_mask=True, fully_padded_batch=True,
         need_weights=False, expect_nan=True, expect_nan_2x=False),
    Case("sdpa_float_mask_fully_masked_row_unbatched_f32",
         "Unbatched cross attention, a float attn_mask whose row 2 is all -inf, "
         "need_weights=False: 2.x out_proj.bias in that row (SDPA), 1.13 NaN.",
         L=4, S=4, N=1, inputs=CROSS, layout=UNBATCHED, attn_mask="float_2d",
         fully_masked_row=True, need_weights=False, expect_nan=True, expect_nan_2x=False),

    # 2) The is_causal hint with a mask that is not causal (2.x only).
    Case("is_causal_hint_noncausal_mask_f32",
         "is_causal=True with a random bool attn_mask (not causal), need_weights=False, no "
         "key_padding_mask: 2.x drops the mask unread and SDPA runs causal.",
         L=5, S=5, N=2, attn_mask="bool_2d", is_causal_hint=True, need_weights=False,
         generations=ONLY_2X),
    Case("is_causal_hint_noncausal_mask_need_weights_f32",
         "is_causal=True with a random bool attn_mask and need_weights=True: 2.x needs the "
         "mask for the weights and applies it as given; the hint changes nothing.",
         L=5, S=5, N=2, attn_mask="bool_2d", is_causal_hint=True, generations=ONLY_2X),
    Case("is_causal_hint_noncausal_mask_key_padding_mask_f32",
         "is_causal=True with a random bool attn_mask and a key_padding_mask, need_weights="
         "False: 2.x merges the two masks and turns the hint off (the merged mask is not "
         "causal).",
         L=5, S=5, N=2, attn_mask="bool_2d", key_padding_mask=True, is_causal_hint=True,
         need_weights=False, generations=ONLY_2X),
    Case("is_causal_hint_noncausal_float_mask_cross_f64",
         "is_causal=True with a random float attn_mask, L=3 < S=5, need_weights=False: SDPA's "
         "causal mask is top-left aligned (query i sees keys 0..i), the float mask unread. "
         "float64.",
         dtype=F64, L=3, S=5, N=2, inputs=CROSS, attn_mask="float_2d", is_causal_hint=True,
         need_weights=False, generations=ONLY_2X),
    Case("fast_path_is_causal_without_attn_mask_f32",
         "is_causal=True without an attn_mask on 2.x's native fast path (grad disabled, "
         "batch_first self-attention): the fast path never reads the hint, and the call runs "
         "without a mask, where the slow path refuses it (reject_is_causal_without_attn_mask).",
         L=4, S=4, N=2, layout=BATCH_FIRST, is_causal_hint=True, grad_enabled=False,
         fast_path=ONLY_2X, generations=ONLY_2X),
    Case("fast_path_is_causal_hint_noncausal_mask_f32",
         "is_causal=True with a random bool attn_mask on 2.x's native fast path (grad "
         "disabled, batch_first self-attention, need_weights=False): the fast path is given "
         "the mask and not the hint, and applies the mask.",
         L=5, S=5, N=2, layout=BATCH_FIRST, attn_mask="bool_2d", is_causal_hint=True,
         need_weights=False, grad_enabled=False, fast_path=ONLY_2X, generations=ONLY_2X),

    # 3) Masks of two types.
    Case("mismatched_masks_bool_attn_mask_float_key_padding_mask_f32",
         "A bool attn_mask and a float key_padding_mask (-inf where padded, -1.0 on key 1 "
         "elsewhere). 2.x warns \"Support for mismatched key_padding_mask and attn_mask is "
         "deprecated\" and adds the two as float masks (key 1 loses weight); 1.13 merges them "
         "by logical_or, so that the -1.0 masks key 1 outright.",
         L=4, S=5, N=2, inputs=CROSS, attn_mask="bool_2d", key_padding_mask=True,
         float_key_padding_mask=True),
    Case("mismatched_masks_float_attn_mask_bool_key_padding_mask_f32",
         "A float attn_mask and a bool key_padding_mask: both generations mask the padded "
         "keys (-inf); 2.x warns that the types differ, 1.13 does not.",
         L=4, S=5, N=2, inputs=ENC_DEC, attn_mask="float_2d", key_padding_mask=True),
    Case("float_masks_both_f64",
         "A float attn_mask and a float key_padding_mask (-inf where padded, -1.0 on key 1 "
         "elsewhere). 2.x adds them; 1.13 merges the padding by masked_fill with a float "
         "mask, which fills nothing: the padded keys keep their weight. float64.",
         dtype=F64, L=3, S=5, N=2, inputs=ENC_DEC, attn_mask="float_2d", key_padding_mask=True,
         float_key_padding_mask=True),

    # 4) Grad disabled: the native fast path where its conditions hold.
    Case("fast_path_f32",
         "Grad disabled, eval, batch_first self-attention, even num_heads, packed weights "
         "with biases, no mask: both generations take the native fast path.",
         L=5, S=5, N=2, layout=BATCH_FIRST, grad_enabled=False, fast_path=BOTH),
    Case("fast_path_per_head_weights_key_padding_mask_f32",
         "The native fast path with a bool key_padding_mask and per-head weights, H=4.",
         H=4, L=4, S=4, N=3, layout=BATCH_FIRST, key_padding_mask=True,
         average_attn_weights=False, grad_enabled=False, fast_path=BOTH),
    Case("fast_path_need_weights_false_f64",
         "The native fast path without weights, E=16, H=2 (head_dim 8), a bool "
         "key_padding_mask. float64.",
         dtype=F64, E=16, H=2, L=5, S=5, N=2, layout=BATCH_FIRST, key_padding_mask=True,
         need_weights=False, grad_enabled=False, fast_path=BOTH),
    Case("fast_path_attn_mask_bool_key_padding_mask_f32",
         "Grad disabled with a bool attn_mask and a bool key_padding_mask: 2.x's fast path "
         "takes both (merged); 1.13's refuses any attn_mask and runs the slow path.",
         L=5, S=5, N=2, layout=BATCH_FIRST, attn_mask="bool_2d", key_padding_mask=True,
         grad_enabled=False, fast_path=ONLY_2X),
    Case("fast_path_attn_mask_bool_3d_f32",
         "Grad disabled with a bool (N*H, L, S) attn_mask: 2.x's fast path, 1.13's slow path.",
         L=4, S=4, N=2, layout=BATCH_FIRST, attn_mask="bool_3d", grad_enabled=False,
         fast_path=ONLY_2X),
    Case("fast_path_fully_padded_batch_f32",
         "The native fast path, the last batch entry's keys all padded, need_weights=False: "
         "NaN in that batch entry in both generations (2.x's slow path would give "
         "out_proj.bias: grad_enabled_fully_padded_batch_f32).",
         L=4, S=4, N=2, layout=BATCH_FIRST, key_padding_mask=True, fully_padded_batch=True,
         need_weights=False, grad_enabled=False, fast_path=BOTH, expect_nan=True),
    Case("fast_path_fully_masked_row_f32",
         "Grad disabled, row 2 of a bool attn_mask all True, need_weights=False: 2.x's fast "
         "path gives NaN there; 1.13's slow path NaN too.",
         L=5, S=5, N=2, layout=BATCH_FIRST, attn_mask="bool_2d", fully_masked_row=True,
         need_weights=False, grad_enabled=False, fast_path=ONLY_2X, expect_nan=True),
    Case("fast_path_dropout_eval_fully_padded_batch_f32",
         "Grad disabled, eval, batch_first self-attention with dropout=0.5 (off in eval), "
         "the last batch entry's keys all padded, need_weights=False. 2.x: dropout is no "
         "condition of the fast path, which gives that batch entry NaN (its slow path would "
         "give out_proj.bias); 1.13: \"dropout was 0.5, required zero\", the slow path, NaN.",
         L=4, S=4, N=2, layout=BATCH_FIRST, dropout=0.5, key_padding_mask=True,
         fully_padded_batch=True, need_weights=False, grad_enabled=False, fast_path=ONLY_2X,
         expect_nan=True),
    Case("grad_enabled_fully_padded_batch_f32",
         "fast_path_fully_padded_batch_f32 with grad enabled: the slow path, where 2.x's SDPA "
         "gives the padded batch entry out_proj.bias and 1.13 NaN.",
         L=4, S=4, N=2, layout=BATCH_FIRST, key_padding_mask=True, fully_padded_batch=True,
         need_weights=False, expect_nan=True, expect_nan_2x=False),
    Case("grad_disabled_float_key_padding_mask_f32",
         "Grad disabled, batch_first self-attention, a float key_padding_mask (-inf where "
         "padded, -1.0 on key 1 elsewhere). 2.x: a float mask rules the fast path out, and "
         "the slow path adds it. 1.13: the fast path makes it bool (the -1.0 masks key 1) "
         "and warns \"Converting mask without torch.bool dtype to bool\".",
         L=5, S=5, N=2, layout=BATCH_FIRST, key_padding_mask=True, float_key_padding_mask=True,
         grad_enabled=False, fast_path=("1.13",)),
    Case("grad_disabled_float_attn_mask_fully_masked_row_f32",
         "Grad disabled, batch_first self-attention, a float attn_mask whose row 2 is all "
         "-inf, need_weights=False: 2.x's slow path (float mask), SDPA, out_proj.bias in that "
         "row; 1.13's slow path (attn_mask), NaN.",
         L=5, S=5, N=2, layout=BATCH_FIRST, attn_mask="float_2d", fully_masked_row=True,
         need_weights=False, grad_enabled=False, expect_nan=True, expect_nan_2x=False),
    Case("grad_disabled_seq_first_fully_padded_batch_f32",
         "Grad disabled but batch_first=False: the slow path (2.x's SDPA: out_proj.bias in "
         "the padded batch entry; 1.13: NaN).",
         L=4, S=4, N=2, key_padding_mask=True, fully_padded_batch=True, need_weights=False,
         grad_enabled=False, expect_nan=True, expect_nan_2x=False),
    Case("grad_disabled_unbatched_fully_padded_f32",
         "Grad disabled, eval, self-attention, but unbatched (L, E) input whose keys are all "
         "padded, need_weights=False: \"input not batched\", the slow path (2.x's SDPA: "
         "out_proj.bias in every row; 1.13: NaN).",
         L=4, S=4, N=1, layout=UNBATCHED, key_padding_mask=True, fully_padded_batch=True,
         need_weights=False, grad_enabled=False, expect_nan=True, expect_nan_2x=False),
    Case("grad_disabled_odd_heads_fully_padded_batch_f32",
         "Grad disabled, batch_first, but num_heads=1 (odd): the slow path.",
         H=1, L=4, S=4, N=2, layout=BATCH_FIRST, key_padding_mask=True, fully_padded_batch=True,
         need_weights=False, grad_enabled=False, expect_nan=True, expect_nan_2x=False),
    Case("grad_disabled_cross_fully_padded_batch_f32",
         "Grad disabled, batch_first, but key is value is not query (encoder-decoder): the "
         "slow path.",
         L=4, S=4, N=2, inputs=ENC_DEC, layout=BATCH_FIRST, key_padding_mask=True,
         fully_padded_batch=True, need_weights=False, grad_enabled=False, expect_nan=True,
         expect_nan_2x=False),
    Case("grad_disabled_no_bias_fully_padded_batch_f32",
         "Grad disabled, batch_first self-attention, but bias=False: 2.x hands the fast path "
         "only a module with in_proj_bias, and runs the slow path (SDPA: out_proj has no "
         "bias, so the padded batch entry's output is 0).",
         L=4, S=4, N=2, layout=BATCH_FIRST, bias=False, key_padding_mask=True,
         fully_padded_batch=True, need_weights=False, grad_enabled=False, generations=ONLY_2X),
]

# Each says so in its case.json ("generations_differ": true): a reader that follows one
# generation only (the tutorials follow 2.x) can tell it from a case both compute alike.
GENERATION_CASES = [dataclasses.replace(c, generations_differ=True) for c in GENERATION_CASES]

GENERATION_REJECTIONS = [
    Rejection("reject_fast_path_without_bias",
              "Grad disabled, batch_first self-attention, bias=False: 1.13 takes its native fast "
              "path and hands it in_proj_bias None (\"_native_multi_head_attention(): argument "
              "'qkv_bias' (position 7) must be Tensor, not NoneType\"); 2.x runs the slow path "
              "(grad_disabled_no_bias_fully_padded_batch_f32).",
              _base("b", N=2, L=4, S=4, layout=BATCH_FIRST, bias=False, key_padding_mask=True,
                    grad_enabled=False),
              generations=("1.13",)),
    Rejection("reject_key_padding_mask_uint8",
              "key_padding_mask of dtype uint8: both generations accept only bool and floating "
              "key padding masks (\"only bool and floating types of key_padding_mask are "
              "supported\").",
              _base("b", N=2, L=3, S=5, inputs=ENC_DEC, key_padding_mask=True),
              defect=_set("key_padding_mask", lambda t: t["key_padding_mask"].to(torch.uint8))),
]

GENERATION_FUNCTIONAL_CASES = [
    Functional("functional_fully_masked_row_need_weights_false_f32",
               "F.multi_head_attention_forward with row 2 of a bool attn_mask all True and "
               "need_weights=False: 2.x's SDPA branch gives that row out_proj_bias, 1.13 NaN.",
               L=5, S=5, N=2, inputs=ENC_DEC, attn_mask="bool_2d", fully_masked_row=True,
               need_weights=False, expect_nan=True, expect_nan_2x=False),
]

GENERATION_FUNCTIONAL_REJECTIONS = [
    FunctionalRejection("functional_reject_attn_mask_uint8",
                        "A uint8 attn_mask: 2.x accepts only bool and floating masks; 1.13 "
                        "warned and read it as bool, so this is a case of 2.x only.",
                        _functional_base(attn_mask="bool_2d"),
                        _functional_set("attn_mask", lambda c: c["attn_mask"].to(torch.uint8)),
                        "only bool and floating types of attn_mask are supported",
                        generations=ONLY_2X),
]
