"""What the llama.cpp goldens and benchmarks were made with, and a compact JSON writer."""
import json
import pathlib
import platform

import llama_cpp


def llama_cpp_versions() -> dict:
    """llama-cpp-python's version and the sonames of the llama.cpp it vendors and built."""
    lib = pathlib.Path(llama_cpp.__file__).parent / "lib"

    def soname(stem: str) -> str:
        names = sorted(p.name for p in lib.glob(f"lib{stem}.so.*.*.*"))
        return names[-1].split(".so.")[1] if names else "unknown"

    return {
        "llama_cpp_python": llama_cpp.__version__,
        "libllama": soname("llama"),
        "libggml": soname("ggml"),
        "system_info": llama_cpp.llama_print_system_info().decode().strip(),
        "machine": platform.machine(),
    }


def dump_compact(obj: dict, stream) -> None:
    """One line per top-level key, and one line per element of top-level lists: small, diffable."""
    stream.write("{\n")
    items = list(obj.items())
    for i, (key, value) in enumerate(items):
        stream.write(f"  {json.dumps(key)}: ")
        if isinstance(value, list):
            stream.write("[\n")
            for j, element in enumerate(value):
                sep = "," if j + 1 < len(value) else ""
                stream.write("    " + json.dumps(element, ensure_ascii=False) + sep + "\n")
            stream.write("  ]")
        else:
            stream.write(json.dumps(value, ensure_ascii=False))
        stream.write(",\n" if i + 1 < len(items) else "\n")
    stream.write("}\n")
