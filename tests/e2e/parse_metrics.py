"""Reads an OpenMetrics exposition on stdin with Prometheus' own Python
parser (which raises on anything malformed) and prints its families as JSON:
{family: {"type": ..., "samples": [{"name", "labels", "value"}]}}."""
import json
import sys

from prometheus_client.openmetrics.parser import text_string_to_metric_families

families = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    families[family.name] = {
        "type": family.type,
        "samples": [
            {"name": s.name, "labels": dict(s.labels), "value": s.value}
            for s in family.samples
        ],
    }
json.dump(families, sys.stdout)
