#!/usr/bin/env python3
"""Print CONFORMANCE.md's tables from an A2A TCK compatibility report.

    scripts/conformance-table.py REPORT [--tck DIR]

REPORT is the `reports/compatibility.json` that the A2A TCK
(a2aproject/a2a-tck, `run_tck.py`) writes. With `--tck DIR` (the root of the
TCK checkout that wrote REPORT), each requirement also gets its spec section
and title, read from `DIR/tck/requirements/*.py`; the TCK is not imported.

Prints Markdown on stdout: a summary by level (MUST, SHOULD, MAY), then one
table per area with each requirement's level, its overall result, and its
result on JSON-RPC, HTTP+JSON and gRPC. Cells: `pass`, `FAIL`, `skipped`,
`not tested` (the TCK has no test for it), `—` (no test of it ran on that
binding).
Standard library only.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys

from pathlib import Path


LEVELS = ('MUST', 'SHOULD', 'MAY')

# Areas in the order they are printed, each with the id prefixes it holds.
AREAS = [
    ('Agent card', ('CARD-', 'BIND-FIELD-')),
    ('Data model', ('DM-',)),
    ('Core operations', ('CORE-',)),
    ('Streaming and subscriptions', ('STREAM-',)),
    ('Versioning', ('VER-',)),
    ('JSON-RPC binding', ('JSONRPC-',)),
    ('HTTP+JSON binding', ('HTTP_JSON-',)),
    ('gRPC binding', ('GRPC-',)),
    ('Push notifications', ('PUSH-',)),
    ('Authentication and security', ('AUTH-',)),
    ('Equivalence of bindings', ('BIND-EQUIV-',)),
]
OTHER = 'Other'

# roostd serves these three bindings; the report's `agent_card` results (the
# card is checked once, not per binding) show in the Result column only.
TRANSPORTS = [('jsonrpc', 'JSON-RPC'), ('http_json', 'HTTP+JSON'), ('grpc', 'gRPC')]

CELL = {'PASS': 'pass', 'FAIL': 'FAIL', 'SKIPPED': 'skipped', 'NOT TESTED': 'not tested'}


def area_of(req_id: str) -> str:
    for name, prefixes in AREAS:
        if req_id.startswith(prefixes):
            return name
    return OTHER


def tck_specs(root: Path) -> dict[str, dict[str, str]]:
    """`{id: {"section", "title"}}` from the TCK's RequirementSpec(...) calls."""
    specs: dict[str, dict[str, str]] = {}
    files = sorted((root / 'tck' / 'requirements').glob('*.py'))
    if not files:
        sys.exit(f'no tck/requirements/*.py under {root}')
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (
                isinstance(node, ast.Call)
                and getattr(node.func, 'id', None) == 'RequirementSpec'
            ):
                continue
            fields = {
                k.arg: k.value.value
                for k in node.keywords
                if k.arg in ('id', 'section', 'title')
                and isinstance(k.value, ast.Constant)
            }
            if 'id' in fields:
                specs[fields['id']] = fields
    return specs


def section_key(section: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in section.split('.'))
    except ValueError:
        return ()


def cell(text: str) -> str:
    return text.replace('|', '\\|')


def summary(reqs: dict[str, dict]) -> list[str]:
    out = [
        '| Level | Requirements | Passed | Failed | Skipped | Not tested by the TCK |',
        '|---|---:|---:|---:|---:|---:|',
    ]
    for level in LEVELS:
        mine = [r for r in reqs.values() if r['level'] == level]
        count = {s: sum(1 for r in mine if r['status'] == s) for s in CELL}
        out.append(
            f"| {level} | {len(mine)} | {count['PASS']} | {count['FAIL']} | "
            f"{count['SKIPPED']} | {count['NOT TESTED']} |"
        )
    return out


def area_tables(reqs: dict[str, dict], specs: dict[str, dict[str, str]]) -> list[str]:
    titled = bool(specs)
    head = '| Requirement | Level | Result | ' + ' | '.join(t for _, t in TRANSPORTS)
    rule = '|---|---|---|' + '---|' * len(TRANSPORTS)
    if titled:
        head += ' | Section | Title'
        rule += '---|---|'
    head += ' |'
    grouped: dict[str, list[str]] = {}
    for req_id in reqs:
        grouped.setdefault(area_of(req_id), []).append(req_id)
    out: list[str] = []
    for name in [a for a, _ in AREAS] + [OTHER]:
        ids = grouped.get(name)
        if not ids:
            continue
        ids.sort(
            key=lambda i: (section_key(specs.get(i, {}).get('section', '')), i)
        )
        out += ['', f'### {name}', '', head, rule]
        for req_id in ids:
            r = reqs[req_id]
            status = CELL.get(r['status'], r['status'])
            row = [f'`{req_id}`', r['level'], status]
            for key, _ in TRANSPORTS:
                t = r.get('transports', {}).get(key)
                row.append(CELL.get(t, t) if t else '—')
            if titled:
                spec = specs.get(req_id, {})
                row += [spec.get('section', ''), cell(spec.get('title', ''))]
            out.append('| ' + ' | '.join(row) + ' |')
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description="CONFORMANCE.md's tables from an A2A TCK compatibility.json"
    )
    parser.add_argument('report', type=Path, help="the TCK's reports/compatibility.json")
    parser.add_argument(
        '--tck', type=Path, help='root of the TCK checkout (adds sections and titles)'
    )
    args = parser.parse_args()
    report = json.loads(args.report.read_text())
    reqs = report['per_requirement']
    specs = tck_specs(args.tck) if args.tck else {}
    print('\n'.join(summary(reqs) + area_tables(reqs, specs)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
