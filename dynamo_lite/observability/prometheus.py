"""An embedded Prometheus (Debian's `prometheus` package) scraping the cluster's targets file."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from dynamo_lite.config import PrometheusSpec
from dynamo_lite.infra import ManagedProcess, MissingBinary, free_port
from dynamo_lite.infra.health import http_ok
from dynamo_lite.infra.process import ProcessInfo, RestartableChild


def scrape_config(targets_path: Path, scrape_interval_s: float) -> dict[str, object]:
    """prometheus.yml for one cluster: every target from the file-SD list, re-read as it changes."""
    interval = f"{scrape_interval_s:g}s"
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "scrape_configs": [{
            "job_name": "dynamo_lite",
            "file_sd_configs": [{"files": [str(targets_path)], "refresh_interval": interval}],
        }],
    }  # fmt: skip


def find_prometheus() -> Path:
    found = shutil.which("prometheus")
    if found is None:
        raise MissingBinary("prometheus not found: install it with `sudo apt-get install prometheus` "
                            "(Debian/Ubuntu), or put a prometheus binary on PATH")
    return Path(found)


class EmbeddedPrometheus(RestartableChild):
    """Component: Prometheus with its data under `<state_dir>/prometheus/data`."""

    part = "prometheus"

    def __init__(self, spec: PrometheusSpec, state_dir: Path, targets_path: Path) -> None:
        self.host = spec.host
        self.port = spec.port or free_port(spec.host)
        self.name = f"prometheus on http://{self.host}:{self.port}"
        home = state_dir / "prometheus"
        home.mkdir(parents=True, exist_ok=True)
        config = home / "prometheus.yml"
        config.write_text(yaml.safe_dump(scrape_config(targets_path, spec.scrape_interval_s), sort_keys=False))
        argv = [
            str(find_prometheus()),
            f"--config.file={config}",
            f"--storage.tsdb.path={home / 'data'}",
            f"--web.listen-address={self.host}:{self.port}",
            "--storage.tsdb.retention.time=7d",
        ]
        self.process = ManagedProcess("prometheus", argv, state_dir / "logs" / "prometheus.log")

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def processes(self) -> list[ProcessInfo]:
        pid = self.process.pid
        return [ProcessInfo(name="prometheus", pid=pid, url=self.url, log=str(self.process.log_path))] if pid else []

    async def start(self) -> None:
        self.process.start()
        await self.process.wait_healthy(lambda: http_ok(f"{self.url}/-/ready"), 60)

    async def stop(self) -> None:
        await self.process.stop()
