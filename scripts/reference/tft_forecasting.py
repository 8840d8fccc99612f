"""pytorch-forecasting's Temporal Fusion Transformer in a manual training loop, for
side-by-side speed runs against tli's TFT (`cargo bench -p tli-plugin-tft --bench step`).

The model is pytorch-forecasting's own `TemporalFusionTransformer` (installed by
scripts/bench-vs-reference.sh into target/reference-venv), built directly at tli's bench
shape: 6 observed-past and 7 known reals (each through its own input transform of width
`hidden`, i.e. hidden_continuous_size = hidden, as tli's), the asset (2 levels) as a static
categorical embedding, 64 encoder + 5 decoder bars, 4 attention heads, one LSTM layer, no
dropout, three quantiles (0.1, 0.5, 0.9) with its QuantileLoss. One step: forward,
loss, backward, `clip_grad_norm_` at 1.0, `torch.optim.AdamW` (lr 1e-3) — no Lightning
trainer around it.

Prints one JSON line: {"impl": "reference", "hidden": H, "batch": B, "step_ms": ...},
the median of REPEATS steps after two warm-up steps.

Environment: HIDDEN (64), BATCH (64), LOOKBACK (64), REPEATS (5), THREADS (2),
REFERENCE_FLUSH_DENORMAL=1 for torch.set_flush_denormal(True).
"""

import json
import os
import time
import warnings

import torch

warnings.filterwarnings("ignore")
from pytorch_forecasting import TemporalFusionTransformer  # noqa: E402
from pytorch_forecasting.metrics import QuantileLoss  # noqa: E402


def env_int(key, default):
    return int(os.environ.get(key, default))


def main():
    if os.environ.get("REFERENCE_FLUSH_DENORMAL") == "1":
        torch.set_flush_denormal(True)
    torch.set_num_threads(env_int("THREADS", 2))
    torch.manual_seed(1)
    hidden, batch = env_int("HIDDEN", 64), env_int("BATCH", 64)
    lookback, horizons, repeats = env_int("LOOKBACK", 64), 5, env_int("REPEATS", 5)
    observed = [f"observed_{i}" for i in range(6)]
    known = [f"known_{i}" for i in range(7)]
    model = TemporalFusionTransformer(
        hidden_size=hidden,
        lstm_layers=1,
        dropout=0.0,
        output_size=3,
        loss=QuantileLoss([0.1, 0.5, 0.9]),
        attention_head_size=4,
        max_encoder_length=lookback,
        static_categoricals=["asset"],
        static_reals=[],
        time_varying_categoricals_encoder=[],
        time_varying_categoricals_decoder=[],
        time_varying_reals_encoder=observed + known,
        time_varying_reals_decoder=known,
        x_reals=observed + known,
        x_categoricals=["asset"],
        hidden_continuous_size=hidden,
        embedding_sizes={"asset": (2, hidden)},
    )
    # No dataset, so no target normalizer: forecasts stay in the target's own scale.
    model.output_transformer = lambda out: out["prediction"]
    asset = (torch.arange(batch) % 2).view(batch, 1)
    x = {
        "encoder_cat": asset.unsqueeze(1).expand(batch, lookback, 1).contiguous(),
        "decoder_cat": asset.unsqueeze(1).expand(batch, horizons, 1).contiguous(),
        "encoder_cont": torch.randn(batch, lookback, 13),
        "decoder_cont": torch.randn(batch, horizons, 13),
        "encoder_lengths": torch.full((batch,), lookback),
        "decoder_lengths": torch.full((batch,), horizons),
        "target_scale": torch.tensor([[0.0, 1.0]]).expand(batch, 2),
    }
    y = torch.randn(batch, horizons)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-3)
    model.train()

    def step():
        opt.zero_grad(set_to_none=True)
        prediction = model(x)["prediction"]
        loss = model.loss.loss(prediction, y).mean()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    for _ in range(2):
        step()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    times.sort()
    print(json.dumps({"impl": "reference", "hidden": hidden, "batch": batch,
                      "parameters": sum(p.numel() for p in params),
                      "step_ms": round(times[len(times) // 2] * 1e3, 2)}), flush=True)


if __name__ == "__main__":
    main()
