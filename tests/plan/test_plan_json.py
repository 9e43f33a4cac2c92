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
    assert doc["error"]["id"] == "CTXPAR-PLAN-007"


def test_nothing_accepted_ends_the_table_with_an_id():
    out = subprocess.run([BIN, "plan", "--model", "deepseek-v3", "--hardware", "h100", "--gpus",
                          "4"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "CTXPAR-PLAN-005" in out.stdout  # the refusals, each with its rule
    assert "run: ctxpar explain CTXPAR-PLAN-007" in out.stderr


BASE = ["--model", "llama-3.1-70b", "--hardware", "h200", "--gpus", "8"]


@pytest.mark.parametrize("flags,error_id,field", [
    (["--mem-fraction-static", "5"], "CTXPAR-PLAN-006", "--mem-fraction-static"),
    (["--mem-fraction-static", "nan"], "CTXPAR-PLAN-006", "--mem-fraction-static"),
    (["--mem-fraction-static", "0"], "CTXPAR-PLAN-006", "--mem-fraction-static"),
    (["--mem-fraction-static", "-0.5"], "CTXPAR-PLAN-006", "--mem-fraction-static"),
    (["--gpus", "0"], "CTXPAR-PLAN-006", "--gpus"),
    (["--gpus", "-1"], "CTXPAR-PLAN-006", "--gpus"),
    (["--concurrency", "0"], "CTXPAR-PLAN-004", "--concurrency"),
    (["--concurrency", "-3"], "CTXPAR-PLAN-004", "--concurrency"),
    (["--request-rate", "nan"], "CTXPAR-PLAN-004", "--request-rate"),
    (["--request-rate", "inf"], "CTXPAR-PLAN-004", "--request-rate"),
    (["--request-rate", "0"], "CTXPAR-PLAN-004", "--request-rate"),
    (["--concurrency", "2", "--request-rate", "nan"], "CTXPAR-PLAN-004", "--request-rate"),
    (["--num-requests", "0"], "CTXPAR-PLAN-004", "--num-requests"),
    (["--num-requests", "-5"], "CTXPAR-PLAN-004", "--num-requests"),
    (["--ttft-slo-ms", "0"], "CTXPAR-PLAN-004", "--ttft-slo-ms"),
    (["--ttft-slo-ms", "nan"], "CTXPAR-PLAN-004", "--ttft-slo-ms"),
    (["--itl-slo-ms", "-1"], "CTXPAR-PLAN-004", "--itl-slo-ms"),
    (["--itl-slo-ms", "inf"], "CTXPAR-PLAN-004", "--itl-slo-ms"),
    (["--input-len", "0"], "CTXPAR-PLAN-004", "--input-len"),
    (["--output-len", "9:3"], "CTXPAR-PLAN-004", "--output-len"),
    (["--speculative-algorithm", "NGRAM"], "CTXPAR-PLAN-004", "--speculative-accept-rate"),
    (["--speculative-accept-rate", "0.5"], "CTXPAR-PLAN-004", "--speculative-accept-rate"),
    (["--speculative-algorithm", "NGRAM", "--speculative-accept-rate", "1.5"], "CTXPAR-PLAN-004",
     "--speculative-accept-rate"),
    (["--speculative-algorithm", "NGRAM", "--speculative-accept-rate", "nan"], "CTXPAR-PLAN-004",
     "--speculative-accept-rate"),
    (["--speculative-algorithm", "STANDALONE", "--speculative-accept-rate", "0.5"],
     "CTXPAR-PLAN-004", "--speculative-algorithm"),
])
def test_an_input_out_of_range_is_refused_before_any_simulation(flags, error_id, field):
    for json_flag in ([], ["--json"]):
        out = subprocess.run([BIN, "plan", *BASE, *flags, *json_flag], capture_output=True,
                             text=True, timeout=120)
        assert out.returncode == 2, out.stdout
        assert out.stdout == "", "nothing is planned"
        assert field in out.stderr and f"run: ctxpar explain {error_id}" in out.stderr, out.stderr


def test_the_bounds_themselves_are_taken():
    doc = plan(*BASE, "--mem-fraction-static", "1", "--concurrency", "1", "--num-requests", "1",
               "--ttft-slo-ms", "0.001", "--output-len", "1")
    validate(doc)
    assert doc["workload"]["num_requests"] == 1
    assert all(not c["meets_slo"] for c in doc["candidates"])


def test_speculation_is_priced_beside_plain_decoding():
    doc = plan(*BASE, "--input-len", "2048", "--output-len", "128", "--concurrency", "4",
               "--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4",
               "--speculative-accept-rate", "0.8")
    validate(doc)
    assert doc["workload"]["speculative_accept_rate"] == 0.8
    for c in doc["candidates"]:
        # 3 drafts accepted at 0.8 each: at most 1 + .8 + .64 + .512 tokens a verify step.
        assert 1 < c["spec_accept_length"] <= 2.952 + 1e-9
        plain = c["without_speculation"]["output_tokens_per_s"]
        assert c["speculation_gain"] == pytest.approx(c["output_tokens_per_s"] / plain)
    plain_doc = plan(*BASE, "--input-len", "2048", "--output-len", "128", "--concurrency", "4")
    assert "spec_accept_length" not in plain_doc["candidates"][0]
    by_flags = {c["flags"]: c["output_tokens_per_s"] for c in plain_doc["candidates"]}
    for c in doc["candidates"]:
        assert c["without_speculation"]["output_tokens_per_s"] == pytest.approx(by_flags[c["flags"]])
