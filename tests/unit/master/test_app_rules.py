"""The master's routes compile their URL builders on first use (det.master.app._Rule): they
match and build exactly as werkzeug's own rules do."""

from __future__ import annotations

from flask import Flask
from werkzeug.routing import Rule

from det.master.api import BLUEPRINTS
from det.master.app import _Flask, _Rule


def _app(cls: type[Flask]) -> Flask:
    app = cls("routes")
    for bp in BLUEPRINTS:
        app.register_blueprint(bp)
    return app


def _values(rule: Rule) -> dict[str, object]:
    """A value of each of the rule's arguments its converter accepts."""
    out: dict[str, object] = {}
    for name in rule.arguments:
        converter = type(rule._converters[name]).__name__
        out[name] = 7 if converter == "IntegerConverter" else f"{name}-x"
    return out


def test_every_route_matches_and_builds_as_werkzeug_compiles_it() -> None:
    lazy, eager = _app(_Flask), _app(Flask)
    rules = {r.endpoint: r for r in lazy.url_map.iter_rules()}
    assert len(rules) > 200 and all(isinstance(r, _Rule) for r in rules.values())
    lazy_urls = lazy.url_map.bind("master.test")
    eager_urls = eager.url_map.bind("master.test")
    for endpoint, rule in rules.items():
        values = _values(rule)
        method = sorted(rule.methods or {"GET"})[0]
        # with an unknown value too: it becomes the query string (the other builder)
        for extra in ({}, {"unknown": "1 2"}):
            built = lazy_urls.build(endpoint, {**values, **extra}, method=method)
            assert built == eager_urls.build(endpoint, {**values, **extra}, method=method)
        # what a rule builds, it matches, to the same endpoint and arguments
        path = lazy_urls.build(endpoint, values, method=method)
        assert lazy_urls.match(path, method=method) == eager_urls.match(path, method=method)
