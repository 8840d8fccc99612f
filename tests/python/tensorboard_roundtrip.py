#!/usr/bin/env python3
"""Reads the host's TensorBoard event files back with TensorBoard's own EventAccumulator.

Usage: tensorboard_roundtrip.py ROOT
ROOT is a --tensorboard-dir (ROOT/job-N/task-M-.../events.out.tfevents.*). Prints one
JSON object: {"job-N/task-M-...": {"scalars": {tag: [[step, value], ...]},
"texts": {tag: [[step, text], ...]}, "hparams": {name: value}}, ...}, the hparams as the
HParams dashboard's plugin data decodes them. Values that JSON cannot hold (NaN,
infinities) are printed as the strings "nan", "inf" and "-inf".
"""
import json
import math
import os
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2


def number(value):
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def read_run(directory):
    accumulator = EventAccumulator(directory, size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    scalars = {
        tag: [[event.step, number(event.value)] for event in accumulator.Scalars(tag)]
        for tag in tags["scalars"]
    }
    hparams = {}
    try:
        hparam_tags = accumulator.PluginTagToContent("hparams")
    except KeyError:
        hparam_tags = {}
    for content in hparam_tags.values():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        for name, value in data.session_start_info.hparams.items():
            kind = value.WhichOneof("kind")
            hparams[name] = getattr(value, kind) if kind else None
    texts = {}
    for tag in tags["tensors"]:
        if tag in hparam_tags:
            continue
        texts[tag] = [
            [event.step, b"".join(event.tensor_proto.string_val).decode("utf-8")]
            for event in accumulator.Tensors(tag)
        ]
    return {"scalars": scalars, "texts": texts, "hparams": hparams}


def main() -> int:
    root = sys.argv[1]
    runs = {}
    for directory, _dirs, files in sorted(os.walk(root)):
        if any("tfevents" in name for name in files):
            runs[os.path.relpath(directory, root)] = read_run(directory)
    json.dump(runs, sys.stdout, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
