"""Build tests/native_attack.c as a shared object (the hostile corpus's native code)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

NATIVE_SOURCE = Path(__file__).parent / "native_attack.c"


def build_native(out: Path, outside: Path, unix_path: str, caller_pid: int) -> bytes | None:
    """native_attack.c built as a shared object at ``out`` (its bytes), or None without a C compiler."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return None
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), f'-DOUTSIDE="{outside}"',
                    f'-DUNIX_SOCKET="{unix_path}"', f"-DCALLER_PID={caller_pid}", str(NATIVE_SOURCE)],
                   check=True, capture_output=True, timeout=120)
    return out.read_bytes()
