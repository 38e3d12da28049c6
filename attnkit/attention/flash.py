"""Flash sparse attention: exact sparse attention that never holds the L x L matrix (issue 47).

    out = sparse_attention(q, k, v, mask, attention="entmax15")          # (B, H, Lq, D)
    p   = attention_weights(q, k, v, mask, attention="entmax15")         # (B, H, Lq, Lk), only when asked

computes ``map(scale * q kᵀ + bias) v`` row by row, where ``map`` is one of the sparse maps of attnkit:

- ``"sparsemax"``;
- ``"sparsegen-lin"`` with ``lam < 1``: sparsemax of ``scores / (1 - lam)``;
- ``"entmax15"`` (1.5-entmax, exact closed form);
- ``"entmax-alpha"`` with ``alpha`` a float in (1, 2] or a tensor (H,) of one alpha per head (its gradient flows:
  learned alpha per head).

Every map is ``p = [z - tau]_+^(1 / (alpha - 1))``, ``z = (alpha - 1) s``, ``sum_j p_j = 1`` (sparsemax: alpha = 2),
so the forward keeps only the threshold ``tau`` of each row (B, H, Lq, 2: as the row's max of z and tau past it,
never their rounded sum) and the backward recomputes the scores a
block of rows at a time: no (B, H, Lq, Lk) tensor is allocated, forward or backward.

Inputs: q (B, H, Lq, D), k and v (B, H, Lk, D), one dtype among float32, bfloat16, float16 (float64 too, on the
CPU); computed in float32 (float64 for float64 inputs), returned in the inputs' dtype; ``scale`` defaults to
``1 / sqrt(D)``. ``mask``: None; a boolean key mask (B, Lk), True = attend (any padding pattern); or a 4-D boolean
(True = attend) or additive float mask broadcastable to (B, H, Lq, Lk) (0 / -inf or finite values, as transformers
builds them: values at or below half the dtype's lowest are taken as -inf, as attnkit's own attention does). Every
mask becomes one additive ``bias`` tensor broadcastable to (B, H, Lq, Lk) by ``expand`` (never materialised larger
than given). A row with no key to attend gives zeros (never NaN) and zero gradients. The mask gets no gradient.
``dropout``: the weights dropped in the forward as ``nn.functional.dropout`` would drop the materialised map, by a
mask drawn per (batch, head) slice and tile of rows from generators seeded by one seed (drawn from torch's generator),
redrawn in the backward: not stored.

Backends (the same contract, see :mod:`attnkit.attention.flash_cpu`): CPU tensors run :mod:`flash_cpu` (blocked
torch and attnkit's compiled row kernel); CUDA tensors, and any tensor with ``ATTNKIT_KERNEL=triton``, run
:mod:`attnkit.attention.flash_triton` where it and triton are importable (with ``TRITON_INTERPRET=1`` its kernels run
on CPU tensors), else the blocked torch backend (device-agnostic; exact, slower).
"""

from __future__ import annotations

import importlib
import math
import numbers

import torch

from ..errors import UserError
from . import flash_cpu, kernels

__all__ = ["sparse_attention", "attention_weights", "output_and_weights", "ATTENTIONS", "backend_for"]

#: the maps this module computes
ATTENTIONS = ("sparsemax", "sparsegen-lin", "entmax15", "entmax-alpha")

_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.float64)

class FlashArgumentError(UserError):
    """A wrong argument of :func:`sparse_attention` / :func:`attention_weights`, said in one line."""


#: tests and benchmarks may force a backend: None (by the rules above), "cpu" or "triton"
_force_backend: str | None = None
_triton_module = None
_triton_why = "not loaded yet"


def _err(msg: str) -> FlashArgumentError:
    return FlashArgumentError(msg)


def _load_triton():
    """:mod:`attnkit.attention.flash_triton`, or None (not written yet, triton missing, ...), imported once."""
    global _triton_module, _triton_why
    if _triton_module is None and _triton_why == "not loaded yet":
        try:
            _triton_module = importlib.import_module(f"{__package__}.flash_triton")
            _triton_why = "flash_triton"
        except ImportError as e:
            _triton_why = f"flash_triton unavailable ({e})"
    return _triton_module


def backend_for(t: torch.Tensor):
    """The backend module that runs for tensors like ``t``."""
    choice = _force_backend
    if choice is None:
        choice = "triton" if (t.device.type == "cuda" or kernels.kernel_choice() == "triton") else "cpu"  # ATTNKIT_KERNEL
    if choice == "triton" and t.dtype == torch.float64 and t.device.type == "cpu" and _force_backend is None:
        return flash_cpu  # (the Triton kernels take no float64: CPU float64 stays exact on the blocked backend)
    if choice == "triton":
        mod = _load_triton()
        if mod is not None:
            return mod
        if _force_backend == "triton":
            raise _err(f"the triton backend was asked for, but {_triton_why}")
    return flash_cpu


# ----------------------------------------------------------------------------- arguments


def _check_qkv(q, k, v) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise _err(f"{name} must be a torch.Tensor (B, H, L, D), got {type(t).__name__}")
        if t.dim() != 4:
            raise _err(f"{name} must be 4-D (B, H, L, D), got shape {tuple(t.shape)}")
        if t.dtype not in _DTYPES:
            raise _err(f"{name} must be float32, bfloat16 or float16 (float64 on the CPU), got {t.dtype}")
    if not (q.dtype == k.dtype == v.dtype):
        raise _err(f"q, k and v must have one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise _err(f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}")
    if q.dtype == torch.float64 and q.device.type != "cpu":
        raise _err(f"float64 inputs run on the CPU only, got them on {q.device}")
    B, H, Lq, D = q.shape
    if k.shape[:2] != (B, H) or k.shape[3] != D:
        raise _err(f"k must be (B, H, Lk, D) = ({B}, {H}, Lk, {D}) to match q {tuple(q.shape)}, got {tuple(k.shape)}")
    if v.shape != k.shape:
        raise _err(f"v must have k's shape {tuple(k.shape)}, got {tuple(v.shape)}")
    if min(B, H, Lq, D, k.shape[2]) == 0:
        raise _err(f"q and k must have no empty dimension, got q {tuple(q.shape)}, k {tuple(k.shape)}")


def _refuse_tensor(name: str, value, expected: str) -> None:
    """A tensor given for a number: refused, naming the float to give instead."""
    if isinstance(value, torch.Tensor):
        raise _err(f"{name} must be {expected}, not a tensor: give "
                   f"{name}={value.flatten()[0].item() if value.numel() else '...'!r} as a float")


def _check_scale(scale, D: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(D)
    _refuse_tensor("scale", scale, "a Python number (default 1/sqrt(D))")
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise _err(f"scale must be a positive finite number (default 1/sqrt(D)), got {scale!r}")
    s = float(scale)
    if not (math.isfinite(s) and s > 0):
        raise _err(f"scale must be a positive finite number (default 1/sqrt(D)), got scale={scale!r}")
    if s > 1e30:  # past float32's range (3.4e38) the product overflows, and the weights' recomputation with it
        raise _err(f"scale={scale!r}: expected at most 1e30 (scores times scale must stay finite in float32; "
                   "the default is 1/sqrt(D))")
    return s


def _check_lam(lam) -> float:
    if lam is None:
        raise _err("lam is required for attention='sparsegen-lin' (a finite number below 1)")
    _refuse_tensor("lam", lam, "a Python number below 1 (one lam for every head)")
    if isinstance(lam, bool) or not isinstance(lam, (int, float)):
        raise _err(f"lam must be a finite number below 1 (sparsegen-lin divides by 1 - lam), got {lam!r}")
    lam_f = float(lam)
    if not math.isfinite(lam_f) or lam_f >= 1.0:
        raise _err(f"lam must be a finite number below 1 (sparsegen-lin divides by 1 - lam), got lam={lam!r}")
    return lam_f


#: the least alpha flash attention takes (but 1, softmax, which it does not): p = [z - tau]_+^(1 / (alpha - 1)) with
#: z - tau near 1 magnifies float32's rounding (6e-8) by 1 / (alpha - 1), 6e-5 here (at 1.000001 the rebuilt rows
#: summed to 1 +- 0.03: sweep 2026-11-28o A2); models take the materialised map below it
ALPHA_MIN = 1.001


def _near_one(a: float, head: int | None = None) -> str:
    where = "" if head is None else f" (head {head})"
    return (f"alpha={a!r}{where}: flash attention takes alpha from {ALPHA_MIN} (its float32 thresholds cannot hold the map so "
            f"near softmax: the power 1 / (alpha - 1) magnifies their rounding past 1e-4); use alpha 1 (softmax, "
            f"torch's scaled_dot_product_attention) or attnkit.entmax_bisect on the materialised scores")


def _check_alpha(alpha, H: int, device, dtype) -> torch.Tensor:
    """alpha as a tensor (H,) in the compute dtype (float64 for float64 inputs, else float32); a tensor keeps its
    graph (its gradient flows back)."""
    if alpha is None:
        raise _err("alpha is required for attention='entmax-alpha' (a float in (1, 2] or a tensor (H,) of one per head)")
    if isinstance(alpha, torch.Tensor):
        if not alpha.is_floating_point():
            raise _err(f"alpha must be a float in (1, 2] or a floating-point tensor (H,), got dtype {alpha.dtype}")
        if alpha.dim() == 0:
            alpha = alpha.reshape(1).expand(H)
        if alpha.shape != (H,):
            raise _err(f"alpha must be a float in (1, 2] or a tensor (H,) = ({H},), one per head, got shape {tuple(alpha.shape)}")
        if alpha.device != device:
            raise _err(f"alpha must be on the inputs' device {device}, got {alpha.device}")
        if device.type == "cpu":  # (on a GPU this read would wait for the device: not checked there)
            a = alpha.detach()
            if not bool(((a > 1) & (a <= 2)).all()):
                raise _err(f"alpha must lie in (1, 2] for every head (1 is softmax, which is not sparse; above 2 the "
                           f"threshold's Newton steps are not guaranteed), got {a.tolist()}")
            if bool((a < ALPHA_MIN).any()):
                head = int(a.argmin())
                value = a[head].item()  # float32's rendering (1.000100017) to the digits it holds (1.0001)
                raise _err(_near_one(float(f"{value:.7g}") if a.dtype != torch.float64 else value, head))
        return alpha.to(dtype)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)):
        raise _err(f"alpha must be a float in (1, 2] or a tensor (H,) of one per head, got {alpha!r}")
    a = float(alpha)
    if not (math.isfinite(a) and 1 < a <= 2):
        raise _err(f"alpha must be a float in (1, 2] (1.5: 1.5-entmax, 2: sparsemax; 1 is softmax, not sparse), got alpha={alpha!r}")
    if a < ALPHA_MIN:
        raise _err(_near_one(a))
    return torch.full((H,), a, dtype=dtype, device=device)


def _bias(mask, B: int, H: int, Lq: int, Lk: int, device, dtype):
    """Every mask as one additive float ``bias`` broadcastable to (B, H, Lq, Lk) (-inf = masked), or None."""
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        raise _err(f"mask must be None or a torch.Tensor, got {type(mask).__name__}")
    if mask.device != device:
        raise _err(f"mask must be on the inputs' device {device}, got {mask.device}")
    if mask.dim() == 2:
        if mask.dtype != torch.bool:
            raise _err(f"a 2-D mask is a key mask (B, Lk) and must be boolean (True = attend), got {mask.dtype}")
        if mask.shape != (B, Lk):
            raise _err(f"a 2-D mask is a key mask (B, Lk) = ({B}, {Lk}), got shape {tuple(mask.shape)}")
        mask = mask[:, None, None, :]
    elif mask.dim() != 4:
        raise _err(f"mask must be a key mask (B, Lk) = ({B}, {Lk}) or 4-D, broadcastable to (B, H, Lq, Lk) = "
                   f"({B}, {H}, {Lq}, {Lk}), got shape {tuple(mask.shape)}")
    want = (B, H, Lq, Lk)
    if any(m not in (1, w) for m, w in zip(mask.shape, want)):
        raise _err(f"mask of shape {tuple(mask.shape)} does not broadcast to (B, H, Lq, Lk) = {want}")
    if mask.dtype == torch.bool:
        return torch.where(mask, torch.zeros((), dtype=dtype, device=device), torch.full((), -math.inf, dtype=dtype, device=device))
    if not mask.is_floating_point():
        raise _err(f"mask must be boolean (True = attend) or an additive float mask, got dtype {mask.dtype}")
    if device.type == "cpu" and bool((torch.isnan(mask) | torch.isposinf(mask)).any()):
        raise _err("an additive mask must hold 0, finite values or -inf (no NaN, no +inf)")
    neg = mask <= torch.finfo(mask.dtype).min / 2  # transformers' "very negative": exactly -inf, as attnkit's attention
    return mask.to(dtype).masked_fill(neg, -math.inf)


def fixed_alpha(attention: str) -> float | None:
    """The one alpha of every head for the maps that fix it (sparsemax and sparsegen-lin 2.0, 1.5-entmax 1.5), known
    without reading a tensor (the backends then compile or pick its closed forms); None for entmax-alpha."""
    return {"sparsemax": 2.0, "sparsegen-lin": 2.0, "entmax15": 1.5}.get(attention)


def _prepare(q, k, v, mask, attention, alpha, lam, scale):
    _check_qkv(q, k, v)
    if not isinstance(attention, str) or attention not in ATTENTIONS:
        raise _err(f"attention must be one of {', '.join(ATTENTIONS)}, got {attention!r}")
    if alpha is not None and attention != "entmax-alpha":
        raise _err(f"alpha is only for attention='entmax-alpha', got attention={attention!r} with alpha={alpha!r}")
    if lam is not None and attention != "sparsegen-lin":
        raise _err(f"lam is only for attention='sparsegen-lin', got attention={attention!r} with lam={lam!r}")
    B, H, Lq, D = q.shape
    Lk = k.shape[2]
    dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    scale_f = _check_scale(scale, D)
    bias = _bias(mask, B, H, Lq, Lk, q.device, dtype)
    if attention == "entmax-alpha":
        alpha_t = _check_alpha(alpha, H, q.device, dtype)
    else:
        alpha_t = torch.full((H,), fixed_alpha(attention), dtype=dtype, device=q.device)
    if attention == "sparsegen-lin":
        lam_f = _check_lam(lam)
        scale_f = scale_f / (1.0 - lam_f)
        if bias is not None:
            bias = bias / (1.0 - lam_f)
    if bias is not None:
        bias = bias.expand(B, H, Lq, Lk)  # zero strides: never materialised larger than given
    return q.contiguous(), k.contiguous(), v.contiguous(), bias, alpha_t, scale_f


# ----------------------------------------------------------------------------- autograd


class _FlashSparseAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, alpha, scale, backend, dropout, fixed):
        extra = () if dropout is None else (dropout,)
        out, tau, aux = backend.forward(q, k, v, bias, alpha.detach(), scale, *extra, fixed_alpha=fixed)
        ctx.backend, ctx.scale, ctx.extra, ctx.fixed = backend, scale, extra, fixed
        ctx.save_for_backward(q, k, v, bias, alpha, out, tau, aux)
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        q, k, v, bias, alpha, out, tau, aux = ctx.saved_tensors
        need_alpha = ctx.needs_input_grad[4]
        dq, dk, dv, dalpha = ctx.backend.backward(q, k, v, bias, alpha.detach(), ctx.scale, out, tau, aux,
                                                  grad_out.contiguous(), need_alpha, *ctx.extra,
                                                  fixed_alpha=ctx.fixed)
        return dq, dk, dv, None, (dalpha.to(alpha.dtype) if need_alpha else None), None, None, None, None


def _check_dropout(dropout) -> tuple[float, int] | None:
    """None (no dropout), or (p, seed) with the seed drawn from torch's default generator (so ``torch.manual_seed``
    and a resumed run's restored generator give the same masks)."""
    if isinstance(dropout, bool) or not isinstance(dropout, numbers.Real) or not 0 <= float(dropout) < 1:
        raise _err(f"dropout must be a probability in [0, 1), got {dropout!r}")
    if float(dropout) == 0:
        return None
    return float(dropout), int(torch.randint(-(1 << 62), 1 << 62, ()).item())


def sparse_attention(q, k, v, mask=None, *, attention="entmax15", alpha=None, lam=None, scale=None,
                     dropout=0.0) -> torch.Tensor:
    """Exact sparse attention ``map(scale * q kᵀ + bias) v``, (B, H, Lq, D) in the inputs' dtype, with no L x L
    matrix in the forward or the backward; gradients for q, k, v and a tensor ``alpha``. ``dropout``: the weights
    dropped with that probability (kept ones scaled by 1 / (1 - dropout)), as ``nn.functional.dropout`` on the
    materialised map would, the mask redrawn from a seed in the backward (the blocked backend: Triton's kernels take
    none). First derivatives only (a double backward is refused by torch), and not under torch.func's transforms
    (refused: the maps of :mod:`attnkit.attention.maps` and :mod:`~attnkit.attention.entmax` on the materialised
    scores run there). See the module's docstring."""
    q, k, v, bias, alpha_t, scale_f = _prepare(q, k, v, mask, attention, alpha, lam, scale)
    drop = _check_dropout(dropout)
    backend = backend_for(q) if drop is None else flash_cpu
    try:
        return _FlashSparseAttention.apply(q, k, v, bias, alpha_t, scale_f, backend, drop, fixed_alpha(attention))
    except RuntimeError as e:
        if "functorch transforms" not in str(e):
            raise
        raise _err("sparse_attention does not run under torch.func's transforms (grad, vmap, jacrev, jvp): its backward "
                   "recomputes blocks in one pass; there, apply the map to the materialised scores, "
                   "attnkit.sparsemax(scale * q @ k.transpose(-1, -2)) @ v (or entmax15, entmax_bisect, sparsegen_lin), "
                   "which run under them") from None


def attention_weights(q, k, v, mask=None, *, attention="entmax15", alpha=None, lam=None, scale=None) -> torch.Tensor:
    """The map p (B, H, Lq, Lk) that :func:`sparse_attention` applies, from the same thresholds, materialised (for
    inspection: no gradient flows through it). Same arguments as :func:`sparse_attention`."""
    return output_and_weights(q, k, v, mask, attention=attention, alpha=alpha, lam=lam, scale=scale)[1]


def output_and_weights(q, k, v, mask=None, *, attention="entmax15", alpha=None, lam=None, scale=None):
    """(:func:`sparse_attention`'s output, :func:`attention_weights`' map) from one forward pass, without gradients
    (what a model asked for its attention weights needs)."""
    q, k, v, bias, alpha_t, scale_f = _prepare(q, k, v, mask, attention, alpha, lam, scale)
    backend = backend_for(q)
    with torch.no_grad():
        out, tau, _ = backend.forward(q, k, v, bias, alpha_t.detach(), scale_f, fixed_alpha=fixed_alpha(attention))
        return out, backend.weights(q, k, bias, alpha_t.detach(), scale_f, tau)
