"""The layer DAG: validation of hpc_stateless_layers / hpc_stateless_images and graph queries.

Every invalid input must raise LayerSpecError whose ``path`` is the dotted key at fault.
"""

from __future__ import annotations

import pickle

import pytest

from ansible_collections.hpc.stateless.plugins.module_utils._layers.graph import (
    IMAGES_VAR,
    LAYERS_VAR,
    LayerGraph,
    LayerSpecError,
    bootstrap_tool,
)


def root(distro="debian", release="12", **extra):
    """A bootstrap (root) layer spec."""
    return {"bootstrap": {"distro": distro, "release": release}, **extra}


def child(parent, **extra):
    """A layer built on ``parent``."""
    return {"parent": parent, **extra}


# Two trees: deb -> {compute -> {gpu, mpi}, login}; alma -> storage.
# Names are chosen so that alphabetical order and build order differ.
FOREST = {
    "gpu": child("compute"),
    "storage": child("alma"),
    "login": child("deb"),
    "compute": child("deb", roles=["slurm"]),
    "mpi": child("compute"),
    "deb": root(),
    "alma": root("almalinux", "9"),
}


@pytest.fixture
def forest() -> LayerGraph:
    return LayerGraph.from_spec(FOREST)


def spec_error(layers, images=None, **kwargs) -> LayerSpecError:
    with pytest.raises(LayerSpecError) as info:
        LayerGraph.from_spec(layers, images, **kwargs)
    return info.value


# --------------------------------------------------------------------------- valid graphs


def test_order_puts_parents_first_and_breaks_ties_by_name(forest):
    """Build order is a topological order; among ready layers the smallest name comes first."""
    assert forest.order() == ["alma", "deb", "compute", "gpu", "login", "mpi", "storage"]


def test_order_is_topological_for_every_edge(forest):
    """Every layer appears after its parent."""
    position = {name: i for i, name in enumerate(forest.order())}
    for name in forest.names:
        parent = forest.parent(name)
        if parent is not None:
            assert position[parent] < position[name]


def test_levels_group_layers_by_depth(forest):
    """levels(): roots, then their children, then grandchildren, each sorted by name."""
    assert forest.levels() == [["alma", "deb"], ["compute", "login", "storage"], ["gpu", "mpi"]]


def test_single_layer_graph():
    """One bootstrap layer is a root and a leaf at level 0."""
    graph = LayerGraph.from_spec({"only": root()})
    assert graph.order() == ["only"]
    assert graph.levels() == [["only"]]
    assert graph.roots() == graph.leaves() == ["only"]
    assert graph.ancestors("only") == graph.descendants("only") == []


def test_empty_layers_give_an_empty_graph():
    """No layers: no order, no levels, no images."""
    graph = LayerGraph.from_spec({})
    assert len(graph) == 0
    assert graph.order() == [] and graph.levels() == [] and graph.images == {}


def test_structure_queries(forest):
    """parent/children/ancestors/descendants/roots/leaves answer from the parent links."""
    assert forest.names == sorted(FOREST)
    assert len(forest) == 7
    assert "gpu" in forest and "nope" not in forest
    assert forest.parent("deb") is None
    assert forest.parent("gpu") == "compute"
    assert forest.children("deb") == ["compute", "login"]
    assert forest.children("gpu") == []
    assert forest.ancestors("gpu") == ["deb", "compute"]
    assert forest.ancestors("deb") == []
    assert forest.descendants("deb") == ["compute", "gpu", "login", "mpi"]
    assert forest.descendants("alma") == ["storage"]
    assert forest.roots() == ["alma", "deb"]
    assert forest.leaves() == ["gpu", "login", "mpi", "storage"]


def test_descendants_follow_build_order():
    """descendants() lists a deeper chain parents-first even when names sort the other way."""
    graph = LayerGraph.from_spec({"z": root(), "y": child("z"), "x": child("y"), "w": child("x")})
    assert graph.descendants("z") == ["y", "x", "w"]
    assert graph.ancestors("w") == ["z", "y", "x"]
    assert graph.levels() == [["z"], ["y"], ["x"], ["w"]]


@pytest.mark.parametrize("query", ["parent", "children", "ancestors", "descendants", "spec"])
def test_queries_on_unknown_layer_raise_key_error_naming_known_layers(forest, query):
    """Asking about a layer that does not exist is a KeyError listing the known layers."""
    with pytest.raises(KeyError, match="unknown layer 'nope'.*alma, compute"):
        getattr(forest, query)("nope")


def test_spec_is_canonical():
    """spec(): all keys present, roles as plain strings in order, bootstrap list defaults."""
    graph = LayerGraph.from_spec({
        "base": root(release="bookworm", description="Base", groups=["all_nodes"]),
        "app": child("base", roles=["b", {"role": "a"}, {"name": "ns.coll.c"}], vars={"x": 1}),
    }, host_arch="amd64")
    assert graph.spec("app") == {
        "parent": "base",
        "bootstrap": None,
        "arch": "amd64",
        "roles": ["b", "a", "ns.coll.c"],
        "vars": {"x": 1},
        "groups": [],
        "description": "",
    }
    base = graph.spec("base")
    assert base["parent"] is None
    assert base["bootstrap"] == {
        "distro": "debian", "release": "bookworm", "packages": [], "components": [], "extra_args": [],
        "updates": True, "security": True, "arch": "amd64",
    }
    assert base["groups"] == ["all_nodes"] and base["description"] == "Base"


def test_a_debian_root_with_python3_gets_the_apt_binding():
    """A Debian-family root that lists python3 gets python3-apt after its packages (once); one without python3,
    and dnf and zypper roots, keep their list as written."""
    def packages(distro, listed):
        graph = LayerGraph.from_spec({"r": {"bootstrap": {"distro": distro, "release": "12", "packages": listed}}})
        return graph.spec("r")["bootstrap"]["packages"]
    assert packages("debian", ["systemd", "python3"]) == ["systemd", "python3", "python3-apt"]
    assert packages("ubuntu", ["python3"]) == ["python3", "python3-apt"]
    assert packages("debian", ["python3-apt", "python3"]) == ["python3-apt", "python3"]
    assert packages("debian", ["systemd"]) == ["systemd"]
    assert packages("debian", []) == []
    assert packages("rocky", ["python3"]) == ["python3"]
    assert packages("opensuse-leap", ["python3"]) == ["python3"]


def test_bootstrap_options_are_normalised():
    """Optional bootstrap keys keep their values; extra_args as a string is shell-split."""
    graph = LayerGraph.from_spec({"r": {"arch": "arm64", "bootstrap": {
        "distro": "rocky", "release": "9", "packages": ["vim"],
        "gpg_check": False, "extra_args": "--setopt 'install_weak_deps=False' -q",
    }}})
    boot = graph.spec("r")["bootstrap"]
    assert boot["packages"] == ["vim"]
    assert boot["arch"] == "arm64"  # the layer's (dnf gets rpm's name for it: _build/bootstrap.py)
    assert boot["gpg_check"] is False
    assert boot["extra_args"] == ["--setopt", "install_weak_deps=False", "-q"]


def test_bootstrap_tool_must_fit_the_distro():
    """bootstrap.tool picks mmdebstrap (the default) or debootstrap for Debian; a tool of another family is named."""
    graph = LayerGraph.from_spec({"r": {"bootstrap": {"distro": "debian", "release": "bookworm",
                                                      "tool": "debootstrap"}}})
    assert graph.spec("r")["bootstrap"]["tool"] == "debootstrap"
    with pytest.raises(LayerSpecError) as err:
        LayerGraph.from_spec({"r": {"bootstrap": {"distro": "rocky", "release": "9", "tool": "mmdebstrap"}}})
    assert err.value.path == "hpc_stateless_layers.r.bootstrap.tool"
    assert err.value.problem == "'mmdebstrap' cannot bootstrap rocky (allowed: dnf)"


def test_spec_and_images_are_copies():
    """Mutating returned specs/images does not change the graph."""
    graph = LayerGraph.from_spec({"r": root(vars={"x": [1]})}, {"img": {"layer": "r"}})
    spec = graph.spec("r")
    spec["vars"]["x"].append(2)
    spec["roles"].append("evil")
    graph.images["img"]["formats"].append("squashfs")
    assert graph.spec("r")["vars"] == {"x": [1]}
    assert graph.spec("r")["roles"] == []
    assert graph.images["img"]["formats"] == ["cpio.zst"]


def test_input_is_not_mutated():
    """from_spec leaves the caller's data untouched."""
    layers = {"r": root(vars={"x": {"y": 1}}), "c": child("r", roles=[{"role": "a"}])}
    images = {"img": {"layer": "c", "formats": "squashfs", "kernel_args": ["quiet"]}}
    before = pickle.dumps((layers, images))
    LayerGraph.from_spec(layers, images)
    assert pickle.dumps((layers, images)) == before


def test_images_are_normalised(forest):
    """Images: default format, a string format becomes a list, duplicates drop,
    kernel_args list joins with spaces, extra keys survive."""
    graph = LayerGraph.from_spec(FOREST, {
        "compute-img": {"layer": "compute"},
        "gpu-img": {"layer": "gpu", "formats": "squashfs", "kernel_args": ["quiet", "rd.shell=0"]},
        "login-img": {"layer": "login", "formats": ["cpio.gz", "squashfs", "cpio.gz"],
                      "kernel_args": "console=ttyS0", "owner": "ops"},
    }, host_arch="amd64")
    images = graph.images
    assert images["compute-img"] == {"layer": "compute", "formats": ["cpio.zst"], "kernel_args": "", "arch": "amd64"}
    assert images["gpu-img"]["formats"] == ["squashfs"]
    assert images["gpu-img"]["kernel_args"] == "quiet rd.shell=0"
    assert images["login-img"] == {
        "layer": "login", "formats": ["cpio.gz", "squashfs"], "kernel_args": "console=ttyS0", "owner": "ops",
        "arch": "amd64",
    }
    assert graph.image_layer("gpu-img") == "gpu"
    with pytest.raises(KeyError, match="unknown image 'nope'.*compute-img"):
        graph.image_layer("nope")


def test_role_exists_is_asked_about_every_role():
    """role_exists is called with each listed role name (plain names, also from mappings)."""
    asked = []

    def exists(name):
        asked.append(name)
        return True

    LayerGraph.from_spec({"r": root(roles=["a", {"role": "b"}]), "c": child("r", roles=["c"])},
                         role_exists=exists)
    assert sorted(asked) == ["a", "b", "c"]


@pytest.mark.parametrize(("distro", "tool"), [
    ("debian", "debootstrap"), ("ubuntu", "debootstrap"), ("rocky", "dnf"),
    ("almalinux", "dnf"), ("fedora", "dnf"), ("sles", "zypper"), ("opensuse-leap", "zypper"),
])
def test_bootstrap_tool(distro, tool):
    """Each supported distro maps to its bootstrap tool family."""
    assert bootstrap_tool(distro) == tool


def test_bootstrap_tool_unknown_distro():
    """An unknown distro is a LayerSpecError listing the supported ones."""
    with pytest.raises(LayerSpecError) as info:
        bootstrap_tool("gentoo")
    assert info.value.path == "distro"
    assert "'gentoo'" in str(info.value) and "debian" in str(info.value)


# --------------------------------------------------------------------------- LayerSpecError


def test_layer_spec_error_carries_path_and_problem():
    """str() is 'path: problem'; attributes are kept; it is a ValueError and pickles."""
    err = LayerSpecError("a.b", "is wrong")
    assert str(err) == "a.b: is wrong"
    assert (err.path, err.problem) == ("a.b", "is wrong")
    assert isinstance(err, ValueError)
    copy = pickle.loads(pickle.dumps(err))
    assert copy.__class__ is LayerSpecError and str(copy) == "a.b: is wrong"
    assert str(LayerSpecError("", "bare")) == "bare"


# --------------------------------------------------------------------------- invalid layers

L = LAYERS_VAR


def test_unknown_parent_names_the_parent_key():
    """A parent that is not a layer: path is <layer>.parent, message lists known layers."""
    err = spec_error({"base": root(), "app": child("bsae")})
    assert err.path == f"{L}.app.parent"
    assert "unknown parent layer 'bsae'" in err.problem
    assert "app, base" in err.problem


def test_cycle_names_every_member():
    """A parent cycle is reported with all its members (following parent links), from the smallest name."""
    err = spec_error({"base": root(), "c": child("a"), "a": child("b"), "b": child("c"), "x": child("base")})
    assert err.path == L
    assert "cycle between layers a -> b -> c -> a" in err.problem
    assert "base" not in err.problem and "x" not in err.problem


def test_cycle_reached_from_a_tail_names_only_the_cycle():
    """A layer hanging off a cycle is not reported as part of it."""
    err = spec_error({"a": child("b"), "b": child("c"), "c": child("b")})
    assert "b -> c -> b" in err.problem
    assert "a ->" not in err.problem


def test_self_parent_is_a_cycle():
    """A layer that is its own parent is a cycle of one."""
    err = spec_error({"a": child("a")})
    assert "cycle between layers a -> a" in str(err)


def test_parent_and_bootstrap_together():
    """A layer with both parent and bootstrap is rejected at the layer's path."""
    err = spec_error({"base": root(), "app": {**root(), "parent": "base"}})
    assert err.path == f"{L}.app"
    assert "both 'parent' and 'bootstrap'" in err.problem


@pytest.mark.parametrize("spec", [{}, {"roles": ["a"]}, {"parent": None, "bootstrap": None}])
def test_neither_parent_nor_bootstrap(spec):
    """A layer with neither parent nor bootstrap is rejected at the layer's path."""
    err = spec_error({"app": spec})
    assert err.path == f"{L}.app"
    assert "neither 'parent' nor 'bootstrap'" in err.problem


def test_unknown_distro():
    """An unsupported distro is reported at bootstrap.distro with the supported list."""
    err = spec_error({"base": root(distro="gentoo")})
    assert err.path == f"{L}.base.bootstrap.distro"
    assert "unsupported distro 'gentoo'" in err.problem
    assert "almalinux" in err.problem and "ubuntu" in err.problem


def test_role_that_does_not_exist():
    """role_exists=False: path is roles[i] and the search hint is quoted."""
    err = spec_error(
        {"base": root(roles=["common", "mising"])},
        role_exists=lambda name: name == "common",
        role_search_hint="/etc/ansible/roles, ./roles",
    )
    assert err.path == f"{L}.base.roles[1]"
    assert "role 'mising' not found" in err.problem
    assert "/etc/ansible/roles, ./roles" in err.problem


def test_roles_are_not_checked_without_callback():
    """Without role_exists, any role name is accepted."""
    graph = LayerGraph.from_spec({"base": root(roles=["anything"])})
    assert graph.spec("base")["roles"] == ["anything"]


@pytest.mark.parametrize(("layer", "path", "fragment"), [
    ({**root(), "parnet": "x"}, "base.parnet", "did you mean 'parent'?"),
    ({**root(), "role": ["x"]}, "base.role", "did you mean 'roles'?"),
    ({**root(), "descripton": "x"}, "base.descripton", "did you mean 'description'?"),
    ({"bootstrap": {"distro": "debian", "relase": "12"}}, "base.bootstrap.relase", "did you mean 'release'?"),
    ({"bootstrap": {"distro": "debian", "release": "12", "pakages": []}}, "base.bootstrap.pakages",
     "did you mean 'packages'?"),
    (root(roles=[{"rol": "x"}]), "base.roles[0].rol", "did you mean 'role'?"),
])
def test_unknown_keys_suggest_the_close_one(layer, path, fragment):
    """A misspelt key is reported at its own path with a did-you-mean hint."""
    err = spec_error({"base": layer})
    assert err.path == f"{L}.{path}"
    assert "unknown key" in err.problem and fragment in err.problem


def test_unknown_key_without_close_match_lists_allowed_keys():
    """A key resembling nothing gets no suggestion but the allowed keys."""
    err = spec_error({"base": {**root(), "zzzzzz": 1}})
    assert err.path == f"{L}.base.zzzzzz"
    assert "did you mean" not in err.problem
    assert "bootstrap, description, groups, parent, roles, sources, vars" in err.problem


@pytest.mark.parametrize(("release", "hint"), [(12, "quote it: '12'"), (22.04, "quote it: '22.04'")])
def test_numeric_release_hints_to_quote(release, hint):
    """YAML reads `release: 12` as a number; the error says to quote it."""
    err = spec_error({"base": root(release=release)})
    assert err.path == f"{L}.base.bootstrap.release"
    assert "expected a string" in err.problem and hint in err.problem


@pytest.mark.parametrize(("bootstrap", "path", "fragment"), [
    ({"distro": "debian"}, "bootstrap.release", "is required"),
    ({"release": "12"}, "bootstrap.distro", "is required"),
    ({"distro": "debian", "release": ""}, "bootstrap.release", "is required"),
    ({"distro": "debian", "release": "12", "packages": "vim"}, "bootstrap.packages", "expected a list, got string"),
    ({"distro": "debian", "release": "12", "packages": ["vim", 3]}, "bootstrap.packages[1]",
     "expected a string, got int"),
    ({"distro": "debian", "release": "12", "gpg_check": "yes"}, "bootstrap.gpg_check", "expected a bool"),
    ({"distro": "debian", "release": "12", "mirror": ["a"]}, "bootstrap.mirror", "expected a string, got list"),
    ({"distro": "debian", "release": "12", "extra_args": "--opt 'unclosed"}, "bootstrap.extra_args",
     "cannot split"),
    ([{"distro": "debian", "release": "12"}], "bootstrap", "a layer bootstraps exactly one distro"),
    ("debian", "bootstrap", "expected a mapping, got string"),
])
def test_bad_bootstrap(bootstrap, path, fragment):
    """Bad bootstrap values are reported at the key at fault."""
    err = spec_error({"base": {"bootstrap": bootstrap}})
    assert err.path == f"{L}.base.{path}"
    assert fragment in err.problem


@pytest.mark.parametrize(("layer", "path", "fragment"), [
    ("not a mapping", "base", "expected a mapping, got string"),
    (root(roles="common"), "base.roles", "expected a list, got string"),
    (root(roles=["a", "a"]), "base.roles[1]", "listed twice"),
    (root(roles=["a", {"role": "a"}]), "base.roles[1]", "listed twice"),
    (root(roles=[{"role": "a", "name": "b"}]), "base.roles[0]", "exactly one of 'role' or 'name'"),
    (root(roles=[{}]), "base.roles[0]", "exactly one of 'role' or 'name'"),
    (root(roles=["  "]), "base.roles[0]", "empty role name"),
    (root(roles=[7]), "base.roles[0]", "expected a string, got int"),
    (root(vars=["x"]), "base.vars", "expected a mapping, got list"),
    (root(vars={1: "x"}), "base.vars", "expected a string, got int"),
    (root(groups="compute"), "base.groups", "expected a list"),
    (root(description=["x"]), "base.description", "expected a string"),
    (child(5), "base.parent", "expected a string, got int"),
])
def test_bad_layer_values(layer, path, fragment):
    """Bad layer values are reported at the key at fault."""
    err = spec_error({"base": layer})
    assert err.path == f"{L}.{path}"
    assert fragment in err.problem


def test_layers_must_be_a_mapping():
    """hpc_stateless_layers itself must be a mapping."""
    err = spec_error([{"base": root()}])
    assert err.path == L and "expected a mapping, got list" in err.problem


@pytest.mark.parametrize("name", ["Compute", "-base", "a b", "gpu/1", "", "é", "compute\n", "base\nx"])
def test_invalid_layer_names(name):
    """Layer names must be lower-case host/image-safe names; the error is at the name."""
    err = spec_error({name: root()})
    assert err.path == f"{L}.{name}"
    assert "invalid layer name" in err.problem


def test_non_string_layer_name():
    """A numeric layer name (unquoted YAML key) is invalid, not a crash."""
    err = spec_error({1: root()})
    assert err.path == f"{L}.1" and "invalid layer name 1" in err.problem


@pytest.mark.parametrize("name", ["base", "base-2", "base_2", "v1.2", "0day"])
def test_valid_layer_names(name):
    """Lower-case letters, digits, '-', '_' and '.' are accepted."""
    assert LayerGraph.from_spec({name: root()}).names == [name]


# --------------------------------------------------------------------------- invalid images

I = IMAGES_VAR


@pytest.mark.parametrize(("images", "path", "fragment"), [
    ({"img": {"layer": "nope"}}, "img.layer", "unknown layer 'nope' (known layers: app, base)"),
    ({"img": {}}, "img.layer", "is required"),
    ({"img": {"layer": 3}}, "img.layer", "expected a string"),
    ({"img": {"layer": "app", "formats": ["cpio.zst", "tar"]}}, "img.formats[1]", "unknown format 'tar'"),
    ({"img": {"layer": "app", "formats": "zip"}}, "img.formats[0]", "unknown format 'zip'"),
    ({"img": {"layer": "app", "formats": {"a": 1}}}, "img.formats", "expected a list"),
    ({"img": {"layer": "app", "kernel_args": ["quiet", 1]}}, "img.kernel_args[1]", "expected a string"),
    ({"img": "app"}, "img", "expected a mapping"),
    ({"Img": {"layer": "app"}}, "Img", "invalid image name"),
])
def test_bad_images(images, path, fragment):
    """Bad image entries are reported at the key at fault."""
    err = spec_error({"base": root(), "app": child("base")}, images)
    assert err.path == f"{I}.{path}"
    assert fragment in err.problem


def test_images_must_be_a_mapping():
    """hpc_stateless_images itself must be a mapping."""
    err = spec_error({"base": root()}, ["base"])
    assert err.path == I


# -- architectures ------------------------------------------------------------------------------


def test_a_root_without_arch_is_the_build_hosts_and_its_children_inherit_it():
    graph = LayerGraph.from_spec(FOREST, {"c": {"layer": "gpu"}}, host_arch="arm64")
    assert graph.names == sorted(FOREST)
    assert {graph.arch(name) for name in graph.names} == {"arm64"}
    assert graph.spec("deb")["bootstrap"]["arch"] == "arm64"
    assert graph.image_arch("c") == "arm64" and graph.images["c"]["arch"] == "arm64"
    assert graph.arches() == ["arm64"]


def test_a_tree_of_two_architectures_is_one_layer_and_image_per_architecture():
    """The first architecture keeps the names as written, the other is <name>-<arch>, parents follow."""
    layers = {"base": root(arch=["amd64", "arm64"]), "hpc": child("base"), "grace": child("hpc", arch="arm64")}
    images = {"hpc": {"layer": "hpc"}, "grace": {"layer": "grace"}, "login": {"layer": "hpc", "arch": "amd64"}}
    graph = LayerGraph.from_spec(layers, images, host_arch="amd64")
    assert graph.names == ["base", "base-arm64", "grace", "hpc", "hpc-arm64"]
    assert [graph.arch(n) for n in graph.names] == ["amd64", "arm64", "arm64", "amd64", "arm64"]
    assert graph.parent("hpc-arm64") == "base-arm64" and graph.parent("hpc") == "base"
    assert graph.parent("grace") == "hpc-arm64"
    assert graph.spec("base-arm64")["bootstrap"]["arch"] == "arm64"
    assert graph.origin("hpc-arm64") == ("hpc", "arm64")
    assert graph.variants("hpc") == {"amd64": "hpc", "arm64": "hpc-arm64"}
    assert sorted(graph.images) == ["grace", "hpc", "hpc-arm64", "login"]
    assert graph.images["hpc-arm64"]["layer"] == "hpc-arm64" and graph.image_arch("hpc-arm64") == "arm64"
    assert graph.images["grace"]["layer"] == "grace" and graph.image_arch("grace") == "arm64"
    assert graph.image_variants("hpc") == {"amd64": "hpc", "arm64": "hpc-arm64"}
    assert graph.image_origin("login") == ("login", "amd64")


def test_a_child_naming_another_architecture_than_its_parent_is_refused_with_both_named():
    layers = {"base": root(arch="amd64"), "grace": child("base", arch="arm64")}
    with pytest.raises(LayerSpecError) as err:
        LayerGraph.from_spec(layers)
    assert err.value.path == f"{LAYERS_VAR}.grace.arch"
    assert "layer grace names arm64, but its parent layer base is amd64" in str(err.value)


def test_an_image_naming_an_architecture_its_layer_lacks_is_refused_with_both_named():
    with pytest.raises(LayerSpecError) as err:
        LayerGraph.from_spec({"base": root(arch="amd64")}, {"c": {"layer": "base", "arch": ["arm64"]}})
    assert err.value.path == f"{IMAGES_VAR}.c.arch"
    assert "image c names arm64, but its layer base is amd64" in str(err.value)


def test_bootstrap_arch_is_refused_and_says_where_it_goes():
    with pytest.raises(LayerSpecError) as err:
        LayerGraph.from_spec({"base": {"bootstrap": {"distro": "debian", "release": "12", "arch": "arm64"}}})
    assert err.value.path == f"{LAYERS_VAR}.base.bootstrap.arch"
    assert f"move it to {LAYERS_VAR}.base.arch (`arch: arm64`)" in str(err.value)


@pytest.mark.parametrize(("arch", "path", "problem"), [
    ("aarch64", "base.arch", "unknown architecture 'aarch64'"),
    (["amd64", "amd64"], "base.arch[1]", "listed twice"),
    ([], "base.arch", "is empty"),
    (64, "base.arch", "expected a list, got int"),
])
def test_a_bad_arch_is_named(arch, path, problem):
    with pytest.raises(LayerSpecError) as err:
        LayerGraph.from_spec({"base": root(arch=arch)})
    assert err.value.path == f"{LAYERS_VAR}.{path}"
    assert problem in str(err.value)


def test_an_expanded_name_that_the_inventory_uses_already_is_refused():
    layers = {"base": root(arch=["amd64", "arm64"]), "base-arm64": root()}
    with pytest.raises(LayerSpecError) as err:
        LayerGraph.from_spec(layers, host_arch="amd64")
    assert err.value.path == f"{LAYERS_VAR}.base.arch"
    assert "the arm64 layer of base is named base-arm64, which is a layer" in str(err.value)
