"""Shared set-up of the binding's test scripts: puts python/ on the path (for `braid`) and
imports torch, re-running the script under Debian's interpreter when another python3 cannot see
Debian's python3-torch, else exiting 77 (ctest's "skipped") with the reason. Usage, first thing
in a test script: `from torch_or_skip import torch`."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
try:
    import torch  # noqa: F401
except ImportError:
    if sys.executable != "/usr/bin/python3" and os.path.exists("/usr/bin/python3"):
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("SKIP: torch is not installed (tools/install-deps.sh installs python3-torch)")
    sys.exit(77)
