"""The study engine: what every study (a paper's reproduction, a benchmark) shares.

A study is one folder under :mod:`selfcal.studies` whose package registers a :class:`Study`
subclass with :func:`register_study` when it is imported; the composition root -- the CLI,
a script -- imports the study packages (:func:`selfcal.studies.import_all`) before it asks the
registry (:func:`study_names`, :func:`get_study`), and ``selfcal reproduce NAME`` exists from
then on. The engine itself imports no study: a worker process imports the one study package
its runs need (:func:`execute_group`). A study states:

* ``title`` (the report's heading) and ``version``, bumped whenever its executor's computation
  or metrics change;
* ``specs(protocol)``: the runs, built with :meth:`Study.spec` -- one per (dataset, method,
  regime, hyperparameter candidate, seed);

and its folder holds the rest, found by name: the study's ``name`` is the folder's
(``bo4sc_images`` is ``bo4sc-images``) and its CLI ``help`` the package docstring; ``protocol.py``
defines ``PROTOCOLS`` -- named :class:`StudyProtocol` instances, ``"full"`` (the default) and
``"quick"`` (a small version for tests and a first look), and any variant -- and ``SELECTION``,
the :class:`~selfcal.selection.Criterion` that selects a method's candidates on
validation (or the study defines a ``criterion(record)`` method when it depends on the run);
``execute.py`` with ``execute(protocol, group)`` (results for a group of specs; ``batch_by``
forms the groups), ``report.py`` with
``sections(results)`` and ``summary(results)`` (and optionally ``payload(results)``) over a
:class:`StudyResults`, and optionally ``figures.py`` with ``figures(results)``. The engine
writes the header, the failures, the figures, the JSON and the provenance
(:mod:`selfcal.experiments.report`). A study may instead override the methods of the same
names.

The engine owns the rest: seeds as replicates; the protocol's fingerprint in every run's key
(settings + study version + the study's ``fingerprint_extras``), so runs of another version
are never mixed in; the thread count, fixed around every executor call so that a rerun gives
the same numbers bit for bit whatever the caller's setting; the sweep (resumable, parallel
workers, :func:`selfcal.experiments.run_sweep`); selection; aggregates and paired verdicts
(:mod:`selfcal.experiments.tables`); staleness checks of committed reports.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import json
import re
import sys
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Generic, TypeVar, cast

from selfcal._registry import Registry
from selfcal._validation import check_int
from selfcal.experiments.runner import SweepSummary, run_sweep
from selfcal.experiments.selection import hp
from selfcal.experiments.spec import RunResult, RunSpec
from selfcal.experiments.store import ResultsStore, RunRecord
from selfcal.experiments.study_results import StudyResults
from selfcal.selection import Criterion

TEST_LOGITS = "test_logits"
TEST_LABELS = "test_labels"
"""Artefact names every study that keeps its test predictions uses."""
UNFINGERPRINTED = ("name", "seeds", "datasets", "notes")
"""Protocol fields that do not change any run's result (each seed and dataset is its own run)."""


def settings_fingerprint(settings: Mapping[str, Any]) -> str:
    """First 12 hex digits of the SHA-256 of the settings as sorted JSON."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


@dataclass(frozen=True)
class StudyProtocol:
    """Everything a study's runs depend on besides (dataset, method, regime, candidate, seed).

    Subclasses add their settings as fields with defaults. ``threads``: torch (and BLAS)
    threads per run, fixed by the engine around every executor call and part of the
    fingerprint: results are bit-identical for a given thread count, whatever the caller's."""

    name: str
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    datasets: tuple[str, ...] = ()
    threads: int = 1
    notes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        check_int("threads", self.threads)
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct and non-empty, got {self.seeds!r}")

    def settings(self) -> dict[str, Any]:
        """The fields that change a run's result."""
        return {k: v for k, v in asdict(self).items() if k not in UNFINGERPRINTED}


P = TypeVar("P", bound=StudyProtocol)
"""A study's protocol type."""


@functools.lru_cache(maxsize=256)
def _fingerprint(protocol: StudyProtocol, version: int, extras: str) -> str:
    return settings_fingerprint(
        {**protocol.settings(), "study_version": version, **json.loads(extras)}
    )


class Study(Generic[P]):
    """Base class of every study (module doc). Subclasses set ``title`` and ``version`` and
    implement :meth:`specs`; ``name``, ``protocols`` and ``selection`` come from the folder
    unless a subclass sets them."""

    name: ClassVar[str]
    title: ClassVar[str]
    version: ClassVar[int]
    protocols: ClassVar[Mapping[str, StudyProtocol]]
    default_protocol: ClassVar[str] = "full"
    selection: ClassVar[Criterion | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Fill in what the folder says (module doc): the ``name`` from the package's, the
        ``protocols`` and ``selection`` from its ``protocol.py`` (``PROTOCOLS``, ``SELECTION``)."""
        super().__init_subclass__(**kwargs)
        package = cls.__module__
        if "name" not in cls.__dict__:
            cls.name = package.rsplit(".", 1)[-1].replace("_", "-")
        try:
            protocol = importlib.import_module(f"{package}.protocol")
        except ModuleNotFoundError as err:  # a study without a protocol.py sets its own
            if err.name != f"{package}.protocol":
                raise
            protocol = None
        if protocol is not None and "protocols" not in cls.__dict__:
            cls.protocols = protocol.PROTOCOLS
        if protocol is not None and "selection" not in cls.__dict__:
            cls.selection = getattr(protocol, "SELECTION", None)

    @property
    def help(self) -> str:
        """The CLI's help: the study package's docstring, without its ``selfcal reproduce NAME``
        lead, on one line (a study may set ``help`` itself instead)."""
        doc = sys.modules[type(self).__module__].__doc__ or self.title
        text = re.sub(r"^``selfcal reproduce [\w-]+``:\s*", "", doc.strip())
        text = re.sub(r"\s*\(:\w+:`[^`]*`\)|:\w+:`~?([^`]*)`", r"\1", text).replace("``", "")
        text = " ".join(text.split())
        return text[:1].upper() + text[1:]

    def part(self, name: str) -> Any:
        """Module ``name`` of the study's folder (``None`` when it has none)."""
        package = type(self).__module__
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as err:
            if err.name != f"{package}.{name}":
                raise
            return None

    # ------------------------------------------------------------------ runs
    def fingerprint_extras(self) -> Mapping[str, Any]:
        """Study-level settings outside the protocol that change results (e.g. the method
        table); folded into the fingerprint."""
        return {}

    def fingerprint(self, protocol: StudyProtocol) -> str:
        """Hash of the protocol's settings, the study version and the extras (cached: every
        spec carries it)."""
        extras = json.dumps(self.fingerprint_extras(), sort_keys=True)
        return _fingerprint(protocol, self.version, extras)

    def spec(
        self,
        protocol: StudyProtocol,
        dataset: str,
        method: str,
        seed: int,
        *,
        regime: str | None = None,
        config: Mapping[str, Any] | None = None,
        model: Mapping[str, Any] | None = None,
    ) -> RunSpec:
        """One run of ``protocol``; ``config`` holds the candidate's grid values."""
        hparams: dict[str, Any] = {
            "protocol": protocol.name,
            "fingerprint": self.fingerprint(protocol),
            "threads": protocol.threads,
        }
        if regime is not None:
            hparams["regime"] = regime
        if self.device(dataset) != "cpu":  # CPU runs keep the keys they always had
            hparams["device"] = self.device(dataset)
        hparams.update(hp(config or {}))
        return RunSpec(self.name, dataset, method, seed, hparams, model or {})

    def device(self, dataset: str) -> str:
        """The device type the runs on ``dataset`` train on (default ``"cpu"``). A run on any
        other device carries it in its spec, so its key differs from the CPU run's: a store
        resumed on another machine never mixes CPU and GPU results of one run."""
        return "cpu"

    def specs(self, protocol: P) -> list[RunSpec]:
        raise NotImplementedError

    def execute(self, protocol: P, group: list[RunSpec]) -> list[RunResult]:
        """Results for a group of specs: the folder's ``execute.execute``."""
        return self.part("execute").execute(protocol, group)

    def batch_by(self, spec: RunSpec) -> Hashable:
        """Specs with equal ids run in one executor call (default: one spec a call)."""
        return spec.key

    def protocol(self, name: str | None = None) -> P:
        """The protocol ``name`` (default: :attr:`default_protocol`)."""
        name = self.default_protocol if name is None else name
        if name not in self.protocols:
            raise ValueError(f"--protocol must be one of {', '.join(self.protocols)}; got {name!r}")
        return cast(P, self.protocols[name])

    def protocol_of(self, spec: RunSpec) -> P:
        """The protocol a stored spec was made with; a spec of another version of it (another
        fingerprint) is an error rather than a silent mix of results."""
        protocol = self.protocol(str(spec.hparams["protocol"]))
        if spec.hparams["fingerprint"] != self.fingerprint(protocol):
            raise ValueError(
                f"run {spec.key} was made with another version of protocol "
                f"{protocol.name!r} of study {self.name!r}; start a new store"
            )
        return protocol

    # ------------------------------------------------------------------ selection
    def criterion(self, record: RunRecord) -> Criterion:
        """How the candidates of ``record``'s method are selected: :attr:`selection` (a
        method with one candidate per seed needs none)."""
        if self.selection is None:
            raise NotImplementedError(f"study {self.name!r} has no selection criterion")
        return self.selection

    # ------------------------------------------------------------------ report
    def heading(self, protocol: P) -> str:
        """The report's heading under ``protocol`` (default: :attr:`title`)."""
        return self.title

    def sections(self, results: StudyResults[P]) -> list[str]:
        """The report's body (Markdown lines): the folder's ``report.sections``."""
        return self.part("report").sections(results)

    def figures(self, results: StudyResults[P]) -> Mapping[str, Any]:
        """``{file name: matplotlib figure or None}`` (``None``: not drawable from these
        runs): the folder's ``figures.figures``, if it has one."""
        module = self.part("figures")
        return {} if module is None else module.figures(results)

    def summary(self, results: StudyResults[P]) -> list[str]:
        """What ``selfcal reproduce NAME`` prints after the sweep: ``report.summary``."""
        return self.part("report").summary(results)

    def payload(self, results: StudyResults[P]) -> Mapping[str, Any]:
        """Study-specific additions to the ``--json`` object: ``report.payload``, if any."""
        extra = getattr(self.part("report"), "payload", None)
        return {} if extra is None else extra(results)


# ----------------------------------------------------------------------------- registry
_STUDIES: Registry[Callable[[], Study]] = Registry("study")


StudyClass = TypeVar("StudyClass", bound=type[Study[Any]])


def register_study(cls: StudyClass) -> StudyClass:
    """Class decorator: register a :class:`Study` under its ``name``."""
    for attribute in ("name", "title", "version", "protocols"):
        if not hasattr(cls, attribute):
            raise ValueError(f"study class {cls.__name__} has no {attribute!r}")
    missing = {"full", "quick"} - set(cls.protocols)
    if missing or cls.default_protocol not in cls.protocols:
        raise ValueError(
            f"study {cls.name!r} needs 'full' and 'quick' protocols and its "
            f"default; missing: {sorted(missing)}"
        )
    _STUDIES.register(cls.name)(cls)
    return cls


def study_names() -> tuple[str, ...]:
    """The names of the registered studies: those whose package has been imported (every
    study under :mod:`selfcal.studies` after :func:`selfcal.studies.import_all`)."""
    return _STUDIES.names()


def get_study(name: str) -> Study:
    """The registered study ``name`` (module doc: its package must have been imported; the
    papers' studies register with ``selfcal.studies.import_all()``, which the engine never
    calls, so the error says so when none is registered)."""
    if not _STUDIES.names():
        raise ValueError(
            f"unknown study {name!r}: no study is registered; the papers' studies register "
            "when their packages are imported: call selfcal.studies.import_all() first"
        )
    return _STUDIES.get(name)()


# ----------------------------------------------------------------------------- execution
@contextlib.contextmanager
def fixed_threads(threads: int) -> Iterator[None]:
    """Run a block with ``threads`` torch threads and BLAS threads (threadpoolctl, when
    installed), restoring the caller's settings afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        with _blas_threads(threads):
            yield
    finally:
        torch.set_num_threads(before)


def _blas_threads(threads: int) -> contextlib.AbstractContextManager[Any]:
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - scikit-learn (the full extra) brings it
        return contextlib.nullcontext()
    return threadpool_limits(limits=threads)


def execute_group(group: list[RunSpec], module: str | None = None) -> list[RunResult]:
    """The runner's executor for every study (top-level, so worker processes can unpickle it):
    the group's study and protocol, under the protocol's fixed thread count. ``module``: the
    study's module, imported first (a fresh worker process registers the study so)."""
    if module is not None:
        importlib.import_module(module)
    study = get_study(group[0].study)
    protocol = study.protocol_of(group[0])
    with fixed_threads(protocol.threads):
        return study.execute(protocol, group)


def _group_id(spec: RunSpec) -> Hashable:
    return get_study(spec.study).batch_by(spec)


def run_study(
    study: Study,
    protocol: StudyProtocol,
    store: ResultsStore,
    *,
    workers: int = 1,
    progress: bool = False,
    retry_failed: bool = False,
    executor: str = "process",
    address: str | None = None,
) -> SweepSummary:
    """Run (or resume) every spec of ``protocol`` not yet in ``store`` (nor stored as failed,
    unless ``retry_failed``), in worker processes or as Ray tasks (``executor="ray"``, on the
    cluster at ``address`` or a new local instance: :func:`~selfcal.experiments.run_sweep`)."""
    return run_sweep(
        study.specs(protocol),
        functools.partial(execute_group, module=type(study).__module__),
        store=store,
        workers=workers,
        batch_by=_group_id,
        progress=progress,
        retry_failed=retry_failed,
        executor=executor,
        address=address,
    )
