# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The archive view: what the configured apt sources offer, read once per run on the controller.

* :mod:`.debversion` - Debian version ordering (dpkg's rules), written here.
* :mod:`.index` - an :class:`~.index.ArchiveView` of the sources' signed Release files and Packages indexes,
  cached by hash, and the pending updates of a set of installed packages against it.

The floor between ``_contract`` (it reads the sources' contract) and ``_layers`` (the plan asks it).
"""
