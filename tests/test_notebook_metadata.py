"""The committed notebooks carry normalised metadata, so opening one in JupyterLab leaves it unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
SCRIPT = NOTEBOOKS / "normalize_metadata.py"


def test_committed_notebooks_are_normalised():
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_check_catches_a_stale_notebook_and_the_fix_keeps_outputs(tmp_path):
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "execution_count": 1,
                "id": "a1",
                "metadata": {"tags": ["raises-exception"], "execution": {"iopub.status.busy": "2026-11-22"}},
                "outputs": [{"name": "stdout", "output_type": "stream", "text": ["42\n"]}],
                "source": ["print(42)"],
            }
        ],
        "metadata": {
            "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
            "language_info": {"name": "python", "version": "3.12.3"},
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "01_x.ipynb"
    path.write_text(json.dumps(nb))
    check = subprocess.run(
        [sys.executable, str(SCRIPT), "--check", str(path)], capture_output=True, text=True
    )
    assert check.returncode == 1 and "01_x.ipynb" in check.stdout
    subprocess.run([sys.executable, str(SCRIPT), str(path)], check=True, capture_output=True)
    fixed = json.loads(path.read_text())
    assert fixed["metadata"]["kernelspec"]["display_name"] == "Python 3 (ipykernel)"
    assert fixed["metadata"]["language_info"] == {"name": "python"}
    cell = fixed["cells"][0]
    assert cell["metadata"] == {"tags": ["raises-exception"]} and cell["outputs"] == nb["cells"][0]["outputs"]
    again = subprocess.run(
        [sys.executable, str(SCRIPT), "--check", str(path)], capture_output=True, text=True
    )
    assert again.returncode == 0
