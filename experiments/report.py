#!/usr/bin/python3
"""Tables and plots for sf-testbed experiments, from rows.csv (pandas + matplotlib, Debian's python3).

    report.py results/NAME            writes results/NAME/table.md and results/NAME/*.png
    report.py --index results         writes results/README.md from every experiment's summary
    report.py --moved COMMIT results  writes results/moved.json: the re-run experiments' counts at COMMIT and now

Called by `sf-testbed experiment`; safe to re-run by hand. Every table puts the paper's figure
(arXiv 2606.06751) beside ours, and says so where a row cannot be reproduced on CPU ranks. The code is the
package experiments/sfreport/ (one module per experiment family; sfreport/registry.py maps each kind to its report).
"""
import sys

from sfreport.gpu import report_gpu
from sfreport.index import index, index_text, moved
from sfreport.registry import GPU, REPORTS, SCRIPTED, report

# What tests/results/check_claims.py reads from this module.
__all__ = ["GPU", "REPORTS", "SCRIPTED", "index", "index_text", "moved", "report", "report_gpu"]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--index":
        index(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "--moved":
        moved(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 2:
        report(sys.argv[1])
    else:
        sys.exit(__doc__)
