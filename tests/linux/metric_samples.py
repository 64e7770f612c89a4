"""A metric's samples as one value, for tests that compare whole values."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["parsed", "samples"]


def samples(registry: CollectorRegistry, name: str) -> dict[tuple[str, ...], float]:
    """Sample ``name`` (e.g. ``felix_iptables_chains``, ``dataplane_hns_calls_total``)
    by its label values, in label order."""
    out: dict[tuple[str, ...], float] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sample.labels.values())] = sample.value
    return out


def parsed(text: str, name: str, labels: Sequence[str] = ()) -> dict[tuple[str, ...], float]:
    """Like :func:`samples`, from an exposition (what a scrape returned); the
    exposition does not keep the labels' order, so ``labels`` gives it."""
    out: dict[tuple[str, ...], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sample.labels[k] for k in labels)] = sample.value
    return out
