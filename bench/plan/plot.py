"""Plots a `ctxpar plan --json` answer: per accepted candidate its KV capacity, output tokens/s,
TTFT p50 and ITL p50; with --measured (bench/plan/dcp_serve.py's results.json) the measured
figures beside the predicted ones.

    python bench/plan/plot.py plan.json --out plan.png [--measured results.json]
"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def short(c):
    s = f"dcp {c['dcp_size']} {c['dcp_comm_backend']}"
    return s + (" +rq" if c["dcp_replicate_q_proj"] else "")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("plan")
    p.add_argument("--out", required=True)
    p.add_argument("--measured", default=None)
    a = p.parse_args()
    doc = json.load(open(a.plan))
    cands = doc["candidates"]
    measured = {}
    if a.measured:
        for r in json.load(open(a.measured)):
            measured[r["flags"]] = r
    labels = [short(c) for c in cands]
    panels = [("max_total_num_tokens", "KV capacity (tokens)", "max_total_num_tokens"),
              ("output_tokens_per_s", "output tokens/s", "output_tokens_per_s"),
              ("ttft_ms_p50", "TTFT p50 (ms)", "ttft_ms_p50"),
              ("itl_ms_p50", "ITL p50 (ms)", "itl_ms_p50")]
    fig, axes = plt.subplots(1, 4, figsize=(16, 0.45 * len(cands) + 2))
    for ax, (key, title, mkey) in zip(axes, panels):
        y = range(len(cands))
        ax.barh([i + 0.2 for i in y], [c[key] for c in cands], height=0.4, label="predicted")
        if measured:
            ax.barh([i - 0.2 for i in y], [measured.get(c["flags"], {}).get(mkey, 0) for c in cands],
                    height=0.4, label="measured")
            ax.legend(fontsize=7)
        ax.set_yticks(list(y))
        ax.set_yticklabels(labels if ax is axes[0] else [], fontsize=7)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9)
        ax.grid(True, axis="x", alpha=0.3)
    w = doc["workload"]
    fig.suptitle(f"ctxpar plan: {doc['model']['name']} on {doc['hardware']['devices']} x "
                 f"{doc['hardware']['name']}, input {w['input_len']}, output {w['output_len']}, "
                 f"concurrency {w['concurrency']} (ranked best first)", fontsize=9)
    fig.tight_layout()
    fig.savefig(a.out, dpi=100)


if __name__ == "__main__":
    main()
