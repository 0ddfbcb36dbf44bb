"""Plans run in the background: one thread per job, progress from the planner's callback, cancel.

A job owns a private folder (its workload, then its report: report.html, report.md, plan.json
and the charts, written by calc.render.plan.write_report as `roofline plan --out` writes them).
The planner calls ``progress(done, total, label)`` after each candidate; a cancelled job's
callback raises ``Cancelled`` there, so the planner stops between candidates. At most
``MAX_RUNNING`` jobs run at once (more are refused with a 429) and the ``KEEP`` newest finished
jobs are kept; older folders are removed, and all of them when the server stops.
"""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from calc.web.params import ApiError

MAX_RUNNING = 2
KEEP = 16


class Cancelled(Exception):
    """Raised inside the planner's progress callback when the job is cancelled."""


@dataclass
class Job:
    id: str
    folder: Path
    state: str = "running"  # running | done | failed | cancelled
    done: int = 0
    total: int = 0
    label: str = ""
    error: str | None = None
    result: dict | None = None
    started: float = field(default_factory=time.time)
    finished: float | None = None
    cancel: threading.Event = field(default_factory=threading.Event)

    def progress(self, done: int, total: int, label: str = "") -> None:
        if self.cancel.is_set():
            raise Cancelled
        self.done, self.total, self.label = done, total, label

    def status(self) -> dict:
        out = {"job": self.id, "state": self.state, "done": self.done, "total": self.total, "label": self.label,
               "error": self.error, "elapsed_s": (self.finished or time.time()) - self.started}
        if self.state == "done":
            out["report"] = f"/plan/jobs/{self.id}/report.html"
            out["plan"] = self.result
        return out


class Jobs:
    """The server's jobs by id (ids are random; a request never names a folder)."""

    def __init__(self, new_folder):
        self._new_folder = new_folder
        self._jobs: dict[str, Job] = {}
        self._lock = threading.Lock()

    def start(self, prepare, run) -> Job:
        """A job whose ``prepare(folder)`` runs now (its errors are the request's 400) and whose
        ``run(prepared, folder, progress) -> dict`` runs in the background."""
        with self._lock:
            running = sum(j.state == "running" for j in self._jobs.values())
            if running >= MAX_RUNNING:
                raise ApiError(429, f"roofline: error: plan: {running} plans are running, the most the page runs at "
                                    "once; wait for one or cancel it")
            job = Job(uuid.uuid4().hex, self._new_folder())
            self._jobs[job.id] = job
        try:
            prepared = prepare(job.folder)
        except BaseException:
            self._drop(job.id)
            raise
        threading.Thread(target=self._work, args=(job, run, prepared), daemon=True, name=f"plan-{job.id[:8]}").start()
        self._prune()
        return job

    def _work(self, job: Job, run, prepared) -> None:
        try:
            job.result = run(prepared, job.folder, job.progress)
            job.state = "done"
        except Cancelled:
            job.state = "cancelled"
        except ApiError as exc:
            job.error, job.state = exc.line, "failed"
        except Exception as exc:  # noqa: BLE001 (a planner failure is the job's, shown on the page)
            from calc.core.errors import SpecError

            job.error = f"roofline: error: {exc}" if isinstance(exc, SpecError) else f"roofline: error: plan: {exc}"
            job.state = "failed"
        finally:
            job.finished = time.time()

    def get(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise ApiError(404, f"roofline: error: plan: no job {job_id[:40]!r} (finished jobs are kept {KEEP} deep)")
        return job

    def cancel(self, job_id: str) -> Job:
        job = self.get(job_id)
        job.cancel.set()
        return job

    def _drop(self, job_id: str) -> None:
        with self._lock:
            job = self._jobs.pop(job_id, None)
        if job is not None:
            shutil.rmtree(job.folder, ignore_errors=True)

    def _prune(self) -> None:
        finished = sorted((j for j in self._jobs.values() if j.state != "running"), key=lambda j: j.started)
        for job in finished[:-KEEP] if len(finished) > KEEP else []:
            self._drop(job.id)

    def close(self) -> None:
        """Cancel every job and remove every folder (the server is stopping)."""
        for job in list(self._jobs.values()):
            job.cancel.set()
        for job_id in list(self._jobs):
            self._drop(job_id)
