"""Prometheus remote write (issue 22): samples → requests a Prometheus-compatible TSDB accepts.
Its layer is that of ``kafka`` and ``state``: it reads values and errors only."""
