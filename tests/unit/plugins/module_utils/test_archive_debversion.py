"""Debian version ordering (module_utils/_archive/debversion.py): dpkg's rules, the tricky cases, and a
cross-check of hundreds of random versions against the host's own ``dpkg --compare-versions``."""

from __future__ import annotations

import random
import shutil
import subprocess

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._archive import debversion
from ansible_collections.hpc.stateless.plugins.module_utils._archive.debversion import compare, newest, parse

# (a, b, expected sign of compare(a, b))
CASES = [
    ("1.0", "1.0", 0),
    ("1.0", "1.0-0", 0),  # a missing revision is an empty one, which weighs like "0"
    ("1.01", "1.1", 0),  # digit runs are numbers: leading zeros do not count
    ("0:1.0", "1.0", 0),
    ("1.0~rc1", "1.0", -1),  # ~ sorts before the end of the string
    ("1.0~~", "1.0~", -1),
    ("1.0~~a", "1.0~~", 1),
    ("1.0", "1.0a", -1),  # the end of the string before a letter
    ("1.0a", "1.0+", -1),  # letters before non-letters
    ("1.0+", "1.0.", -1),  # non-letters by character code
    ("1.0.", "1.0~", 1),
    ("1:0.9", "2.0", 1),  # the epoch outranks everything
    ("2:1", "10:0", -1),  # epochs compare as numbers
    ("1.2.10", "1.2.9", 1),
    ("1.2-10", "1.2-9", 1),
    ("1.0-1", "1.0-1.1", -1),
    ("3.0.20-1~deb12u1", "3.0.22-1~deb12u1", -1),
    ("3.0.22-1~deb12u1", "3.0.22-1", -1),  # a backport/stable update sorts before the unstable revision
    ("5.2.15-2+b2", "5.2.15-2+b13", -1),  # binNMUs: b13 is newer than b2
    ("20230311", "20250419~deb12u2", -1),
    ("6.1.176-1", "6.1.192-1", -1),
    ("1.2-3-4", "1.2-3-5", -1),  # upstream may hold '-' when there is a revision: the last '-' splits
    ("1a", "1", 1),
    ("2.30-2", "2.30-2ubuntu1", -1),
    ("1.0-1", "1.0-1~bpo1", 1),
]


@pytest.mark.parametrize("a, b, sign", CASES)
def test_tricky_cases(a, b, sign):
    assert compare(a, b) == sign
    reverse = compare(b, a)  # pylint: disable=arguments-out-of-order
    assert reverse == -sign


def test_parse_splits_epoch_upstream_revision():
    assert parse("2:1.2-3-4") == (2, "1.2-3", "4")
    assert parse("1.0") == (0, "1.0", "")
    assert parse("0:1.0~rc1-0ubuntu1") == (0, "1.0~rc1", "0ubuntu1")


@pytest.mark.parametrize("bad, why", [("", "empty"), ("x:1.0", "epoch 'x' is not a number"), (":1", "epoch '' is not a number"),
                                      ("1:", "no upstream version"), ("1.0-", "empty revision"), ("1 .0", "white space")])
def test_bad_versions_are_refused_naming_them(bad, why):
    with pytest.raises(ValueError) as error:
        compare(bad, "1.0")
    assert why in str(error.value)
    assert repr(bad) in str(error.value)


def test_newest_and_sort_key():
    versions = ["1.0", "1.0~rc1", "1:0.1", "1.0-1", "1.0+b1"]
    assert newest(versions) == "1:0.1"
    assert sorted(versions, key=debversion.sort_key) == ["1.0~rc1", "1.0", "1.0-1", "1.0+b1", "1:0.1"]


def _random_version(rng: random.Random) -> str:
    def run(alphabet: str, size: int) -> str:
        return "".join(rng.choice(alphabet) for _index in range(rng.randint(0, size)))

    upstream = rng.choice("0123456789") + run("0123456789.~+aZz", 6)
    version = upstream
    if rng.random() < 0.6:
        if rng.random() < 0.1:
            version += "-" + run("012a.~", 2) + "0"  # upstream holding a '-'
        version += "-" + run("0123456789.~+bdu", 5) + rng.choice("0123456789ab")
    if rng.random() < 0.15:
        version = f"{rng.choice(['0', '1', '2', '10'])}:{version}"
    return version


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="the cross-check needs the host's dpkg (every Debian host has it)")
def test_order_matches_dpkg_on_hundreds_of_random_versions():
    """Sort 400 random versions with compare(), then ask dpkg about each neighbouring pair (one shell, one
    dpkg call per pair). dpkg's order is a total preorder, so when dpkg agrees on every neighbour (less, or
    equal exactly where compare() says equal) it agrees on all ~80,000 pairs of the list."""
    rng = random.Random(27)
    versions = sorted({_random_version(rng) for _index in range(400)} | {case[0] for case in CASES} | {case[1] for case in CASES},
                      key=debversion.sort_key)
    pairs = list(zip(versions, versions[1:]))
    script = ('while read -r a b; do if dpkg --compare-versions "$a" lt "$b"; then echo lt; '
              'elif dpkg --compare-versions "$a" eq "$b"; then echo eq; else echo gt; fi; done')
    verdicts = subprocess.run(["bash", "-c", script], input="".join(f"{a} {b}\n" for a, b in pairs),
                              capture_output=True, text=True, check=True).stdout.split()
    assert len(verdicts) == len(pairs)
    disagreements = [(a, b, dpkg, compare(a, b)) for (a, b), dpkg in zip(pairs, verdicts)
                     if {"lt": -1, "eq": 0, "gt": 1}[dpkg] != compare(a, b)]
    assert disagreements == []
    assert verdicts.count("lt") > 300  # the list really is spread out, not one equality class
