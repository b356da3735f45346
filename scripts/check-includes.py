#!/usr/bin/env python3
"""Every source and header of trainbench compiles on its own includes, without the precompiled
header: a syntax-only pass (-fsyntax-only) over the build's compile commands that force the
precompiled header, with it taken out, plus one translation unit per header that no source
includes first (a source that includes its own header first already checks that header alone).
A source whose command has no precompiled header is left out: the build compiled it on its own
includes already (the torch-free code, the tests of it, and the files that skip the header).

usage: check-includes.py BUILD_DIR [--jobs N]
  BUILD_DIR: a configured build (Ninja); its compile_commands.json is used when it has one,
  else the commands come from `ninja -t compdb`. CI checks the normal build dir; in a build
  without TRAINBENCH_PCH only the headers are left to check.
"""
import argparse
import concurrent.futures
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

PCH_FLAGS = ("-Winvalid-pch",)


def syntax_only(command):
    """The compile command, checking syntax only: no object file, no precompiled header."""
    args = shlex.split(command)
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a == "-include" and i + 1 < len(args) and "cmake_pch" in args[i + 1]:
            skip = True  # the precompiled header CMake forces into every TU
            continue
        if a in ("-MD", "-MMD", "-c") or a in PCH_FLAGS:
            continue
        out.append(a)
    return out + ["-fsyntax-only"]


def compile_entries(build_dir, root):
    path = os.path.join(build_dir, "compile_commands.json")
    if os.path.exists(path):
        with open(path) as f:
            entries = json.load(f)
    else:
        r = subprocess.run(["ninja", "-C", build_dir, "-t", "compdb"], capture_output=True, text=True, check=True)
        entries = json.loads(r.stdout)
    build = os.path.abspath(build_dir) + os.sep
    out = []
    for e in entries:
        f = os.path.abspath(os.path.join(e["directory"], e["file"]))
        if f.endswith(".cpp") and f.startswith(root + os.sep) and not f.startswith(build):
            e = dict(e, file=f, command=e.get("command") or shlex.join(e["arguments"]))
            out.append(e)
    return out


def forces_pch(command):
    args = shlex.split(command)
    return any(a == "-include" and "cmake_pch" in b for a, b in zip(args, args[1:]))


def first_include(path):
    with open(path) as f:
        for line in f:
            m = re.match(r'\s*#\s*include\s*["<]([^">]+)[">]', line)
            if m:
                return m.group(1)
    return None


def uses_torch(path, seen=None):
    """Whether the header includes LibTorch, itself or through the project's own headers (a
    header reaching ATen only through util/torch_compat.hpp needs LibTorch's paths as well)."""
    seen = set() if seen is None else seen
    if path in seen or not os.path.exists(path):
        return False
    seen.add(path)
    with open(path) as f:
        text = f.read()
    if re.search(r'^\s*#\s*include\s*<(ATen|c10|torch)/', text, re.M):
        return True
    lib = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib")
    return any(uses_torch(os.path.normpath(os.path.join(lib, inc)), seen)
               for inc in re.findall(r'^\s*#\s*include\s*"(trainbench/[^"]+)"', text, re.M))


def header_jobs(entries, root, scratch):
    """One TU per header under lib/ and apps/ that no source includes first, with the flags of
    its own .cpp, else of a TU in the same folder, else of a torch TU of the library."""
    by_file = {os.path.relpath(e["file"], root): e for e in entries}
    first = {first_include(os.path.join(root, f)) for f in by_file}
    fallback = next(e for f, e in by_file.items() if f.startswith("lib/trainbench/pipeline"))
    jobs = []
    for top in ("lib", "apps"):
        for folder, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(".hpp"):
                    continue
                header = os.path.relpath(os.path.join(folder, name), root)
                if any(inc and header.endswith("/" + inc) for inc in first):
                    continue  # checked alone by the source that includes it first
                stem = header[: -len(".hpp")]
                same_dir = [e for f, e in by_file.items() if os.path.dirname(f) == os.path.dirname(header)]
                entry = by_file.get(stem + ".cpp") or (same_dir[0] if same_dir else fallback)
                if uses_torch(os.path.join(root, header)) and "torch/include" not in entry["command"]:
                    entry = fallback  # a torch-free TU of the folder lacks LibTorch's include paths
                tu = os.path.join(scratch, header.replace("/", "_") + ".cpp")
                with open(tu, "w") as f:
                    f.write(f'#include "{os.path.join(root, header)}"\n')
                args = [tu if a == entry["file"] else a for a in syntax_only(entry["command"])]
                jobs.append((header + " (alone)", args, entry["directory"]))
    return jobs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("build_dir")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    a = parser.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    entries = compile_entries(a.build_dir, root)
    if not entries:
        raise SystemExit(f"check-includes: no compile commands for sources under {root} in {a.build_dir}")
    start = time.time()
    with tempfile.TemporaryDirectory() as scratch:
        jobs = [(os.path.relpath(e["file"], root), syntax_only(e["command"]), e["directory"])
                for e in entries if forces_pch(e["command"])]
        jobs += header_jobs(entries, root, scratch)

        def run(job):
            name, args, cwd = job
            t0 = time.time()
            r = subprocess.run(args, cwd=cwd, capture_output=True, text=True)
            return name, r.returncode, r.stderr, time.time() - t0

        failed, times = [], []
        with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
            for name, rc, err, seconds in pool.map(run, jobs):
                times.append((seconds, name))
                if rc != 0:
                    failed.append(name)
                    print(f"== {name}: does not compile on its own includes\n{err[:4000]}")
    slowest = ", ".join(f"{n} {s:.0f} s" for s, n in sorted(times, reverse=True)[:5])
    print(f"check-includes: {len(jobs)} translation units, {len(failed)} failed, {time.time() - start:.0f} s "
          f"(slowest: {slowest})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
