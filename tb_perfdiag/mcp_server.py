"""The Model Context Protocol face: ``tb-perfdiag mcp LOGDIR`` serves the tools of
``agent_tools`` over stdio with the official SDK (``pip install 'tb-perfdiag[mcp]'``).

Thin, like ``plugin.py``: every tool in ``agent_tools.TOOLS`` is published as it is
declared (name, one-line description, typed parameters), read-only, and answers with
its JSON as one text block within ``max_bytes``; a failure becomes an MCP tool error
(``is_error``) with ``agent_tools.error_text``'s words, and the server keeps answering.
stdout carries the protocol alone: logs go to stderr.
"""
from __future__ import annotations

import functools
import importlib.resources
import logging
import sys

from ._version import __version__

NAME = "tb-perfdiag"
INSTALL_HINT = "the MCP server needs the mcp package: pip install 'tb-perfdiag[mcp]'"


def skill_text() -> str:
    """The guide shipped with the package (SKILL.md): from 'my step is slow' to the fix."""
    return importlib.resources.files("tb_perfdiag").joinpath("SKILL.md").read_text("utf-8")


def _published(method, mcp_error):
    from .agent_tools import error_text
    from .render.json import json_bytes

    """``method`` as the SDK calls it: its signature, its JSON as compact text, and any
    failure as the SDK's tool error (a message for the model, no traceback)."""
    @functools.wraps(method)
    def call(*args, **kwargs):
        try:
            doc = method(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - every failure is the assistant's to read
            raise mcp_error(error_text(e)) from None
        return json_bytes(doc).decode("utf-8")
    return call


def build(logdir: str, service=None):
    """The MCP server over ``logdir`` (an ``MCPServer``, not yet running); ``service``:
    a ``DiagnosisService`` of its own (the plugin's defaults and budgets otherwise)."""
    # imported here: the CLI reads skill_text() for every --help
    from .agent_tools import TOOLS, Tools
    from .cache import DiagnosisCache
    from .discovery import Catalog
    from .service import DiagnosisService
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    service = service or DiagnosisService(Catalog(logdir), DiagnosisCache(version=__version__))
    tools = Tools(service)
    server = MCPServer(NAME, version=__version__, instructions=skill_text(),
                       log_level="WARNING")
    read_only = ToolAnnotations(read_only_hint=True, destructive_hint=False,
                                idempotent_hint=True, open_world_hint=False)
    for spec in TOOLS:
        server.add_tool(_published(getattr(tools, spec.name), ToolError), name=spec.name,
                        description=spec.description, annotations=read_only,
                        structured_output=False)
    return server


def serve(logdir: str) -> None:
    """Serves until the client closes stdin."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    build(logdir).run("stdio")
