"""setup.py - builds vllmc._C against this repository's libvllm.a.

`pip install ./python` (from the repository root) runs this in python/ of
the checkout (pip builds in the tree), so the repository is one directory up.
build_ext first runs `make PIC=1` there, which compiles the library with
-fPIC into build-pic/ (libvllm.a: the public API of include/vllm/ only) and
the `vllmc` command, then compiles vllmc/_C.c against include/ alone and
links build-pic/libvllm.a plus the system libraries the library needs
(LIB_LDLIBS in the Makefile). The command is copied into the package
(vllmc/bin/vllmc) and the `vllmc` console script execs it.

VLLMC_MAKE_JOBS sets make's -j (default: the number of CPUs); VLLMC_WERROR=1
makes warnings errors, in make and in the extension (tests/test_python.sh).
"""
import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.join(ROOT, "build-pic")


class MakeThenBuildExt(build_ext):
    def run(self):
        if not os.path.exists(os.path.join(ROOT, "Makefile")) or not os.path.isdir(os.path.join(ROOT, "include", "vllm")):
            raise RuntimeError(
                f"vllmc builds from a vllm.c checkout: {ROOT} has no Makefile and include/vllm/ "
                "(install with `pip install ./python` from the repository root)")
        jobs = os.environ.get("VLLMC_MAKE_JOBS", str(os.cpu_count() or 1))
        werror = ["WERROR=1"] if os.environ.get("VLLMC_WERROR") else []
        subprocess.check_call(["make", "-C", ROOT, f"-j{jobs}", "PIC=1", *werror, "build-pic/libvllm.a",
                               "build-pic/vllmc"])
        super().run()
        # the CLI beside the extension, for the console script
        out = os.path.join(HERE if self.inplace else self.build_lib, "vllmc", "bin")
        os.makedirs(out, exist_ok=True)
        shutil.copy2(os.path.join(BUILD, "vllmc"), os.path.join(out, "vllmc"))


ext = Extension(
    "vllmc._C",
    sources=["vllmc/_C.c"],
    include_dirs=[os.path.join(ROOT, "include")],
    extra_objects=[os.path.join(BUILD, "libvllm.a")],
    libraries=["pcre2-8", "jansson", "xxhash", "utf8proc", "m"],
    # the repository's warnings (Makefile WARN); tests/test_python.sh builds with -Werror
    extra_compile_args=["-std=c17", "-Wall", "-Wextra", "-Wshadow", "-Wno-unused-parameter", "-Wstrict-prototypes",
                        "-Wvla", "-Wno-cast-function-type"] + (["-Werror"] if os.environ.get("VLLMC_WERROR") else []),
    extra_link_args=["-pthread"],
)

setup(ext_modules=[ext], cmdclass={"build_ext": MakeThenBuildExt})
