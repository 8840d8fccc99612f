"""Reference Mamba-2 forecaster in plain PyTorch, for side-by-side speed runs.

The block follows the published Mamba-2 design (Dao & Gu 2024, "Transformers are
SSMs", arXiv:2405.21060) as its reference repository state-spaces/mamba builds it
in its non-fused `Mamba2Simple` path: in_proj -> causal depthwise conv1d + SiLU ->
SSD -> + D*x -> gated RMSNorm (norm before gate off) -> out_proj; the SSD is the
paper's minimal chunked algorithm (`ssd_minimal_discrete`: a quadratic form inside
each chunk, chunk states, a recurrence over chunks, the states' output). B and C
keep their single group and broadcast over heads inside einsum, as the reference
does. The forecaster around it is tli's: input linear -> pre-norm residual stack ->
final RMSNorm -> linear head on the window's last bar, MSE loss, AdamW and
global-norm clipping at 1.0.

Prints one JSON line per lookback:
  {"impl": "reference", "lookback": L, "batch": B, "fwd_bwd_ms": ..., "step_ms": ...}
each the median of REPEATS timed runs after one warm-up.

Environment: LOOKBACKS (256,1024,4096), BARS (16384 bars per step), REPEATS (5),
THREADS (2), REFERENCE_FLUSH_DENORMAL=1 (torch.set_flush_denormal(True), which tli's
processes do; off by default, as PyTorch starts), and the model sizes D_MODEL 64, LAYERS 2, D_STATE 32, HEADDIM 32,
EXPAND 2, D_CONV 4, CHUNK 64, FEATURES 8 (tli's defaults).
"""

import json
import math
import os
import time

import torch
import torch.nn.functional as F
from torch import nn


def env_int(key, default):
    return int(os.environ.get(key, default))


def segsum(x):
    """out[..., i, j] = sum_{k=j+1..i} x_k for i >= j, -inf above the diagonal."""
    t = x.size(-1)
    x = x.unsqueeze(-1).expand(*x.shape, t)
    below = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=-1)
    x = x.masked_fill(~below, 0)
    s = torch.cumsum(x, dim=-2)
    on_or_below = torch.tril(torch.ones(t, t, dtype=torch.bool, device=x.device), diagonal=0)
    return s.masked_fill(~on_or_below, -torch.inf)


def ssd(x, a, b, c, chunk):
    """x (b, l, h, p) already times dt; a (b, l, h) = A*dt; b, c (b, l, g, n), g = 1
    broadcast over heads. l a multiple of chunk. Returns y (b, l, h, p)."""
    bs, length, h, p = x.shape
    n = b.shape[-1]
    nc = length // chunk
    x = x.reshape(bs, nc, chunk, h, p)
    a = a.reshape(bs, nc, chunk, h).permute(0, 3, 1, 2)
    b = b.reshape(bs, nc, chunk, -1, n)
    c = c.reshape(bs, nc, chunk, -1, n)
    a_cum = torch.cumsum(a, dim=-1)
    decay = torch.exp(segsum(a))
    y_diag = torch.einsum("bclhn,bcshn,bhcls,bcshp->bclhp", c, b, decay, x)
    decay_states = torch.exp(a_cum[..., -1:] - a_cum)
    states = torch.einsum("bclhn,bhcl,bclhp->bchpn", b, decay_states, x)
    init = torch.zeros_like(states[:, :1])
    states = torch.cat([init, states], dim=1)
    decay_chunk = torch.exp(segsum(F.pad(a_cum[..., -1], (1, 0))))
    new_states = torch.einsum("bhzc,bchpn->bzhpn", decay_chunk, states)
    states = new_states[:, :-1]
    state_decay = torch.exp(a_cum)
    y_off = torch.einsum("bclhn,bchpn,bhcl->bclhp", c, states, state_decay)
    return (y_diag + y_off).reshape(bs, length, h, p)


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Mamba2Simple(nn.Module):
    def __init__(self, d_model, d_state, d_conv, expand, headdim, chunk):
        super().__init__()
        self.d_inner = expand * d_model
        self.d_state, self.headdim, self.chunk = d_state, headdim, chunk
        self.nheads = self.d_inner // headdim
        self.conv_dim = self.d_inner + 2 * d_state
        self.in_proj = nn.Linear(d_model, 2 * self.d_inner + 2 * d_state + self.nheads, bias=False)
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, d_conv, groups=self.conv_dim,
                                padding=d_conv - 1)
        dt = torch.exp(torch.rand(self.nheads) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
        dt = dt.clamp(min=1e-4)
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))
        self.A_log = nn.Parameter(torch.log(torch.empty(self.nheads).uniform_(1, 16)))
        self.D = nn.Parameter(torch.ones(self.nheads))
        self.norm = RMSNorm(self.d_inner)
        self.out_proj = nn.Linear(self.d_inner, d_model, bias=False)

    def forward(self, u):
        bs, length, _ = u.shape
        z, xbc, dt = torch.split(self.in_proj(u), [self.d_inner, self.conv_dim, self.nheads], -1)
        xbc = F.silu(self.conv1d(xbc.transpose(1, 2))[..., :length].transpose(1, 2))
        x, b, c = torch.split(xbc, [self.d_inner, self.d_state, self.d_state], -1)
        dt = F.softplus(dt + self.dt_bias)
        a = -torch.exp(self.A_log)
        x = x.reshape(bs, length, self.nheads, self.headdim)
        b = b.reshape(bs, length, 1, self.d_state)
        c = c.reshape(bs, length, 1, self.d_state)
        y = ssd(x * dt.unsqueeze(-1), a * dt, b, c, self.chunk)
        y = y + x * self.D.unsqueeze(-1)
        y = y.reshape(bs, length, self.d_inner) * F.silu(z)
        return self.out_proj(self.norm(y))


class Forecaster(nn.Module):
    def __init__(self, features, d_model, layers, **block):
        super().__init__()
        self.input = nn.Linear(features, d_model)
        self.norms = nn.ModuleList(RMSNorm(d_model) for _ in range(layers))
        self.mixers = nn.ModuleList(Mamba2Simple(d_model, **block) for _ in range(layers))
        self.norm_f = RMSNorm(d_model)
        self.head = nn.Linear(d_model, 1)

    def forward(self, x):
        h = self.input(x)
        for norm, mixer in zip(self.norms, self.mixers):
            h = h + mixer(norm(h))
        return self.head(self.norm_f(h)[:, -1])


def median_ms(fn, repeats):
    fn()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    times.sort()
    return times[len(times) // 2] * 1e3


def main():
    if os.environ.get("REFERENCE_FLUSH_DENORMAL") == "1":
        torch.set_flush_denormal(True)
    torch.set_num_threads(env_int("THREADS", 2))
    torch.manual_seed(1)
    lookbacks = [int(v) for v in os.environ.get("LOOKBACKS", "256,1024,4096").split(",")]
    bars, repeats, features = env_int("BARS", 16384), env_int("REPEATS", 5), env_int("FEATURES", 8)
    for lookback in lookbacks:
        batch = max(bars // lookback, 1)
        model = Forecaster(features, env_int("D_MODEL", 64), env_int("LAYERS", 2),
                           d_state=env_int("D_STATE", 32), d_conv=env_int("D_CONV", 4),
                           expand=env_int("EXPAND", 2), headdim=env_int("HEADDIM", 32),
                           chunk=min(env_int("CHUNK", 64), lookback))
        x = torch.randn(batch, lookback, features)
        y = torch.randn(batch, 1)
        params = list(model.parameters())

        def fwd_bwd():
            loss = (model(x) - y).pow(2).mean()
            torch.autograd.grad(loss, params)

        opt = torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = (model(x) - y).pow(2).mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            opt.step()

        print(json.dumps({"impl": "reference", "lookback": lookback, "batch": batch,
                          "fwd_bwd_ms": round(median_ms(fwd_bwd, repeats), 2),
                          "step_ms": round(median_ms(step, repeats), 2)}), flush=True)


if __name__ == "__main__":
    main()
