"""A sweep runner that never loses a measurement.

Each configuration's result row is appended to a CSV and flushed to disk as soon as it is
measured, so a crash, an interrupt or a killed kernel keeps every finished row; a re-run skips
the configurations whose key is already in the file, measured by the same library (each row
says when it was measured, ``measured_at``, at which commit, and by which code: ``library_tree``,
the git tree of ``lib/perflab``; rows of other code are measured again unless ``resume="any"``).
Failures such as out-of-memory become rows (``status`` "oom" or "error") and the sweep goes on.
Metadata (device, versions, what the key is) lives beside the CSV in a JSON file of the same
name.

Used by notebooks 01 and 03 (timings), 04 (peak memory); every sweep of the workbook goes
through it.
"""

from __future__ import annotations

import csv
import json
import os
import warnings
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import torch

from perflab.measure.paths import git_commit, library_tree
from perflab.measure.progress import progress


def is_out_of_memory(error: BaseException) -> bool:
    """True for CUDA's OutOfMemoryError and for the CPU allocator's failure to allocate."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    message = str(error).lower()
    return isinstance(error, RuntimeError) and (
        "out of memory" in message or "can't allocate memory" in message
    )


def _as_csv_text(value) -> str:
    """How ``csv.writer`` writes ``value``: ``None`` as an empty cell, anything else as str."""
    return "" if value is None else str(value)


class Sweep:
    """Results of one sweep in ``path`` (CSV) keyed by the configuration fields ``key``."""

    def __init__(
        self,
        path: str | Path,
        key: Sequence[str],
        metadata: dict | None = None,
        fill_key: Callable[[dict], dict] | None = None,
    ):
        """``fill_key(row)`` gives the values of key fields that a row written before they
        existed lacks (read as text like the rest of the row), so that an older file still
        answers which configurations are done, and keeps them when it is rewritten."""
        self.path = Path(path)
        self.fill_key = fill_key
        if self.path.suffix != ".csv":
            raise ValueError(f"a sweep file must end in .csv, got {self.path.name!r}")
        if not key:
            raise ValueError("a sweep needs at least one key field")
        self.key = tuple(key)
        self.metadata_path = self.path.with_suffix(".json")
        self.metadata = dict(metadata or {})

    def key_of(self, row: dict) -> tuple[str, ...]:
        """The key fields of ``row`` as the CSV file holds them once read back (``None`` is an
        empty cell, everything else its ``str``), so a configuration finds its row."""
        return tuple(_as_csv_text(row[k]) for k in self.key)

    def _repair(self) -> None:
        """Drop a last line cut off by a crash mid-write; it will be measured again."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            self.path.write_bytes(data[: data.rfind(b"\n") + 1])

    def _rows(self) -> tuple[list[str], list[dict]]:
        if not self.path.exists() or self.path.stat().st_size == 0:
            return [], []
        with self.path.open(newline="") as f:
            reader = csv.DictReader(f)
            fields, rows = list(reader.fieldnames or []), list(reader)
        if self.fill_key:
            for row in rows:
                row.update({k: _as_csv_text(v) for k, v in self.fill_key(row).items()})
        return fields, rows  # the header as written: a new key column makes append rewrite

    def done(self, any_library: bool = False) -> set[tuple[str, ...]]:
        """Keys of the rows already in the file that the current library measured (any
        library's with ``any_library``)."""
        tree = library_tree() or ""
        return {
            self.key_of(row)
            for row in self._rows()[1]
            if any_library or row.get("library_tree", "") == tree
        }

    def append(self, row: dict) -> None:
        """Add one row and force it to disk. A row with new columns rewrites the file (atomically)
        with the union of the columns, earlier rows getting blanks there."""
        missing = [k for k in self.key if k not in row]
        if missing:
            raise ValueError(f"row lacks key fields {missing}; key: {list(self.key)}")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fields, rows = self._rows()
        new_fields = [name for name in row if name not in fields]
        if fields and new_fields:
            tmp = self.path.with_suffix(".csv.tmp")
            with tmp.open("w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=fields + new_fields, restval="")
                writer.writeheader()
                writer.writerows(rows + [row])
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            return
        with self.path.open("a", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=fields or list(row), restval="")
            if not fields:
                writer.writeheader()
            writer.writerow(row)
            f.flush()
            os.fsync(f.fileno())

    def _write_metadata(self) -> None:
        now = datetime.now(UTC).isoformat(timespec="seconds")
        stored = json.loads(self.metadata_path.read_text()) if self.metadata_path.exists() else {}
        merged = {
            **stored,
            **self.metadata,
            "key": list(self.key),
            "updated": now,
            "commit": git_commit(),
            "library_tree": library_tree(),
        }
        merged.setdefault("created", now)
        self.metadata_path.parent.mkdir(parents=True, exist_ok=True)
        self.metadata_path.write_text(json.dumps(merged, indent=2, default=str) + "\n")

    def todo(self, configs: Iterable[dict], *, resume: bool | str = True) -> list[dict]:
        """Prepare the files (repair a cut-off last line, write the metadata) and return the
        ``configs`` not measured yet by this library (``resume=True``), by any library
        (``resume="any"``), or all of them (``resume=False``). For sweeps that measure several
        configurations in one go (notebook 07's launches) and ``record`` them."""
        if resume not in (True, False, "any"):
            raise ValueError(f"resume must be True, False or 'any', got {resume!r}")
        configs = list(configs)
        for config in configs:
            missing = [k for k in self.key if k not in config]
            if missing:
                raise ValueError(f"configuration {config} lacks key fields {missing}")
        self._repair()
        self._write_metadata()
        done = self.done(any_library=resume == "any") if resume else set()
        return [config for config in configs if self.key_of(config) not in done]

    def record(self, row: dict) -> None:
        """Append ``row`` stamped with ``measured_at``, the ``commit`` and the ``library_tree``
        it was measured at."""
        if not hasattr(self, "_commit"):
            self._commit = git_commit() or ""
        now = datetime.now(UTC).isoformat(timespec="seconds")
        self.append(
            {
                **row,
                "measured_at": now,
                "commit": self._commit,
                "library_tree": library_tree() or "",
            }
        )

    def earlier_rows_note(self, rows: pd.DataFrame, measured_now: int) -> str | None:
        """A line saying which of ``rows`` (as ``select`` returned them) were measured before
        this run, when, at which commit and by which library (how many by another than this
        one); None when all were measured now."""
        earlier = len(rows) - measured_now
        if earlier <= 0 or "measured_at" not in rows:
            return None
        old = rows.sort_values("measured_at").head(earlier)
        commits = sorted({str(c) for c in old.get("commit", pd.Series(dtype=str)).dropna()})
        trees = old.get("library_tree", pd.Series("", index=old.index)).astype(object).fillna("")
        trees = trees.astype(str)
        other = sorted({t[:10] or "unrecorded" for t in trees if t != (library_tree() or "")})
        return (
            f"{self.path.name}: {earlier} of {len(rows)} rows were measured earlier, "
            f"{old['measured_at'].min()} to {old['measured_at'].max()}"
            + (f", at commit {', '.join(commits)}" if commits else "")
            + (
                f"; {int((trees != (library_tree() or '')).sum())} of them by another library "
                f"than this one (library_tree {', '.join(other)})"
                if other
                else ", by this library"
            )
            + " (resume=False measures them again)"
        )

    def read(self) -> pd.DataFrame:
        """Every row in the file as a DataFrame (empty if nothing was measured yet)."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return pd.DataFrame()
        return pd.read_csv(self.path)

    def run(
        self,
        configs: Iterable[dict],
        measure: Callable[[dict], dict],
        *,
        resume: bool | str = True,
        desc: str | None = None,
    ) -> pd.DataFrame:
        """Measure every configuration not yet in the file; return the rows of ``configs``.

        ``measure(config)`` returns the result fields. An out-of-memory error is recorded as a
        row with ``status="oom"``, any other exception as ``status="error"`` (with a warning);
        both keep the sweep going and are not retried on re-run (delete the rows to retry).
        ``resume=False`` measures everything again, appending new rows after the old ones;
        ``resume="any"`` also keeps rows that another library measured (and says so).
        """
        configs = list(configs)
        todo = {self.key_of(config) for config in self.todo(configs, resume=resume)}
        skipped = 0
        bar = progress(configs, desc=desc or self.path.stem, unit="config")
        for config in bar:
            key = self.key_of(config)
            if key not in todo:
                skipped += 1
                bar.set_postfix(skipped=skipped)
                continue
            try:
                row = {**config, "status": "ok", "error": "", **measure(config)}
            except Exception as error:  # every failure becomes a row; the sweep goes on
                status = "oom" if is_out_of_memory(error) else "error"
                first_line = (str(error).splitlines() or [""])[0]
                message = f"{type(error).__name__}: {first_line}"
                if status == "error":
                    warnings.warn(f"{self.path.name} {config}: {message}", stacklevel=2)
                if torch.cuda.is_available():
                    torch.cuda.empty_cache()
                row = {**config, "status": status, "error": message}
            row.update({k: config[k] for k in self.key})
            self.record(row)
            todo.discard(key)
        bar.close()
        rows = self.select(configs)
        note = self.earlier_rows_note(rows, len(configs) - skipped)
        if note:
            print(note)
        return rows

    def select(self, configs: Iterable[dict]) -> pd.DataFrame:
        """The last row measured for each of ``configs``, in their order."""
        frame = self.read()
        if frame.empty:
            return frame
        keys = [self.key_of(row) for row in self._rows()[1]]
        frame = frame.assign(_key=keys).drop_duplicates("_key", keep="last").set_index("_key")
        wanted = [self.key_of(c) for c in configs]
        wanted = [k for k in wanted if k in frame.index]
        return frame.loc[wanted].reset_index(drop=True)
