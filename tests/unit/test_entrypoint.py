"""The entry points: the log level (--log-level, else $DYNAMO_LITE_LOG, else info; exported to the processes
started after), and the frontend's refusal of a model it cannot find or whose reasoning parser cannot read it."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SHOW = """
import logging, os, subprocess, sys
from dynamo_lite.infra.entrypoint import configure_logging
configure_logging({level!r})
child = subprocess.run([sys.executable, "-c", "import os; print(os.environ['DYNAMO_LITE_LOG'])"],
                       capture_output=True, text=True, check=True).stdout.strip()
print(logging.getLevelName(logging.getLogger().level), child)
"""


def run(level: str | None, env_level: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DYNAMO_LITE_LOG"}
    if env_level is not None:
        env["DYNAMO_LITE_LOG"] = env_level
    return subprocess.run([sys.executable, "-c", SHOW.format(level=level)], capture_output=True, text=True, env=env,
                          timeout=60)


@pytest.mark.parametrize("level, env_level, shown", [(None, None, "INFO info"), (None, "DEBUG", "DEBUG debug"),
                                                     ("warning", "debug", "WARNING warning")])
def test_the_level_comes_from_the_flag_then_the_environment_and_reaches_child_processes(level, env_level, shown):
    done = run(level, env_level)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == shown


def test_a_bad_level_in_the_environment_is_refused_by_name():
    done = run(None, "loud")
    assert done.returncode != 0
    assert "DYNAMO_LITE_LOG='loud': expected one of debug, info, warning, error" in done.stderr


def test_the_frontend_refuses_a_model_it_cannot_find_with_the_file_and_the_path(tmp_path):
    spec = tmp_path / "cluster.yaml"
    spec.write_text(f"state_dir: {tmp_path / 'state'}\nmodels:\n  - {{name: m, path: {tmp_path / 'nowhere'}}}\n"
                    "pools: []\n")
    done = frontend_refuses(spec)
    assert f"error: {spec}: model path '{tmp_path / 'nowhere'}': no config.json there" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_frontend_refuses_a_reasoning_parser_the_model_s_vocabulary_cannot_serve(tmp_path):
    """deepseek_r1's parser looks up `<think>` and `</think>`; the tiny tokenizer has neither. vLLM's engine would
    refuse to start with a traceback; the frontend says so at start, with the file, the model and the tokens."""
    from dynamo_lite.engines.models.tiny import train_tokenizer

    train_tokenizer(tmp_path / "model")
    (tmp_path / "model" / "config.json").write_text('{"model_type": "llama"}')
    spec = tmp_path / "cluster.yaml"
    spec.write_text(f"state_dir: {tmp_path / 'state'}\nmodels:\n  - {{name: m, path: {tmp_path / 'model'}, "
                    "reasoning_parser: deepseek_r1}\npools: []\n")
    done = frontend_refuses(spec)
    assert (f"error: {spec}: models[0] (m): reasoning_parser: 'deepseek_r1' looks up '<think>', '</think>' in the "
            "model's vocabulary, which has no such token") in done.stderr
    assert "Traceback" not in done.stderr


def frontend_refuses(spec: Path) -> subprocess.CompletedProcess[str]:
    """The frontend started on `spec` (with no NATS or etcd to reach): it must stop at once with exit code 2."""
    done = subprocess.run([sys.executable, "-m", "dynamo_lite.frontend", "-f", str(spec), "--port", "1",
                           "--nats-url", "nats://127.0.0.1:1", "--etcd-url", "http://127.0.0.1:1"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    return done
