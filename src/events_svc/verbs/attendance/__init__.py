"""The attendance import: a bounded, resumable job that marks attendance row by row.

`parse` turns a CSV body or JSON rows into stored rows, `jobs` creates, reads, resumes
and cancels a job, `batch` is the pass that works jobs in batches (the loop's imports
pass's and `resume`'s).
"""

from events_svc.verbs.attendance.batch import ImportOptions, next_import_due, run_import_pass

__all__ = ["ImportOptions", "next_import_due", "run_import_pass"]
