"""Prometheus remote write (issue 22): samples → requests a Prometheus-compatible TSDB accepts.
Its layer is that of ``kafka`` and ``state``: it reads values, errors and, from
:mod:`l2m.config.job`, how an endpoint's URL is shown (without credentials) only."""
