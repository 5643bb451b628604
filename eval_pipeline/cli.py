"""The `eval-pipeline` command: run or resume a campaign against the DAGSTER_HOME instance."""

import argparse
import json
import os
import sys
import warnings

from eval_pipeline.settings import dagster_home


def _run(args: argparse.Namespace) -> int:
    home = dagster_home()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["DAGSTER_HOME"] = str(home)  # before Dagster reads it

    from dagster import BetaWarning, DagsterInstance

    from eval_pipeline.campaign import CampaignError, load_campaign
    from eval_pipeline.defs import build_definitions
    from eval_pipeline.report import render_markdown
    from eval_pipeline.runner import run_campaign

    warnings.filterwarnings("ignore", category=BetaWarning)  # data versions are beta; we rely on them knowingly
    try:
        campaign = load_campaign(args.campaign)
    except CampaignError as error:
        print(f"eval-pipeline: {error}", file=sys.stderr)
        return 2
    with DagsterInstance.get() as instance:
        run = run_campaign(
            campaign,
            build_definitions([campaign]),
            instance,
            progress=lambda line: print(line, file=sys.stderr),
            workers=args.workers,
        )
    if args.json:
        print(json.dumps(run.as_json(), indent=2, sort_keys=True))
    else:
        print(render_markdown(run.report))
        print(f"Report: {run.report['report_path']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="eval-pipeline", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run or resume a campaign in process")
    run.add_argument("--campaign", default="demo", help="a built-in campaign name or a campaign YAML path")
    run.add_argument("--json", action="store_true", help="print one JSON summary object on stdout")
    run.add_argument(
        "--workers",
        type=int,
        default=min(4, os.cpu_count() or 1),
        help="trial runs in parallel processes (default: cores, at most 4)",
    )
    run.set_defaults(handler=_run)
    args = parser.parse_args(argv)
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
