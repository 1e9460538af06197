"""Helpers shared by the companion snippets: read a golden case, rebuild PyTorch's module.

The snippets in this folder reproduce the numbers of the course pages with real PyTorch,
the version that made the golden cases: 1.13.1, Debian's python3-torch, run as
/usr/bin/python3. This file only reads golden/cases/ (the format is golden/FORMAT.md) and
safetensors files, and builds the `torch.nn.MultiheadAttention` a case describes; it
computes nothing itself. Under PyTorch 2.x (Debian 13's 2.6) every snippet runs too: a
check of what only 1.13.1 has (its source lines, its API) stops the snippet as skipped,
with the reason, and one of what 2.x does differently is checked as docs/15-versions.md says.

Legend: L = target length, S = source length, N = batch, E = embed_dim, H = num_heads,
D = E / H.
"""

import contextlib
import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[2]
CASES = ROOT / "golden" / "cases"
# The exit status of a snippet stopped by only_with_pytorch_1_13: CTest reports the
# docs-companion tests that end with it as skipped (SKIP_RETURN_CODE, docs/CMakeLists.txt).
SKIPPED = 77
PARAMETERS = ("in_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
              "bias_k", "bias_v", "out_proj.weight", "out_proj.bias")


def load_case(name):
    """(case.json as a dict, {file name without .npy: torch tensor}) of golden/cases/<name>."""
    folder = CASES / name
    info = json.loads((folder / "case.json").read_text())
    tensors = {p.name[:-len(".npy")]: torch.from_numpy(np.load(p)) for p in sorted(folder.glob("*.npy"))}
    return info, tensors


def make_module(info, tensors):
    """The nn.MultiheadAttention of the case, with the case's parameters, in eval mode."""
    m = info["module"]
    dtype = torch.float64 if info["dtype"] == "float64" else torch.float32
    module = torch.nn.MultiheadAttention(
        m["embed_dim"], m["num_heads"], dropout=m["dropout"], bias=m["bias"],
        add_bias_kv=m["add_bias_kv"], add_zero_attn=m["add_zero_attn"], kdim=m["kdim"],
        vdim=m["vdim"], batch_first=m["batch_first"], dtype=dtype)
    module.load_state_dict({k: tensors[k] for k in PARAMETERS if k in tensors}, strict=True)
    return module.eval()


def inputs(info, tensors):
    """query, key, value as PyTorch was given them: one object where the case says so."""
    aliases = info.get("inputs", {})
    query = tensors["query"]
    key = query if aliases.get("query_is_key") else tensors["key"]
    value = key if aliases.get("key_is_value") else tensors["value"]
    return query, key, value


def forward(module, info, tensors, **override):
    """module(query, key, value, ...) with the case's masks and flags (1.13.1 has no is_causal).

    Gradients stay enabled and the parameters require them, so nn.MultiheadAttention takes
    its slow path, F.multi_head_attention_forward, as golden/generate.py did."""
    query, key, value = inputs(info, tensors)
    kwargs = dict(need_weights=info["forward"]["need_weights"],
                  average_attn_weights=info["forward"]["average_attn_weights"],
                  attn_mask=tensors.get("attn_mask"), key_padding_mask=tensors.get("key_padding_mask"))
    kwargs.update(override)
    return module(query, key, value, **kwargs)


@contextlib.contextmanager
def in_projection_spy():
    """Records the q, k, v that multi_head_attention_forward computes, by wrapping the two
    helpers it calls by name: F._in_projection_packed and F._in_projection."""
    seen = []
    packed, separate = F._in_projection_packed, F._in_projection

    def spy_packed(*args, **kwargs):
        q, k, v = packed(*args, **kwargs)
        seen.append((q, k, v))
        return q, k, v

    def spy_separate(*args, **kwargs):
        q, k, v = separate(*args, **kwargs)
        seen.append((q, k, v))
        return q, k, v

    F._in_projection_packed, F._in_projection = spy_packed, spy_separate
    try:
        yield seen
    finally:
        F._in_projection_packed, F._in_projection = packed, separate


def read_safetensors(path):
    """{name: torch tensor} of a float32/float64 .safetensors file, read by hand as its format
    says (Debian has no safetensors package): 8 bytes of header length (little-endian), the
    JSON header, then the data at each tensor's data_offsets."""
    raw = Path(path).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    dtypes = {"F32": np.float32, "F64": np.float64}
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        array = np.frombuffer(data[begin:end], dtype=dtypes[entry["dtype"]]).reshape(entry["shape"])
        tensors[name] = torch.from_numpy(array.copy())
    return tensors


def close(got, expected, rtol, atol):
    """|got - expected| <= atol + rtol |expected| everywhere, NaN equal to NaN, shapes equal."""
    got = torch.as_tensor(got).detach().double()
    expected = torch.as_tensor(expected).detach().double()
    if got.shape != expected.shape:
        return False
    both_nan = torch.isnan(got) & torch.isnan(expected)
    ok = (got - expected).abs() <= atol + rtol * expected.abs()
    ok = ok | both_nan | (got == expected)  # equal infinities
    return bool(ok.all())


def max_abs_err(got, expected):
    return float((torch.as_tensor(got).detach().double() - torch.as_tensor(expected).detach().double()).abs().max())


def rounded(values, decimals=4):
    """Values as the tutorials print them, %.4f, for comparing with a page."""
    return [float(f"{float(x):.{decimals}f}") for x in torch.as_tensor(values).detach().flatten()]


def check(label, condition):
    """Prints the label with OK, or raises AssertionError: every check of a snippet can fail."""
    print(f"  {label:<62} {'OK' if condition else 'FAILED'}")
    assert condition, label


def is_pytorch_1_13():
    """True under PyTorch 1.13, the goldens' version (Debian's 1.13.1 reports 1.13.0a0)."""
    return torch.__version__.startswith("1.13.")


def only_with_pytorch_1_13(what):
    """Stops the snippet here as skipped, saying why, unless the PyTorch here is 1.13: what
    follows checks `what`, which only 1.13.1 has. The checks before it have run."""
    if is_pytorch_1_13():
        return
    print(f"SKIPPED: {what} needs PyTorch 1.13.1, the goldens' version; this is PyTorch "
          f"{torch.__version__} (docs/15-versions.md).")
    sys.stdout.flush()
    sys.exit(SKIPPED)


def title(text):
    print(f"== {text} ==")
    print(f"PyTorch {torch.__version__}; the golden cases come from 1.13.1 "
          "(Debian's python3-torch 1.13.1, which reports 1.13.0a0)")


def done():
    print("OK")
    sys.stdout.flush()
