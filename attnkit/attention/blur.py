"""The Gaussian blur (SesameBERT's locality step): its kernel, whether it is the identity, and the blur itself."""

from __future__ import annotations

import functools

import torch
from torch import nn

#: where a blur goes: nowhere, on each head's output (context) or on the values
BLUR_PLACES = ("none", "context", "value")


def gaussian_kernel(size: int, sigma: float, dtype=torch.float64, device=None) -> torch.Tensor:
    """The fixed 1-D blur kernel ``g_j = exp(-(j - c)^2 / (2 sigma^2))``, ``c = (size-1)/2``, summing to 1.

    As ``sigma -> 0`` it tends to the identity ``[0, .., 1, .., 0]`` (exactly, once the tails underflow); as ``sigma ->
    inf`` to the uniform ``1 / size`` (exactly, once its square overflows).
    """
    j = torch.arange(size, dtype=torch.float64)
    var2 = 2.0 * float(sigma) * float(sigma)  # (not ** 2, which raises OverflowError past 1e154: inf is the uniform limit)
    if var2 == 0.0:  # sigma below ~1e-162: its square underflows (0/0 at the centre); the limit is the identity
        g = (j == (size - 1) / 2).to(torch.float64)
        return (g / g.sum()).to(dtype=dtype, device=device)
    g = torch.exp(-((j - (size - 1) / 2) ** 2) / var2)
    return (g / g.sum()).to(dtype=dtype, device=device)


#: a float32 blur kernel whose off-centre weights are all below this is no blur: each tail is lost when added to
#: anything of ordinary size (sigma 0.1 at width 3: tails of 1.9e-22), so the model trains as with no blur, bit for bit
IDENTITY_TAIL = 1e-20


def blur_is_identity(size: int, sigma: float) -> bool:
    """Whether the float32 kernel of width ``size`` at ``sigma`` is the identity ``[0, .., 1, .., 0]`` to within
    :data:`IDENTITY_TAIL` (at width 3: sigma 0.01 exactly, 0.1 to 1.9e-22; 0.3 is already a faint blur)."""
    k = gaussian_kernel(size, sigma, dtype=torch.float32)
    c = size // 2
    return float(k[c]) == 1.0 and (size == 1 or float(torch.cat([k[:c], k[c + 1:]]).max()) < IDENTITY_TAIL)


def gaussian_blur(x: torch.Tensor, kernel: torch.Tensor, valid: torch.Tensor | None = None) -> torch.Tensor:
    """Depthwise blur of ``x`` [B, H, L, D] along L with ``kernel`` [k] (odd k), zero "SAME" padding.

    ``valid`` [B, L] (True = real token) zeroes padded positions first, so padding never
    leaks into real tokens: a padded batch gives each sentence what it gets alone.
    ``out[:, :, i] = sum_j kernel[j] * x[:, :, i + j - c]`` (the kernel is symmetric).
    Half-precision inputs (fp16/bf16, as under autocast) are blurred in float32 and the result rounded once: in bf16
    arithmetic the side weights of a narrow kernel (0.004 at sigma 0.3) are lost to rounding at every step.
    """
    dtype = x.dtype
    x = x.to(torch.promote_types(dtype, torch.float32))
    if valid is not None:
        x = x.masked_fill(~valid[:, None, :, None], 0.0)
    k = kernel.numel()
    c = k // 2
    w = kernel.to(dtype=x.dtype, device=x.device)
    if k == 1:
        return (x * w[0]).to(dtype)
    L = x.size(-2)
    xp = nn.functional.pad(x, (0, 0, c, c))  # [B, H, L + 2c, D], zeros at both ends
    out = w[0] * xp[..., 0:L, :]
    for j in range(1, k):
        out = out + w[j] * xp[..., j : j + L, :]
    return out.to(dtype)



@functools.lru_cache(maxsize=32)
def cached_kernel(size: int, sigma: float, dtype, device) -> torch.Tensor:
    """:func:`gaussian_kernel`, built once per (size, sigma, dtype, device), not in every layer of every forward; never
    an inference tensor (a first call under ``torch.inference_mode`` cached one, and every later forward that needed
    gradients failed: "Inference tensors cannot be saved for backward")."""
    with torch.inference_mode(False):
        return gaussian_kernel(size, sigma, dtype=dtype, device=device)


def valid_keys(attention_mask: torch.Tensor | None, batch: int, length: int) -> torch.Tensor | None:
    """[B, Lk] bool, True for keys some query may attend to (real tokens); None if nothing is masked."""
    if attention_mask is None:
        return None
    m = attention_mask
    keep = m if m.dtype == torch.bool else m > torch.finfo(m.dtype).min / 2
    if keep.dim() == 4:
        keep = keep.any(dim=1).any(dim=1)  # over heads and queries -> [B, Lk]
    elif keep.dim() == 3:
        keep = keep.any(dim=1)
    return keep.expand(batch, length)

