"""The HTML report: self-contained, and rendered for real in headless Chromium with its plots."""

import os
import re
import shutil
import struct
import subprocess
import zlib
from dataclasses import replace
from pathlib import Path

import pytest

from eval_pipeline.gates import parse_policy
from eval_pipeline.html_report import LABEL, MARGIN, OUTCOME_COLOURS, WIDTH, render_html, write_html_report
from eval_pipeline.outcomes import Outcome
from eval_pipeline.report import build_report
from eval_pipeline.results import MISSING
from eval_pipeline_tests.conftest import trial
from eval_pipeline_tests.test_gates import POLICY, RESULTS

ESTIMATE_BLUE = (0x2B, 0x6C, 0xB0)
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    # prod fails (terminal is under its floor), staging passes
    gates = [parse_policy(POLICY, "prod.yaml"), parse_policy({**POLICY, "environment": "staging", "floors": {}}, "s")]
    directory = tmp_path_factory.mktemp("reports")
    return build_report("gated", "d" * 64, "p" * 64, RESULTS, baseline="base", gates=gates, directory=directory)


def test_the_report_is_one_file_with_four_plots_and_nothing_to_fetch(report):
    html = render_html(report, RESULTS)
    assert html.count("<svg") == 4
    assert "<script" not in html and "src=" not in html and "href=" not in html
    # one dot per (slice, variant) row, over both slices and the portfolio: 6 rates, 3 differences
    assert html.count('class="estimate"') == 6 + 3
    assert "terminal / cand" in html and "Paired difference against base" in html


def svg(html: str, title: str) -> str:
    """The plot of that title in the page."""
    [plot] = re.findall(rf'<svg role="img" aria-label="{re.escape(title)}".*?</svg>', html)
    return plot


def test_the_portfolio_row_is_bold_in_html_not_in_markdown_asterisks(report):
    html = render_html(report, RESULTS)
    assert "**" not in html
    assert html.count("<td><strong>all</strong></td>") == 2 * 2, "one portfolio row per variant in each table"
    assert "all / cand" in svg(html, "Resolved rates")


def test_every_outcome_has_a_colour_of_its_own():
    assert set(OUTCOME_COLOURS) == {*Outcome, MISSING}
    assert len(set(OUTCOME_COLOURS.values())) == len(OUTCOME_COLOURS)
    # an OOM kill and a test timeout in one campaign: the bars and the legend tell them apart
    results = [
        trial("a", "v", 0, "oom_killed"),
        replace(trial("b", "v", 0, "oom_killed"), outcome="test_timeout", oom_killed=False),
        trial("c", "v", 0, "resolved"),
    ]
    html = render_html(build_report("c", "d", "p", results), results)
    bars = dict(re.findall(r'fill="(#[0-9a-f]{6})"><title>(\w+): 1</title>', svg(html, "Outcomes per variant")))
    legend = re.findall(r'fill="(#[0-9a-f]{6})"/><text[^>]*>(\w+)</text>', svg(html, "Outcomes per variant"))
    assert (
        sorted(bars.values()) == sorted(outcome for _, outcome in legend) == ["oom_killed", "resolved", "test_timeout"]
    )
    assert len(set(bars)) == 3 and set(bars) == {colour for colour, _ in legend}


def test_the_duration_axis_is_in_seconds(report):
    durations = svg(render_html(report, RESULTS), "Durations (s)")
    assert re.search(r'<text class="axis-unit"[^>]*>seconds</text>', durations)


def test_rate_intervals_stay_within_zero_and_one(report):
    assert report.slices["terminal"]["cand"].ci_low < 0, "m = (1, 0, 0, 0): the t-interval reaches below 0"
    html = render_html(report, RESULTS)
    bounds = [float(b) for pair in re.findall(r"<td>\[(\S+), (\S+)\]</td>", html) for b in pair]
    assert len(bounds) == 2 * 6 and all(0 <= b <= 1 for b in bounds)
    lines = re.findall(r'<line class="interval" x1="([\d.]+)" y1="[\d.]+" x2="([\d.]+)"', svg(html, "Resolved rates"))
    assert len(lines) == 6 and all(LABEL <= float(x) <= WIDTH - MARGIN for line in lines for x in line)


def test_the_gates_verdicts_and_broken_rules_are_shown(report):
    html = render_html(report, RESULTS)
    gates = dict(re.findall(r'<li class="gate" data-environment="(\w+)">.*?<span class="(\w+)">', html))
    assert gates == {"prod": "failed", "staging": "passed"}
    assert "<li>floor: terminal: resolved rate 0.25 is below the floor 0.5</li>" in html


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        if os.environ.get("CI"):
            pytest.fail("CI must provide Debian's chromium (see .ci/run)")
        pytest.skip("no chromium installed")
    return found


def png_pixels(path: Path) -> tuple[int, int, list[tuple[int, int, int]]]:
    """Width, height and RGB pixels of an 8-bit RGB or RGBA PNG (what Chromium writes), decoded by hand."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    chunks, offset = {}, 8
    while offset < len(data):
        (length,), kind = struct.unpack(">I", data[offset : offset + 4]), data[offset + 4 : offset + 8]
        chunks.setdefault(kind, []).append(data[offset + 8 : offset + 8 + length])
        offset += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][0][:10])
    assert depth == 8 and colour in (2, 6)
    channels = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(b"".join(chunks[b"IDAT"])), width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                estimate = left + up - corner
                paeth = min(
                    (abs(estimate - left), 0, left), (abs(estimate - up), 1, up), (abs(estimate - corner), 2, corner)
                )
                line[i] = (line[i] + paeth[2]) & 0xFF
        rows.append(line)
        previous = line
    pixels = [tuple(row[x * channels : x * channels + 3]) for row in rows for x in range(width)]
    return width, height, pixels


def test_the_report_renders_with_its_plots_in_headless_chromium(report, tmp_path):
    page = write_html_report(report, RESULTS)
    screenshot = tmp_path / "report.png"
    subprocess.run(
        [
            chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=900,1400",
            f"--screenshot={screenshot}",
            page.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    width, height, pixels = png_pixels(screenshot)
    assert (width, height) == (900, 1400)
    blue = sum(pixel == ESTIMATE_BLUE for pixel in pixels)
    assert blue > 500, f"the interval lines and estimate dots are drawn ({blue} pixels of their blue)"
    assert sum(pixel != (255, 255, 255) for pixel in pixels) > 0.03 * width * height, "text, tables and plots"
