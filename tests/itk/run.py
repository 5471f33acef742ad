#!/usr/bin/env python3
"""Runs A2A ITK scenarios with roostd's ITK agent capsule among the kit's agents.

    run.py --itk DIR --roostd BIN --roostctl BIN --capsule DIR [--list]
           [--only NAME[,NAME...]] [--rust]

DIR is a checkout of the A2A Integration Test Kit (a2aproject/a2a-itk) with
its Python agents' environments made (scripts/itk does that). This adds an
agent 'roost' to the kit's agents — roostd with examples/itk-agent, started
by tests/itk/roost_agent.py — and runs each scenario below with the kit's
own cluster, traversal, runner and checks (testlib.start_itk_cluster,
execute_itk_test). Each scenario prints PASSED or FAILED; the exit status
is 0 only when all passed. With --rust, the kit's Rust v1.0 agent (built
by scripts/itk from the Rust package registry) joins as a third peer of
roostd's: first and last with it, and in the middle of rust -> roost ->
python_v10.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# roostd's agent first, in the middle and last of a traversal, beside the
# kit's Python 0.3 and 1.0 agents, on each transport and behaviour.
PROTOCOLS = ['jsonrpc', 'http_json', 'grpc']
BEHAVIORS = [
    ('send', 'send_message', False),
    ('stream', 'send_message', True),
    ('push', 'push_notification', False),
    ('resubscribe', 'resubscribe', True),
]


def scenarios(rust: bool = False) -> list[dict]:
    out = []
    others = ['python_v10', 'python_v03'] + (['rust_v10'] if rust else [])
    for protocol in PROTOCOLS:
        for short, behavior, streaming in BEHAVIORS:
            for other in others:
                # roost -> other -> roost: roost first and last.
                out.append({
                    'name': f'roost-{other}-{protocol}-{short}',
                    'sdks': ['roost', other],
                    'edges': ['0->1', '1->0'],
                    'protocols': [protocol],
                    'behavior': behavior,
                    'streaming': streaming,
                })
            # python_v10 -> roost -> python_v03 -> python_v10: roost in the middle.
            out.append({
                'name': f'python-roost-python-{protocol}-{short}',
                'sdks': ['python_v10', 'roost', 'python_v03'],
                'edges': ['0->1', '1->2', '2->0'],
                'protocols': [protocol],
                'behavior': behavior,
                'streaming': streaming,
            })
            if rust:
                # rust_v10 -> roost -> python_v10 -> rust_v10 (a 0.3
                # agent cannot call the Rust agent: its card is 1.0's only).
                out.append({
                    'name': f'rust-roost-python-{protocol}-{short}',
                    'sdks': ['rust_v10', 'roost', 'python_v10'],
                    'edges': ['0->1', '1->2', '2->0'],
                    'protocols': [protocol],
                    'behavior': behavior,
                    'streaming': streaming,
                })
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument('--itk', required=True)
    p.add_argument('--roostd', required=True)
    p.add_argument('--roostctl', required=True)
    p.add_argument('--capsule', required=True)
    p.add_argument('--only', default='')
    p.add_argument('--list', action='store_true')
    p.add_argument('--rust', action='store_true')
    args = p.parse_args()
    cases = scenarios(args.rust)
    if args.list:
        for c in cases:
            print(c['name'])
        return 0
    if args.only:
        wanted = {n.strip() for n in args.only.split(',') if n.strip()}
        unknown = wanted - {c['name'] for c in cases}
        if unknown:
            print(f'unknown scenarios: {sorted(unknown)} (--list lists them)')
            return 2
        cases = [c for c in cases if c['name'] in wanted]

    # Paths as given, before the kit's directory becomes the working one.
    itk = os.path.abspath(args.itk)
    roostd, roostctl, capsule = (
        os.path.abspath(p) for p in (args.roostd, args.roostctl, args.capsule)
    )
    os.chdir(itk)
    sys.path.insert(0, itk)
    logging.basicConfig(level=logging.INFO, format='%(asctime)s %(levelname)s %(message)s')
    import test_suite
    import testlib

    python = sys.executable

    def spawn_roost(http_port: int, grpc_port: int) -> subprocess.Popen:
        return subprocess.Popen([
            python, os.path.join(HERE, 'roost_agent.py'),
            '--httpPort', str(http_port), '--grpcPort', str(grpc_port),
            '--roostd', roostd,
            '--roostctl', roostctl,
            '--capsule', capsule,
        ])

    test_suite._AGENT_DEFS['roost'] = {'launcher': spawn_roost}

    async def run_all() -> dict[str, bool]:
        sdks = sorted({s for c in cases for s in c['sdks']})
        procs, _uris, ports = await testlib.start_itk_cluster(sdks)
        results: dict[str, bool] = {}
        try:
            for c in cases:
                got = await testlib.execute_itk_test(
                    sdks=c['sdks'], behavior=c['behavior'], edges=c['edges'],
                    scenario_name=c['name'], protocols=c['protocols'],
                    streaming=c['streaming'],
                )
                for name, detail in got.items():
                    results[name] = bool(detail['passed'])
                    print(f"{'PASSED' if detail['passed'] else 'FAILED'} {name}", flush=True)
        finally:
            testlib.stop_itk_cluster(procs, ports)
        return results

    results = asyncio.run(run_all())
    failed = [n for n, ok in results.items() if not ok]
    print(f'{len(results) - len(failed)} passed, {len(failed)} failed')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
