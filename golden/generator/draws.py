"""Random draws that come out the same under every CPU kernel, and the seeds they start from.

Every random value of the goldens is drawn here: randn() and uniform() for the generator's
own tensors, pytorch_init_drawn_in_float64() for PyTorch's parameter initialisation, and
seed_for() for the seed of each case, layout and weight set.
"""

import contextlib
import zlib

import torch

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


BASE_SEED = 20240601


def seed_for(name: str) -> int:
    """A seed from the case name alone, so adding or reordering cases changes no other case."""
    return BASE_SEED + zlib.crc32(name.encode("utf-8"))

