"""lm-eval's `local-completions` loglikelihood against `ctxpar serve`, on a small local
multiple-choice task written here: lm-eval tokenizes through the server (its remote tokenizer:
/tokenizer_info, /tokenize) and scores each choice from /v1/completions with echo and logprobs.
Its per-choice log-likelihoods must equal the ones this test sums from the same route itself."""

import json

import pytest
import requests

from conftest import MODEL_NAME

DOCS = [
    {"question": "The capital of France is", "choices": [" Paris", " Berlin"], "answer": 0},
    {"question": "The capital of Germany is", "choices": [" Rome", " Berlin"], "answer": 1},
    {"question": "Two plus two equals", "choices": [" four", " seven"], "answer": 0},
    {"question": "The sun rises in the", "choices": [" west", " east"], "answer": 1},
    {"question": "Water freezes at zero degrees", "choices": [" Celsius", " banana"], "answer": 0},
    {"question": "The opposite of hot is", "choices": [" loud", " cold"], "answer": 1},
]

TASK = """task: ctxpar_facts
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{question}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{answer}}}}"
target_delimiter: ""
metric_list:
  - metric: acc
"""


def reference_loglikelihood(server, context, continuation):
    """sum log p(continuation | context) from /v1/completions echo, as lm-eval defines it."""
    tok = lambda text: requests.post(server.url + "/tokenize",
                                     json={"prompt": text, "add_special_tokens": False}).json()
    ctx = tok(context)["tokens"]
    whole = tok(context + continuation)["tokens"]
    r = requests.post(server.url + "/v1/completions",
                      json={"model": MODEL_NAME, "prompt": whole, "max_tokens": 1,
                            "temperature": 0, "echo": True, "logprobs": 1})
    lps = r.json()["choices"][0]["logprobs"]["token_logprobs"]
    return sum(lps[len(ctx):len(whole)])


def test_local_completions_loglikelihood(server, tmp_path):
    lm_eval = pytest.importorskip("lm_eval")
    from lm_eval.tasks import TaskManager

    data = tmp_path / "facts.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (tmp_path / "ctxpar_facts.yaml").write_text(TASK.format(data=data))
    results = lm_eval.simple_evaluate(
        model="local-completions",
        model_args=(f"base_url={server.url}/v1/completions,model={MODEL_NAME},"
                    "tokenizer_backend=remote,num_concurrent=2,max_retries=1"),
        tasks=["ctxpar_facts"],
        task_manager=TaskManager(include_path=str(tmp_path)),
        log_samples=True,
    )
    samples = results["samples"]["ctxpar_facts"]
    assert len(samples) == len(DOCS)
    correct = 0
    for s in samples:
        doc = s["doc"]
        got = [r[0][0] for r in s["resps"]]
        want = [reference_loglikelihood(server, doc["question"], c) for c in doc["choices"]]
        assert got == pytest.approx(want, abs=1e-4), doc
        correct += max(range(len(want)), key=want.__getitem__) == doc["answer"]
    acc = results["results"]["ctxpar_facts"]["acc,none"]
    assert acc == pytest.approx(correct / len(DOCS))
    assert acc >= 4 / 6  # SmolLM2 knows most of these
