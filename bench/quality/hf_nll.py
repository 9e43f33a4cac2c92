"""The outside reference for bench/quality/perplexity.py: HF transformers in float32 on the
weights it dequantizes from the same GGUF, scoring the same chunks of the same ids.

Run by perplexity.py --hf-python PY (an interpreter with torch, transformers, gguf and
accelerate) as `PY hf_nll.py JOB.json`; JOB holds "model" (the GGUF path), "chunks" (lists of
ids, each with its BOS already in place) and "first" (the last unscored position). Prints one
JSON line: the NLL summed over positions first + 1 .. len - 1 of each chunk, and their count.
"""

import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        job = json.load(f)
    model = AutoModelForCausalLM.from_pretrained(
        os.path.dirname(job["model"]), gguf_file=os.path.basename(job["model"]),
        torch_dtype=torch.float32, attn_implementation="eager")
    model.eval()
    torch.set_num_threads(os.cpu_count())
    first = job["first"]
    nll, count = 0.0, 0
    for i, ids in enumerate(job["chunks"]):
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0].double()
        lp = torch.log_softmax(logits, -1)
        for j in range(first, len(ids) - 1):
            nll -= lp[j, ids[j + 1]].item()
            count += 1
        print(f"  transformers float32: chunk {i + 1}/{len(job['chunks'])}, running NLL "
              f"{nll / count:.5f}", file=sys.stderr, flush=True)
    print(json.dumps({"nll": nll, "tokens": count}))


if __name__ == "__main__":
    main()
