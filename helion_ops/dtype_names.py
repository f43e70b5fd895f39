"""Both spellings of a dtype on every command line: tritonbench's (``bf16``) and torch's
(``bfloat16``). Each command keeps its own spelling inside and checks the name it gets."""

from __future__ import annotations

TRITONBENCH_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
TORCH_NAMES = {short: name for name, short in TRITONBENCH_NAMES.items()}


def torch_name(text: str) -> str:
    """``bf16`` -> ``bfloat16``; any other text as it is (for the command's own check)."""
    return TORCH_NAMES.get(text, text)


def tritonbench_name(text: str) -> str:
    """``bfloat16`` -> ``bf16``; any other text as it is (for the command's own check)."""
    return TRITONBENCH_NAMES.get(text, text)
