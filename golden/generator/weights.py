"""golden/weights/: weight files as other programs save them. A real TransformerEncoder's
state_dict as safetensors, with what its first layer's self-attention returns, and one
set of values saved as F32, F64, F16 and BF16, with PyTorch's widening of them."""

import json
from pathlib import Path

import torch

from .cases import TOLERANCE
from .draws import pytorch_init_drawn_in_float64, randn, seed_for
from .files import FORMAT_VERSION, new_folder, save_npy, write_json
from .runner import run_self_attention, slow_path_only

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
    write_json(folder / "model.json", document)
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
    """golden/weights/: transformer_encoder/ and dtypes/ (see their writers above)."""
    out.mkdir(parents=True, exist_ok=True)
    write_transformer_encoder(out)
    write_dtypes(out)
    return 2
