"""Try to overwrite the host file argv[1] from inside the build: print what each way got."""
import os
import sys

MARKER = sys.argv[1]


def write(path):
    try:
        with open(path, "w", encoding="ascii") as handle:
            handle.write("escaped\n")
        return "wrote"
    except OSError as exc:
        return f"errno{exc.errno}"


print("proc1root", write("/proc/1/root" + MARKER))
# A second chroot: chroot into a subdirectory while the working directory stays above it, walk up past the
# build's root, and chroot there (the host's / when the build's chroot is the only fence).
try:
    os.makedirs("/tmp/userns-escape", exist_ok=True)
    os.chdir("/")
    os.chroot("/tmp/userns-escape")
    for _ in range(64):
        os.chdir("..")
    os.chroot(".")
    print("chroot", write(MARKER))
except OSError as exc:
    print("chroot", f"errno{exc.errno}")
