#!/usr/bin/env python3
"""Joins ctxpar_gpu_bench's and torch_bench.py's JSON into the issue's targets; prints the table.

Targets (issue 5): GQA at least 0.95 x SDPA's throughput; MLA at least 60 % of the roofline
(floor / time) and at least 5 x the PyTorch MLA decode; merge and pack at N = 8 each under 5 %
of the attention time of the same shape.
"""
import json
import sys


def load(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError) as e:
        return {"error": f"{path}: {e}", "cases": []}


def main():
    ours, torch_res, out = load(sys.argv[1]), load(sys.argv[2]), sys.argv[3]
    key = lambda c: (c["kind"], c["batch"], c["context"], c["q_heads"])
    torch_ms = {key(c): c["ms"] for c in torch_res.get("cases", [])}
    rows, verdicts = [], []
    for c in ours.get("cases", []):
        t = torch_ms.get(key(c))
        vs_torch = t / c["ms"] if t else None
        roofline = c["floor_ms"] / c["ms"]
        merge_frac = c["merge8_ms"] / c["ms"]
        pack_frac = c["pack8_ms"] / c["ms"]
        checks = {"merge8 < 5%": merge_frac < 0.05, "pack8 < 5%": pack_frac < 0.05}
        if c["kind"] == "gqa":
            checks["vs SDPA >= 0.95"] = vs_torch is not None and vs_torch >= 0.95
            checks["splits vs 1 < 1e-4"] = 0 <= c["check_rel_err"] < 1e-4
        else:
            checks["roofline >= 60%"] = roofline >= 0.6
            checks["vs torch >= 5x"] = vs_torch is not None and vs_torch >= 5.0
            checks["tc vs simt < 1e-2"] = 0 <= c["check_rel_err"] < 1e-2
        row = dict(c, torch_ms=t, vs_torch=vs_torch, roofline=roofline, merge_frac=merge_frac,
                   pack_frac=pack_frac, checks=checks)
        rows.append(row)
        verdicts.append(all(checks.values()))
    summary = {"device": ours.get("device"), "copy_gbs": ours.get("copy_gbs"),
               "read_gbs": ours.get("read_gbs"), "matmul_tflops": ours.get("matmul_tflops"),
               "torch": torch_res.get("torch"), "errors": [r["error"] for r in (ours, torch_res)
                                                           if "error" in r],
               "rows": rows, "all_targets_met": bool(rows) and all(verdicts)}
    json.dump(summary, open(out, "w"), indent=1)

    print(f"\n{summary['device']}: copy {summary['copy_gbs']} GB/s, read {summary['read_gbs']} "
          f"GB/s, bf16 matmul {summary['matmul_tflops']} TFLOP/s, torch {summary['torch']}")
    print(f"{'case':<22}{'ms':>9}{'GB/s':>7}{'TF/s':>7}{'roof':>6}{'torch ms':>10}{'x torch':>8}"
          f"{'merge%':>7}{'pack%':>6}{'simt ms':>9}  unmet")
    for r in rows:
        name = f"{r['kind']} B{r['batch']} L{r['context']} H{r['q_heads']}"
        xt = f"{r['vs_torch']:.2f}" if r["vs_torch"] else "n/a"
        tm = f"{r['torch_ms']:.4f}" if r["torch_ms"] else "n/a"
        unmet = ", ".join(k for k, ok in r["checks"].items() if not ok) or "-"
        print(f"{name:<22}{r['ms']:>9.4f}{r['kv_gbs']:>7.0f}{r['tflops']:>7.1f}"
              f"{100 * r['roofline']:>5.0f}%{tm:>10}{xt:>8}{100 * r['merge_frac']:>6.1f}%"
              f"{100 * r['pack_frac']:>5.1f}%{r.get('simt_ms') or 0:>9.4f}  {unmet}")
    for e in summary["errors"]:
        print("error:", e)
    print("all targets met" if summary["all_targets_met"] else "some targets NOT met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
