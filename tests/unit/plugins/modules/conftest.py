# -*- coding: utf-8 -*-
# Copyright (c) 2026 hpc.stateless developers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Runs a module's real main() the way Ansible does: its arguments in ``basic._ANSIBLE_ARGS``,
its SystemExit caught and the JSON it printed parsed. Each test file names its module as ``MODULE``."""

from __future__ import annotations

import json
from typing import Callable

import pytest
from ansible.module_utils import basic


@pytest.fixture
def run_module(request, monkeypatch, capsys) -> Callable[..., tuple[dict, int]]:
    """Run the test file's ``MODULE.main()`` with ``args``; return (result, exit code)."""
    main = request.module.MODULE.main

    def run(args: dict, check_mode: bool = False) -> tuple[dict, int]:
        payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check_mode}}
        monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps(payload).encode())
        with pytest.raises(SystemExit) as exc:
            main()
        return json.loads(capsys.readouterr().out), exc.value.code

    return run
