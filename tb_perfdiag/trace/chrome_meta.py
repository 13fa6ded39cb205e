"""What both Kineto scanners (``kineto.scan_python`` and the C one behind
``native_scan.scan_kineto``) share about a Chrome-trace file's metadata: the "M"
events that name processes and threads, and the top-level keys kept verbatim.

Its own module so that neither scanner imports the other.
"""
from __future__ import annotations

# "INFO" and "WARNING": libkineto's log lines of the capture, where it says what it lost
# (``losses.kineto_losses``); the reader keeps only that of them
METADATA_KEYS = ("deviceProperties", "distributedInfo", "baseTimeNanoseconds",
                 "schemaVersion", "displayTimeUnit", "INFO", "WARNING")


def metadata_event(e: dict, process_name: dict, process_label: dict,
                   thread_name: dict) -> None:
    """Record one "M" event's process/thread naming."""
    a = e.get("args") or {}
    nm = e.get("name")
    if not isinstance(a, dict):
        return
    if nm == "process_name":
        process_name[e.get("pid")] = str(a.get("name", ""))
    elif nm == "process_labels":
        process_label[e.get("pid")] = str(a.get("labels", ""))
    elif nm == "thread_name":
        thread_name[(e.get("pid"), e.get("tid"))] = str(a.get("name", ""))
