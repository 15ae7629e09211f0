"""/etc/image-release: what pack writes, what every reader (image_diff, the playbooks' filter) gets back, and
what a shell that sources the file assigns."""

from __future__ import annotations

import subprocess

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._contract.release import (
    RELEASE_KEYS,
    image_release,
    parse_image_release,
    shell_value,
)

KEY = "f" * 64


def test_image_release_lines():
    text = image_release("compute", "v1.2-3-gabc", "slurm", KEY, 1_700_000_000, {"SITE": "lab"})
    assert text.decode() == ("IMAGE=compute\nVERSION=v1.2-3-gabc\nLAYER=slurm\nLAYER_KEY=" + KEY
                             + "\nBUILD_TIME=2023-11-14T22:13:20Z\nSITE=lab\n")


@pytest.mark.parametrize("extra", [{"VERSION": "x"}, {"lower": "x"}, {"OK": "two\nlines"}, {"OK": "cr\rline"},
                                   {"A B": "x"}, {"_X": "x"}])
def test_image_release_refuses_bad_extra_keys(extra):
    with pytest.raises(ValueError, match="release_extra"):
        image_release("i", "v", "l", "k", 0, extra)


def test_the_key_list_is_what_the_writer_writes_first():
    text = image_release("i", "v", "l", "k", 0, {"A": "1", "Z": "2"}).decode()
    assert [line.split("=", 1)[0] for line in text.splitlines()] == [*RELEASE_KEYS, "A", "Z"]


@pytest.mark.parametrize("value", ["compute", "1.0~rc1", "v1.2-3-gabc+dirty", "2023-11-14T22:13:20Z", KEY, "a=b",
                                   "/srv/x,y@z%", ""])
def test_plain_values_are_written_bare(value):
    """Every name, version, key and time pack writes needs no quoting: the bytes of older packs stay the same."""
    assert shell_value(value) == value


@pytest.mark.parametrize("value", ["Lab 2", "it's", "$HOME", "`id`", "a;b", 'say "hi"', "back\\slash", "~root",
                                   "PATH:~/bin", "  padded  ", "#hash", "tab\there", "Zürich", "'", "a'b'c"])
def test_round_trip_through_the_reader(value):
    release = parse_image_release(image_release("i", "v", "l", "k", 0, {"SITE": value}))
    assert release["SITE"] == value
    assert list(release) == [*RELEASE_KEYS, "SITE"]


@pytest.mark.parametrize("value", ["Lab 2", "it's", "$HOME", "`id`", "a;b", 'say "hi"', "back\\slash", "~root",
                                   "PATH:~/bin", "  padded  ", "#hash", "Zürich", "1.0~rc1", ""])
def test_a_shell_that_sources_the_file_assigns_the_same_values(tmp_path, value):
    """The rolling update sources the file on a node (``. /etc/image-release``)."""
    path = tmp_path / "image-release"
    path.write_bytes(image_release("compute", "v1", "slurm", KEY, 0, {"SITE": value}))
    shell = subprocess.run(["sh", "-c", '. "$1" && printf "%s\\n%s\\n%s" "$IMAGE" "$BUILD_TIME" "$SITE"', "sh", str(path)],
                           capture_output=True, text=True, check=True, env={"HOME": "/nonexistent", "PATH": "/usr/bin:/bin"})
    assert shell.stdout.split("\n", 2) == ["compute", "1970-01-01T00:00:00Z", value]
    assert parse_image_release(path.read_text())["SITE"] == value


def test_reader_edge_cases_of_the_old_rules():
    """image_diff's old reader, the rolling update's and verify's Jinja: one rule for all of them."""
    text = ("# written by hand\n"
            "\n"
            "IMAGE=c\r\n"                   # CRLF line ends
            "VERSION=1=2\n"                 # only the first "=" separates
            "bad line\n"                    # no assignment: ignored (all three old rules)
            "# COMMENT=not a key\n"         # a comment is no key (verify's rule read '# COMMENT' as one)
            "LAYER = slurm\n"               # not an assignment in a shell either
            "  LAYER_KEY=abc  \n"           # indented, trailing blanks dropped
            "SITE=Lab 2\n"                  # older packs wrote extra values bare
            "QUOTED=\"a b\"\n"
            "HALF='open\n"                  # an unbalanced quote is kept as written
            "EMPTY=\n"
            "lower=ok\n"
            "VERSION=3\n")                  # a key given twice keeps its last value, as in a shell
    expected = {"IMAGE": "c", "VERSION": "3", "LAYER_KEY": "abc", "SITE": "Lab 2",
                "QUOTED": "a b", "HALF": "'open", "EMPTY": "", "lower": "ok"}
    assert parse_image_release(text) == expected


def test_reader_takes_bytes_and_nothing():
    assert parse_image_release(b"IMAGE=c\nVERSION=\xff\n") == {"IMAGE": "c", "VERSION": "\ufffd"}
    assert parse_image_release("") == {}
