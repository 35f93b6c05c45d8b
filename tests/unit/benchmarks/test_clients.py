"""benchmarks/clients.py: each client's runs reduced to medians per target and frontend / direct, the table and
the plot; and the options it refuses."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from benchmarks import clients  # noqa: E402


def run(client: str, target: str, req_s: float, ttft_p99: float) -> dict:
    figures = {"completed": 40, "failed": 0, "req_s": req_s, "out_tok_s": 64 * req_s, "ttft_p50": ttft_p99 / 2,
               "ttft_p99": ttft_p99, "itl_p50": 20.0, "itl_p99": 40.0}  # fmt: skip
    return {"round": 0, "client": client, "target": target, "seed": 1, "figures": figures}


def test_medians_per_target_and_the_ratio(tmp_path: Path) -> None:
    runs = [run("bench", "direct", 0.50, 100), run("bench", "frontend", 0.45, 150),
            run("bench", "direct", 0.40, 300), run("bench", "frontend", 0.55, 250),
            run("bench", "direct", 0.60, 200), run("bench", "frontend", 0.50, 200)]  # fmt: skip
    summ = clients.summary(runs)
    assert list(summ) == ["bench"]
    assert summ["bench"]["direct"]["req_s"] == 0.50 and summ["bench"]["frontend"]["req_s"] == 0.50
    assert summ["bench"]["direct"]["ttft_p99"] == 200 and summ["bench"]["frontend"]["ttft_p99"] == 200
    assert summ["bench"]["frontend / direct"]["req_s"] == pytest.approx(1.0)
    assert summ["bench"]["frontend / direct"]["itl_p99"] == pytest.approx(1.0)
    text = clients.table(summ)
    assert "| bench | frontend / direct |  |  | 1.00x |" in text and "| bench | direct | 40 | 0 | 0.500 |" in text
    clients.plot(summ, "title", tmp_path / "c.png")
    assert (tmp_path / "c.png").stat().st_size > 1000


def test_bad_options_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--clients", "wrk"], ["--rate", "0"], ["--clients", ""]):
        with pytest.raises(SystemExit):
            clients.parse(argv)
    assert "unknown client(s) wrk" in capsys.readouterr().err
