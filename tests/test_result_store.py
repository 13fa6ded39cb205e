"""A result store on an S3-compatible server (moto's server mode, started here): a first
TensorBoard summarises a pod (its Dask workers write the results to the bucket), a
second TensorBoard on the same store shows the whole summary and a host's diagnosis
without analysing anything."""
from __future__ import annotations

import os
import shutil

import pytest

from conftest import TensorBoard

moto_server = pytest.importorskip("moto.server", reason="moto[server] is a test dependency")
pytest.importorskip("s3fs", reason="s3fs is a test dependency")


@pytest.fixture(scope="module")
def s3():
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_DEFAULT_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    import s3fs
    fs = s3fs.S3FileSystem(key="test", secret="test",
                           client_kwargs={"endpoint_url": env["AWS_ENDPOINT_URL"]})
    fs.mkdir("perfdiag-results")
    yield env, fs
    server.stop()


def _small_pod(pod_logdir, tmp_path, hosts=8):
    logdir, _ = pod_logdir
    src = next(logdir.rglob("host00.xplane.pb")).parent
    dst = tmp_path / "ld" / "pod" / "plugins" / "profile" / src.name
    dst.mkdir(parents=True)
    for i in range(hosts):
        shutil.copy(src / f"host{i:02d}.xplane.pb", dst)
    return tmp_path / "ld", f"pod/{src.name}"


def test_second_server_on_the_same_s3_store_analyses_nothing(s3, pod_logdir, tmp_path):
    env, fs = s3
    logdir, run = _small_pod(pod_logdir, tmp_path)
    env = {**env, "TB_PERFDIAG_RESULTS": "s3://perfdiag-results/team",
           "TB_PERFDIAG_WORKERS": "2", "TB_PERFDIAG_WORKER_MEMORY_MB": "1024",
           "TB_PERFDIAG_DASK_SCHEDULER": ""}
    first = TensorBoard(logdir, extra_env=env)
    try:
        status, _, one = first.get(f"/data/plugin/perfdiag/hosts?run={run}&wait=1&sort=host",
                                   timeout=180)
        assert status == 200 and one["complete"] and one["analysed"] == 8
        assert all(r["status"] == 200 for r in one["hosts"])
    finally:
        first.stop()
    stored = fs.ls("perfdiag-results/team")
    assert len([p for p in stored if p.endswith(".row")]) == 8
    assert len([p for p in stored if p.endswith(".diag")]) == 8
    second = TensorBoard(logdir, extra_env=env)
    try:
        status, _, two = second.get(f"/data/plugin/perfdiag/hosts?run={run}&sort=host")
        assert status == 200 and two["complete"] and two["from_store"] == 8
        assert two["analysed"] == 0 and not two["engine"]["started"]
        assert [r for r in two["hosts"]] == [r for r in one["hosts"]]
        status, _, d = second.get(f"/data/plugin/perfdiag/diagnosis?run={run}&host=host03")
        assert status == 200 and d["gaps_total"] > 0
        _, _, st = second.get("/data/plugin/perfdiag/status")
        assert st["analyses"] == 0 and st["results"]["shared"] and st["results"]["reads"] >= 9
        assert not st["pod_engine"]["started"]
    finally:
        second.stop()
