"""rft.io: atomic writes never leave partial files; JSONL errors name file and line."""

from __future__ import annotations

import argparse
import hashlib
import json

import pytest

from rft import io


def test_atomic_write_replaces_whole_file(tmp_path):
    p = tmp_path / "sub" / "f.json"
    io.atomic_write_json(p, {"a": 1})
    io.atomic_write_json(p, {"b": 2})
    assert json.loads(p.read_text()) == {"b": 2}
    assert [x.name for x in p.parent.iterdir()] == ["f.json"]


def test_failed_write_keeps_previous_file_and_no_temp(tmp_path):
    p = tmp_path / "rows.jsonl"
    io.atomic_write_jsonl(p, [{"input": "x", "label": "1"}])
    before = p.read_bytes()

    def rows():
        yield {"input": "y", "label": "2"}
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        io.atomic_write_jsonl(p, rows())
    assert p.read_bytes() == before
    assert [x.name for x in tmp_path.iterdir()] == ["rows.jsonl"]


def test_jsonl_roundtrip_and_sha(tmp_path):
    p = tmp_path / "r.jsonl"
    rows = [{"input": "é", "label": "42"}, {"input": "b", "label": "-3"}]
    assert io.atomic_write_jsonl(p, rows) == 2
    assert io.read_jsonl(p) == rows
    assert io.sha256_file(p) == hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.mark.parametrize("bad, msg", [('{"a": 1}\n{oops\n', ":2: not valid JSON"), ('[1, 2]\n', ":1: expected a JSON object")])
def test_bad_jsonl_names_file_and_line(tmp_path, bad, msg):
    p = tmp_path / "bad.jsonl"
    p.write_text(bad)
    with pytest.raises(ValueError, match=msg) as e:
        io.read_jsonl(p)
    assert str(p) in str(e.value)


def test_line_numbers_count_blank_lines(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"a": 1}\n\n{"a": 2}\n')
    assert list(io.iter_jsonl_lines(p)) == [(1, {"a": 1}), (3, {"a": 2})]


def test_flag_value_is_the_last_occurrence_as_argparse_reads_it():
    from rft.io import flag_value

    argv = ["--rollout_batch_size", "8", "--lr", "1e-6", "--rollout_batch_size", "64"]  # "$@" after the recipe
    assert flag_value(argv, "--rollout_batch_size") == "64" and flag_value(argv, "--lr") == "1e-6"
    assert flag_value(argv, "--absent") is None and flag_value(["--ckpt_path"], "--ckpt_path") is None


@pytest.mark.parametrize(("env", "expected"), [({"RFT_TEST_DIR": "/runs/a"}, "/runs/a"), ({}, None)])
def test_add_env_flag_defaults_to_the_variable_and_names_it(env, expected, monkeypatch):
    monkeypatch.delenv("RFT_TEST_DIR", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    p = argparse.ArgumentParser()
    io.add_env_flag(p, "--dir", "RFT_TEST_DIR", "the run's directory", otherwise=", else none")
    assert p.parse_args([]).dir == expected
    assert p.parse_args(["--dir", "x"]).dir == "x"
    assert "the run's directory (default: $RFT_TEST_DIR, else none)" in " ".join(p.format_help().split())
