"""--pod: one XSpace per host (the --large XSpace job, own seed per host) in one capture
folder, some hosts stalling in data loading every step."""
from __future__ import annotations

import json
from pathlib import Path

from large import LargeXSpace
from sim import US


def write_pod(out: Path, hosts: int, events: int, stragglers=(), stall_us=20_000,
              seed: int = 12345) -> dict:
    """A pod run: ``hosts`` XSpace files (one per host, own seed) in one capture folder;
    the ``stragglers`` spend ``stall_us`` more in data loading every step.  Returns the
    ground truth the pod summary must find."""
    folder = out / "plugins" / "profile" / "2026_11_23_10_00_00"
    folder.mkdir(parents=True, exist_ok=True)
    names = [f"host{i:02d}" for i in range(hosts)]
    for i, name in enumerate(names):
        LargeXSpace(seed + i, events, stall_us if i in stragglers else 0,
                    hostname=name).run(folder / f"{name}.xplane.pb")
    truth = {"hosts": names, "stragglers": [names[i] for i in sorted(stragglers)],
             "straggler_cause": "data_loading", "stall_ns_per_step": int(stall_us * US)}
    (out / "POD_TRUTH.json").write_text(json.dumps(truth, indent=1))
    return truth
