"""Stand-in for the get-pip bootstrap script that ``ansible-test --venv`` downloads.

ansible-test fetches get-pip.py from ci-files.testing.ansible.com, which this build host
cannot reach. setup.sh puts this file where ansible-test caches that download. It takes the
same arguments (pip install options and requirement specifiers, plus get-pip's own
--no-setuptools/--no-wheel) and gets pip from the Python standard library's ensurepip,
then installs the requested pip from the package index the host can reach.
"""

import subprocess
import sys

GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}


def main() -> None:
    args = [arg for arg in sys.argv[1:] if arg not in GET_PIP_ONLY]
    subprocess.run([sys.executable, "-m", "ensurepip", "--upgrade"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *args], check=True)


if __name__ == "__main__":
    main()
