"""The service's routes over a run's hosts together: the pod summary (``/hosts``), the
collective join of a run (``run_join``) and what is read from it (the Collectives card, a
host's peer wait, the overlay's peer-wait slices).  A mixin of ``DiagnosisService``."""
from __future__ import annotations

from .analysis import Options
from .analysis.run.view import RunView, run_view
from .errors import NotFound
from .pod import PodJob, decode_result
from .render import collectives as coll_render
from .render.pod import summary_row
from .service_common import RENDER_PEAK

MAX_POD_JOBS = 4      # finished pod summaries kept (their diagnoses stay in the cache)
STORED_ROWS_WAIT_S = 10.0   # a new summary's first answer waits this long for stored rows


class PodRoutes:
    """The run-wide routes of ``DiagnosisService`` (its catalog, cache, engine, budget and
    pod jobs)."""

    def _wait_for_pod_task(self, key) -> None:
        """When a pod summary's Dask task is analysing ``key`` right now, waits for it
        (and keeps what it sent back) instead of analysing the file a second time."""
        fut = self.engine.pending(self.cache.digest(key))
        if fut is None or self.cache.peek(key) is not None:
            return
        try:
            res = fut.result()
        except Exception:  # noqa: BLE001 - the task failed: analysed here, its error said here
            return
        if res.get("blob") is not None and self.cache.store is None:
            self.cache.put(key, decode_result(res["blob"]))
        elif res.get("blob") is not None:
            self.cache.save_blob(key, res["blob"], res["row"])

    def hosts_json(self, params):
        """Per-host summary of a run (pods of up to thousands of hosts): duty cycle,
        typical step, worst gap, top causes, stragglers flagged against the median host;
        one page of rows in the order asked.  Rows come from the result store when any
        process analysed the host already; the other hosts are analysed as Dask tasks in
        the background and each call answers with the rows done so far (``complete``
        false until all are), or waits for all with ``wait=1``."""
        job = self._pod_job(params.run, self._options(params))
        if params.wait:
            job.wait()
        else:   # a pod already in the store answers whole at the first call
            job.known.wait(STORED_ROWS_WAIT_S)
        desc = None if not params.order else params.order == "desc"
        return job.snapshot(params.sort or "straggler", desc, params.hosts_offset,
                            params.hosts_limit)

    def _pod_job(self, run_name: str, opt: Options) -> PodJob:
        """The job summarising every host of run ``run_name`` with options ``opt`` (the
        running or finished one for the files as listed, else a new one)."""
        run = self.catalog.runs().get(run_name)
        if run is None:
            run = self.catalog.runs(refresh=True).get(run_name)
        if run is None:
            raise NotFound("no such run in the logdir", run=run_name)
        sources = [self.catalog.find(run.name, h) for h in run.hosts()]
        sources = [s for s in sources if s is not None]
        # the files as listed (size, mtime) pick the job, so a poll costs no I/O per
        # host; the job keys each result by the file's full identity
        key = (run.name, opt.key(), tuple((s.path, s.size, s.mtime) for s in sources))
        with self._pods_lock:
            job = self._pods.pop(key, None)
            if job is None:
                job = PodJob(run.name, sources, opt, self.cache, self.engine,
                             self.max_file_bytes)
            self._pods[key] = job                # most recent last
            while len(self._pods) > MAX_POD_JOBS:
                self._pods.pop(next(iter(self._pods))).cancel()
        return job

    def run_join(self, params, wait: bool = False) -> tuple[RunView | None, dict, dict]:
        """(the run's ``RunView`` or None, the host's own row, a state): ``joined``;
        ``pending`` while the run's other hosts are analysed (``wait``: until they are);
        ``alone`` when no other participant shares this host's collectives; ``none`` when
        it has none; ``other_span`` when the capture asked for is not the one the run's
        summary joins (each host's latest)."""
        src = self._source(params)
        diag = self._diagnosis(params)
        opt = self._options(params)
        own = summary_row(src.host, src.span, diag)
        if not own.get("collectives_table"):
            return None, own, {"state": "none"}
        run = self.catalog.runs().get(params.run)
        if run is None or len(run.hosts()) < 2:
            rows, key = [own], (self._identity(src), opt.key())
        else:
            latest = self.catalog.find(params.run, src.host)
            if latest is not None and latest.path != src.path:
                return None, own, {"state": "other_span"}
            job = self._pod_job(params.run, opt)
            if wait:
                job.wait()
            if not job.complete:
                rows_now = list(job.rows.values())
                return None, own, {"state": "pending", "hosts": len(rows_now),
                                       "done": sum(r.get("status") != "pending"
                                                   for r in rows_now)}
            rows, key = [dict(r) for r in job.rows.values()], job   # finished: its rows stay
        with self._pods_lock:
            view = self._joins.get(key)
        if view is None:
            view = run_view(rows)
            with self._pods_lock:
                self._joins[key] = view
                while len(self._joins) > MAX_POD_JOBS:
                    self._joins.pop(next(iter(self._joins)))
        failed = [r for r in rows if r.get("status") != 200]
        if not view.joined(src.host):
            return None, own, {"state": "alone", "failed": failed, "hosts": len(rows)}
        return view, own, {"state": "joined", "failed": [r["host"] for r in failed]}

    def collectives_json(self, params, wait: bool = False):
        """The Collectives card of one host: its collectives matched with the other
        participants of the run (per op: instances, peer wait, transfer, whom it waited
        for, the steps), its peer wait per step and device, the run's stragglers; or why
        there is no such figure (``state``)."""
        view, own, st = self.run_join(params, wait)
        if view is None:
            out = {"state": st["state"], "host": params.host}
            if st["state"] == "alone":
                out.update(coll_render.alone_json(own, st["failed"], st["hosts"]))
            elif st["state"] == "pending":
                out.update(hosts=st["hosts"], done=st["done"],
                           note="matching this host's collectives with the other hosts' "
                                f"({st['done']} of {st['hosts']} analysed)")
            elif st["state"] == "other_span":
                out["note"] = ("this is not the host's latest capture: the run's collectives "
                               "are matched across each host's latest capture only")
            else:
                out["note"] = "no collective ops on this host's devices"
            return out
        diag = self._diagnosis(params)
        with self.budget.admit(RENDER_PEAK, what="collectives"):
            out = coll_render.host_json(view, self._source(params).host, diag,
                                        len(diag.steps) or None)
        out["failed_hosts"] = st["failed"]
        return out

    def peer_wait(self, params, diag) -> tuple:
        """(peer wait per step and device of the host ``params`` name, or None; why None;
        whom it waited for most): from the run's collective join, waiting for the run's
        other hosts to be analysed."""
        view, _, st = self.run_join(params, wait=True)
        if view is None:
            return None, coll_render.ALONE_SHORT if st["state"] == "alone" else \
                "peer wait is matched on each host's latest capture only", None
        host = self._source(params).host
        return view.peer_cells(host, diag), "", view.waited_for(host)

    def _wait_slices(self, params, diag) -> tuple:
        """(the peer-wait part of each collective op of this host, or None; why none): the
        overlay waits for the run's other hosts to be analysed (it is kept as built)."""
        view, _, st = self.run_join(params, wait=True)
        if view is None:
            return None, {"none": None, "alone": coll_render.ALONE,
                          "other_span": "peer wait is matched on each host's latest capture "
                                        "only"}.get(st["state"])
        return coll_render.wait_slices(view.join, self._source(params).host, diag), None
