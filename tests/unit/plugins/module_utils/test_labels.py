"""The container contract: the label names every built layer image already carries, and the labels a layer gets."""

from __future__ import annotations

from ansible_collections.hpc.stateless.plugins.module_utils._contract import labels


def test_the_label_names_are_those_of_the_images_in_storage():
    """Renaming a label would orphan every layer image built before: the names are part of the contract."""
    assert (labels.LAYER_LABEL, labels.KEY_LABEL, labels.PARENT_LABEL, labels.PARENT_KEY_LABEL,
            labels.GIT_COMMIT_LABEL) == ("hpc.stateless.layer", "hpc.stateless.key", "hpc.stateless.parent",
                                         "hpc.stateless.parent-key", "hpc.stateless.git-commit")
    assert all(name.startswith(labels.LABEL_PREFIX) for name in labels.layer_labels("l", "k", None, None, None))


def test_a_root_layer_has_empty_parent_labels_and_extra_labels_are_kept():
    assert labels.layer_labels("base", "k1", None, None, "abc", {"org.example": "x"}) == {
        "hpc.stateless.layer": "base", "hpc.stateless.key": "k1", "hpc.stateless.inputs-key": "k1",
        "hpc.stateless.parent": "",
        "hpc.stateless.parent-key": "", "hpc.stateless.git-commit": "abc", "org.example": "x"}
    assert labels.layer_labels("base", "k1", None, None, "abc", arch="arm64")["hpc.stateless.arch"] == "arm64"
    assert labels.arch_of(labels.layer_labels("base", "k1", None, None, None, arch="arm64")) == "arm64"


def test_the_labels_written_are_the_labels_walked():
    images = {"localhost/p/base:k1": labels.layer_labels("base", "k1", None, None, None)}

    class Reader:
        def image_labels(self, ref: str) -> dict[str, str]:
            return images[ref]

    top = labels.layer_labels("compute", "k2", "base", "k1", None)
    assert labels.layer_keys_of(Reader(), "localhost/p/compute:k2", top) == {"compute": "k2", "base": "k1"}
