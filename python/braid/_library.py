"""The one place that finds and loads braid's libraries for Python: libbraid.so (the C API),
libbraid_shard.so (the sharded step, for shard.py) and the _braid_torch extension module (the
torch.distributed backend, for braid.torch).

Each is looked up in $BRAID_LIB_DIR (a folder holding it, or a build tree), else in this
checkout's build/. libbraid.so is loaded first, once, with RTLD_GLOBAL, so that
libbraid_shard.so and the extension (which link it by its soname) use this very copy.
"""
import ctypes
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_core = None
_torch_ext = None


def roots():
    """The folders searched, in order."""
    found = [os.environ["BRAID_LIB_DIR"]] if os.environ.get("BRAID_LIB_DIR") else []
    return found + [os.path.normpath(os.path.join(_HERE, "..", "..", "build"))]


def find(names, subdir, hint):
    """The first of `names` in a root folder or its `subdir`; OSError naming where it looked and
    `hint` (how to build it) when none is there."""
    if isinstance(names, str):
        names = [names]
    for root in roots():
        for name in names:
            for path in (os.path.join(root, name), os.path.join(root, subdir, name)):
                if os.path.exists(path):
                    return path
    raise OSError("braid: %s not found in %s; %s, or set BRAID_LIB_DIR" %
                  (names[0], " or ".join(roots()), hint))


def load_core():
    """libbraid.so, loaded once (RTLD_GLOBAL)."""
    global _core
    if _core is None:
        _core = ctypes.CDLL(find("libbraid.so", "src", "build it (cmake --build build)"),
                            mode=ctypes.RTLD_GLOBAL)
    return _core


def load_torch_extension():
    """The _braid_torch module (src/torch), after libbraid.so."""
    global _torch_ext
    if _torch_ext is not None:
        return _torch_ext
    load_core()
    import torch.distributed  # noqa: F401  (registers ProcessGroup and Store with pybind11)
    names = ["_braid_torch" + s for s in importlib.machinery.EXTENSION_SUFFIXES]
    path = find(names, os.path.join("src", "torch"),
                "build it (cmake --build build --target braid_torch; configure says "
                "'braid: torch-backend: NO (...)' when torch's C++ files are missing: "
                "tools/install-deps.sh installs libtorch-dev and pybind11-dev)")
    spec = importlib.util.spec_from_file_location("braid._braid_torch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules["braid._braid_torch"] = module
    _torch_ext = module
    return module
