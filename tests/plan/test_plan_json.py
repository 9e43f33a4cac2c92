"""`ctxpar plan --json` against docs/plan.schema.json (JSON Schema 2020-12, the jsonschema package)."""
import copy
import json
import os
import subprocess

import jsonschema
import pytest

BIN = os.environ["CTXPAR_BIN"]
SCHEMA = json.load(open(os.path.join(os.environ["CTXPAR_SOURCE_DIR"], "docs", "plan.schema.json")))
SMOLLM2 = os.path.expanduser("~/.cache/ctxpar/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def plan(*args, rc=0):
    out = subprocess.run([BIN, "plan", "--json", *args], capture_output=True, text=True, timeout=120)
    assert out.returncode == rc, out.stderr
    return json.loads(out.stdout)


def validate(doc):
    jsonschema.Draft202012Validator(SCHEMA).validate(doc)


def test_schema_is_valid():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


def test_the_issues_example_validates_and_ranks():
    doc = plan("--model", "deepseek-v3", "--hardware", "h200", "--gpus", "8", "--input-len",
               "32768", "--output-len", "1024", "--concurrency", "64")
    validate(doc)
    assert [c["rank"] for c in doc["candidates"]] == list(range(1, len(doc["candidates"]) + 1))
    ids = {r["error"]["id"] for r in doc["refused"]}
    assert {"CTXPAR-DCP-002", "CTXPAR-DCP-005", "CTXPAR-DCP-006"} <= ids


def test_an_open_loop_with_objectives_validates():
    doc = plan("--model", "llama-3.1-70b", "--hardware", "mi300x", "--gpus", "8", "--input-len",
               "2000:8000", "--output-len", "100:300", "--request-rate", "4", "--num-requests", "64",
               "--ttft-slo-ms", "2000", "--itl-slo-ms", "50")
    validate(doc)
    assert doc["workload"]["input_len"] == [2000, 8000]


@pytest.mark.skipif(not os.path.exists(SMOLLM2), reason="SmolLM2 is not downloaded")
def test_a_checkpoint_on_this_machine_validates():
    doc = plan("--model-path", SMOLLM2, "--tp-size", "3", "--kv-cache-mib", "8", "--input-len",
               "500", "--output-len", "16", "--concurrency", "4")
    validate(doc)
    assert doc["hardware"]["platform"] == "cpu"


def test_the_schema_refuses_what_it_must():
    doc = plan("--model", "qwen3-235b-a22b", "--hardware", "b200", "--gpus", "8")
    validate(doc)
    for broken in (lambda d: d.pop("candidates"),
                   lambda d: d["candidates"][0].update(extra=1),
                   lambda d: d["refused"][0]["error"].update(id="DCP-2"),
                   lambda d: d["candidates"][0].update(dcp_comm_backend="nccl")):
        bad = copy.deepcopy(doc)
        broken(bad)
        with pytest.raises(jsonschema.ValidationError):
            validate(bad)


def test_nothing_accepted_validates_and_exits_2():
    doc = plan("--model", "deepseek-v3", "--hardware", "h100", "--gpus", "4", rc=2)
    validate(doc)
    assert doc["candidates"] == []
    assert {r["error"]["id"] for r in doc["refused"]} >= {"CTXPAR-PLAN-005"}
