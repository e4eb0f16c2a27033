"""`ctxbench report`: figures, report.md and a self-contained report.html for a results directory."""

from __future__ import annotations

import argparse

from ctxbench.sim.analysis.ranking import RANK_BY

NAME = "report"
HELP = "write figures, report.md and a self-contained report.html for a results directory"
DESCRIPTION = """\
Write the human report of a results directory made by `ctxbench run`: figures as PNG and SVG
(miss rate vs budget, re-read tokens, eviction-latency CDF, context occupancy and a per-turn
timeline for one session), report.md (configuration, the decision view, the misses, figures,
optimal bracket when present) and report.html, a single file with every image embedded that opens from disk.
`ctxbench run` writes the same report into its results directory unless given --no-report.
The results are summarised once, as `ctxbench run` does, and every table and sentence of the
report draws that summary.
Names from the results (strategies, sessions, traces) are escaped in report.md. A meta.json that
is not a JSON object of the shape `run` writes is an error (exit 2) naming the key.

Only the files of an earlier report by ctxbench are replaced; a directory ctxbench did not
write (no .ctxbench.json manifest), and not empty, is refused (exit 2) unless --force, which
adds the report beside the files already there; a file or figures/ entry that ctxbench did not
write is never replaced.

Examples:
  ctxbench report results
  ctxbench report results --out /tmp/report --session mixed/mixed-4-00001 --strategy lru
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results_dir", metavar="RESULTS_DIR", help="a results directory written by 'ctxbench run'")
    p.add_argument("--out", metavar="DIR", help="where to write the report (default: RESULTS_DIR)")
    p.add_argument("--force", action="store_true",
                   help="write into a directory ctxbench did not write, beside the files already there")
    p.add_argument("--session", metavar="ID",
                   help="session of the occupancy and timeline figures, as ID or TRACE/ID "
                        "(default: the one with the most capacity misses)")
    p.add_argument("--strategy", metavar="NAME",
                   help="strategy of the per-turn timeline (default: the best-ranked)")
    p.add_argument("--rank-by", choices=tuple(RANK_BY), default=None, metavar="METRIC",
                   help=f"what the decision view ranks by ({', '.join(RANK_BY)}; default: the run's --rank-by)")


def run(args) -> int:
    from ctxbench.sim.presentation.report import write_report

    report = write_report(args.results_dir, args.out, session=args.session, strategy=args.strategy, force=args.force,
                          rank_by=args.rank_by)
    print(f"report: {report.html} ({len(report.figures)} figure files in {report.out_dir / 'figures'})")
    return 0
