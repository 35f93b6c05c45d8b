"""Observability: Prometheus targets for the running cluster, an embedded Prometheus, Grafana dashboards."""
