"""golden/layouts/: one real nn.MultiheadAttention's weights in other models' layouts
(GPT-2, BERT, GPT-NeoX, Megatron v1 and v2, Llama, ONNX Runtime), each permuted with the
model's published formula and checked against PyTorch."""

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .case_tensors import set_random_parameters
from .cases import TOLERANCE
from .draws import randn, seed_for
from .files import FORMAT_VERSION, new_folder, remove_stale_folders, save_npy, write_json
from .runner import run_self_attention

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
    set_random_parameters(mha)
    return mha.eval()


def write_layout(out: Path, name: str, mha, layout: dict, prefix: str, info: dict) -> None:
    folder = new_folder(out / name)
    x = randn((info["L"], info["N"], info["embed_dim"]), torch.float32)  # (L, N, E), seq-first
    document = {"format": FORMAT_VERSION, "layout": name, "prefix": prefix,
                "pytorch_prefix": "self_attn.", "dtype": "float32",
                "embed_dim": info["embed_dim"], "num_heads": info["num_heads"],
                "bias": mha.in_proj_bias is not None, "tolerance": TOLERANCE[torch.float32]}
    if "num_key_value_heads" in info:
        document["num_key_value_heads"] = info["num_key_value_heads"]
    write_json(folder / "layout.json", document)
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
    check_grouped_query_attention(out / "llama", layout)


def check_grouped_query_attention(folder: Path, layout: dict) -> None:
    """Grouped-query attention as Llama computes it (without rotary), from the layout's
    own tensors: it must be what MultiheadAttention returned (the folder's query.npy and
    attn_output.npy)."""
    E, H, Hkv, L, N = (LLAMA_SIZES[k] for k in ("E", "H", "Hkv", "L", "N"))
    D, group = E // H, H // Hkv
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
    """golden/layouts/: one folder per layout (see the top of this file)."""
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

