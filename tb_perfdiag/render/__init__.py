"""Renderers of a typed ``Diagnosis``: page/CLI JSON, Chrome-trace overlay, terminal
text and pod summary rows.  None of them analyses anything."""
