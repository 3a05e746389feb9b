"""Results files read back: what a record may make the workbench do, and what it must hold.

A results JSON is data, possibly from someone else. It names the program file it measured
(`spec`), but a program file is Python and runs when loaded, so the name alone never
chooses what runs: `program_for` takes the file the user passed (`--program`) or a study
shipped with the workbench, and checks it against the sha256 the record carries. Every
field read is checked (`checked_step_record`), so a wrong-typed or non-finite value is one
message naming the record and the field, never a traceback or a NaN folded in.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from workbench.errors import WorkbenchError
from workbench.files import read_bounded
from workbench.loader import file_digest, split_spec
from workbench.schemas import MEASURE_RECORD, STEP_RECORD, check


class ResultsFileError(WorkbenchError):
    """A results file whose records are not what compile-and-measure writes."""


_FIX_JSON = "pass the JSON compile-and-measure wrote"


def program_for(path: Path, index: int, record: dict, programs, studies_dir: Path) -> str:
    """The program spec to load for `record` (record `index` of results file `path`): the
    file of `programs` (the user's --program) with the record's file name, else the shipped
    study of that name under `studies_dir`; its content must match the record's
    program_sha256 where the record has one. The record's fields are checked already
    (checked_step_record)."""
    spec = record["spec"]
    file, attr = split_spec(spec)
    suffix = f":{attr}" if attr != "program" else ""
    given = [Path(split_spec(p)[0]) for p in programs]
    chosen = next((g for g in given if g.name == file.name), None)
    if chosen is None and file.parent.name == "studies" and (studies_dir / file.name).is_file():
        chosen = studies_dir / file.name  # the installed study, never a file beside the results
    if chosen is None:
        named = ", ".join(str(g) for g in given) or "none"
        raise ResultsFileError(
            f"{path}: record {index}'s program file {file} must be passed with --program (a "
            f"program file is Python and runs when loaded, so results never choose one), got "
            f"--program {named}; pass --program {file} if you trust that file")
    want = record.get("program_sha256")
    if want is not None:
        got = file_digest(str(chosen))
        if got != want:
            raise ResultsFileError(
                f"{path}: record {index}'s program {file} must be the file the run measured "
                f"(sha256 {want[:16]}...), got {chosen} with sha256 {got[:16]}...; pass the "
                "program file the run measured with --program")
    return f"{chosen}{suffix}"


def checked_step_record(path: Path, index: int, record: dict) -> None:
    """Raise ResultsFileError unless `record` has what sweep steps reads (schemas.STEP_RECORD):
    a schedule name, sizes (name -> positive int) and steps (stage, stmts, a finite
    median_ms >= 0)."""
    check(record, STEP_RECORD, f"{path}: record {index}", _FIX_JSON, ResultsFileError)


MAX_TIME_S = 365 * 24 * 3600.0  # the largest time a results file may hold


def read_results_csv(path: Path, columns: list[str], value: str | None = None):
    """The table of results CSV `path` (predicted.csv, measured.csv, steps.csv), whole: it
    must be UTF-8, end with a newline (a file cut short by a full disk does not), have
    `columns`, no row with an empty key, and `value` (if given) numeric: finite and > 0 where
    the row is predicted (`predicted_s`), finite >= 0 or empty where measured, at most a
    year (MAX_TIME_S)."""
    import csv
    import io

    import pandas as pd

    raw = read_bounded(path, "results file", "regenerate it with workbench sweep")
    try:
        text = raw.decode("utf-8")
        if "\x00" in text:
            raise UnicodeError("a NUL byte")
    except UnicodeError as e:
        raise ResultsFileError(f"results file {path} must be a UTF-8 CSV table, got binary "
                               f"data ({e}); regenerate it with workbench sweep") from None
    if text and not text.endswith("\n"):
        raise ResultsFileError(f"results file {path} must end with a newline, got a last line "
                               f"cut short ({text.splitlines()[-1][:60]!r}); the file was not "
                               "written whole: regenerate it with workbench sweep")
    _check_ragged(path, text, csv)
    try:
        df = pd.read_csv(io.StringIO(text))
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as e:
        raise ResultsFileError(f"results file {path} must be a CSV table, got {e}") from None
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ResultsFileError(f"results file {path} must have columns {columns}, got "
                               f"{list(df.columns)} (missing {missing}); regenerate it with "
                               "workbench sweep")
    keys = [c for c in columns if c != value]
    empty = df[keys].isna().any(axis=1)
    if empty.any():
        row = int(empty.idxmax())
        raise ResultsFileError(f"results file {path} row {row + 2} must have every key "
                               f"({', '.join(keys)}), got an empty one; the file was not "
                               "written whole: regenerate it with workbench sweep")
    if value is not None:
        numbers = pd.to_numeric(df[value], errors="coerce")
        not_a_number = numbers.isna() & df[value].notna()  # text such as "fast"
        # beyond a year a "time" is no step's: and its milliseconds overflow a float in the
        # report's plot (a fuzzed 1.8e305 s drew an empty log axis)
        infinite = numbers.isin([float("inf"), float("-inf")]) | (numbers > MAX_TIME_S)
        out_of_range = ~(numbers > 0) if value == "predicted_s" else numbers < 0
        bad = not_a_number | infinite | out_of_range
        if bad.any():
            row = int(bad.idxmax())
            got = df[value].iloc[row]
            got = "an empty cell" if pd.isna(got) else repr(getattr(got, "item", lambda: got)())
            raise ResultsFileError(f"results file {path} row {row + 2} column {value} must be "
                                   f"a finite time in seconds"
                                   f"{' > 0' if value == 'predicted_s' else ' >= 0 (or empty)'}"
                                   f" and at most {MAX_TIME_S:g} (a year)"
                                   f", got {got}; regenerate the file")
        df[value] = numbers
    _check_columns(path, df, columns)
    return df


def _check_ragged(path: Path, text: str, csv) -> None:
    """Every row of CSV `text` has the header's number of fields: pandas would make the extra
    fields of a longer row an index and shift every column (a traceback further on)."""
    reader = csv.reader(text.splitlines(keepends=True))
    try:
        header = next(reader, [])
        for row in reader:
            if row and len(row) != len(header):
                raise ResultsFileError(
                    f"results file {path} row {reader.line_num} must have {len(header)} "
                    f"fields, as the header, got {len(row)}; the file was not written by the "
                    "workbench: regenerate it with workbench sweep")
    except csv.Error as e:
        raise ResultsFileError(f"results file {path} must be a CSV table, got {e} at row "
                               f"{reader.line_num}; regenerate it with workbench sweep") from None


# Columns a results CSV may hold whose cells must be finite numbers (or empty): the report
# computes with them (steps.csv's error, a measured table's fastest baseline).
NUMERIC_COLUMNS = ("fastest_baseline_s", "model_s", "lower_bound_s", "measured_ms",
                   "predicted_ms", "predicted_gpu_ms", "error", "stage", "steps")
SIZE_MAX = 2**62  # a size or a GPU count beyond this is no run's
_SIZE_ITEM = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,63})=([0-9]{1,19})(?:\^([0-9]{1,2}))?")


def size_label_ok(label) -> bool:
    """Whether `label` is a size label of the sweeps ('N=2^28', 'H=12288,T=2^13'): names and
    whole numbers (a power at most 2^62), so studies.sweep.size_values can read it without
    an error or an unbounded power (2^99999 took the report down)."""
    for item in str(label).split(","):
        m = _SIZE_ITEM.fullmatch(item)
        if m is None:
            return False
        base, exp = int(m[2]), int(m[3]) if m[3] else 1
        if base > SIZE_MAX or (exp > 1 and base > 1 and exp * math.log2(base) > 62):
            return False
    return True


def _check_columns(path: Path, df, columns: list[str]) -> None:
    """The cells every report reads: the size a label the sweeps write, gpus a whole number
    from 1 to SIZE_MAX, the NUMERIC_COLUMNS numbers (or empty); each (study, schedule, size,
    gpus) once (a repeated row was averaged without a word)."""
    import pandas as pd

    def bad(row: int, column: str, what: str) -> ResultsFileError:
        got = df[column].iloc[row]
        return ResultsFileError(f"results file {path} row {row + 2} column {column} must be "
                                f"{what}, got {str(got)[:40]!r}; regenerate it with "
                                "workbench sweep")

    if "size" in columns:
        for i, label in enumerate(df["size"]):
            if not size_label_ok(label):
                raise bad(i, "size", "sizes as NAME=VALUE[,NAME=VALUE] (VALUE a whole number "
                                     "or 2^K, at most 2^62), e.g. N=2^28")
    if "gpus" in columns:
        gpus = pd.to_numeric(df["gpus"], errors="coerce")
        wrong = ~((gpus >= 1) & (gpus <= SIZE_MAX) & (gpus == gpus.round()))
        if wrong.any():
            raise bad(int(wrong.to_numpy().argmax()), "gpus", f"a whole number from 1 to "
                                                             f"{SIZE_MAX}")
        df["gpus"] = gpus.astype("int64")
    for column in NUMERIC_COLUMNS:
        if column not in df.columns:
            continue
        numbers = pd.to_numeric(df[column], errors="coerce")
        wrong = (numbers.isna() & df[column].notna()) | numbers.isin([math.inf, -math.inf])
        if wrong.any():
            raise bad(int(wrong.to_numpy().argmax()), column, "a finite number (or empty)")
        df[column] = numbers
    keys = [c for c in ("study", "schedule", "size", "gpus") if c in columns]
    if len(keys) == 4:
        repeated = df.duplicated(keys, keep="first")
        if repeated.any():
            row = int(repeated.to_numpy().argmax())
            first = int((df[keys] == df[keys].iloc[row]).all(axis=1).to_numpy().argmax())
            raise ResultsFileError(f"results file {path} row {row + 2} must be the only row of "
                                   f"its {', '.join(keys)}, got a repeat of row {first + 2}; "
                                   "keep one row per case (workbench sweep measured keeps the "
                                   "last run's)")


def checked_measure_record(path: Path, index: int, record) -> None:
    """Raise ResultsFileError unless `record` has the fields of a compile-and-measure record
    with their types (schemas.MEASURE_RECORD): names as strings, sizes as name -> positive
    int, P a positive int, times finite and >= 0 (median_ms may be null: a schedule that was
    not measured)."""
    check(record, MEASURE_RECORD, f"{path}: record {index}", _FIX_JSON, ResultsFileError)
