"""``ctxbench import``: turn real agent logs (Claude Code, Codex CLI, Gemini CLI, SWE-agent, mini-swe-agent, OpenHands) into a trace file."""

from __future__ import annotations

import argparse
import json

from ctxbench.sim.errors import InputError
from ctxbench.sim.output import check_output_file, output_file
from ctxbench.traces.importers import AUTO, FORMAT_NAMES, IMPORTERS, import_paths
from ctxbench.traces.io import save, trace_format
from ctxbench.traces.tokens import DEFAULT_OVERHEAD_TOKENS

NAME = "import"
HELP = f"import real agent logs ({', '.join(importer.LABEL for importer in IMPORTERS)}) as a trace"


def _formats() -> str:
    """The formats of the table, one paragraph each, and ``auto``, aligned as a help section."""
    width = max(len(name) for name in FORMAT_NAMES)
    paragraphs = [(importer.FORMAT, importer.HELP) for importer in IMPORTERS]
    paragraphs.append((AUTO, "detect each file's format from its content."))
    lines = []
    for name, text in paragraphs:
        first, *rest = text.splitlines()
        lines.append(f"  {name:<{width}}  {first}")
        lines.extend(" " * (width + 4) + line for line in rest)
    return "\n".join(lines)


DESCRIPTION = f"""\
Import real agent sessions as a trace (docs/design.md §2), one session per log.

By default the trace holds the whole context window (docs/design.md §7): beside the file reads,
edits, writes and tool outputs, every message (user, assistant, thinking, compaction summaries),
each tool call's input and each window's fixed overhead (system prompt and tool definitions:
the log's own where it records one, else its first recorded input tokens less the content before
them, else {DEFAULT_OVERHEAD_TOKENS:,} tokens, counted in the summary). --no-conversation leaves
messages, calls and overhead out: only files and tool outputs, as traces were before.

Formats:
{_formats()}

Malformed or truncated lines (a JSON value nested too deeply among them) are skipped and
counted in the summary; a missing or unreadable file, one not in the format, or a whole-file log
(.traj, OpenHands .json) nested too deeply, is an error (exit 2) and nothing is written. An
existing --out is replaced only if it is a Parquet trace ctxbench wrote, or with --force.

Examples:
  ctxbench import claude-code ~/.claude/projects/my-project --out real.parquet
  ctxbench import auto run1.traj events.json --out mixed.parquet --no-conversation
  ctxbench import openhands ~/.openhands/conversations/<id> --out oh.parquet
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``ctxbench import``."""
    parser.add_argument("format", metavar="FORMAT", choices=FORMAT_NAMES,
                        help=f"log format: {', '.join(FORMAT_NAMES)}")
    parser.add_argument("paths", metavar="PATH", nargs="+", help="log files or directories to walk")
    parser.add_argument("--out", required=True, metavar="TRACE",
                        help="trace file to write (.parquet keeps the metadata; .csv, .jsonl, optionally .gz)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing file that ctxbench cannot tell it wrote (a CSV or JSON-lines file, "
                             "or one written by another program)")
    parser.add_argument("--no-conversation", action="store_true",
                        help="leave messages, tool calls' inputs and the overhead out (only files and tool outputs)")
    parser.add_argument("--json", action="store_true", help="print the import report as JSON")


def run(args: argparse.Namespace) -> int:
    """Import, write the trace atomically, print the summary."""
    trace_format(args.out)  # an unusable --out fails before any reading
    check_output_file(args.out, force=args.force)
    df, report = import_paths(args.format, args.paths, conversation=not args.no_conversation)
    if df.empty:
        raise InputError(f"{', '.join(args.paths)}: no tool calls found; nothing to write")
    with output_file(args.out, force=args.force) as tmp:
        save(df, tmp, format_of=args.out)
    if args.json:
        print(json.dumps({"out": str(args.out), **report.to_dict()}, indent=2, default=str))
    else:
        print(f"wrote {args.out}: {report.summary()}")
    return 0
