"""Parses a Prometheus scrape (OpenMetrics text, on stdin) with Prometheus's own Python
client parser, which rejects malformed exposition, and prints every sample as JSON:
{"families": {name: type}, "samples": [[name, {labels}, value], ...]}."""
import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def main():
    text = sys.stdin.read()
    families = {}
    samples = []
    for family in text_string_to_metric_families(text):
        families[family.name] = family.type
        for s in family.samples:
            samples.append([s.name, dict(s.labels), s.value])
    json.dump({"families": families, "samples": samples}, sys.stdout)


if __name__ == "__main__":
    main()
