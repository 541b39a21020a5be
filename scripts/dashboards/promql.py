"""PromQL the dashboards share: the model selector, percentiles, and the server error ratio."""

from __future__ import annotations

GOOD_CODES = "OK|INVALID_ARG|NOT_FOUND|UNSUPPORTED|ALREADY_EXISTS"
M = 'model=~"$model"'  # the model variable (All = .*)


def quantiles(metric: str, by: str, selector: str = M) -> list[tuple[str, str]]:
    return [
        (
            f"histogram_quantile({q}, sum by ({by}, le) "
            f"(rate({metric}_bucket{{{selector}}}[$__rate_interval])))",
            f"p{int(q * 100)} {{{{{by.split(', ')[0]}}}}}"
            + "".join(f" {{{{{b}}}}}" for b in by.split(", ")[1:]),
        )
        for q in (0.5, 0.95, 0.99)
    ]


def ratio_errors(by: str, selector: str = M) -> str:
    return (
        f"1 - (sum by ({by}) (rate(conch_gateway_requests_total{{{selector},"
        f'code=~"{GOOD_CODES}"}}[$__rate_interval])) / sum by ({by}) '
        f"(rate(conch_gateway_requests_total{{{selector}}}[$__rate_interval])))"
    )
