"""Runs the commands of README.md and docs/*.md as written.

A fenced block whose info string is `sh` is a list of commands a reader
types; a block `python FILE` is a file the reader saves as FILE first; a
block `python` alone is a program the reader runs (`python fragment`: a
piece of a program, not run).
The blocks of one document run in order, in one fresh directory of their
own, with bash -e (every command must succeed), `python3` being the
Python that runs this script (the one with PyTorch), and the built tools
on PATH. Plain fences are synopses with placeholders and are not run;
an `sh` block right after an HTML comment `<!-- placeholders: COMMANDS -->`
is a synopsis whose placeholders the comment makes (with
doc_placeholders.py, as $DOC_PLACEHOLDERS): the comment's commands run
first, then the block as written.

    doc_commands.py REPO_ROOT WORK_DIR
"""
import os
import re
import subprocess
import sys
import time

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.M | re.S)
PLACEHOLDERS = re.compile(r"<!--\s*placeholders:((?:(?!<!--).)*?)-->\s*\Z",
                          re.S)


def blocks(path):
    """(kind, argument, text) of the runnable blocks of one document."""
    out = []
    text = open(path).read()
    for m in FENCE.finditer(text):
        info = m.group(1).split()
        made = PLACEHOLDERS.search(text, max(0, m.start() - 2000), m.start())
        if info[:1] == ["sh"] and made:
            out.append(("sh", made.group(1).strip(), m.group(2)))
        elif info[:1] == ["sh"]:
            out.append(("sh", None, m.group(2)))
        elif info[:1] == ["python"] and len(info) == 2 and \
                info[1] != "fragment":
            out.append(("file", info[1], m.group(2)))
        elif info == ["python"]:
            out.append(("python", None, m.group(2)))
    return out


def run_document(path, work, env):
    """Returns the failures of one document's blocks."""
    name = os.path.basename(path)
    found = blocks(path)
    if not any(kind in ("sh", "python") for kind, _, _ in found):
        return [], 0
    os.makedirs(work)
    failures = []
    commands = 0
    for kind, arg, text in found:
        if kind == "file":
            with open(os.path.join(work, arg), "w") as f:
                f.write(text)
            continue
        commands += 1
        start = time.time()
        setup = arg + "\n" if kind == "sh" and arg else ""
        command = ["bash", "-euo", "pipefail", "-c", setup + text] \
            if kind == "sh" else ["python3", "-c", text]
        proc = subprocess.run(command,
                              cwd=work, env=env, capture_output=True,
                              text=True, errors="replace", timeout=600)
        first = text.strip().splitlines()[0]
        if proc.returncode != 0:
            failures.append(f"{name}: `{first}` ...: exit {proc.returncode}\n"
                            + proc.stdout[-2000:] + proc.stderr[-3000:])
        else:
            made = " (placeholders made first)" if setup else ""
            print(f"{name}: ran {len(text.strip().splitlines())} line(s) "
                  f"from `{first}`{made} in {time.time() - start:.0f} s")
            if "error:" in proc.stderr:
                failures.append(f"{name}: `{first}` printed an error:\n"
                                + proc.stderr[-2000:])
    return failures, commands


def main():
    root, work = sys.argv[1:3]
    shims = os.path.join(work, "bin")
    os.makedirs(shims)
    os.symlink(sys.executable, os.path.join(shims, "python3"))
    env = dict(os.environ)
    env["PATH"] = shims + os.pathsep + env["PATH"]
    # The commands use mpirun as a reader does; these runs are as root.
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    env["DOC_PLACEHOLDERS"] = os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "doc_placeholders.py")
    docs = [os.path.join(root, "README.md")] + sorted(
        os.path.join(root, "docs", f)
        for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
    failures, documents = [], 0
    for path in docs:
        stem = os.path.splitext(os.path.basename(path))[0]
        f, n = run_document(path, os.path.join(work, stem), env)
        failures += f
        documents += n > 0
    for f in failures:
        print("FAIL:", f)
    print(f"{documents} documents run, {len(failures)} failed")
    return 1 if failures or documents == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
