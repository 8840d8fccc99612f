#!/usr/bin/env python3
"""Checks a TorchScript export of tli (`tli models torchscript`) with PyTorch alone.

Usage: torchscript_check.py EXPORT_DIR PREDICTIONS_JSON
Loads EXPORT_DIR/model.pt with torch.jit.load, runs it on the example inputs the export
wrote (signature.json says their files, dtypes and shapes), multiplies each column by its
target scale, and compares every value with the same bar's and column's value in the
`tli predict -o json` output of the same file. Also runs the module on the first half of
the inputs (another batch size) when the module takes any batch size (signature.json's
`batch` is null); a module traced for a fixed batch is called that many windows at a time. Prints one JSON line: rows compared, the largest absolute
and relative differences, and whether the half batch agreed. Exit 0 when every value is
within 1e-5 (relative to the forecasts' scale).
"""
import json
import pathlib
import sys

import torch


def main() -> int:
    export, predictions = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    signature = json.loads((export / "signature.json").read_text())
    dtypes = {"float32": torch.float32, "int64": torch.int64}
    inputs = []
    for spec in signature["inputs"]:
        data = bytearray((export / spec["file"]).read_bytes())
        tensor = torch.frombuffer(data, dtype=dtypes[spec["dtype"]]).reshape(spec["shape"])
        inputs.append(tensor)
    module = torch.jit.load(str(export / "model.pt"))
    batch = signature.get("batch")  # None: any batch size; else the size it was traced for
    n = len(inputs[0])
    with torch.no_grad():
        if batch is None:
            out = module(*inputs).double()
            half = n // 2
            out_half = module(*[x[:half] for x in inputs]).double()
        else:
            out = torch.cat(
                [module(*[x[i:i + batch] for x in inputs]) for i in range(0, n, batch)]
            ).double()
            half = n // 2
            out_half = out[:half]
    scales = torch.tensor(signature["target_scales"], dtype=torch.float64)
    forecasts = out.reshape(out.shape[0], -1) * scales
    by_time = {row["timestamp"]: row for row in json.loads(predictions.read_text())}
    columns = signature["columns"]
    scale = float(forecasts.abs().max())
    worst_abs, compared = 0.0, 0
    for i, ts in enumerate(signature["timestamps"]):
        row = by_time[ts]
        for c, name in enumerate(columns):
            diff = abs(float(forecasts[i, c]) - float(row[name]))
            worst_abs = max(worst_abs, diff)
            compared += 1
    half_agrees = bool(torch.allclose(out_half, out[:half], rtol=1e-5, atol=1e-6 * scale))
    ok = worst_abs <= 1e-5 * scale and compared > 0 and half_agrees
    print(json.dumps({
        "rows": len(signature["timestamps"]),
        "values": compared,
        "max_abs_diff": worst_abs,
        "max_rel_diff": worst_abs / scale if scale else 0.0,
        "half_batch_agrees": half_agrees,
        "ok": ok,
    }))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
