"""The tensors of a case, drawn from its own seed: a module with random parameters, and
the forward inputs and masks, with the object identity (self, encoder-decoder or cross
attention) the case asks for."""

from typing import Callable, Optional

import torch

from .cases import BATCH_FIRST, ENC_DEC, SELF, SEQ_FIRST, UNBATCHED, Case
from .draws import randn, seed_for, uniform


# The worked example's numbers (case worked_example_f64), small integers chosen so that
# every block of in_proj_weight is different (a wrong split changes every result) and
# q . k^T is an integer a student can check by hand. E = 4, H = 2, D = 2, L = S = 3, N = 1.
WORKED_EXAMPLE = {
    "in_proj_weight": [[1, 0, 0, 0],     # W_q: rows [0, 4), the identity: q = x + b_q
                       [0, 1, 0, 0],
                       [0, 0, 1, 0],
                       [0, 0, 0, 1],
                       [0, 1, 0, 0],     # W_k: rows [4, 8), the features shifted by one:
                       [0, 0, 1, 0],     #   k = (x1, x2, x3, x0), so that q . k^T is not
                       [0, 0, 0, 1],     #   symmetric and swapping W_q and W_k shows
                       [1, 0, 0, 0],
                       [1, 1, 0, 0],     # W_v: rows [8, 12), sums of neighbours
                       [0, 1, 1, 0],
                       [0, 0, 1, 1],
                       [1, 0, 0, 1]],
    "in_proj_bias": [0, 0, 0, 0,  0, 0, 0, 0,  0, 0, 0, 1],   # b_q, b_k = 0; b_v = [0, 0, 0, 1]
    "out_proj.weight": [[1, 0, 0, 0],
                        [0, 1, 0, 0],
                        [0, 0, 1, 0],
                        [0, 0, 1, 1]],
    "out_proj.bias": [0, 0, 0, -1],
    "query": [[[1, 0, 1, 0]],            # (L, N, E) = (3, 1, 4)
              [[0, 2, 0, 1]],
              [[1, 1, 0, 0]]],
}


def set_worked_example_parameters(mha: torch.nn.MultiheadAttention) -> None:
    """The worked example's parameters, as written in WORKED_EXAMPLE."""
    with torch.no_grad():
        for name, p in mha.named_parameters():
            p.copy_(torch.tensor(WORKED_EXAMPLE[name], dtype=p.dtype))


def make_module(case: Case) -> torch.nn.MultiheadAttention:
    """A real MultiheadAttention with every parameter, biases included, set to non-zero values.

    PyTorch initialises the biases to zero; random biases make a wrong bias order or a
    forgotten bias fail the comparison. (PyTorch's own initial values are replaced, so
    they may depend on the CPU kernel; how many values it draws does not.)
    """
    mha = torch.nn.MultiheadAttention(**case.module_options(), dtype=case.dtype)
    if case.worked_example:
        set_worked_example_parameters(mha)
    else:
        set_random_parameters(mha)
    return mha.eval()


def set_random_parameters(mha: torch.nn.MultiheadAttention) -> None:
    """Every parameter, biases included, uniform between -0.5 and 0.5, in PyTorch's order."""
    with torch.no_grad():
        for _, p in mha.named_parameters():
            p.copy_(uniform(p.shape, -0.5, 0.5, p.dtype))


def input_shape(case: Case, length: int, dim: int) -> tuple:
    if case.layout == SEQ_FIRST:
        return (length, case.N, dim)
    if case.layout == BATCH_FIRST:
        return (case.N, length, dim)
    return (length, dim)


def make_inputs(case: Case) -> tuple:
    """query, key, value with the object identity the case asks for."""
    if case.worked_example:
        query = torch.tensor(WORKED_EXAMPLE["query"], dtype=case.dtype)
        assert case.inputs == SELF and tuple(query.shape) == input_shape(case, case.L, case.E), case.name
        return query, query, query
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


def float_key_padding_mask(case: Case, padded: torch.Tensor, attn_mask) -> tuple:
    """(key_padding_mask, attn_mask): the drawn bool padding as a float mask, -inf where
    padded, and -1.0 on key 1 where it is not; attn_mask with key 0 never masked.

    The generations read such a mask differently: 2.x adds it to the scores (key 1 loses
    weight); 1.13 merges it into a bool attn_mask by logical_or, and on its fast path makes
    it bool, so that the -1.0 masks key 1 outright; into a float attn_mask 1.13 merges
    nothing. Key 0 is never padded (every batch entry has a key) nor penalised, and stays
    unmasked, so that no row is fully masked under either reading."""
    mask = torch.zeros(padded.shape, dtype=case.dtype)
    mask.masked_fill_(padded, float("-inf"))
    if case.S > 1:
        mask[..., 1].masked_fill_(~padded[..., 1], -1.0)
    if attn_mask is not None:
        attn_mask = attn_mask.clone()
        attn_mask[..., 0] = False if attn_mask.dtype == torch.bool else 0.0
    return mask, attn_mask


def make_tensors(case: Case, alter: Optional[Callable[[dict], None]] = None) -> tuple:
    """The module and every forward input of a case, from the case's own seed.

    alter(tensors), when given, changes the drawn inputs in place once everything is
    drawn and before anything runs: an extreme case writes its extreme value, a rejection
    case breaks a valid input. Drawing first keeps the other values those of the case's seed.
    """
    torch.manual_seed(seed_for(case.name))
    mha = make_module(case)
    query, key, value = make_inputs(case)
    kpm = make_key_padding_mask(case) if case.key_padding_mask else None
    attn_mask = make_attn_mask(case, kpm) if case.attn_mask else None
    if case.float_key_padding_mask:
        kpm, attn_mask = float_key_padding_mask(case, kpm, attn_mask)
    tensors = {"query": query, "key": key, "value": value,
               "key_padding_mask": kpm, "attn_mask": attn_mask}
    if alter is not None:
        alter(tensors)
    return mha, tensors

